"""A job's evaluations and its assistants.

A job's evaluations are its records (``job_id``) that cost a build and a launch. Besides the
worker that holds the job, assistants (other workers, without a lease) may tune its study; the
holder and its assistants take the job's evaluations one at a time, each in its record's
transaction (``tw_jobs.spent_evals``), so that a job never spends more than its budget.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, exists, or_, select, update
from sqlalchemy import func as sa_func
from sqlalchemy.orm import Session

from tilewise.errors import InputError
from tilewise.status import JobStatus, RecordSource, RecordStatus
from tilewise.store._coerce import conflict_insert, rowcount
from tilewise.store._jobs import JobRow, job_row
from tilewise.store._models import JobAssistModel, JobModel, RecordModel, WorkloadModel, utcnow

#: The order a registration tries a job's free slots in (:func:`assist_job`).
_SLOTS = random.Random()


def _evaluation() -> Any:
    # A record that cost a build and a launch: not rejected before, not a re-measure.
    return and_(
        RecordModel.status != RecordStatus.INFEASIBLE,
        RecordModel.source != RecordSource.REMEASURE,
    )


def job_evaluations(session: Session, *, job_id: int) -> int:
    """The evaluations a job has spent: its records that cost a build and a launch (not the
    ones rejected before, not re-measures)."""
    query = (
        select(sa_func.count())
        .select_from(RecordModel)
        .where(RecordModel.job_id == job_id, _evaluation())
    )
    return int(session.scalar(query) or 0)


def job_spent(session: Session, *, job_id: int) -> int:
    """:func:`job_evaluations`, read from the job's row (``spent_evals``, taken by
    :func:`tag_record` in each record's transaction) rather than counted from its records."""
    return int(session.scalar(select(JobModel.spent_evals).where(JobModel.id == job_id)) or 0)


def _member(job_id: int, worker_id: str) -> Any:
    # The job's holder, or one of its assistants.
    return or_(
        JobModel.worker_id == worker_id,
        exists().where(JobAssistModel.job_id == job_id, JobAssistModel.worker_id == worker_id),
    )


def tag_record(
    session: Session, *, record_id: int, job_id: int, worker_id: str, counts: bool = True
) -> bool:
    """Keep or drop the job tag of a record that ``worker_id`` has just added in this
    transaction with ``job_id``; whether it was kept.

    Kept if the job is running, ``worker_id`` holds it or assists it (:func:`assist_job`), and,
    for a record that ``counts`` as an evaluation (:func:`job_evaluations`), the job has spent
    less than its budget: then one UPDATE checks that and takes the evaluation (``spent_evals``).
    Concurrent workers of one job queue on that row's lock from the UPDATE to their commit, and
    no longer: call this last in the record's transaction. A record whose tag is dropped still
    serves the study; only its own transaction ever saw it tagged.
    """
    running = and_(JobModel.id == job_id, JobModel.status == JobStatus.RUNNING)
    if counts:
        taken = session.execute(
            update(JobModel)
            .where(
                running, _member(job_id, worker_id), JobModel.spent_evals < JobModel.budget_evals
            )
            .values(spent_evals=JobModel.spent_evals + 1)
            .execution_options(synchronize_session=False)
        )
        kept = rowcount(taken) == 1
    else:
        kept = (
            session.scalar(select(JobModel.id).where(running, _member(job_id, worker_id)))
            is not None
        )
    if not kept:
        session.execute(
            update(RecordModel)
            .where(RecordModel.id == record_id, RecordModel.job_id == job_id)
            .values(job_id=None)
            .execution_options(synchronize_session=False)
        )
    return kept


