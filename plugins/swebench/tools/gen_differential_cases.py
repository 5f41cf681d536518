#!/usr/bin/env python3
"""Writes random grading cases with the official harness's answers, for
tests/component/differential.rs.

The golden data pins known quirks; this checks everything else the same way:
logs assembled from the line shapes the parsers care about (status lines with
odd ids, Django and sympy result lines, markers, exit codes, control
characters, Python-only whitespace, CRLF and lone CR), each run through every
parser and through `get_eval_report`; and, for 4.1.0, test patches mutated
from the sample rows, run through `get_modified_files` and
`get_test_directives`.

Usage, once per harness version (each in its own virtualenv):
    /tmp/venv-swebench-4.1.0/bin/python tools/gen_differential_cases.py 1 2000 > /tmp/cases-4.1.0.json
    /tmp/venv-swebench-5.0.2/bin/python tools/gen_differential_cases.py 1 2000 > /tmp/cases-5.0.2.json
    SWEBENCH_DIFFERENTIAL_CASES=/tmp/cases-4.1.0.json cargo test -p plugin-swebench --test component differential -- --ignored
    SWEBENCH_DIFFERENTIAL_CASES=/tmp/cases-5.0.2.json cargo test -p plugin-swebench --test component differential -- --ignored
"""

import json
import os
import random
import sys
import tempfile
import types
from pathlib import Path

import swebench
import swebench.harness.grading as grading

PARSERS = [
    "parse_log_pytest",
    "parse_log_pytest_options",
    "parse_log_pytest_v2",
    "parse_log_django",
    "parse_log_seaborn",
    "parse_log_sympy",
    "parse_log_matplotlib",
    "parse_log_marked",
]
# A repo/version 4.1.0 maps to each parser.
REPOS = {
    "parse_log_pytest": ("pallets/flask", "2.3"),
    "parse_log_pytest_options": ("psf/requests", "2.0"),
    "parse_log_pytest_v2": ("astropy/astropy", "5.1"),
    "parse_log_django": ("django/django", "3.0"),
    "parse_log_seaborn": ("mwaskom/seaborn", "0.12"),
    "parse_log_sympy": ("sympy/sympy", "1.1"),
    "parse_log_matplotlib": ("matplotlib/matplotlib", "3.7"),
    "parse_log_marked": ("markedjs/marked", "1.2"),
}
IDS = [
    "t.py::a", "t.py::b[x y]", "t.py::c[/tmp/a/b]", "t.py::d[1-2]", "t.py::e[a", "t.py::e[a b]",
    "t.py::e[a c]", "tests/test_x.py::T::m", "test_foo (m.T)", "[1]", "x", "t.py::f[MouseButton.LEFT]",
    "t.py::g[//h/x]", "t.py::h[/a/*]", "\u00fcn\u00ef[\u00e7]", "test_a", "test_b",
]
STATUSES = ["PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"]
SPACES = [" ", " ", " ", "\t", "\x1c", "\u3000", "  ", "\xa0"]
NOISE = [
    ">>>>> Tests Errored", ">>>>> Reset Failed", "collected 0 items", "Killed", "===== 3 passed in 1s =====",
    "5 passing", "Tests:  3 passed", "Executed 0 of 0", "1 spec, 0 failures", "# tests 2",
    "Test Suites: 1 failed, 2 total", "ModuleNotFoundError: x", "case': ok", "--version is equivalent to version",
    "Timeout error: 5 seconds exceeded.",
]
SAMPLE = Path(__file__).resolve().parents[4] / "shared/data/swebench/instances-sample.jsonl"


def parsers():
    if swebench.__version__ == "4.1.0":
        from swebench.harness.log_parsers import python
        from swebench.harness.log_parsers.javascript import parse_log_marked

        found = {name: getattr(python, name) for name in PARSERS if name != "parse_log_marked"}
        found["parse_log_marked"] = parse_log_marked
        return found
    from swebench.harness.log_parsers import PARSER_REGISTRY

    return {name: PARSER_REGISTRY[name] for name in PARSERS}


def random_line(rng):
    test, status, space = rng.choice(IDS), rng.choice(STATUSES), rng.choice(SPACES)
    shapes = [
        lambda: f"{status}{space}{test}",
        lambda: f"FAILED {test} - msg - more",
        lambda: f"FAILED {test}[p - q] - boom",
        lambda: f"{test}{space}{status}",
        lambda: f"{test} {status} [ 10%]",
        lambda: f"{test} {rng.choice(IDS)} {status}",
        lambda: f"{status}{space}{test}{space}{rng.choice(IDS)}",
        lambda: f"\x1b[32m{status}\x1b[0m {test}",
        lambda: f"SKIPPED [{rng.randrange(1, 4)}] t.py:3: reason",
        lambda: rng.choice(["PASSED", " PASSED ", "FAILED", "XFAIL", "PASSED ", "FAILED  "]),
        lambda: f"{test} ... {rng.choice(['ok', 'OK', ' OK', 'FAIL', 'ERROR', 'skipped x'])}",
        lambda: f"{rng.choice(['FAIL:', 'ERROR:'])} {test}",
        lambda: rng.choice(["FAIL:", "ERROR:", "ok", "  ok", "okay"]),
        lambda: f"{test} ... Testing against Django installed in '/x' with up to 8 processes\n"
        "System check identified no issues (0 silenced).\nok",
        lambda: f"{test} ... Internal Server Error: /a/b/\nok",
        lambda: f"{test} ... System check identified no issues (0 silenced)\nok",
        lambda: "Applying sites.0002_alter_domain_unique...test_no_migrations ... ok",
        lambda: f"___ sympy/x/tests/test_y.py:{rng.choice(['test_a', 'test_b'])} ___",
        lambda: f"{rng.choice(['test_a', 'test_b', '  test_c'])} {rng.choice(['ok', 'F', 'E', 'f'])}",
        lambda: f"{rng.randrange(1, 13)}) Marked {test} ",
        lambda: rng.choice(["+ : '>>>>> Start Test Output'", "+ : '>>>>> End Test Output'"]),
        lambda: f">>>>> Test Exit Code: {rng.choice(['0', '1', '137', '-1', 'abc', ' 2', chr(0x663), chr(0x660)])}",
        lambda: rng.choice(NOISE),
    ]
    return rng.choice(shapes)()


