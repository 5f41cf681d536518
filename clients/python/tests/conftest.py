"""A real ``sandfleet serve`` on loopback for the whole session: the local
backend over the quickstart's images and dataset, as tests/e2e/serve.rs runs
it. No HTTP is mocked; a test that needs a broken network puts a real
proxy socket between the client and the daemon.

The daemon binary is ``$SANDFLEET_BIN``, else the workspace's
``target/debug/sandfleet`` (built with ``cargo build -p sandfleet`` when it
is missing).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import sandfleet

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "examples" / "quickstart"
TOKEN = "python-client-test-token"

# The 1,000-lease test needs the local backend to hold that many sandboxes;
# the quickstart's own default (4 per core) is far fewer.
MAX_SANDBOXES = 1100


def rows() -> dict[str, dict[str, Any]]:
    """The quickstart's dataset rows, by task id."""
    lines = (QUICKSTART / "tasks.jsonl").read_text().splitlines()
    return {row["id"]: row for row in map(json.loads, filter(str.strip, lines))}


def solutions() -> dict[str, str | None]:
    """The quickstart's solutions, by task id."""
    lines = (QUICKSTART / "solutions.jsonl").read_text().splitlines()
    return {row["id"]: row.get("solution") for row in map(json.loads, filter(str.strip, lines))}


def fleet_file(directory: Path) -> Path:
    """The quickstart's images and dataset, a shared pool, a daemon token."""
    images = QUICKSTART / "images"
    text = f"""
[run]
name = "python-client"
dataset = "{QUICKSTART / 'tasks.jsonl'}"

[adapter]
name = "generic"

# Reused sandboxes, reset and verified: what makes a lease's recycle
# "clean" rather than "replaced".
[fleet]
recycle = true

[plugins]
reset = "git-restore"

[api]
state_dir = "serve"
token_env = "SANDFLEET_PY_TOKEN"
max_leases = {MAX_SANDBOXES}

[[shared_pools]]
name = "tools"
image = "shellutils"
size = 1
max_sessions_per_sandbox = 2

[[clusters]]
name = "local"
backend = "local"

[clusters.local]
state_dir = "state"
max_sandboxes = {MAX_SANDBOXES}

[clusters.local.images]
calc = {{ path = "{images / 'calc'}", git = true }}
textkit = {{ path = "{images / 'textkit'}", git = true }}
shellutils = {{ path = "{images / 'shellutils'}", git = true }}
"""
    path = directory / "fleet.toml"
    path.write_text(text)
    return path


def daemon_binary() -> Path:
    explicit = os.environ.get("SANDFLEET_BIN")
    if explicit:
        return Path(explicit)
    binary = REPO / "target" / "debug" / "sandfleet"
    if not binary.exists():
        subprocess.run(["cargo", "build", "-p", "sandfleet"], cwd=REPO, check=True)
    return binary


@dataclass
class Daemon:
    url: str
    token: str
    run_id: str
    process: subprocess.Popen[str]


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    # Not under pytest's tmp_path (mode 700 under /tmp/pytest-of-USER): the
    # sandboxes' root, a mapped uid, must be able to enter the state dir.
    directory = Path(tempfile.mkdtemp(prefix="sandfleet-py-"))
    directory.chmod(0o755)
    process = subprocess.Popen(
        [str(daemon_binary()), "serve", str(fleet_file(directory)), "--listen", "127.0.0.1:0"],
        cwd=directory,
        env={**os.environ, "SANDFLEET_PY_TOKEN": TOKEN, "SANDFLEET_LOG": "warn"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    # "sandfleet serve: run id ID (...)", then "listening on http://ADDR".
    first = process.stdout.readline()
    second = process.stdout.readline()
    assert first.startswith("sandfleet serve: run id "), first
    assert second.startswith("listening on "), second
    run_id = first.removeprefix("sandfleet serve: run id ").split()[0]
    yield Daemon(url=second.removeprefix("listening on ").strip(), token=TOKEN, run_id=run_id, process=process)
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def client(daemon: Daemon) -> AsyncIterator[sandfleet.AsyncClient]:
    async with sandfleet.AsyncClient(daemon.url, token=daemon.token) as client:
        yield client
