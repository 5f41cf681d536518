"""What the daemon answers, as frozen dataclasses.

Each keeps the fields a trainer branches on as attributes and the whole
answer in ``raw``, so a field a newer daemon adds is never lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

__all__ = ["ExecResult", "Output", "Grade", "TestResult", "LeaseInfo", "SnapshotInfo", "SessionInfo"]


@dataclass(frozen=True)
class ExecResult:
    """What a command did. Its exit code is the task's business, not an error."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration_ms: int = 0
    stdout_dropped: int = 0
    stderr_dropped: int = 0

    @classmethod
    def from_json(cls, body: dict[str, Any], stdout: str | None = None, stderr: str | None = None) -> ExecResult:
        """From a buffered answer, or from a stream's ``exit`` event and the
        output the stream carried."""
        return cls(
            exit_code=int(body["exit_code"]),
            stdout=body.get("stdout", "") if stdout is None else stdout,
            stderr=body.get("stderr", "") if stderr is None else stderr,
            timed_out=bool(body.get("timed_out", False)),
            duration_ms=int(body.get("duration_ms", 0)),
            stdout_dropped=int(body.get("stdout_dropped", 0)),
            stderr_dropped=int(body.get("stderr_dropped", 0)),
        )


@dataclass(frozen=True)
class Output:
    """A piece of a streamed command's output, as it was printed."""

    stream: Literal["stdout", "stderr"]
    data: str


@dataclass(frozen=True)
class TestResult:
    """One test's status: ``passed``, ``failed``, ``skipped``, ``error`` or ``xfail``."""

    __test__ = False  # not a pytest test class

    name: str
    status: str


@dataclass(frozen=True)
class Grade:
    """An evaluation by the daemon's task adapter.

    ``status`` is ``ok``, ``failed`` or ``infra_error``. ``infra`` is true for
    ``infra_error``: the environment was at fault (``infra_failure`` names the
    sign, ``error`` says why), so the sample is to be masked, not scored.
    ``reward`` is the adapter's reward, ``None`` when it gave none.
    """

    status: str
    reward: float | None
    infra: bool
    tests: tuple[TestResult, ...] = ()
    detail: str = ""
    timed_out: bool = False
    error: str | None = None
    infra_failure: str | None = None
    adapter: str = ""
    duration_ms: int = 0
    report: Any = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Grade:
        grade = body.get("grade") or {}
        return cls(
            status=body["status"],
            reward=grade.get("reward"),
            infra=body["status"] == "infra_error",
            tests=tuple(TestResult(t["name"], t["status"]) for t in grade.get("tests", [])),
            detail=grade.get("detail", ""),
            timed_out=bool(body.get("timed_out", False)),
            error=body.get("error"),
            infra_failure=body.get("infra_failure"),
            adapter=body.get("adapter", ""),
            duration_ms=int(body.get("duration_ms", 0)),
            report=grade.get("report"),
            raw=body,
        )


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class LeaseInfo:
    """A lease as the daemon describes it."""

    id: str
    cluster: str
    image: str
    sandbox: str
    expires_at: datetime
    state: str
    task_id: str | None = None
    run_id: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    reuses: int = 0
    lost: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> LeaseInfo:
        return cls(
            id=body["id"],
            cluster=body["cluster"],
            image=body["image"],
            sandbox=body["sandbox"],
            expires_at=_timestamp(body["expires_at"]),
            state=body.get("state", "ready"),
            task_id=body.get("task_id"),
            run_id=body.get("run_id"),
            labels=dict(body.get("labels") or {}),
            reuses=int(body.get("reuses", 0)),
            lost=body.get("lost"),
            raw=body,
        )


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot as the daemon describes it: a lease's files when taken."""

    id: str
    lease: str
    cluster: str
    image: str
    restores_in_place: bool
    expires_at: datetime
    run_id: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> SnapshotInfo:
        return cls(
            id=body["id"],
            lease=body["lease"],
            cluster=body["cluster"],
            image=body["image"],
            restores_in_place=bool(body.get("restores_in_place", False)),
            expires_at=_timestamp(body["expires_at"]),
            run_id=body.get("run_id"),
            raw=body,
        )


@dataclass(frozen=True)
class SessionInfo:
    """A shared-pool session: pinned to one of the pool's sandboxes."""

    id: str
    pool: str
    sandbox: str
