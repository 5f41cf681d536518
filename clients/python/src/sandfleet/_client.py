"""The asyncio client: leases, snapshots, forks and shared-pool sessions.

Everything runs on the caller's event loop over one pooled connection set;
no call blocks the loop and no thread is started. What a client makes
(leases, snapshots, sessions) it gives back: on leaving an ``async with``
block however it is left — an exception, a cancelled task — and, for
whatever is still held, when the client closes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping, Sequence
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, Generic, TypeVar

from ._transport import Transport, _backoff
from .errors import LeaseExpired, NotFound, SandfleetError, TransportError, from_response
from .models import ExecResult, Grade, LeaseInfo, Output, SessionInfo, SnapshotInfo

__all__ = ["AsyncClient", "Lease", "LeaseGroup", "Snapshot", "Session", "ExecStream", "Acquiring"]

log = logging.getLogger("sandfleet")

T = TypeVar("T")

Command = str | Sequence[str]
"""A shell command line (run by ``sh -c``) or an argv list (run without a shell)."""

# The daemon kills a command without a timeout of its own after this long;
# the client waits that long plus a margin for the answer.
_DAEMON_EXEC_TIMEOUT_S = 600.0
_ANSWER_MARGIN_S = 30.0


class AsyncClient:
    """A client of one ``sandfleet serve`` daemon.

    ::

        async with sandfleet.AsyncClient("http://127.0.0.1:7878") as client:
            async with client.lease(image="calc") as lease:
                result = await lease.exec("python3 -c 'print(6 * 7)'")

    ``max_connections`` bounds the pool: past it, requests wait for a free
    connection (for at most ``timeout``) instead of opening more sockets.
    ``keepalive_expiry`` drops idle connections before anything between the
    client and the daemon does. ``retries`` is how often a request that may
    be sent twice is sent again after a transport failure. ``run_id`` is the
    default run id of every lease, for listing and reaping them together.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:7878",
        token: str | None = None,
        *,
        run_id: str | None = None,
        timeout: float = 900.0,
        max_connections: int = 1024,
        keepalive_expiry: float = 5.0,
        retries: int = 3,
    ) -> None:
        self._transport = Transport(
            base_url,
            token,
            timeout=timeout,
            max_connections=max_connections,
            keepalive_expiry=keepalive_expiry,
            retries=retries,
        )
        self.run_id = run_id
        self._held: dict[str, Lease | Snapshot | Session] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Gives back everything this client still holds, waits for releases
        under way, then closes the connections."""
        if self._closed:
            return
        self._closed = True
        held = list(self._held.values())
        await asyncio.gather(*(item.release() for item in held), return_exceptions=True)
        pending = [task for task in self._background if not task.done()]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self._transport.aclose()

    # -- leases -----------------------------------------------------------

    async def acquire(
        self,
        image: str | None = None,
        task: Mapping[str, Any] | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
        ttl_s: int | None = None,
        workdir: str | None = None,
    ) -> Lease:
        """A lease on a sandbox of ``image``, or one set up for the dataset row
        ``task``. The caller releases it (or the client does on close);
        prefer :meth:`lease`, which releases it when its block ends."""
        body = self._acquire_body(image, task, labels, run_id, ttl_s, workdir)
        response = await self._transport.request("POST", "/v1/leases", idempotent=False, json_body=body)
        return self._adopt(LeaseInfo.from_json(response.json()), ttl_s)

    def lease(
        self,
        image: str | None = None,
        task: Mapping[str, Any] | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
        ttl_s: int | None = None,
        workdir: str | None = None,
    ) -> Acquiring[Lease]:
        """A lease to use with ``async with``: released when the block ends,
        however it ends (awaited instead, the caller releases it)."""
        return Acquiring(self, lambda: self.acquire(image, task, labels=labels, run_id=run_id, ttl_s=ttl_s, workdir=workdir))

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
    ) -> Acquiring[LeaseGroup]:
        """``n`` leases of ``image`` (or for ``task``), or one per row of
        ``tasks``, all of them or none: when one cannot be had the daemon
        releases the others and this raises."""
        if tasks is not None:
            bodies = [self._acquire_body(None, row, labels, run_id, ttl_s, None) for row in tasks]
        elif n is not None and n > 0:
            bodies = [self._acquire_body(image, task, labels, run_id, ttl_s, None)] * n
        else:
            raise ValueError("leases: give n >= 1 (with image or task) or tasks")

        async def acquire_all() -> LeaseGroup:
            response = await self._transport.request(
                "POST", "/v1/leases:batch", idempotent=False, json_body={"leases": bodies}
            )
            return LeaseGroup(self._adopt(LeaseInfo.from_json(info), ttl_s) for info in response.json()["leases"])

        return Acquiring(self, acquire_all)

    async def list_leases(self, run_id: str | None = None) -> list[LeaseInfo]:
        """The daemon's live leases (only ``run_id``'s, when given), whoever
        holds them."""
        params = {"run_id": run_id} if run_id else None
        response = await self._transport.request("GET", "/v1/leases", idempotent=True, params=params)
        return [LeaseInfo.from_json(info) for info in response.json()["leases"]]

    # -- shared pools -------------------------------------------------------

    def session(self, pool: str) -> Acquiring[Session]:
        """A session on the shared pool ``pool``: pinned to one of its
        sandboxes, which other sessions share; closed when the block ends."""

        async def open_session() -> Session:
            response = await self._transport.request("POST", f"/v1/shared/{pool}/sessions", idempotent=False)
            body = response.json()
            session = Session(self, SessionInfo(id=body["id"], pool=body["pool"], sandbox=body["sandbox"]))
            self._held[session.key] = session
            return session

        return Acquiring(self, open_session)

    # -- daemon -------------------------------------------------------------

    async def metrics(self) -> str:
        """The daemon's Prometheus metrics, as text."""
        return (await self._transport.request("GET", "/metrics", idempotent=True)).text

    async def ready(self) -> dict[str, Any]:
        """``/readyz``: whether the daemon's backends and plugins are up."""
        response = await self._transport.request("GET", "/readyz", idempotent=True)
        body: dict[str, Any] = response.json()
        return body

    # -- internals ----------------------------------------------------------

    def _acquire_body(
        self,
        image: str | None,
        task: Mapping[str, Any] | None,
        labels: Mapping[str, str] | None,
        run_id: str | None,
        ttl_s: int | None,
        workdir: str | None,
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "image": image,
            "task": dict(task) if task is not None else None,
            "labels": dict(labels) if labels else None,
            "run_id": run_id or self.run_id,
            "ttl_s": ttl_s,
            "workdir": workdir,
        }
        return {name: value for name, value in fields.items() if value is not None}

    def _adopt(self, info: LeaseInfo, ttl_s: int | None) -> Lease:
        """A lease the daemon made for this client: held, and kept renewed."""
        lease = Lease(self, info, ttl_s)
        self._held[lease.key] = lease
        return lease

    def _spawn(self, work: Awaitable[T]) -> asyncio.Task[T]:
        """``work`` as a task the client keeps track of until it is done."""
        task: asyncio.Task[T] = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _shielded(self, work: Awaitable[T]) -> T:
        """``work`` run to its end even when the caller is cancelled: a
        release must not stop half-way and leave a sandbox held."""
        return await asyncio.shield(self._spawn(work))

    def _give_back_when_made(self, making: asyncio.Future[Any]) -> None:
        """Releases what ``making`` makes once it is made: its caller was
        cancelled while the daemon was already making it."""

        async def give_back() -> None:
            try:
                made = await making
            except Exception:  # nothing was made
                return
            await made.release()

        self._spawn(give_back())


