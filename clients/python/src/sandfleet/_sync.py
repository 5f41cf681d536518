"""A blocking facade over :class:`AsyncClient`, for scripts and notebooks.

It runs the async client on an event loop of its own, in one thread, and
waits for each call: the logic (retries, idempotency keys, renewals,
releases) is the async client's, once. The loop runs between calls too, so
idle leases are still renewed while the script does something else.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

from ._client import AsyncClient, Command, ExecStream, Lease, LeaseGroup, Session, Snapshot
from .models import ExecResult, Grade, LeaseInfo, Output

__all__ = ["Client", "SyncLease", "SyncSnapshot", "SyncSession", "SyncExecStream"]

T = TypeVar("T")


class _Loop:
    """An event loop in a daemon thread, and a way to wait on it."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sandfleet-loop", daemon=True)
        self._thread.start()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(work, self._loop)
        return future.result()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


class Client:
    """The blocking client: the calls of :class:`AsyncClient`, waited for.

    ::

        with sandfleet.Client("http://127.0.0.1:7878") as client:
            with client.lease(image="calc") as lease:
                print(lease.exec(["python3", "-c", "print(6 * 7)"]).stdout)

    Leases, snapshots and sessions are acquired when the call returns and
    given back when their ``with`` block ends (or by ``release()``, or when
    the client closes).
    """

    def __init__(self, base_url: str = "http://127.0.0.1:7878", token: str | None = None, **options: Any) -> None:
        self._loop = _Loop()

        async def make() -> AsyncClient:
            return AsyncClient(base_url, token, **options)

        self._async = self._loop.run(make())

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Gives back everything still held, then stops the loop."""
        try:
            self._loop.run(self._async.aclose())
        finally:
            self._loop.stop()

    def lease(
        self,
        image: str | None = None,
        task: Mapping[str, Any] | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
        ttl_s: int | None = None,
        workdir: str | None = None,
    ) -> SyncLease:
        """A lease, acquired now; use it with ``with`` to release it when the
        block ends."""
        made = self._async.acquire(image, task, labels=labels, run_id=run_id, ttl_s=ttl_s, workdir=workdir)
        return SyncLease(self._loop, self._loop.run(made))

    acquire = lease

    def leases(
        self,
        n: int | None = None,
        image: str | None = None,
        task: Mapping[str, Any] | None = None,
        *,
        tasks: Sequence[Mapping[str, Any]] | None = None,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
        ttl_s: int | None = None,
    ) -> SyncLeaseGroup:
        """Several leases, all of them or none."""
        acquiring = self._async.leases(n, image, task, tasks=tasks, labels=labels, run_id=run_id, ttl_s=ttl_s)
        return SyncLeaseGroup(self._loop, self._loop.run(_awaited(acquiring)))

    def list_leases(self, run_id: str | None = None) -> list[LeaseInfo]:
        """The daemon's live leases."""
        return self._loop.run(self._async.list_leases(run_id))

    def session(self, pool: str) -> SyncSession:
        """A session on the shared pool ``pool``."""
        return SyncSession(self._loop, self._loop.run(_awaited(self._async.session(pool))))

    def metrics(self) -> str:
        """The daemon's Prometheus metrics, as text."""
        return self._loop.run(self._async.metrics())


async def _awaited(acquiring: Any) -> Any:
    return await acquiring


class _SyncRunner:
    """Commands on a lease or a session, waited for."""

    def __init__(self, loop: _Loop, runner: Lease | Session) -> None:
        self._loop = loop
        self._runner = runner
        self.id = runner.id

    def exec(self, command: Command, **options: Any) -> ExecResult:
        """As :meth:`Lease.exec`."""
        return self._loop.run(self._runner.exec(command, **options))

    def stream(self, command: Command, **options: Any) -> SyncExecStream:
        """As :meth:`Lease.stream`: iterate it for the output as printed."""
        return SyncExecStream(self._loop, self._runner.stream(command, **options))

    def release(self) -> None:
        self._loop.run(self._runner.release())

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._loop.run(self._runner.__aexit__(kind, error, trace))


class SyncLease(_SyncRunner):
    """A :class:`Lease`, with each call waited for."""

    _runner: Lease

    @property
    def info(self) -> LeaseInfo:
        return self._runner.info

    def write(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self._loop.run(self._runner.write(path, data, mode))

    def read(self, path: str) -> bytes:
        return self._loop.run(self._runner.read(path))

    def evaluate(self, solution: str | None = None, task: Mapping[str, Any] | None = None) -> Grade:
        return self._loop.run(self._runner.evaluate(solution, task))

    def recycle(self) -> str:
        return self._loop.run(self._runner.recycle())

    def renew(self, ttl_s: int | None = None) -> LeaseInfo:
        return self._loop.run(self._runner.renew(ttl_s))

    def snapshot(self, ttl_s: int | None = None) -> SyncSnapshot:
        return SyncSnapshot(self._loop, self._loop.run(_awaited(self._runner.snapshot(ttl_s))))

    def restore(self, snapshot: SyncSnapshot | Snapshot | str) -> None:
        target = snapshot.id if isinstance(snapshot, SyncSnapshot) else snapshot
        self._loop.run(self._runner.restore(target))


class SyncSession(_SyncRunner):
    """A shared-pool :class:`Session`, with each call waited for."""

    close = _SyncRunner.release


class SyncLeaseGroup(list[SyncLease]):
    """Leases acquired together; ``with`` releases them all."""

    def __init__(self, loop: _Loop, group: LeaseGroup) -> None:
        super().__init__(SyncLease(loop, lease) for lease in group)
        self._loop = loop
        self._group = group

    def __enter__(self) -> SyncLeaseGroup:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._loop.run(self._group.__aexit__(kind, error, trace))

    def release(self) -> None:
        self._loop.run(self._group.release())


class SyncSnapshot:
    """A :class:`Snapshot`, with each call waited for."""

    def __init__(self, loop: _Loop, snapshot: Snapshot) -> None:
        self._loop = loop
        self._snapshot = snapshot
        self.id = snapshot.id
        self.info = snapshot.info

    def fork(self, n: int, **options: Any) -> SyncLeaseGroup:
        """``n`` leases starting from the snapshot's files, all or none."""
        return SyncLeaseGroup(self._loop, self._loop.run(_awaited(self._snapshot.fork(n, **options))))

    def delete(self) -> None:
        self._loop.run(self._snapshot.delete())

    def __enter__(self) -> SyncSnapshot:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._loop.run(self._snapshot.__aexit__(kind, error, trace))


class SyncExecStream:
    """An :class:`ExecStream`, iterated by waiting for each piece."""

    def __init__(self, loop: _Loop, stream: ExecStream) -> None:
        self._loop = loop
        self._stream = stream

    @property
    def result(self) -> ExecResult:
        return self._stream.result

    def __iter__(self) -> Iterator[Output]:
        while True:
            try:
                yield self._loop.run(_next(self._stream))
            except StopAsyncIteration:
                return

    def __enter__(self) -> SyncExecStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.run(self._stream.aclose())


async def _next(stream: ExecStream) -> Output:
    return await stream.__anext__()
