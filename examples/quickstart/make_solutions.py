#!/usr/bin/env python3
"""Regenerates solutions.jsonl: each solution is a `git diff` of one edit to
an image tree. Run it after changing an image or an edit below."""

import json
import pathlib
import shutil
import subprocess
import tempfile

HERE = pathlib.Path(__file__).resolve().parent

# task id -> (image, file, old text, new text); None means "no solution".
EDITS = {
    "calc-add": ("calc", None, None, None),
    "calc-sub": ("calc", "calc/ops.py", "return b - a", "return a - b"),
    # A wrong fix: the test still fails.
    "calc-div": ("calc", "calc/ops.py", "return a // b", "return a % b"),
    "calc-mean": ("calc", "calc/ops.py", "    return sum(xs) / len(xs)",
                  "    if not xs:\n        return 0.0\n    return sum(xs) / len(xs)"),
    "calc-power": ("calc", "calc/ops.py", "def clamp(x, lo, hi):",
                   "def power(a, b):\n    return a ** b\n\n\ndef clamp(x, lo, hi):"),
    "textkit-slugify": ("textkit", "textkit/words.py", 'return "-".join(text.split())',
                        'return "-".join(text.lower().split())'),
    "textkit-count": ("textkit", "textkit/words.py", 'return len(text.split(" "))',
                      "return len(text.split())"),
    # A wrong fix: the off-by-one moves the other way.
    "textkit-wrap": ("textkit", "textkit/words.py", ">= width", ">= width - 1"),
    # Never terminates: the task overruns its timeout.
    "textkit-truncate": ("textkit", "textkit/words.py", "    return text",
                         "    while len(text) > limit:\n        pass\n    return text"),
    "shell-trim": ("shellutils", "bin/trim.sh", "sed -e 's/^ *//' -e 's/ *$//'",
                   "sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//'"),
    "shell-upper": ("shellutils", "bin/upper.sh", "tr 'a-y' 'A-Y'", "tr 'a-z' 'A-Z'"),
}

# A patch written against another version of the file: it does not apply.
STALE_CLAMP = """diff --git a/calc/ops.py b/calc/ops.py
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -30,4 +30,4 @@ def clamp(x, lo, hi):
     if x < lo:
         return lo
-    if x >= hi:
-        return lo
+    if x >= hi:
+        return hi
"""


def diff(image, path, old, new):
    with tempfile.TemporaryDirectory() as tmp:
        tree = pathlib.Path(tmp) / image
        shutil.copytree(HERE / "images" / image, tree)
        git = lambda *args: subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True, text=True)
        git("init", "-q")
        git("add", "-A")
        git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "base")
        target = tree / path
        text = target.read_text()
        assert old in text, f"{path}: {old!r} not found"
        target.write_text(text.replace(old, new, 1))
        return git("diff").stdout


def main():
    rows = []
    for task, (image, path, old, new) in EDITS.items():
        rows.append({"id": task, "solution": diff(image, path, old, new) if path else ""})
    rows.append({"id": "calc-clamp", "solution": STALE_CLAMP})
    # shell-count has no solution at all.
    with open(HERE / "solutions.jsonl", "w") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
