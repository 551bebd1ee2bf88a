"""The closed vocabularies stored in the database (stored as their string values)."""

from __future__ import annotations

from enum import StrEnum


class RecordStatus(StrEnum):
    """What happened to one measured tiling. Only ``ok`` records carry a latency."""

    OK = "ok"
    INFEASIBLE = "infeasible"  # rejected by the static check: never compiled
    BUILD_FAILED = "build_failed"
    WRONG = "wrong"  # ran, but the output did not match the reference
    CRASHED = "crashed"
    TIMEOUT = "timeout"


class JobStatus(StrEnum):
    """Life of a tuning job: queued -> running -> succeeded | failed | cancelled."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL_JOB_STATUSES


_TERMINAL_JOB_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class WorkerStatus(StrEnum):
    """What a worker said in its last heartbeat."""

    IDLE = "idle"
    BUSY = "busy"
    STOPPED = "stopped"
