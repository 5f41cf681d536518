#!/usr/bin/env python3
"""Writes tests/parity/*.json: rows on which R2E-Gym's reward code raises, or
accepts what a strict JSON parser would not, each with what R2E-Gym does.

The inputs and descriptions are written here by hand. Every `expected` value
is what R2E-Gym's own code does with the input: `DockerRuntime.run_tests`,
`parse_logs` and `_calculate_reward` (agenthub/runtime/docker.py) and
`execution_log_parser.py`, unedited, from a source tree of R2E-Gym at commit
69bc953542b428d1e4c8a59ce3ea1a32e50ef0f0. As for the reference data in
shared/data/swebench/golden/r2e, the only stand-in is the container, whose
`exec_run` answers with the case's output and exit code; every package
outside the standard library (docker, swebench, ...) is an empty stand-in
that this code path never calls.

Usage:
    git -C R2E-Gym archive 69bc953 src/r2egym | tar -x -C /tmp/r2e
    python3 tools/gen_reward_cases.py /tmp/r2e/src tests/parity
"""

import importlib.abc
import importlib.machinery
import json
import logging
import sys
import types
from pathlib import Path

COMMIT = "r2e-gym@69bc953542b428d1e4c8a59ce3ea1a32e50ef0f0"
ABSENT = object()

PASSING = (
    "============================= test session starts ==============================\n"
    "collected 2 items\n\n"
    "r2e_tests/test_1.py ..                                                   [100%]\n\n"
    "=========================== short test summary info ============================\n"
    "PASSED r2e_tests/test_1.py::test_a\n"
    "PASSED r2e_tests/test_1.py::test_b\n"
    "============================== 2 passed in 0.01s ===============================\n"
)
EXPECTED_AB = json.dumps({"test_a": "PASSED", "test_b": "PASSED"})

CASES = [
    (
        "repo_without_a_parser",
        "parse_logs calls parse_log_fn(f\"{self.repo_name}\") (docker.py:517), which raises "
        "ValueError for a repository outside its list (execution_log_parser.py:38-62) before "
        "anything is compared.",
        "django", PASSING, 0, EXPECTED_AB,
    ),
    (
        "empty_repo_name",
        "An empty repo_name is no repository parse_log_fn knows: ValueError "
        "(execution_log_parser.py:62).",
        "", PASSING, 0, EXPECTED_AB,
    ),
    (
        "no_expected_output_json",
        "Without the field, _calculate_reward_r2e falls back to self.read_file(...) "
        "(docker.py:545-548), which the @DeprecationWarning decorator (docker.py:391) replaced "
        "with an exception instance: calling it raises TypeError.",
        "sympy", PASSING, 0, ABSENT,
    ),
    (
        "expected_output_json_null",
        "json.loads(None) (docker.py:550) raises TypeError.",
        "sympy", PASSING, 0, None,
    ),
    (
        "expected_single_quotes",
        "Python-literal quoting is not JSON: json.loads raises JSONDecodeError (docker.py:550).",
        "sympy", PASSING, 0, "{'test_a': 'PASSED', 'test_b': 'PASSED'}",
    ),
    (
        "expected_trailing_comma",
        "A trailing comma: JSONDecodeError from json.loads (docker.py:550).",
        "pandas", PASSING, 0, '{"test_a": "PASSED", "test_b": "PASSED",}',
    ),
    (
        "expected_byte_order_mark",
        "json.loads refuses a str starting with U+FEFF: JSONDecodeError (docker.py:550).",
        "pandas", PASSING, 0, "\ufeff" + EXPECTED_AB,
    ),
    (
        "expected_a_list",
        "Valid JSON that is no object: decolor_dict_keys calls .items() on a list "
        "(execution_log_parser.py:68, from docker.py:551) and raises AttributeError.",
        "numpy", PASSING, 0, '["test_a", "test_b"]',
    ),
    (
        "expected_a_string",
        "A JSON string that holds JSON decodes to a str, which has no .items(): AttributeError "
        "(execution_log_parser.py:68).",
        "numpy", PASSING, 0, json.dumps(EXPECTED_AB),
    ),
    (
        "expected_huge_integer",
        "An integer literal of 4,301 digits: int() in json.loads refuses it (CPython's "
        "int_max_str_digits, 4300) with ValueError (docker.py:550).",
        "numpy", PASSING, 0, '{"test_a": "PASSED", "test_b": ' + "7" * 4301 + "}",
    ),
    (
        "parsed_name_not_expected",
        "Equal sizes, and the first parsed name in sorted order that the expected map lacks is "
        "looked up anyway: KeyError in the comparison loop (docker.py:562).",
        "scrapy", PASSING, 0, json.dumps({"test_a": "PASSED", "test_c": "PASSED"}),
    ),
    (
        "lone_surrogate_key_then_key_error",
        "json.loads keeps an unpaired \\ud800 escape as a lone surrogate, so the key is valid "
        "for Python; sizes are equal and `test_b` is missing: KeyError (docker.py:562), not a "
        "decoding error.",
        "scrapy", PASSING, 0, '{"test_a": "PASSED", "test_b\\ud800": "PASSED"}',
    ),
    (
        "lone_surrogate_cut_away",
        "The surrogate sits after \" - \", which the name cut drops (docker.py:555): the maps "
        "are equal and the reward is 1.0.",
        "aiohttp", PASSING, 0, '{"test_a": "PASSED", "test_b - \\ud800 msg": "PASSED"}',
    ),
    (
        "nan_and_non_string_values",
        "NaN and numbers are valid for Python's json.loads; they never equal a parsed status, "
        "so the first such test (in sorted order) gives reward 0.0 without raising.",
        "tornado", PASSING, 0, '{"test_a": NaN, "test_b": 1e400}',
    ),
]


