#!/usr/bin/env python3
"""Regenerates ../data/swebench-4.1.0-specs.json from the official swebench 4.1.0 package.

swebench 4.1.0 builds each instance's eval script from its per-repo/version spec
table (`MAP_REPO_VERSION_TO_SPECS`) and picks the log parser by repo
(`MAP_REPO_TO_PARSER`). The adapter carries the part of those tables it uses as
data, so the plugin needs neither Python nor the network.

Kept per repo:
  language   the harness's MAP_REPO_TO_EXT ("py" repos get the Python eval script)
  log_parser canonical name of the parser function (aliases resolved)
  fail_only  whether the repo is in FAIL_ONLY_REPOS (graded fail-only)
  versions   per version, only the spec fields the eval script and grading read:
             test_cmd, and for Python repos install and eval_commands when set

Only repos whose parser the adapter implements are kept (the Python parsers and
parse_log_marked). Versions without a test_cmd (dbt-labs/dbt-core) are left out:
the harness cannot build an eval script or grade them either.

Usage (in a virtualenv, not on the plugin's build path):
    python3 -m venv /tmp/venv-swebench-4.1.0
    /tmp/venv-swebench-4.1.0/bin/pip install swebench==4.1.0
    /tmp/venv-swebench-4.1.0/bin/python tools/gen_spec_table.py > data/swebench-4.1.0-specs.json
"""

import json
import sys

import swebench
from swebench.harness.constants import (
    FAIL_ONLY_REPOS,
    MAP_REPO_TO_EXT,
    MAP_REPO_VERSION_TO_SPECS,
)
from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

IMPLEMENTED_PARSERS = {
    "parse_log_pytest",
    "parse_log_pytest_options",
    "parse_log_pytest_v2",
    "parse_log_django",
    "parse_log_seaborn",
    "parse_log_sympy",
    "parse_log_matplotlib",
    "parse_log_marked",
}
PYTHON_SCRIPT_FIELDS = ("test_cmd", "install", "eval_commands")


def repo_entry(repo: str) -> dict | None:
    parser = MAP_REPO_TO_PARSER.get(repo)
    if parser is None or parser.__name__ not in IMPLEMENTED_PARSERS:
        return None
    language = MAP_REPO_TO_EXT[repo]
    fields = PYTHON_SCRIPT_FIELDS if language == "py" else ("test_cmd",)
    versions = {
        version: {key: specs[key] for key in fields if key in specs}
        for version, specs in MAP_REPO_VERSION_TO_SPECS[repo].items()
        if specs.get("test_cmd") is not None
    }
    return {
        "language": language,
        "log_parser": parser.__name__,
        "fail_only": repo in FAIL_ONLY_REPOS,
        "versions": versions,
    }


def main() -> None:
    if swebench.__version__ != "4.1.0":
        sys.exit(f"needs swebench 4.1.0, found {swebench.__version__}")
    repos = {}
    for repo in sorted(MAP_REPO_VERSION_TO_SPECS):
        entry = repo_entry(repo)
        if entry is not None:
            repos[repo] = entry
    json.dump({"swebench": swebench.__version__, "repos": repos}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