class Acquiring(Generic[T]):
    """Something to acquire: ``await`` it to hold it yourself, or enter it
    with ``async with`` to have it released when the block ends — on an
    exception and on cancellation too, even one that comes while the daemon
    is still making it."""

    def __init__(self, client: AsyncClient, make: Callable[[], Awaitable[T]]) -> None:
        self._client = client
        self._make = make
        self._value: T | None = None

    def __await__(self) -> Generator[Any, None, T]:
        return self._make().__await__()

    async def __aenter__(self) -> T:
        making = asyncio.ensure_future(self._make())
        try:
            self._value = await asyncio.shield(making)
        except asyncio.CancelledError:
            self._client._give_back_when_made(making)
            raise
        return self._value

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        value = self._value
        self._value = None
        if value is not None:
            await _release_on_exit(value, error)


async def _release_on_exit(item: Any, error: BaseException | None) -> None:
    """Releases ``item`` as its block ends. A failed release does not hide
    the block's own exception; it is logged instead."""
    try:
        await item.release()
    except SandfleetError:
        if error is None:
            raise
        log.warning("releasing %s after %r failed", item, error, exc_info=True)


class _Runner:
    """What leases and sessions share: commands, buffered or streamed, each
    with an idempotency key, so a retry never runs a command twice."""

    _client: AsyncClient
    _exec_path: str

    def _touch(self) -> None:
        """A call is under way: the daemon counts it as use."""

    def _translate(self, error: SandfleetError) -> SandfleetError:
        return error

    async def exec(
        self,
        command: Command,
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: str | None = None,
        merge_stderr: bool = False,
        idempotency_key: str | None = None,
    ) -> ExecResult:
        """Runs ``command`` and returns what it did. A non-zero exit or a
        timeout is a result, not an error. A dropped connection is retried
        with the same idempotency key: the daemon answers the retry from the
        first execution, so the command runs once."""
        body = _exec_body(command, timeout_s, env, workdir, stdin, merge_stderr)
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        self._touch()
        try:
            response = await self._client._transport.request(
                "POST",
                self._exec_path,
                idempotent=True,
                json_body=body,
                headers=headers,
                timeout=_answer_timeout(timeout_s),
            )
        except SandfleetError as error:
            raise self._translate(error) from error
        finally:
            self._touch()
        return ExecResult.from_json(response.json())

    def stream(
        self,
        command: Command,
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: str | None = None,
        merge_stderr: bool = False,
        idempotency_key: str | None = None,
    ) -> ExecStream:
        """Runs ``command``, giving its output as it is printed::

            async with lease.stream("make test") as output:
                async for chunk in output:
                    print(chunk.stream, chunk.data, end="")
            print(output.result.exit_code)
        """
        body = _exec_body(command, timeout_s, env, workdir, stdin, merge_stderr)
        return ExecStream(self, body, idempotency_key or uuid.uuid4().hex, _answer_timeout(timeout_s))


