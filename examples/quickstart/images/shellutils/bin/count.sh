#!/usr/bin/env bash
# Prints the number of non-empty lines of its input.
wc -l | tr -d ' '
