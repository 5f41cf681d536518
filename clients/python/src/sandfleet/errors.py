"""Errors by what the caller should do about them.

The daemon answers every failure as ``{"error": {"kind": ..., "message": ...}}``
with a status and, when it was throttled, ``Retry-After``. The kinds fall into
three groups a trainer treats differently:

* :class:`InfraError` — the infrastructure failed, not the policy: mask the
  sample (or retry it), never score it as a zero reward;
* :class:`InvalidRequest` and :class:`NotFound` — the caller's mistake: fix
  the code;
* task outcomes are no errors at all: a command's exit code and a grade's
  status come back as values.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "SandfleetError",
    "InfraError",
    "Throttled",
    "PoolFull",
    "Unavailable",
    "TransportError",
    "SandboxLost",
    "SessionLost",
    "LeaseExpired",
    "InvalidRequest",
    "Conflict",
    "Unauthorized",
    "NotFound",
    "from_response",
]


class SandfleetError(Exception):
    """Any failure of a call to the daemon.

    ``status`` is the HTTP status (``None`` when no answer came), ``kind``
    the daemon's stable error kind (``unavailable``, ``sandbox_lost``, ...)
    and ``message`` its one line naming what was wrong.
    """

    def __init__(self, message: str, *, kind: str, status: int | None = None) -> None:
        super().__init__(f"{kind}: {message}" if status is None else f"{status} {kind}: {message}")
        self.message = message
        self.kind = kind
        self.status = status


class InfraError(SandfleetError):
    """The infrastructure failed (daemon, backend, sandbox, network): not the
    task's outcome. Mask the sample or retry it on a fresh lease."""


class Throttled(InfraError):
    """The daemon or its backend asked to slow down; ``retry_after`` is how
    many seconds it asked for, when it said."""

    def __init__(self, message: str, *, kind: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, kind=kind, status=status)
        self.retry_after = retry_after


class PoolFull(Throttled):
    """A shared pool has no room for another session now."""


class Unavailable(InfraError):
    """No sandbox can be had now (capacity, a backend down, a bounded wait
    that ran out, the daemon stopping); it may later."""


class TransportError(Unavailable):
    """No answer came: the connection failed or dropped. ``sent`` tells
    whether the request may have reached the daemon, in which case a
    non-idempotent call (an acquire, an evaluate) may have taken effect."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message, kind="transport")
        self.sent = sent


class SandboxLost(InfraError):
    """The lease's sandbox is gone, and its state with it; release the lease
    and acquire another."""


class SessionLost(SandboxLost):
    """A shared-pool session's sandbox was evicted; open a new session."""


class LeaseExpired(InfraError):
    """The daemon no longer knows a lease this client still holds: it lapsed
    (idle past its ttl, or the daemon restarted). Renewals make this rare."""


class InvalidRequest(SandfleetError):
    """The request cannot be served as it is (a bad field, an unknown image,
    a body over the limit, a plugin declining it)."""


class Conflict(InvalidRequest):
    """The request conflicts with the state, such as an idempotency key
    reused for another command."""


class Unauthorized(InvalidRequest):
    """No bearer token, or a wrong one."""


class NotFound(SandfleetError):
    """No such lease, snapshot, session, pool or run."""


_BY_KIND: dict[str, type[SandfleetError]] = {
    "invalid_request": InvalidRequest,
    "too_large": InvalidRequest,
    "conflict": Conflict,
    "unauthorized": Unauthorized,
    "not_found": NotFound,
    "throttled": Throttled,
    "pool_full": PoolFull,
    "unavailable": Unavailable,
    "timeout": Unavailable,
    "shutting_down": Unavailable,
    "sandbox_lost": SandboxLost,
    "session_lost": SessionLost,
    "backend": InfraError,
    "internal": InfraError,
}


def _retry_after(header: str | None) -> float | None:
    """``Retry-After`` in seconds (the daemon sends whole seconds)."""
    if header is None:
        return None
    try:
        return float(header)
    except ValueError:
        return None


def from_response(status: int | None, body: Any, retry_after: str | None = None) -> SandfleetError:
    """The typed error for an error answer of the daemon.

    A ``plugin`` error is the daemon's problem when a plugin faulted with
    nothing to answer for it (5xx) and the caller's when the plugin declined
    the request (4xx); any kind this client does not know yet is classed by
    its status, so a newer daemon's errors still land in the right group.
    ``status`` is ``None`` for an error event inside a streamed answer.
    """
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("kind"), str):
        kind, message = detail["kind"], str(detail.get("message", ""))
    else:
        kind, message = "http", str(body)[:500]
    cls = _BY_KIND.get(kind)
    if cls is None:
        if status == 404:
            cls = NotFound
        elif status == 429:
            cls = Throttled
        elif status is None or status >= 500 or status == 410:
            cls = InfraError
        else:
            cls = InvalidRequest
    if issubclass(cls, Throttled):
        return cls(message, kind=kind, status=status, retry_after=_retry_after(retry_after))
    return cls(message, kind=kind, status=status)