class ExecStream:
    """A streamed command: an async iterator of :class:`Output` pieces;
    ``result`` holds the :class:`ExecResult` once the iteration ended.

    A connection cut mid-stream is retried with the same idempotency key:
    the daemon replays the execution's output from the start, and the
    pieces already given are skipped, so the caller sees each piece once
    and the command runs once.
    """

    def __init__(self, runner: _Runner, body: dict[str, Any], key: str, timeout: float) -> None:
        self._runner = runner
        self._body = body
        self._key = key
        self._timeout = timeout
        self._events: AsyncIterator[Output] | None = None
        self._result: ExecResult | None = None

    @property
    def result(self) -> ExecResult:
        """What the command did; there once the iteration ended."""
        if self._result is None:
            raise RuntimeError("the stream has not ended yet: iterate it to its end first")
        return self._result

    def __aiter__(self) -> ExecStream:
        return self

    async def __anext__(self) -> Output:
        if self._events is None:
            self._events = self._run()
        return await self._events.__anext__()

    async def __aenter__(self) -> ExecStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stops reading (the command runs on in the sandbox to its end)."""
        if self._events is not None:
            await self._events.aclose()  # type: ignore[attr-defined]

    async def _run(self) -> AsyncIterator[Output]:
        runner = self._runner
        transport = runner._client._transport
        headers = {"Idempotency-Key": self._key, "Accept": "application/x-ndjson"}
        given = 0
        printed: dict[str, list[str]] = {"stdout": [], "stderr": []}
        attempt = 0
        runner._touch()
        try:
            while True:
                try:
                    async with transport.stream(
                        "POST", runner._exec_path, json_body=self._body, headers=headers, timeout=self._timeout
                    ) as response:
                        seen = 0
                        async for line in response.aiter_lines():
                            if not line.strip():
                                continue
                            event = json.loads(line)
                            kind = event.get("event")
                            if kind == "output":
                                seen += 1
                                if seen <= given:
                                    continue
                                given = seen
                                chunk = Output(event["stream"], event["data"])
                                printed[chunk.stream].append(chunk.data)
                                yield chunk
                            elif kind == "exit":
                                self._result = ExecResult.from_json(
                                    event, "".join(printed["stdout"]), "".join(printed["stderr"])
                                )
                                return
                            elif kind == "error":
                                raise from_response(None, event)
                    raise TransportError(f"POST {runner._exec_path}: the stream ended before its exit event", sent=True)
                except TransportError:
                    if attempt >= transport.retries:
                        raise
                attempt += 1
                await asyncio.sleep(_backoff(attempt))
        except SandfleetError as error:
            translated = runner._translate(error)
            if translated is error:
                raise
            raise translated from error
        finally:
            runner._touch()


class Lease(_Runner):
    """One sandbox, held until released. Every call on it counts as use;
    while it sits idle the client renews it before its idle time runs out.
    ``async with lease:`` releases it when the block ends."""

    def __init__(self, client: AsyncClient, info: LeaseInfo, ttl_s: int | None) -> None:
        self._client = client
        self.info = info
        self.id = info.id
        self.key = f"lease/{info.id}"
        self._path = f"/v1/leases/{info.id}"
        self._exec_path = f"{self._path}/exec"
        self._released = False
        self._last_used = time.monotonic()
        ttl = float(ttl_s) if ttl_s is not None else (info.expires_at - datetime.now(timezone.utc)).total_seconds()
        # Not one of the client's background tasks: those are waited for on
        # close, and a renewer ends only when its lease is released.
        self._renewer = asyncio.ensure_future(self._keep_renewed(max(ttl, 3.0)))

    def __repr__(self) -> str:
        return f"Lease({self.id!r}, image={self.info.image!r})"

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await _release_on_exit(self, error)

    def _touch(self) -> None:
        self._last_used = time.monotonic()

    def _translate(self, error: SandfleetError) -> SandfleetError:
        """A lease this client still holds that the daemon calls not live
        has lapsed: an infrastructure failure, not the caller's mistake."""
        if isinstance(error, NotFound) and not self._released and f"`{self.id}`" in error.message:
            return LeaseExpired(error.message, kind=error.kind, status=error.status)
        return error

    async def _call(self, method: str, suffix: str, *, idempotent: bool, **options: Any) -> Any:
        self._touch()
        try:
            return await self._client._transport.request(method, self._path + suffix, idempotent=idempotent, **options)
        except SandfleetError as error:
            raise self._translate(error) from error
        finally:
            self._touch()

    async def write(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Writes ``data`` to the absolute ``path`` in the sandbox."""
        content = data.encode() if isinstance(data, str) else data
        await self._call(
            "PUT", "/files", idempotent=True, content=content, params={"path": path, "mode": format(mode, "o")}
        )

    async def read(self, path: str) -> bytes:
        """The bytes of the file at the absolute ``path`` in the sandbox."""
        response = await self._call("GET", "/files", idempotent=True, params={"path": path})
        content: bytes = response.content
        return content

    async def evaluate(self, solution: str | None = None, task: Mapping[str, Any] | None = None) -> Grade:
        """Grades ``solution`` (a patch) on the lease's task (or on ``task``,
        for a lease acquired for an image) with the daemon's adapter. An
        ``infra_error`` comes back as a grade with ``infra`` set, to mask."""
        body: dict[str, Any] = {}
        if solution is not None:
            body["solution"] = solution
        if task is not None:
            body["task"] = dict(task)
        response = await self._call("POST", "/evaluate", idempotent=False, json_body=body)
        return Grade.from_json(response.json())

    async def recycle(self) -> str:
        """Resets the sandbox through the daemon's reset check: ``clean``, or
        ``replaced`` when it could not be verified clean and a fresh sandbox
        of the image now serves the lease."""
        response = await self._call("POST", "/recycle", idempotent=False)
        body = response.json()
        self.info = LeaseInfo.from_json(body["lease"])
        reset: str = body["reset"]
        return reset

    async def renew(self, ttl_s: int | None = None) -> LeaseInfo:
        """Pushes the lease's expiry out (to ``ttl_s`` of idle time, when
        given). The client does this by itself while the lease is idle."""
        response = await self._call("POST", "/renew", idempotent=True, json_body={"ttl_s": ttl_s} if ttl_s else {})
        self.info = LeaseInfo.from_json(response.json())
        return self.info

    async def refresh(self) -> LeaseInfo:
        """The lease as the daemon sees it now (``state`` is ``lost`` when
        its sandbox is gone)."""
        response = await self._call("GET", "", idempotent=True)
        self.info = LeaseInfo.from_json(response.json())
        return self.info

    def snapshot(self, ttl_s: int | None = None) -> Acquiring[Snapshot]:
        """The sandbox's files as they are now (not its processes), to fork
        or restore from; the lease serves on. Deleted when its ``async
        with`` block ends."""

        async def take() -> Snapshot:
            response = await self._call(
                "POST", "/snapshots", idempotent=False, json_body={"ttl_s": ttl_s} if ttl_s else {}
            )
            snapshot = Snapshot(self._client, SnapshotInfo.from_json(response.json()))
            self._client._held[snapshot.key] = snapshot
            return snapshot

        return Acquiring(self._client, take)

    async def restore(self, snapshot: Snapshot | str) -> None:
        """Puts the sandbox back to ``snapshot`` in place: every process
        ended, every file written since gone."""
        snapshot_id = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
        response = await self._call("POST", "/restore", idempotent=False, json_body={"snapshot": snapshot_id})
        self.info = LeaseInfo.from_json(response.json())

    async def release(self) -> None:
        """Gives the lease back, and only this lease; releasing twice, or a
        lease that lapsed, is no error."""
        if self._released:
            return
        self._released = True
        self._renewer.cancel()
        self._client._held.pop(self.key, None)
        try:
            await self._client._shielded(
                self._client._transport.request("DELETE", self._path, idempotent=True)
            )
        except NotFound:
            pass

    async def _keep_renewed(self, ttl: float) -> None:
        """Renews the lease whenever it has been idle a third of its idle
        time, so a rollout waiting long on its model keeps its sandbox."""
        interval = ttl / 3
        while not self._released:
            idle = time.monotonic() - self._last_used
            if idle < interval:
                await asyncio.sleep(interval - idle)
                continue
            try:
                await self.renew()
            except (LeaseExpired, NotFound):
                return
            except SandfleetError as error:
                log.warning("renewing %s failed (%s); trying again", self, error)
                self._touch()


class LeaseGroup(list[Lease]):
    """Leases acquired together (a batch, or forks of one snapshot);
    ``async with`` releases every one of them when the block ends."""

    async def __aenter__(self) -> LeaseGroup:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await _release_on_exit(self, error)

    async def release(self) -> None:
        """Releases every lease of the group."""
        results = await asyncio.gather(*(lease.release() for lease in self), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result


class Snapshot:
    """A lease's files when it was taken: fork new leases from it, or
    restore a lease of its image to it."""

    def __init__(self, client: AsyncClient, info: SnapshotInfo) -> None:
        self._client = client
        self.info = info
        self.id = info.id
        self.key = f"snapshot/{info.id}"
        self._deleted = False

    def __repr__(self) -> str:
        return f"Snapshot({self.id!r}, lease={self.info.lease!r})"

    async def __aenter__(self) -> Snapshot:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await _release_on_exit(self, error)

    def fork(
        self,
        n: int,
        *,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
        ttl_s: int | None = None,
    ) -> Acquiring[LeaseGroup]:
        """``n`` new leases whose sandboxes start with the snapshot's files,
        all of them or none."""
        body: dict[str, Any] = {"count": n}
        for name, value in (("labels", dict(labels) if labels else None), ("run_id", run_id), ("ttl_s", ttl_s)):
            if value is not None:
                body[name] = value

        async def fork_all() -> LeaseGroup:
            response = await self._client._transport.request(
                "POST", f"/v1/snapshots/{self.id}/leases", idempotent=False, json_body=body
            )
            return LeaseGroup(self._client._adopt(LeaseInfo.from_json(info), ttl_s) for info in response.json()["leases"])

        return Acquiring(self._client, fork_all)

    async def delete(self) -> None:
        """Deletes the snapshot (leases forked from it serve on); deleting
        twice is no error."""
        self._deleted = True
        self._client._held.pop(self.key, None)
        try:
            await self._client._shielded(
                self._client._transport.request("DELETE", f"/v1/snapshots/{self.id}", idempotent=True)
            )
        except NotFound:
            pass

    release = delete


class Session(_Runner):
    """A session on a shared pool, pinned to one sandbox that other sessions
    share. ``async with session:`` closes it when the block ends."""

    def __init__(self, client: AsyncClient, info: SessionInfo) -> None:
        self._client = client
        self.info = info
        self.id = info.id
        self.key = f"session/{info.id}"
        self._exec_path = f"/v1/sessions/{info.id}/exec"

    def __repr__(self) -> str:
        return f"Session({self.id!r}, pool={self.info.pool!r})"

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await _release_on_exit(self, error)

    async def release(self) -> None:
        """Closes the session; closing twice is no error."""
        self._client._held.pop(self.key, None)
        try:
            await self._client._shielded(
                self._client._transport.request("DELETE", f"/v1/sessions/{self.id}", idempotent=True)
            )
        except NotFound:
            pass

    close = release


def _exec_body(
    command: Command,
    timeout_s: float | None,
    env: Mapping[str, str] | None,
    workdir: str | None,
    stdin: str | None,
    merge_stderr: bool,
) -> dict[str, Any]:
    body: dict[str, Any] = {"command": command} if isinstance(command, str) else {"argv": list(command)}
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    if env:
        body["env"] = dict(env)
    if workdir is not None:
        body["workdir"] = workdir
    if stdin is not None:
        body["stdin"] = stdin
    if merge_stderr:
        body["merge_stderr"] = True
    return body


def _answer_timeout(timeout_s: float | None) -> float:
    """How long to wait for a command's answer: its own timeout (or the
    daemon's default) plus a margin for the daemon to kill and report."""
    return (timeout_s if timeout_s is not None else _DAEMON_EXEC_TIMEOUT_S) + _ANSWER_MARGIN_S