def install_stand_ins(source):
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
            if top == "r2egym" or top in sys.stdlib_module_names:
                return None
            return importlib.machinery.ModuleSpec(name, self, is_package=True)

        def create_module(self, spec):
            module = StandIn(spec.name)
            module.__path__ = []
            return module

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, Finder())
    sys.path.insert(0, source)


class Container:
    """`exec_run` as docker answers it: an exit code and the output bytes."""

    def __init__(self, exit_code, output):
        self.result = types.SimpleNamespace(exit_code=exit_code, output=output.encode())

    def exec_run(self, **kwargs):
        return self.result


def r2e_reward(runtime_class, repo_name, output, exit_code, expected):
    row = {"repo_name": repo_name, "docker_image": f"namanjain12/{repo_name}_final:abc"}
    if expected is not ABSENT:
        row["expected_output_json"] = expected
    runtime = object.__new__(runtime_class)
    runtime.ds = row
    runtime.repo_name = repo_name
    runtime.swebench_verified = False
    runtime.repo_path = "/testbed"
    runtime.alt_path = "/root"
    runtime.logger = logging.getLogger("r2e")
    runtime.container = Container(exit_code, output)
    try:
        return {"reward": runtime._calculate_reward()}
    except Exception as error:  # noqa: BLE001 - the caller sees what R2E-Gym raises
        return {"reward": None, "reward_exception": {"type": type(error).__name__, "message": str(error)}}


def main():
    source, out = sys.argv[1], Path(sys.argv[2])
    install_stand_ins(source)
    logging.disable(logging.CRITICAL)
    from r2egym.agenthub.runtime.docker import DockerRuntime

    out.mkdir(parents=True, exist_ok=True)
    for case, description, repo_name, output, exit_code, expected in CASES:
        row_input = {"repo_name": repo_name, "output": output, "exit_code": exit_code}
        if expected is not ABSENT:
            row_input["expected_output_json"] = expected
        answer = r2e_reward(DockerRuntime, repo_name, output, exit_code, expected)
        document = {
            "case": case,
            "description": description,
            "input": row_input,
            "expected": {COMMIT: answer},
        }
        path = out / f"{case}.json"
        path.write_text(json.dumps(document, indent=2, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
