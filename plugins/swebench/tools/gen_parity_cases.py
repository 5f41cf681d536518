#!/usr/bin/env python3
"""Writes tests/parity/*.json: cases the golden sample does not exercise (raw
parser values that are not status words, large generated logs), each with the
official harness's answer under swebench 4.1.0 and 5.0.2.

The inputs and descriptions are written here by hand; every `expected` value
is what the unmodified harness functions return on that input. The large log
is not stored: `big_log` below and `tests/component/common/big_log.rs` generate the
same bytes from the case's `lines`. The harness is
imported from a source tree of each version (a `git archive` of SWE-bench at
tag v4.1.0 and at the 5.0.2 release commit 490635b), or from an installed
`swebench`. Grading and the log parsers import nothing outside the standard
library, but their packages' `__init__` modules pull in docker, unidiff and
the like, so every package outside the standard library is replaced by an
empty stand-in that these functions never call.

Usage:
    git -C SWE-bench archive v4.1.0 swebench | tar -x -C /tmp/swe410
    git -C SWE-bench archive 490635b swebench | tar -x -C /tmp/swe502
    python3 tools/gen_parity_cases.py /tmp/swe410 /tmp/swe502 tests/parity
"""

import importlib.abc
import importlib.machinery
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path

GRADERS = ["swebench-4.1.0", "swebench-5.0.2"]

START = ">>>>> Start Test Output"
END = ">>>>> End Test Output"


def transcript(body, exit_code=None):
    """A test_output.txt as 4.1.0's eval script traces it (`set -x`); 5.x's
    also records the test command's exit status after the end marker."""
    log = "+ source /opt/miniconda3/bin/activate\n+ : '" + START + "'\n+ pytest -rA\n"
    log += body + "+ : '" + END + "'\n"
    if exit_code is not None:
        log += f"+ : '>>>>> Test Exit Code: {exit_code}'\n"
    return log


PARSER_CASES = [
    {
        "case": "pytest_error_colon_line",
        "parser": "parse_log_pytest",
        "description": "A captured print starting `ERROR: could not` starts with a status word, so "
        "parse_log_pytest (4.1.0 log_parsers/python.py:7-25; 5.0.2 python.py:21-41) stores its first "
        "token `ERROR:` as the status of its second token `could`.",
        "log": "PASSED tests/test_a.py::test_ok\nERROR: could not import plugin\nFAILED tests/test_a.py::test_bad - assert 1\n",
    },
    {
        "case": "pytest_options_error_colon_line",
        "parser": "parse_log_pytest_options",
        "description": "pip's `ERROR: Could not find a version` line: parse_log_pytest_options (4.1.0 "
        "python.py:29-60; 5.0.2 python.py:45-78) stores `ERROR:` under `Could`.",
        "log": "ERROR: Could not find a version that satisfies the requirement foo\nPASSED t.py::test_p[/tmp/x/f.txt]\n",
    },
    {
        "case": "matplotlib_glued_status",
        "parser": "parse_log_matplotlib",
        "description": "`PASSEDtest_x` has no space after the status word: parse_log_matplotlib (4.1.0 "
        "python.py:229-249; 5.0.2 python.py:249-271) stores the whole first token `PASSEDtest_x` "
        "as the status of `also`, and `XFAIL:` under `t.py::x`.",
        "log": "PASSEDtest_x also\nXFAIL: t.py::x reason\nPASSED t.py::click[MouseButton.LEFT]\n",
    },
    {
        "case": "pytest_v2_status_last_with_spaces",
        "parser": "parse_log_pytest_v2",
        "description": "A status-last line whose id holds a space: 4.1.0's parse_log_pytest_v2 "
        "(python.py:144-169, line 169) stores the line's second word `q]` as the status of its first "
        "`t.py::u[p`; 5.0.2's (python.py:162-188, line 188) joins the id back and stores the last "
        "token. A status-first `ERROR: boom here` line stores `ERROR:` (4.1.0 under `boom`, 5.0.2 "
        "under `boom here`, line 183).",
        "log": "t.py::u[p q] FAILED\nERROR: boom here\nt.py::w XFAILED\nPASSED t.py::v\n",
    },
    {
        "case": "django_error_colon_header",
        "parser": "parse_log_django",
        "description": "parse_log_django stores the status word itself, never a token: an "
        "`ERROR: test_d (m.T)` header records `ERROR` for `test_d` (5.0.2 python.py:133-135; 4.1.0 "
        "the same branch), unlike the pytest parsers.",
        "log": "test_a (m.T) ... ok\nERROR: test_d (m.T)\n",
    },
]

