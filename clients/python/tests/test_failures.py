"""What happens when things go wrong between the client and the daemon: a
connection cut mid-exec (through a real proxy socket on loopback) and a
rollout cancelled mid-exec or mid-acquire."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest

import sandfleet
from conftest import Daemon, rows


class CuttingProxy:
    """A TCP proxy on loopback in front of the daemon. Armed, it cuts the
    next connection that carries a request with ``trigger`` in it ``after``
    seconds after passing the request on: the daemon got the request, the
    client gets no answer. ``seen`` counts the requests with ``trigger``."""

    def __init__(self, upstream: str, after: float, trigger: bytes = b"/exec HTTP") -> None:
        parsed = urlparse(upstream)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.after = after
        self.trigger = trigger
        self.armed = False
        self.cuts = 0
        self.seen = 0
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def __aenter__(self) -> CuttingProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(self.host, self.port)
        cut = asyncio.Event()

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, watch: bool) -> None:
            while not cut.is_set():
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
                if watch and self.trigger in data:
                    self.seen += 1
                    if self.armed:
                        self.armed = False
                        asyncio.get_running_loop().call_later(self.after, cut.set)

        pipes = [
            asyncio.ensure_future(pipe(client_reader, upstream_writer, True)),
            asyncio.ensure_future(pipe(upstream_reader, client_writer, False)),
        ]
        cutting = asyncio.ensure_future(cut.wait())
        await asyncio.wait([*pipes, cutting], return_when=asyncio.FIRST_COMPLETED)
        if cut.is_set():
            self.cuts += 1
        for task in [*pipes, cutting]:
            task.cancel()
        for writer in (client_writer, upstream_writer):
            writer.close()


def counter(metrics: str, name: str) -> float:
    """The sum of a Prometheus counter's samples over its labels."""
    return sum(float(value) for value in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", metrics, re.MULTILINE))


@pytest.fixture
async def proxied(daemon: Daemon) -> AsyncIterator[tuple[CuttingProxy, sandfleet.AsyncClient]]:
    async with CuttingProxy(daemon.url, after=0.4) as proxy:
        async with sandfleet.AsyncClient(proxy.url, token=daemon.token, keepalive_expiry=0) as client:
            yield proxy, client


async def test_an_exec_cut_mid_way_is_retried_and_runs_once(
    proxied: tuple[CuttingProxy, sandfleet.AsyncClient], client: sandfleet.AsyncClient
) -> None:
    proxy, through_proxy = proxied
    async with through_proxy.lease(image="calc") as lease:
        before = await client.metrics()
        proxy.armed = True
        result = await lease.exec("echo ran >> /workspace/runs; sleep 1; echo done")
        after = await client.metrics()
        assert proxy.cuts == 1
        assert result.stdout == "done\n"
        # The daemon ran one command and answered the retry from it ...
        assert counter(after, "sandfleet_execs_total") - counter(before, "sandfleet_execs_total") == 1
        assert counter(after, "sandfleet_idempotent_replays_total") - counter(before, "sandfleet_idempotent_replays_total") >= 1
        # ... and the command's own side effect says the same.
        assert (await lease.exec("wc -l < /workspace/runs")).stdout.strip() == "1"


async def test_a_stream_cut_mid_way_resumes_without_repeating_output(
    proxied: tuple[CuttingProxy, sandfleet.AsyncClient],
) -> None:
    proxy, through_proxy = proxied
    async with through_proxy.lease(image="calc") as lease:
        proxy.armed = True
        async with lease.stream("echo ran >> /workspace/runs; echo first; sleep 1; echo second") as output:
            pieces = [piece.data async for piece in output]
        assert proxy.cuts == 1
        assert pieces == ["first\n", "second\n"]
        assert output.result.stdout == "first\nsecond\n"
        assert (await lease.exec("wc -l < /workspace/runs")).stdout.strip() == "1"


async def test_a_create_cut_mid_way_is_not_retried(daemon: Daemon, client: sandfleet.AsyncClient) -> None:
    mine = f"py-{uuid.uuid4().hex[:12]}"
    async with CuttingProxy(daemon.url, after=0.0, trigger=b"POST /v1/leases HTTP") as proxy:
        async with sandfleet.AsyncClient(proxy.url, token=daemon.token) as through_proxy:
            proxy.armed = True
            with pytest.raises(sandfleet.TransportError) as cut:
                await through_proxy.acquire(task=rows()["calc-add"], run_id=mine)
    assert cut.value.sent and isinstance(cut.value, sandfleet.InfraError)
    assert (proxy.cuts, proxy.seen) == (1, 1)  # sent once, never again
    for info in await client.list_leases(mine):  # whatever the daemon made of it
        await client._transport.request("DELETE", f"/v1/leases/{info.id}", idempotent=True)


async def test_a_rollout_cancelled_mid_exec_leaves_no_lease(client: sandfleet.AsyncClient) -> None:
    mine = f"py-{uuid.uuid4().hex[:12]}"
    started = asyncio.Event()

    async def rollout() -> None:
        async with client.lease(image="calc", run_id=mine) as lease:
            started.set()
            await lease.exec("sleep 30")

    task = asyncio.ensure_future(rollout())
    await asyncio.wait_for(started.wait(), 60)
    await asyncio.sleep(0.3)
    assert len(await client.list_leases(mine)) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await client.list_leases(mine) == []


async def test_a_rollout_cancelled_mid_acquire_leaves_no_lease(client: sandfleet.AsyncClient) -> None:
    mine = f"py-{uuid.uuid4().hex[:12]}"

    async def rollout() -> None:
        async with client.lease(task=rows()["calc-add"], run_id=mine):
            raise AssertionError("cancelled before the lease was made")

    task = asyncio.ensure_future(rollout())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The daemon finishes making the lease; the client gives it back then.
    for _ in range(300):
        if not client._background and await client.list_leases(mine) == []:
            break
        await asyncio.sleep(0.05)
    assert await client.list_leases(mine) == []
