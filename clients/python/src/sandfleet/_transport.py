"""One pooled httpx connection set per client, and the retry rule.

The rule (the daemon's own: nothing runs twice): a request is sent again
after a transport failure only when sending it twice cannot do anything
twice — reads, releases, renewals, file writes of the same bytes, and execs,
which carry an ``Idempotency-Key`` the daemon answers from the first
execution. A create (an acquire, a fork, a snapshot, an evaluate) is retried
only when the failure shows it never left this process.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

from .errors import SandfleetError, TransportError, from_response

# Failures that show the request never reached the daemon: safe to retry
# whatever the request is.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

SHARD_SIZE = 32
"""Connections per httpx pool; see :class:`Transport`."""


class _Shard:
    """One httpx pool of the transport and how many requests it carries."""

    def __init__(self, http: httpx.AsyncClient, size: int) -> None:
        self.http = http
        self.size = size
        self.busy = 0

    def load(self) -> float:
        return self.busy / self.size


class Transport:
    """Requests to one daemon over a bounded keep-alive pool.

    ``keepalive_expiry`` stays well below any idle timeout between the
    client and the daemon, so the client drops an idle connection before the
    other side does and never writes a request into a connection the peer is
    closing (the keep-alive race that looks like a failure of the request).

    The pool is ``max_connections`` connections in shards of
    :data:`SHARD_SIZE`, each an ``httpx.AsyncClient``, and a request waits
    for room here, in a semaphore, never in httpx's own queue: httpcore
    scans every queued request against every connection each time one
    changes state, so a thousand requests queued on one pool stall the
    event loop for seconds. Admitted requests go to the least busy shard,
    which then always has a free connection.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout: float,
        max_connections: int,
        keepalive_expiry: float,
        retries: int,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.retries = retries
        self.max_connections = max_connections
        self._room = asyncio.Semaphore(max_connections)
        sizes = [SHARD_SIZE] * (max_connections // SHARD_SIZE)
        if max_connections % SHARD_SIZE:
            sizes.append(max_connections % SHARD_SIZE)
        self._shards = [
            _Shard(
                httpx.AsyncClient(
                    base_url=base_url.rstrip("/"),
                    headers=headers,
                    timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
                    limits=httpx.Limits(
                        max_connections=size,
                        max_keepalive_connections=size,
                        keepalive_expiry=keepalive_expiry,
                    ),
                ),
                size,
            )
            for size in sizes
        ]

    async def aclose(self) -> None:
        await asyncio.gather(*(shard.http.aclose() for shard in self._shards))

    @asynccontextmanager
    async def _admitted(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client with a free connection, held for the block."""
        async with self._room:
            shard = min(self._shards, key=_Shard.load)
            shard.busy += 1
            try:
                yield shard.http
            finally:
                shard.busy -= 1

    async def request(
        self,
        method: str,
        path: str,
        *,
        idempotent: bool,
        json_body: Any = None,
        content: bytes | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        """The answer to one request, retried as the module says; an error
        answer raises its typed error."""
        extra: dict[str, Any] = {}
        if timeout is not None:
            extra["timeout"] = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        attempt = 0
        while True:
            try:
                async with self._admitted() as http:
                    response = await http.request(
                        method, path, json=json_body, content=content, params=params, headers=headers, **extra
                    )
                break
            except httpx.TransportError as error:
                sent = not isinstance(error, _NOT_SENT)
                if attempt >= self.retries or (sent and not idempotent):
                    raise TransportError(f"{method} {path}: {type(error).__name__}: {error}", sent=sent) from error
            attempt += 1
            await asyncio.sleep(_backoff(attempt))
        if response.status_code >= 400:
            raise _error(response.status_code, response.content, response.headers.get("retry-after"))
        return response

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        json_body: Any,
        headers: Mapping[str, str],
        timeout: float | None,
    ) -> AsyncIterator[httpx.Response]:
        """A streamed answer, open for the block; one attempt (the caller
        resumes a cut stream, since only it knows what it has read)."""
        extra: dict[str, Any] = {}
        if timeout is not None:
            extra["timeout"] = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        try:
            async with self._admitted() as http, http.stream(
                method, path, json=json_body, headers=headers, **extra
            ) as response:
                if response.status_code >= 400:
                    body = await response.aread()
                    raise _error(response.status_code, body, response.headers.get("retry-after"))
                yield response
        except httpx.TransportError as error:
            raise TransportError(
                f"{method} {path}: {type(error).__name__}: {error}", sent=not isinstance(error, _NOT_SENT)
            ) from error


def _backoff(attempt: int) -> float:
    """Seconds before retry ``attempt`` (1, 2, ...): short, since a transport
    failure on loopback or a LAN clears fast or not at all."""
    return float(min(0.05 * 2 ** (attempt - 1), 2.0))


def _error(status: int, content: bytes, retry_after: str | None) -> SandfleetError:
    try:
        body: Any = json.loads(content) if content else None
    except ValueError:
        body = content.decode(errors="replace")
    return from_response(status, body, retry_after)
