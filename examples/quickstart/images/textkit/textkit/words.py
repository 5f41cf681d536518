"""Word and line helpers, with bugs the quickstart tasks ask to fix."""


def slugify(text):
    return "-".join(text.split())


def count_words(text):
    return len(text.split(" "))


def wrap(text, width):
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) >= width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


def truncate(text, limit):
    return text
