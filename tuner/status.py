"""The closed vocabularies of tilewise: record statuses and sources, job and worker statuses.

Every layer speaks them (a backend's run result, the store's rows, the worker, the API), so they
live at the bottom, beside the value objects. They are ``StrEnum``: a member is equal to its
string value, which is what the database stores and what JSON carries.
"""

from __future__ import annotations

from enum import StrEnum


class RecordStatus(StrEnum):
    """What happened to one measured tiling. Only ``ok`` records carry a latency.

    A backend's run ends ``ok``, ``wrong``, ``crashed`` or ``timeout``; the tuner adds the two
    verdicts reached before a launch (``infeasible``, ``build_failed``).
    """

    OK = "ok"
    INFEASIBLE = "infeasible"  # rejected by the static check: never compiled
    BUILD_FAILED = "build_failed"
    WRONG = "wrong"  # ran, but the output did not match the reference
    CRASHED = "crashed"
    TIMEOUT = "timeout"


class RecordSource(StrEnum):
    """Why a record was made."""

    DEFAULT = "default"  # the op's default tiling, measured by the search
    SEARCH = "search"  # a tiling the search proposed (warm-start guesses included)
    REMEASURE = "remeasure"  # the side-by-side re-measures at the end of a run: no evaluation
    PREDICTED = "predicted"  # a model's prediction: never measured, never a best by default
    #: A tiling the records of a tuned shape lacked, measured there by ``tilewise export
    #: --portfolio K --measure`` (another tuned shape's tiling carried over): no evaluation of
    #: a search, but a measurement the next export and model learn from.
    PORTFOLIO = "portfolio"


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
