"""The RL rollout example, run as a user runs it, against the daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import Daemon

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rollouts.py"

# The status each quickstart task's solution gets from a batch run (as
# tests/support/src/quickstart.rs says for the Rust end-to-end tests).
EXPECTED = {
    "calc-add": "ok",
    "calc-clamp": "failed",
    "calc-div": "failed",
    "calc-mean": "ok",
    "calc-power": "ok",
    "calc-sub": "ok",
    "shell-count": "failed",
    "shell-trim": "ok",
    "shell-upper": "ok",
    "textkit-count": "ok",
    "textkit-slugify": "ok",
    "textkit-truncate": "failed",
    "textkit-wrap": "failed",
}


def test_256_rollouts_in_forked_groups_get_the_runs_grades(daemon: Daemon) -> None:
    finished = subprocess.run(
        [sys.executable, str(EXAMPLE), "--url", daemon.url, "--rollouts", "256"],
        env={**os.environ, "SANDFLEET_TOKEN": daemon.token},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert finished.returncode == 0, finished.stderr
    summary = json.loads(finished.stdout)
    assert (summary["rollouts"], summary["groups"], summary["forked_groups"]) == (256, 32, 32)
    assert (summary["scored"], summary["masked"]) == (256, 0)
    assert set(summary["by_task"]) == set(EXPECTED)
    for task, outcomes in summary["by_task"].items():
        assert {status for status, _ in outcomes} == {EXPECTED[task]}, task
