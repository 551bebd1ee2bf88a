"""The job queue: tuning jobs, claimed by workers under a lease.

A worker claims a job (:func:`claim_job`) and holds it while it renews its lease; a job whose
lease expired goes back to the queue. A cancellation or another worker's claim wins over a
worker that lost its lease: every write of a holder checks that it still holds the job.

Leases compare this host's UTC clock with the times other hosts wrote, so they assume hosts with
synchronized clocks (NTP), as any lease-based queue does.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy import func as sa_func
from sqlalchemy.orm import Session

from tilewise.errors import InputError
from tilewise.status import JobStatus, RecordSource, RecordStatus
from tilewise.store._coerce import enum_value, rowcount
from tilewise.store._models import JobModel, RecordModel, WorkloadModel, utcnow


@dataclass(frozen=True)
class JobRow:
    id: int
    workload_id: int
    status: JobStatus
    budget_evals: int
    budget_seconds: float | None
    force: bool
    seed: int | None
    evaluations: int
    best_latency_us: float | None
    speedup: float | None
    attempts: int
    worker_id: str | None
    lease_until: datetime | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    spent_evals: int = 0  # its evaluations so far (see tilewise.store.tag_record)

    @property
    def done_evals(self) -> int:
        """Its evaluations so far, as a view shows them: the holder writes ``evaluations`` every
        few seconds (and not at all once it died); every worker's record takes one of
        ``spent_evals`` at once, assistants' included."""
        return max(self.evaluations, self.spent_evals)


def job_row(m: JobModel) -> JobRow:
    return JobRow(
        id=m.id,
        workload_id=m.workload_id,
        status=JobStatus(m.status),
        budget_evals=m.budget_evals,
        budget_seconds=m.budget_seconds,
        force=m.force,
        seed=m.seed,
        evaluations=m.evaluations,
        best_latency_us=m.best_latency_us,
        speedup=m.speedup,
        attempts=m.attempts,
        worker_id=m.worker_id,
        lease_until=m.lease_until,
        error=m.error,
        created_at=m.created_at,
        started_at=m.started_at,
        finished_at=m.finished_at,
        spent_evals=m.spent_evals,
    )


def create_job(
    session: Session,
    *,
    workload_id: int,
    budget_evals: int,
    budget_seconds: float | None = None,
    force: bool = False,
    seed: int | None = None,
) -> JobRow:
    """Queue a tuning job. Deduplication against running jobs is the caller's policy."""
    if budget_evals < 1:
        raise InputError(f"budget_evals must be >= 1, got {budget_evals}")
    if budget_seconds is not None and not budget_seconds > 0:
        raise InputError(f"budget_seconds must be > 0, got {budget_seconds}")
    model = JobModel(
        workload_id=workload_id,
        status=JobStatus.QUEUED,
        budget_evals=budget_evals,
        budget_seconds=budget_seconds,
        force=force,
        seed=seed,
        evaluations=0,
        attempts=0,
        created_at=utcnow(),
    )
    session.add(model)
    session.flush()
    return job_row(model)


def get_job(session: Session, *, job_id: int) -> JobRow | None:
    m = session.get(JobModel, job_id, populate_existing=True)
    return None if m is None else job_row(m)


def list_jobs(
    session: Session,
    *,
    status: JobStatus | str | Collection[JobStatus | str] | None = None,
    op: str | None = None,
    workload_id: int | None = None,
    limit: int | None = None,
) -> list[JobRow]:
    """Jobs, newest first, filtered by status (one or several), op and workload."""
    query = _filtered(select(JobModel), status, op, workload_id).order_by(JobModel.id.desc())
    if limit is not None:
        query = query.limit(limit)
    return [job_row(m) for m in session.scalars(query.execution_options(populate_existing=True))]


def count_jobs(
    session: Session,
    *,
    status: JobStatus | str | Collection[JobStatus | str] | None = None,
    op: str | None = None,
    workload_id: int | None = None,
) -> int:
    """How many jobs :func:`list_jobs` would list without its limit."""
    query = _filtered(select(sa_func.count()).select_from(JobModel), status, op, workload_id)
    return int(session.scalar(query) or 0)


def _filtered(
    query: Any,
    status: JobStatus | str | Collection[JobStatus | str] | None,
    op: str | None,
    workload_id: int | None,
) -> Any:
    if status is not None:
        wanted = [status] if isinstance(status, str) else list(status)
        query = query.where(JobModel.status.in_([enum_value(JobStatus, s) for s in wanted]))
    if op is not None:
        query = query.join(WorkloadModel, WorkloadModel.id == JobModel.workload_id).where(
            WorkloadModel.op == op
        )
    if workload_id is not None:
        query = query.where(JobModel.workload_id == workload_id)
    return query


