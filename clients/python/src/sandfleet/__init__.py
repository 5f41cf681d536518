"""A client for ``sandfleet serve``: sandboxes on demand for RL rollouts.

asyncio-native (:class:`AsyncClient`) with a blocking facade (:class:`Client`);
leases released on exit, exceptions and cancellation; every command run at
most once; infrastructure failures typed apart from task outcomes.
"""

from ._client import Acquiring, AsyncClient, ExecStream, Lease, LeaseGroup, Session, Snapshot
from ._sync import Client, SyncExecStream, SyncLease, SyncLeaseGroup, SyncSession, SyncSnapshot
from .errors import (
    Conflict,
    InfraError,
    InvalidRequest,
    LeaseExpired,
    NotFound,
    PoolFull,
    SandboxLost,
    SandfleetError,
    SessionLost,
    Throttled,
    TransportError,
    Unauthorized,
    Unavailable,
)
from .models import ExecResult, Grade, LeaseInfo, Output, SessionInfo, SnapshotInfo, TestResult

__version__ = "0.1.0"
"""The daemon API version this client speaks (the OpenAPI document's ``info.version``)."""

__all__ = [
    "Acquiring",
    "AsyncClient",
    "Client",
    "Conflict",
    "ExecResult",
    "ExecStream",
    "Grade",
    "InfraError",
    "InvalidRequest",
    "Lease",
    "LeaseExpired",
    "LeaseGroup",
    "LeaseInfo",
    "NotFound",
    "Output",
    "PoolFull",
    "SandboxLost",
    "SandfleetError",
    "Session",
    "SessionInfo",
    "SessionLost",
    "Snapshot",
    "SnapshotInfo",
    "SyncExecStream",
    "SyncLease",
    "SyncLeaseGroup",
    "SyncSession",
    "SyncSnapshot",
    "TestResult",
    "Throttled",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "__version__",
]