def assist_job(
    session: Session,
    *,
    worker_id: str,
    max_assistants: int,
    lease_seconds: float,
    targets: Collection[str] | None = None,
    now: datetime | None = None,
) -> JobRow | None:
    """Register ``worker_id`` as an assistant of a running job, or None if none needs one.

    Candidates: running jobs with a live lease held by another worker (with ``targets``, of
    those targets only), whose budget is not spent, with fewer than ``max_assistants`` live
    assistants (heartbeat within ``lease_seconds``). The one with the most evaluations left is
    taken (the oldest on a tie). Any earlier registration of ``worker_id`` ends, and the
    candidates' stale assistants are removed (their records stop counting for them). The
    assistant refreshes its row with :func:`renew_assist` and removes it with :func:`end_assist`.

    Concurrency: an assistant takes one of the job's slots below ``max_assistants`` (its row's
    ``slot``, unique per job), by an insert that does nothing where another worker holds that
    slot; so concurrent workers never exceed ``max_assistants`` (of a fleet that sets one
    number), and no row is locked. Workers registering at once try the free slots in random
    orders, so that a taken slot costs a retry rather than a wait behind every other
    registration. SQLite has one writer.
    """
    if not lease_seconds > 0:
        raise InputError(f"lease_seconds must be > 0, got {lease_seconds}")
    if max_assistants < 1:
        return None
    now = now or utcnow()
    since = now - timedelta(seconds=lease_seconds)
    query = select(JobModel.id, JobModel.budget_evals - JobModel.spent_evals).where(
        JobModel.status == JobStatus.RUNNING,
        JobModel.spent_evals < JobModel.budget_evals,
        JobModel.lease_until >= now,
        JobModel.worker_id != worker_id,
    )
    if targets is not None:
        query = query.where(
            JobModel.workload_id.in_(
                select(WorkloadModel.id).where(WorkloadModel.target.in_(list(targets)))
            )
        )
    left = {job_id: int(n) for job_id, n in session.execute(query).all()}
    if not left:
        return None  # an idle worker's usual poll: one statement
    session.execute(
        delete(JobAssistModel)
        .where(
            or_(
                JobAssistModel.worker_id == worker_id,
                and_(JobAssistModel.job_id.in_(list(left)), JobAssistModel.heartbeat_at < since),
            )
        )
        .execution_options(synchronize_session=False)
    )
    for job_id in sorted(left, key=lambda j: (-left[j], j)):
        taken = set(
            session.scalars(select(JobAssistModel.slot).where(JobAssistModel.job_id == job_id))
        )
        free = [slot for slot in range(max_assistants) if slot not in taken]
        _SLOTS.shuffle(free)
        for slot in free:
            if not _take_slot(session, job_id=job_id, worker_id=worker_id, slot=slot, now=now):
                continue
            job = session.scalars(
                select(JobModel)
                .where(
                    JobModel.id == job_id,
                    JobModel.status == JobStatus.RUNNING,
                    JobModel.worker_id != worker_id,
                )
                .execution_options(populate_existing=True)
            ).first()
            if job is not None:
                return job_row(job)
            # It ended (or this worker took it over) since the candidates were read.
            session.execute(
                delete(JobAssistModel).where(
                    JobAssistModel.job_id == job_id, JobAssistModel.worker_id == worker_id
                )
            )
            break
    return None


def _take_slot(session: Session, *, job_id: int, worker_id: str, slot: int, now: datetime) -> bool:
    """Insert ``worker_id``'s registration in ``slot`` of the job; False if the slot is taken
    (on PostgreSQL, after the transaction that took it ends)."""
    taken = session.scalar(
        conflict_insert(session)(JobAssistModel)
        .values(job_id=job_id, worker_id=worker_id, slot=slot, heartbeat_at=now)
        .on_conflict_do_nothing()
        .returning(JobAssistModel.slot)
    )
    return taken is not None


def renew_assist(
    session: Session, *, job_id: int, worker_id: str, now: datetime | None = None
) -> bool:
    """Refresh an assistant's heartbeat; False if the job is not running any more or
    ``worker_id`` is not its assistant now (removed as stale): the assistant must stop."""
    result = session.execute(
        update(JobAssistModel)
        .where(
            JobAssistModel.job_id == job_id,
            JobAssistModel.worker_id == worker_id,
            JobAssistModel.job_id.in_(
                select(JobModel.id).where(
                    JobModel.id == job_id, JobModel.status == JobStatus.RUNNING
                )
            ),
        )
        .values(heartbeat_at=now or utcnow())
        .execution_options(synchronize_session=False)
    )
    return rowcount(result) == 1


def end_assist(session: Session, *, job_id: int, worker_id: str) -> None:
    """``worker_id`` stops assisting the job: its later records do not count for it."""
    session.execute(
        delete(JobAssistModel)
        .where(JobAssistModel.job_id == job_id, JobAssistModel.worker_id == worker_id)
        .execution_options(synchronize_session=False)
    )


def job_assistants(session: Session, *, job_id: int) -> list[str]:
    """The workers registered as assistants of a job (live or stale), by id."""
    query = (
        select(JobAssistModel.worker_id)
        .where(JobAssistModel.job_id == job_id)
        .order_by(JobAssistModel.worker_id)
    )
    return list(session.scalars(query))
