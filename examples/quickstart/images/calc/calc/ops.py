"""Arithmetic helpers. Several have bugs on purpose: each quickstart task
asks for one of them to be fixed."""


def add(a, b):
    return a + b


def sub(a, b):
    return b - a


def div(a, b):
    return a // b


def mean(xs):
    return sum(xs) / len(xs)


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return lo
    return x