def random_log(rng):
    lines = [random_line(rng) for _ in range(rng.randrange(0, 25))]
    if rng.random() < 0.7:
        start = rng.randrange(len(lines) + 1)
        lines.insert(start, "+ : '>>>>> Start Test Output'")
        end = rng.randrange(start + 1, len(lines) + 1)
        lines.insert(end, "+ : '>>>>> End Test Output'")
        if rng.random() < 0.5:
            lines.insert(end + 1, f">>>>> Test Exit Code: {rng.choice(['0', '1', '2'])}")
    separator = rng.choice(["\n", "\n", "\r\n", "\r"])
    return separator.join(lines) + rng.choice(["", "\n", separator])


def log_case(rng, parser_functions):
    parser = rng.choice(PARSERS)
    log = random_log(rng)
    parsed = {}
    for name, function in parser_functions.items():
        try:
            parsed[name] = {"status_map": function(log, None)}
        except Exception as error:
            parsed[name] = {"exception": f"{type(error).__name__}: {error}"}
    fail_to_pass = rng.sample(IDS, rng.randrange(0, 4))
    pass_to_pass = rng.sample(IDS, rng.randrange(0, 4))
    fail_only = parser == "parse_log_marked" or (swebench.__version__ != "4.1.0" and rng.random() < 0.2)
    repo, version = REPOS[parser]
    row = {
        "instance_id": "org__repo-1", "repo": repo, "version": version,
        "FAIL_TO_PASS": fail_to_pass, "PASS_TO_PASS": pass_to_pass,
        "log_parser": parser, "eval_type": "fail_only" if fail_only else "pass_and_fail",
    }
    patch = rng.choice(["diff", "", None, "diff"])
    # get_eval_report reads only these attributes of the test spec.
    test_spec = types.SimpleNamespace(**row)
    with tempfile.NamedTemporaryFile("w", delete=False, newline="") as file:
        file.write(log)
    try:
        prediction = {"instance_id": row["instance_id"], "model_patch": patch, "model_name_or_path": "m"}
        report = {"report": grading.get_eval_report(test_spec, prediction, file.name, True)}
    except Exception as error:
        report = {"exception": f"{type(error).__name__}: {error}"}
    finally:
        os.unlink(file.name)
    return {"row": row, "patch": patch, "log": log, "parsed": parsed, "graded": report}


def diff_case(rng, rows):
    from swebench.harness.test_spec.python import get_test_directives
    from swebench.harness.utils import get_modified_files

    lines = rng.choice(rows)[rng.choice(["patch", "test_patch"])].split("\n")
    inserts = [
        "diff --git a/x y.py b/x y.py", "new file mode 100644", "deleted file mode 100644", "--- a/q.py",
        "+++ b/q.py", "--- /dev/null", "+++ /dev/null", "@@ -1 +1 @@", "@@ -0,0 +1,2 @@", "@@ -1,2 +1 @@",
        "\\ No newline at end of file", "", "Binary files a/i.png and b/i.png differ", "GIT binary patch",
        "index 123..456 100755", "old mode 100644", "rename from a.py", "-- removed", "--- not header",
        " ctx", "+x", "-y", "\r", "diff --git a/tests/data.json b/tests/data.json", "diff --git a/a b/b b/c",
    ]
    for _ in range(rng.randrange(0, 9)):
        position = rng.randrange(len(lines) + 1)
        operation = rng.randrange(3)
        if operation == 0 and position < len(lines):
            del lines[position]
        elif operation == 1 or position == len(lines):
            lines.insert(position, rng.choice(inserts))
        else:
            lines[position] = rng.choice(inserts)
    patch = "\n".join(lines)
    if rng.random() < 0.1:
        patch = patch.replace("\n", "\r\n")
    try:
        modified = {"files": get_modified_files(patch)}
    except Exception as error:
        modified = {"exception": type(error).__name__}
    repo = rng.choice(["django/django", "pallets/flask"])
    directives = get_test_directives({"repo": repo, "test_patch": patch})
    return {"repo": repo, "patch": patch, "modified_files": modified, "test_directives": directives}


def main() -> None:
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    parser_functions = parsers()
    logs = [log_case(rng, parser_functions) for _ in range(count)]
    diffs = []
    if swebench.__version__ == "4.1.0":
        rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
        diffs = [diff_case(rng, rows) for _ in range(count)]
    json.dump({"grader": f"swebench-{swebench.__version__}", "logs": logs, "diffs": diffs}, sys.stdout)


if __name__ == "__main__":
    main()