ROW_BASE = {
    "repo": "pallets/flask",
    "version": "2.3",
    "log_parser": "parse_log_pytest",
    "eval_type": "pass_and_fail",
}

def big_log(lines):
    """A pytest -rA summary of `lines` tests, with one stray `ERROR:` line:
    every 1000th test fails, every 250th (from the 8th) is skipped."""
    out = ["+ : '" + START + "'\n", "+ pytest -rA t.py\n", "ERROR: could not import plugin\n"]
    for i in range(lines):
        if i % 1000 == 999:
            out.append(f"FAILED t.py::c[{i}] - assert {i} == 0\n")
        elif i % 250 == 7:
            out.append(f"SKIPPED t.py::c[{i}]\n")
        else:
            out.append(f"PASSED t.py::c[{i}]\n")
    out.append("+ : '" + END + "'\n")
    return "".join(out)


LARGE_CASE = {
    "case": "large_log_4_3m_tests",
    "lines": 4_300_000,
    "description": "A 100 MB pytest log of 4.3 million tests, past the adapter's default 64 MiB "
    "memory cap, graded by get_eval_report (4.1.0 grading.py:259-300; 5.0.2 grading.py:327-386): "
    "a failed PASS_TO_PASS test (c[999]) and a missing one leave it unresolved; the skipped c[7] "
    "is neither in 4.1.0 and maintained in 5.0.2 (test_maintained, 5.0.2 grading.py:93-99); the "
    "stray `ERROR:` (parse_log_pytest) is neither in both.",
    "row": {
        "instance_id": "pallets__flask-90200",
        "FAIL_TO_PASS": ["t.py::c[0]", "t.py::c[4299998]"],
        "PASS_TO_PASS": ["t.py::c[1]", "t.py::c[999]", "t.py::c[7]", "could", "t.py::c[9999999]"],
    },
}

GRADING_CASES = [
    {
        "case": "f2p_error_colon_is_neither",
        "description": "The only FAIL_TO_PASS test is recorded as `ERROR:` (parse_log_pytest, "
        "python.py:25 in 4.1.0, :41 in 5.0.2). test_passed and test_failed (4.1.0 grading.py:27-36; "
        "5.0.2 grading.py:85-110) compare for equality, so it lands in neither list, "
        "compute_fail_to_pass of an empty list is 1, and the instance resolves.",
        "row": {"instance_id": "pallets__flask-90101", "FAIL_TO_PASS": ["could"], "PASS_TO_PASS": ["t.py::p"]},
        "log": transcript("ERROR: could not import plugin\nPASSED t.py::p\n"),
    },
    {
        "case": "p2p_error_colon_is_no_regression",
        "description": "A PASS_TO_PASS test recorded as `ERROR:` is neither maintained nor failed "
        "(5.0.2 test_maintained, grading.py:93-99; test_failed :101-110), so a fixed FAIL_TO_PASS "
        "test resolves the instance in both versions.",
        "row": {"instance_id": "pallets__flask-90102", "FAIL_TO_PASS": ["t.py::f"], "PASS_TO_PASS": ["could"]},
        "log": transcript("PASSED t.py::f\nERROR: could not import plugin\n"),
    },
    {
        "case": "exit_code_with_only_raw_errors_5x",
        "description": "5.0.2's get_logs_eval (grading.py:113-176, lines 166-175) voids a log whose "
        "test command exited non-zero when no status is exactly FAILED or ERROR: `ERROR:` is "
        "neither, so the run is not found. 4.1.0 has no such check and grades it.",
        "row": {"instance_id": "pallets__flask-90103", "FAIL_TO_PASS": ["t.py::f"], "PASS_TO_PASS": []},
        "log": transcript("PASSED t.py::f\nERROR: could not import plugin\n", exit_code=1),
    },
    {
        "case": "v2_status_last_ids_with_spaces",
        "description": "astropy's parser (parse_log_pytest_v2): 4.1.0 records `t.py::u[p` with "
        "status `q]` (python.py:169), so the FAIL_TO_PASS id `t.py::u[p q]` is missing and fails, "
        "while the PASS_TO_PASS id `t.py::u[p` is neither; 5.0.2 records `t.py::u[p q]` as PASSED "
        "(python.py:188) and resolves the truncated `t.py::u[p` by prefix (_resolve_case, "
        "grading.py:61-82).",
        "row": {
            "instance_id": "astropy__astropy-90104",
            "repo": "astropy/astropy",
            "version": "5.1",
            "log_parser": "parse_log_pytest_v2",
            "FAIL_TO_PASS": ["t.py::u[p q]"],
            "PASS_TO_PASS": ["t.py::u[p"],
        },
        "log": transcript("t.py::u[p q] PASSED\n"),
    },
]