def count_jobs_by_status(session: Session) -> dict[JobStatus, int]:
    """The number of jobs of each status that has any."""
    query = select(JobModel.status, sa_func.count()).group_by(JobModel.status)
    return {JobStatus(status): int(n) for status, n in session.execute(query)}


def queued_jobs_by_target(session: Session) -> dict[str, int]:
    """The number of queued jobs of each target that has any: the queue's depth per target."""
    query = (
        select(WorkloadModel.target, sa_func.count())
        .join(JobModel, JobModel.workload_id == WorkloadModel.id)
        .where(JobModel.status == JobStatus.QUEUED)
        .group_by(WorkloadModel.target)
    )
    return {str(target): int(n) for target, n in session.execute(query)}


def job_time_by_target(
    session: Session, *, now: datetime | None = None
) -> dict[str, tuple[float, int]]:
    """Per target, the seconds jobs have run (from their start to their end, or to ``now`` while
    they run) and the evaluations they made in that time: the time per evaluation, as a tuning
    run spends it (builds, launches, the search's own work and the final re-measure). A job
    claimed again after its worker died counts from its new start."""
    now = now or utcnow()
    query = (
        select(
            WorkloadModel.target, JobModel.started_at, JobModel.finished_at, JobModel.evaluations
        )
        .join(JobModel, JobModel.workload_id == WorkloadModel.id)
        .where(JobModel.started_at.is_not(None), JobModel.evaluations > 0)
    )
    totals: dict[str, tuple[float, int]] = {}
    for target, started, finished, evaluations in session.execute(query):
        if started is None:  # excluded by the query; for the type checker
            continue
        seconds = max(0.0, ((finished or now) - started).total_seconds())
        spent, count = totals.get(target, (0.0, 0))
        totals[str(target)] = (spent + seconds, count + int(evaluations))
    return totals


def _claimable(now: datetime) -> Any:
    return or_(
        JobModel.status == JobStatus.QUEUED,
        and_(JobModel.status == JobStatus.RUNNING, JobModel.lease_until < now),
    )


