"""Exec round trips per second and client CPU per exec, side by side in one
run, for three clients driving the same leases of one daemon from one event
loop:

* ``sandfleet`` — this package's :class:`sandfleet.AsyncClient`;
* ``raw httpx`` — bare ``httpx.AsyncClient`` calls with the same library (one
  pool as large as the concurrency, no idempotency key, no retries);
* ``old threads`` — the thread-pool ``urllib`` client that
  ``examples/python/sandfleet_client.py`` shipped before this package (a copy
  of its code is below, kept only as the baseline), with a thread per
  concurrent rollout as its docs said to size it.

At each concurrency (1, 64, 512 rollouts, each a loop of ``exec(["true"])``
on a lease of its own) each client runs for ``--seconds``; the event loop's
lag (how late a 5 ms sleep wakes) is sampled all the while and its p99 is
reported. Client CPU is this process's CPU time (all threads) per exec.

    python benches/exec_rate.py                       # starts its own daemon on loopback
    python benches/exec_rate.py --url URL --token T   # or drives a running one

The daemon runs on the same machine: the rates are the daemon's and the
client's together; the CPU column is the client's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

import sandfleet

# ---------------------------------------------------------------------------
# The old client (examples/python/sandfleet_client.py), the parts an exec
# uses, as it was: blocking urllib calls run on a thread pool.


class OldSandfleetError(Exception):
    def __init__(self, status, kind, message):
        super().__init__(f"{status} {kind}: {message}")
        self.status, self.kind, self.message = status, kind, message


@dataclass
class OldExecResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration_ms: int


class OldClient:
    """Blocking calls to the daemon. Thread-safe: every call opens its own connection."""

    def __init__(self, url="http://127.0.0.1:7878", token=None, timeout=600.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method, path, body=None, raw=None, headers=None, query=None):
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = raw
        all_headers = dict(headers or {})
        if body is not None:
            data = json.dumps(body).encode()
            all_headers["Content-Type"] = "application/json"
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
                if response.headers.get_content_type() == "application/json":
                    return json.loads(payload) if payload else None
                return payload
        except urllib.error.HTTPError as error:
            payload = error.read()
            try:
                detail = json.loads(payload)["error"]
                raise OldSandfleetError(error.code, detail["kind"], detail["message"]) from None
            except (ValueError, KeyError, TypeError):
                raise OldSandfleetError(error.code, "http", payload.decode(errors="replace")) from None


class OldLease:
    def __init__(self, client, info):
        self.client, self.info = client, info
        self.id = info["id"]

    def exec(self, command, timeout_s=None, env=None, workdir=None, stdin=None, idempotency_key=None):
        body = {"argv": command} if isinstance(command, list) else {"command": command}
        for key, value in dict(timeout_s=timeout_s, env=env, workdir=workdir, stdin=stdin).items():
            if value is not None:
                body[key] = value
        key = idempotency_key or str(uuid.uuid4())
        for attempt in range(3):
            try:
                answer = self.client.request("POST", f"/v1/leases/{self.id}/exec", body, headers={"Idempotency-Key": key})
                return OldExecResult(**{k: answer[k] for k in OldExecResult.__dataclass_fields__})
            except (ConnectionError, TimeoutError, urllib.error.URLError):
                if attempt == 2:
                    raise


class OldAsyncClient:
    """`Client` for asyncio: each call runs on a thread pool of `max_concurrency` threads."""

    def __init__(self, url="http://127.0.0.1:7878", token=None, max_concurrency=64, timeout=600.0):
        self.sync = OldClient(url, token, timeout)
        self.pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="sandfleet")

    async def call(self, function, *args, **kwargs):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: function(*args, **kwargs))

    def close(self):
        self.pool.shutdown(wait=True)


class OldAsyncLease:
    def __init__(self, client, lease):
        self.client, self.lease, self.id = client, lease, lease.id

    async def exec(self, command, **kwargs):
        return await self.client.call(self.lease.exec, command, **kwargs)


# ---------------------------------------------------------------------------


@dataclass
class Row:
    client: str
    concurrency: int
    execs: int
    seconds: float
    cpu_s: float
    lag_p99_ms: float

    @property
    def rate(self) -> float:
        return self.execs / self.seconds

    @property
    def cpu_us_per_exec(self) -> float:
        return self.cpu_s / self.execs * 1e6


Exec = Callable[[int], Awaitable[None]]
"""Runs one exec on the lease of rollout i."""


async def measure(name: str, concurrency: int, run_exec: Exec, seconds: float) -> Row:
    stop = time.monotonic() + seconds
    execs = 0
    lags: list[float] = []
    running = True

    async def rollout(index: int) -> None:
        nonlocal execs
        while time.monotonic() < stop:
            await run_exec(index)
            execs += 1

    async def watch() -> None:
        while running:
            started = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - started - 0.005)

    watcher = asyncio.ensure_future(watch())
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(rollout(i) for i in range(concurrency)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    running = False
    await watcher
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else 0.0
    return Row(name, concurrency, execs, wall, cpu, p99 * 1000)


async def bench(url: str, token: str | None, levels: list[int], seconds: float) -> list[Row]:
    rows: list[Row] = []
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with sandfleet.AsyncClient(url, token=token) as client:
        for concurrency in levels:
            leases = list(await asyncio.gather(*(client.acquire(image="shellutils") for _ in range(concurrency))))
            ids = [lease.id for lease in leases]
            # A warm-up round, so every client starts with connections open.
            await asyncio.gather(*(lease.exec(["true"]) for lease in leases))

            async def package(i: int) -> None:
                result = await leases[i].exec(["true"])
                assert result.exit_code == 0

            rows.append(await measure("sandfleet", concurrency, package, seconds))

            limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
            async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=600) as http:

                async def raw(i: int) -> None:
                    response = await http.post(f"/v1/leases/{ids[i]}/exec", json={"argv": ["true"]})
                    assert response.status_code == 200 and response.json()["exit_code"] == 0

                rows.append(await measure("raw httpx", concurrency, raw, seconds))

            old = OldAsyncClient(url, token, max_concurrency=concurrency)
            old_leases = [OldAsyncLease(old, OldLease(old.sync, {"id": lease_id})) for lease_id in ids]

            async def threads(i: int) -> None:
                result = await old_leases[i].exec(["true"])
                assert result.exit_code == 0

            rows.append(await measure("old threads", concurrency, threads, seconds))
            old.close()
            await asyncio.gather(*(lease.release() for lease in leases))
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| client | rollouts | execs/s | client CPU per exec | loop lag p99 |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row.client} | {row.concurrency} | {row.rate:,.0f} | {row.cpu_us_per_exec:,.0f} µs | {row.lag_p99_ms:,.1f} ms |"
        )
    return "\n".join(lines)


def start_daemon() -> tuple[subprocess.Popen[str], str, str, Path]:
    """A daemon on loopback as the tests start it (tests/conftest.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import conftest

    directory = Path(tempfile.mkdtemp(prefix="sandfleet-bench-"))
    directory.chmod(0o755)
    process = subprocess.Popen(
        [str(conftest.daemon_binary()), "serve", str(conftest.fleet_file(directory)), "--listen", "127.0.0.1:0"],
        cwd=directory,
        env={**os.environ, "SANDFLEET_PY_TOKEN": conftest.TOKEN, "SANDFLEET_LOG": "warn"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    process.stdout.readline()
    url = process.stdout.readline().removeprefix("listening on ").strip()
    return process, url, conftest.TOKEN, directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--token", default=os.environ.get("SANDFLEET_TOKEN"))
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--levels", default="1,64,512")
    args = parser.parse_args()
    process = directory = None
    url, token = args.url, args.token
    if url is None:
        process, url, token, directory = start_daemon()
    try:
        rows = asyncio.run(bench(url, token, [int(level) for level in args.levels.split(",")], args.seconds))
    finally:
        if process is not None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=120)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
    print(table(rows))


if __name__ == "__main__":
    main()