def generate_parser_version(source, output):
    """Runs in a child process with `source` first on sys.path."""
    install_stand_ins()
    sys.path.insert(0, source)
    import swebench.harness.grading as grading
    import swebench.harness.log_parsers as log_parsers

    registry = getattr(log_parsers, "PARSER_REGISTRY", None)
    python_parsers = importlib.import_module("swebench.harness.log_parsers.python")
    answers = {"parsers": {}, "grading": {}}
    for case in PARSER_CASES:
        parser = (registry or {}).get(case["parser"]) or getattr(python_parsers, case["parser"])
        answers["parsers"][case["case"]] = run(lambda: {"status_map": parser(case["log"], None)})
    for case in GRADING_CASES:
        row = {**ROW_BASE, **case["row"]}
        answers["grading"][case["case"]] = grade_case(grading, row, case["log"])
    large = grade_case(grading, {**ROW_BASE, **LARGE_CASE["row"]}, big_log(LARGE_CASE["lines"]))
    large.pop("get_logs_eval")
    answers["large"] = large
    json.dump(answers, open(output, "w"))


def grade_case(grading, row, log):
    spec = types.SimpleNamespace(
        instance_id=row["instance_id"],
        repo=row["repo"],
        version=row["version"],
        log_parser=row["log_parser"],
        eval_type=row["eval_type"],
        FAIL_TO_PASS=row["FAIL_TO_PASS"],
        PASS_TO_PASS=row["PASS_TO_PASS"],
    )
    prediction = {"instance_id": row["instance_id"], "model_name_or_path": "m", "model_patch": "diff"}
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as log_file:
        log_file.write(log)
    status_map, found = grading.get_logs_eval(spec, log_file.name)
    report = grading.get_eval_report(spec, prediction, log_file.name, include_tests_status=True)
    Path(log_file.name).unlink()
    return {
        "get_logs_eval": {"status_map": status_map, "found": found},
        "report": report,
        "resolved": report[row["instance_id"]]["resolved"],
    }


def run(call):
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - the harness does not catch it either
        return {"exception": {"type": type(error).__name__, "message": str(error)}}


def install_stand_ins():
    class StandIn(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return StandIn(f"{self.__name__}.{name}")

        def __call__(self, *args, **kwargs):
            return StandIn("call")

        def __mro_entries__(self, bases):
            return (object,)

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            top = name.split(".")[0]
            if top == "swebench" or top in sys.stdlib_module_names:
                return None
            return importlib.machinery.ModuleSpec(name, self, is_package=True)

        def create_module(self, spec):
            module = StandIn(spec.name)
            module.__path__ = []
            return module

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, Finder())


def main():
    if sys.argv[1] == "--version-child":
        generate_parser_version(sys.argv[2], sys.argv[3])
        return
    sources = dict(zip(GRADERS, sys.argv[1:3]))
    out = Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    answers = {}
    for grader, source in sources.items():
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as result:
            subprocess.run(
                [sys.executable, __file__, "--version-child", source, result.name], check=True
            )
            answers[grader] = json.load(open(result.name))
    for case in PARSER_CASES:
        expected = {grader: answers[grader]["parsers"][case["case"]] for grader in GRADERS}
        write(out / f"parser_{case['case']}.json", {**case, "expected": expected})
    large = {**LARGE_CASE, "row": {**ROW_BASE, **LARGE_CASE["row"]}}
    large["expected"] = {grader: answers[grader]["large"] for grader in GRADERS}
    write(out / f"{LARGE_CASE['case']}.json", large)
    for case in GRADING_CASES:
        row = {**ROW_BASE, **case["row"]}
        expected = {grader: answers[grader]["grading"][case["case"]] for grader in GRADERS}
        write(
            out / f"grading_{case['case']}.json",
            {
                "case": case["case"],
                "description": case["description"],
                "input": {
                    "instance": row,
                    "prediction": {"instance_id": row["instance_id"], "model_name_or_path": "m", "model_patch": "diff"},
                    "log": case["log"],
                },
                "expected": expected,
            },
        )


def write(path, value):
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