def claim_job(
    session: Session,
    *,
    worker_id: str,
    lease_seconds: float,
    targets: Collection[str] | None = None,
    now: datetime | None = None,
) -> JobRow | None:
    """Take the oldest claimable job for ``worker_id``, or None if there is none.

    Claimable: queued, or running with an expired lease (its worker died: the job goes back);
    with ``targets``, only jobs whose workload's target is one of them.
    The job becomes ``running``, held by ``worker_id`` until ``now + lease_seconds``; the
    worker must ``renew_lease`` before then.

    Concurrency: on PostgreSQL the candidate row is locked with ``FOR UPDATE SKIP LOCKED``, so
    concurrent workers take different jobs without waiting. On SQLite the store's transactions
    begin with ``BEGIN IMMEDIATE``: one writer at a time. Everywhere, the final UPDATE re-checks
    that the job is still claimable (a compare-and-set), so no two workers get one job. Commit
    promptly: the row lock (PostgreSQL) or the write lock (SQLite) is held until then.
    """
    if not lease_seconds > 0:
        raise InputError(f"lease_seconds must be > 0, got {lease_seconds}")
    now = now or utcnow()
    lease_until = now + timedelta(seconds=lease_seconds)
    query = select(JobModel.id).where(_claimable(now))
    if targets is not None:
        query = query.where(
            JobModel.workload_id.in_(
                select(WorkloadModel.id).where(WorkloadModel.target.in_(list(targets)))
            )
        )
    for _ in range(8):  # only engines without row locks ever lose a race and loop
        candidate = session.scalars(
            query.order_by(JobModel.created_at, JobModel.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        ).first()
        if candidate is None:
            return None
        result = session.execute(
            update(JobModel)
            .where(JobModel.id == candidate, _claimable(now))
            .values(
                status=JobStatus.RUNNING,
                worker_id=worker_id,
                lease_until=lease_until,
                attempts=JobModel.attempts + 1,
                started_at=now,
                finished_at=None,
            )
            .execution_options(synchronize_session=False)
        )
        if rowcount(result) == 1:
            return get_job(session, job_id=candidate)
    return None


def _held(job_id: int, worker_id: str) -> Any:
    return and_(
        JobModel.id == job_id,
        JobModel.worker_id == worker_id,
        JobModel.status == JobStatus.RUNNING,
    )


def renew_lease(
    session: Session,
    *,
    job_id: int,
    worker_id: str,
    lease_seconds: float,
    now: datetime | None = None,
) -> bool:
    """Extend the lease; False if ``worker_id`` no longer holds the job (cancelled, finished,
    or reclaimed by another worker after the lease expired): the worker must stop it."""
    if not lease_seconds > 0:
        raise InputError(f"lease_seconds must be > 0, got {lease_seconds}")
    now = now or utcnow()
    result = session.execute(
        update(JobModel)
        .where(_held(job_id, worker_id))
        .values(lease_until=now + timedelta(seconds=lease_seconds))
        .execution_options(synchronize_session=False)
    )
    return rowcount(result) == 1


def update_job_progress(
    session: Session,
    *,
    job_id: int,
    worker_id: str,
    evaluations: int,
    best_latency_us: float | None,
    speedup: float | None,
) -> bool:
    """Record progress of a running job; False if ``worker_id`` no longer holds it."""
    result = session.execute(
        update(JobModel)
        .where(_held(job_id, worker_id))
        .values(evaluations=evaluations, best_latency_us=best_latency_us, speedup=speedup)
        .execution_options(synchronize_session=False)
    )
    return rowcount(result) == 1


def finish_job(
    session: Session,
    *,
    job_id: int,
    worker_id: str,
    status: JobStatus | str,
    error: str | None = None,
    evaluations: int | None = None,
    best_latency_us: float | None = None,
    speedup: float | None = None,
    now: datetime | None = None,
) -> JobRow | None:
    """End a job held by ``worker_id`` as ``succeeded`` or ``failed``.

    Returns the finished job, or None if ``worker_id`` did not hold it (then nothing changes:
    a cancellation or another worker's claim wins). None values leave the progress fields as
    they were.
    """
    status = enum_value(JobStatus, status)
    if status not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        raise InputError(f"a worker finishes a job as succeeded or failed, not {status.value}")
    values: dict[str, Any] = {
        "status": status,
        "error": error,
        "finished_at": now or utcnow(),
        "lease_until": None,
    }
    if evaluations is not None:
        values["evaluations"] = evaluations
    if best_latency_us is not None:
        values["best_latency_us"] = best_latency_us
    if speedup is not None:
        values["speedup"] = speedup
    result = session.execute(
        update(JobModel)
        .where(_held(job_id, worker_id))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if rowcount(result) != 1:
        return None
    return get_job(session, job_id=job_id)


def release_job(
    session: Session,
    *,
    job_id: int,
    worker_id: str,
    evaluations: int | None = None,
    best_latency_us: float | None = None,
    attempted: bool = True,
) -> bool:
    """Hand a running job back to the queue (a worker shutting down before its budget is
    spent, or one that lost the database): ``queued``, no worker, no lease, so the next claim
    resumes it at once. Without ``attempted`` (a graceful stop, nothing wrong with the job) the
    claim is not counted as one of its attempts, which are capped to bound the retries of a
    job that keeps failing its workers. False if ``worker_id`` did not hold it (then nothing
    changes). None values leave progress as is."""
    values: dict[str, Any] = {"status": JobStatus.QUEUED, "worker_id": None, "lease_until": None}
    if not attempted:
        values["attempts"] = JobModel.attempts - 1
    if evaluations is not None:
        values["evaluations"] = evaluations
    if best_latency_us is not None:
        values["best_latency_us"] = best_latency_us
    result = session.execute(
        update(JobModel)
        .where(_held(job_id, worker_id))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return rowcount(result) == 1


def holds_job(session: Session, *, job_id: int, worker_id: str) -> bool:
    """Whether ``worker_id`` holds the job (running, not cancelled, not reclaimed), keeping it
    so until this transaction ends: the row is locked (``FOR UPDATE``; SQLite's transactions
    hold the write lock anyway). A claim skips the locked row and a cancellation waits, so a
    record added in the same transaction with ``job_id`` is counted by whoever holds the job
    next."""
    found = session.scalars(
        select(JobModel.id).where(_held(job_id, worker_id)).with_for_update()
    ).first()
    return found is not None


def cancel_job(session: Session, *, job_id: int, now: datetime | None = None) -> JobRow | None:
    """Cancel a queued or running job; a finished job is returned unchanged. None if no such job.

    A running job's worker learns it at its next ``renew_lease`` or ``update_job_progress``.
    Its counts are taken from its records as it is cancelled (its worker writes them at most
    every few seconds, and a cancelled job's are not written again): the evaluations it spent,
    and the best single measurement among them.
    """
    best = (
        select(sa_func.min(RecordModel.latency_us))
        .where(
            RecordModel.job_id == job_id,
            RecordModel.status == RecordStatus.OK,
            RecordModel.source != RecordSource.REMEASURE,
        )
        .scalar_subquery()
    )
    session.execute(
        update(JobModel)
        .where(
            JobModel.id == job_id,
            JobModel.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]),
        )
        .values(
            status=JobStatus.CANCELLED,
            finished_at=now or utcnow(),
            lease_until=None,
            evaluations=JobModel.spent_evals,
            best_latency_us=sa_func.coalesce(best, JobModel.best_latency_us),
        )
        .execution_options(synchronize_session=False)
    )
    return get_job(session, job_id=job_id)
