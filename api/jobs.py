"""Job submission policy and job views: what the routes call.

Submitting a workload (``submit``):

1. tuned and not forced → the stored result (no job);
2. a queued or running job for the workload exists → that job (no duplicate);
3. otherwise → a new queued job.

Steps 2–3 run under a lock on the workload's row, taken in the request's transaction, so
concurrent submissions of one workload (from any number of API processes) create exactly one job:
PostgreSQL holds ``SELECT ... FOR NO KEY UPDATE`` on the ``tw_workloads`` row until commit (the
weaker row lock, so workers inserting records or tilings, whose foreign keys take KEY SHARE on
that row, are not blocked); SQLite's store begins every transaction with ``BEGIN IMMEDIATE``, so
writers are serialized already. A second submitter waits for the first to commit, then sees its
job (READ COMMITTED reads the newest committed rows per statement).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from tilewise import store
from tilewise.api.deps import TuneRequest
from tilewise.api.errors import NotFound
from tilewise.api.schemas import JobPublic, TunedPublic
from tilewise.kernels.backends import current_toolchain_id
from tilewise.store import JobRow, JobStatus

ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)


@dataclass(frozen=True)
class Submitted:
    """The answer to a submission: a job (new or already active) or the stored result."""

    job: JobPublic | None = None
    tuned: TunedPublic | None = None
    created: bool = False


def submit(session: Session, request: TuneRequest) -> Submitted:
    """Apply the submission policy of the module docstring."""
    workload = store.commit_workload(session, request.what.workload)
    if not request.force:
        tiling = store.get_tiling(
            session, workload_id=workload.id, toolchain=current_toolchain_id(workload.target)
        )
        if tiling is not None:
            return Submitted(tuned=TunedPublic.of(workload, tiling))
    store.lock_workload(session, workload_id=workload.id)
    active = store.list_jobs(session, workload_id=workload.id, status=ACTIVE, limit=1)
    if active:
        return Submitted(job=JobPublic.of(active[0], workload))
    job = store.create_job(
        session,
        workload_id=workload.id,
        budget_evals=request.budget,
        budget_seconds=request.seconds,
        force=request.force,
    )
    return Submitted(job=JobPublic.of(job, workload), created=True)


def _view(session: Session, job: JobRow) -> JobPublic:
    workload = store.get_workload(session, workload_id=job.workload_id)
    assert workload is not None  # a foreign key
    return JobPublic.of(job, workload)


def get(session: Session, job_id: int) -> JobPublic:
    job = store.get_job(session, job_id=job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    return _view(session, job)


def listing(
    session: Session, *, status: JobStatus | None, op: str | None, limit: int
) -> list[JobPublic]:
    jobs = store.list_jobs(session, status=status, op=op, limit=limit)
    workloads = {}
    for job in jobs:
        if job.workload_id not in workloads:
            row = store.get_workload(session, workload_id=job.workload_id)
            assert row is not None  # a foreign key
            workloads[job.workload_id] = row
    return [JobPublic.of(job, workloads[job.workload_id]) for job in jobs]


def cancel(session: Session, job_id: int) -> JobPublic:
    job = store.cancel_job(session, job_id=job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    return _view(session, job)
