"""Repository functions: the only way tilewise reads and writes its tables.

Every function takes a :class:`~sqlalchemy.orm.Session` and keyword-only arguments, flushes but
never commits (the caller's ``session_scope`` does), and returns frozen ``*Row`` values that stay
valid after the session is closed.

Records are append-only: there is no function that updates or deletes one. The tiling table is
the one upserted table.

Time: "now" is this host's UTC clock (``now=`` overrides it, for tests). Leases therefore assume
hosts with synchronized clocks (NTP), as any lease-based queue does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy import func as sa_func
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tilewise.errors import InputError
from tilewise.status import JobStatus, RecordSource, RecordStatus, WorkerStatus
from tilewise.store._models import (
    JobAssistModel,
    JobModel,
    RecordModel,
    TilingModel,
    WorkerModel,
    WorkloadModel,
    utcnow,
)
from tilewise.types import Shape, Tiling, Workload

#: The record sources that the store's queries single out, by the names callers know them by.
SOURCE_PREDICTED = RecordSource.PREDICTED
SOURCE_REMEASURE = RecordSource.REMEASURE


# ---------------------------------------------------------------------------------------------
# Rows


@dataclass(frozen=True)
class WorkloadRow:
    id: int
    key: str
    op: str
    op_version: str
    target: str
    dtype: str
    shape: Shape
    created_at: datetime

    @property
    def workload(self) -> Workload:
        return Workload(
            op=self.op,
            op_version=self.op_version,
            target=self.target,
            dtype=self.dtype,
            shape=self.shape,
        )


@dataclass(frozen=True)
class RecordRow:
    id: int
    workload_id: int
    tiling: Tiling
    tiling_key: str
    status: RecordStatus
    latency_us: float | None
    spread: float | None
    samples_us: tuple[float, ...] | None
    error: str | None
    constraints: Mapping[str, float] | None
    source: str
    trial_number: int | None
    env: Mapping[str, Any]
    created_at: datetime
    job_id: int | None = None


@dataclass(frozen=True)
class TilingRow:
    workload_id: int
    record_id: int
    tiling: Tiling
    latency_us: float
    default_latency_us: float | None
    speedup: float | None
    evaluations: int
    updated_at: datetime


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


@dataclass(frozen=True)
class WorkerRow:
    id: str
    host: str
    pid: int
    target: str
    device: int | None
    status: WorkerStatus
    started_at: datetime
    last_heartbeat: datetime


def _workload_row(m: WorkloadModel) -> WorkloadRow:
    return WorkloadRow(
        id=m.id,
        key=m.key,
        op=m.op,
        op_version=m.op_version,
        target=m.target,
        dtype=m.dtype,
        shape=Shape(m.shape),
        created_at=m.created_at,
    )


def _record_row(m: RecordModel) -> RecordRow:
    return RecordRow(
        id=m.id,
        workload_id=m.workload_id,
        tiling=Tiling(m.tiling),
        tiling_key=m.tiling_key,
        status=RecordStatus(m.status),
        latency_us=m.latency_us,
        spread=m.spread,
        samples_us=None if m.samples_us is None else tuple(m.samples_us),
        error=m.error,
        constraints=m.constraints,
        source=m.source,
        trial_number=m.trial_number,
        env=m.env,
        created_at=m.created_at,
        job_id=m.job_id,
    )


def _tiling_row(m: TilingModel) -> TilingRow:
    return TilingRow(
        workload_id=m.workload_id,
        record_id=m.record_id,
        tiling=Tiling(m.tiling),
        latency_us=m.latency_us,
        default_latency_us=m.default_latency_us,
        speedup=m.speedup,
        evaluations=m.evaluations,
        updated_at=m.updated_at,
    )


def _job_row(m: JobModel) -> JobRow:
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
    )


def _worker_row(m: WorkerModel) -> WorkerRow:
    return WorkerRow(
        id=m.id,
        host=m.host,
        pid=m.pid,
        target=m.target,
        device=m.device,
        status=WorkerStatus(m.status),
        started_at=m.started_at,
        last_heartbeat=m.last_heartbeat,
    )


_E = TypeVar("_E", RecordStatus, JobStatus, WorkerStatus)


def _enum_value(cls: type[_E], value: _E | str) -> _E:
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(m.value for m in cls)
        raise InputError(f"unknown {cls.__name__} {value!r} (one of: {allowed})") from None


# ---------------------------------------------------------------------------------------------
# Workloads


def find_workload(session: Session, *, key: str) -> WorkloadRow | None:
    m = session.scalars(select(WorkloadModel).where(WorkloadModel.key == key)).one_or_none()
    return None if m is None else _workload_row(m)


def get_workload(session: Session, *, workload_id: int) -> WorkloadRow | None:
    m = session.get(WorkloadModel, workload_id)
    return None if m is None else _workload_row(m)


def commit_workload(session: Session, workload: Workload) -> WorkloadRow:
    """Get-or-insert ``workload`` by its key (TVM's ``commit_workload``).

    Safe against a concurrent insert of the same workload: the insert runs in a savepoint, and
    on a unique violation the winner's row is returned.
    """
    found = find_workload(session, key=workload.key)
    if found is not None:
        return found
    model = WorkloadModel(
        key=workload.key,
        op=workload.op,
        op_version=workload.op_version,
        target=workload.target,
        dtype=workload.dtype,
        shape=dict(workload.shape),
        shape_key=workload.shape.key(),
        created_at=utcnow(),
    )
    try:
        with session.begin_nested():
            session.add(model)
    except IntegrityError:
        found = find_workload(session, key=workload.key)
        if found is None:
            raise
        return found
    return _workload_row(model)


# ---------------------------------------------------------------------------------------------
# Records


def add_record(
    session: Session,
    *,
    workload_id: int,
    tiling: Tiling,
    status: RecordStatus | str,
    latency_us: float | None = None,
    spread: float | None = None,
    samples_us: Sequence[float] | None = None,
    error: str | None = None,
    constraints: Mapping[str, float] | None = None,
    source: str,
    trial_number: int | None = None,
    env: Mapping[str, Any],
    job_id: int | None = None,
) -> RecordRow:
    """Append one record.

    ``latency_us`` (the median, µs) is required for ``ok`` records and refused for the others;
    ``spread`` is relative, ``(p75 - p25) / median``, and likewise only for ``ok``. ``job_id``
    names the job whose worker measured it; set it only while holding that job
    (:func:`holds_job` in the same transaction), so that :func:`job_evaluations` is exact.

    Raises:
        InputError: unknown status, or latency/spread given for a non-ok record or missing for
            an ok one.
    """
    status = _enum_value(RecordStatus, status)
    if status is RecordStatus.OK:
        if latency_us is None:
            raise InputError("an ok record needs latency_us")
    elif latency_us is not None or spread is not None:
        raise InputError(f"a {status.value} record has no latency_us or spread")
    model = RecordModel(
        workload_id=workload_id,
        tiling=dict(tiling),
        tiling_key=tiling.key(),
        status=status,
        latency_us=None if latency_us is None else float(latency_us),
        spread=None if spread is None else float(spread),
        samples_us=None if samples_us is None else [float(s) for s in samples_us],
        error=error,
        constraints=None if constraints is None else {k: float(v) for k, v in constraints.items()},
        source=source,
        trial_number=trial_number,
        env=dict(env),
        created_at=utcnow(),
        job_id=job_id,
    )
    session.add(model)
    session.flush()
    return _record_row(model)


def records_for(
    session: Session, *, workload_id: int, status: RecordStatus | str | None = None
) -> list[RecordRow]:
    """Every record of a workload (optionally of one status), oldest first."""
    query = select(RecordModel).where(RecordModel.workload_id == workload_id)
    if status is not None:
        query = query.where(RecordModel.status == _enum_value(RecordStatus, status))
    return [_record_row(m) for m in session.scalars(query.order_by(RecordModel.id))]


def find_record(session: Session, *, workload_id: int, tiling_key: str) -> RecordRow | None:
    """The latest measured record (any status; predictions excluded) of one tiling."""
    query = (
        select(RecordModel)
        .where(
            RecordModel.workload_id == workload_id,
            RecordModel.tiling_key == tiling_key,
            RecordModel.source != SOURCE_PREDICTED,
        )
        .order_by(RecordModel.id.desc())
        .limit(1)
    )
    m = session.scalars(query).one_or_none()
    return None if m is None else _record_row(m)


def top_k(
    session: Session, *, workload_id: int, k: int, include_predicted: bool = False
) -> list[RecordRow]:
    """The ``k`` fastest valid (``ok``) records, fastest first; ties go to the older record.

    A tiling measured several times (re-measures) may appear several times. Predicted records
    are left out unless ``include_predicted``.
    """
    if k < 0:
        raise InputError(f"k must be >= 0, got {k}")
    query = select(RecordModel).where(
        RecordModel.workload_id == workload_id,
        RecordModel.status == RecordStatus.OK,
        RecordModel.latency_us.is_not(None),
    )
    if not include_predicted:
        query = query.where(RecordModel.source != SOURCE_PREDICTED)
    query = query.order_by(RecordModel.latency_us, RecordModel.id).limit(k)
    return [_record_row(m) for m in session.scalars(query)]


# ---------------------------------------------------------------------------------------------
# The tiling table


def upsert_tiling(
    session: Session,
    *,
    workload_id: int,
    record_id: int,
    tiling: Tiling,
    latency_us: float,
    default_latency_us: float | None,
    speedup: float | None,
    evaluations: int,
) -> TilingRow:
    """Set the chosen tiling of a workload, replacing any previous one unconditionally.

    Deciding whether the new tiling is better is the caller's job (e.g. a forced re-tune may
    legitimately replace a faster but stale entry).
    """
    values: dict[str, Any] = {
        "record_id": record_id,
        "tiling": dict(tiling),
        "latency_us": float(latency_us),
        "default_latency_us": None if default_latency_us is None else float(default_latency_us),
        "speedup": None if speedup is None else float(speedup),
        "evaluations": int(evaluations),
        "updated_at": utcnow(),
    }
    for _ in range(2):
        model = session.get(TilingModel, workload_id, with_for_update=True, populate_existing=True)
        if model is not None:
            for name, value in values.items():
                setattr(model, name, value)
            session.flush()
            return _tiling_row(model)
        model = TilingModel(workload_id=workload_id, **values)
        try:
            with session.begin_nested():
                session.add(model)
        except IntegrityError:
            # Lost an insert race (or a bad foreign key: then the second pass raises it).
            continue
        return _tiling_row(model)
    session.add(TilingModel(workload_id=workload_id, **values))
    session.flush()  # raises the IntegrityError that is not a race
    raise AssertionError("unreachable")  # pragma: no cover


def get_tiling(session: Session, *, workload_id: int) -> TilingRow | None:
    m = session.get(TilingModel, workload_id)
    return None if m is None else _tiling_row(m)


def best_tilings(
    session: Session,
    *,
    op: str | None = None,
    target: str | None = None,
    dtype: str | None = None,
) -> list[tuple[WorkloadRow, TilingRow]]:
    """The tiling table joined with its workloads, ordered by op, target, dtype and shape."""
    query = select(WorkloadModel, TilingModel).join(
        TilingModel, TilingModel.workload_id == WorkloadModel.id
    )
    if op is not None:
        query = query.where(WorkloadModel.op == op)
    if target is not None:
        query = query.where(WorkloadModel.target == target)
    if dtype is not None:
        query = query.where(WorkloadModel.dtype == dtype)
    query = query.order_by(
        WorkloadModel.op,
        WorkloadModel.target,
        WorkloadModel.dtype,
        WorkloadModel.shape_key,
        WorkloadModel.op_version,
    )
    return [(_workload_row(w), _tiling_row(t)) for w, t in session.execute(query)]


# ---------------------------------------------------------------------------------------------
# Jobs


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
    return _job_row(model)


def get_job(session: Session, *, job_id: int) -> JobRow | None:
    m = session.get(JobModel, job_id, populate_existing=True)
    return None if m is None else _job_row(m)


def list_jobs(
    session: Session,
    *,
    status: JobStatus | str | Collection[JobStatus | str] | None = None,
    op: str | None = None,
    workload_id: int | None = None,
    limit: int | None = None,
) -> list[JobRow]:
    """Jobs, newest first, filtered by status (one or several), op and workload."""
    query = select(JobModel)
    if status is not None:
        wanted = [status] if isinstance(status, str) else list(status)
        query = query.where(JobModel.status.in_([_enum_value(JobStatus, s) for s in wanted]))
    if op is not None:
        query = query.join(WorkloadModel, WorkloadModel.id == JobModel.workload_id).where(
            WorkloadModel.op == op
        )
    if workload_id is not None:
        query = query.where(JobModel.workload_id == workload_id)
    query = query.order_by(JobModel.id.desc())
    if limit is not None:
        query = query.limit(limit)
    return [_job_row(m) for m in session.scalars(query.execution_options(populate_existing=True))]


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
        if _rowcount(result) == 1:
            return get_job(session, job_id=candidate)
    return None


def _rowcount(result: Any) -> int:
    # Session.execute is typed as returning Result; an UPDATE's result is a CursorResult.
    return int(result.rowcount)


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
    return _rowcount(result) == 1


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
    return _rowcount(result) == 1


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
    status = _enum_value(JobStatus, status)
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
    if _rowcount(result) != 1:
        return None
    return get_job(session, job_id=job_id)


def release_job(
    session: Session,
    *,
    job_id: int,
    worker_id: str,
    evaluations: int | None = None,
    best_latency_us: float | None = None,
) -> bool:
    """Hand a running job back to the queue (a worker shutting down before its budget is
    spent): ``queued``, no worker, no lease, so the next claim resumes it at once. False if
    ``worker_id`` did not hold it (then nothing changes). None values leave progress as is."""
    values: dict[str, Any] = {"status": JobStatus.QUEUED, "worker_id": None, "lease_until": None}
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
    return _rowcount(result) == 1


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


def job_evaluations(session: Session, *, job_id: int) -> int:
    """The evaluations a job has spent: its records that cost a build and a launch (not the
    ones rejected before, not re-measures)."""
    query = (
        select(sa_func.count())
        .select_from(RecordModel)
        .where(
            RecordModel.job_id == job_id,
            RecordModel.status != RecordStatus.INFEASIBLE,
            RecordModel.source != SOURCE_REMEASURE,
        )
    )
    return int(session.scalar(query) or 0)


def may_tag_record(session: Session, *, job_id: int, worker_id: str, counts: bool = True) -> bool:
    """Whether a record that ``worker_id`` adds in this transaction may carry ``job_id``.

    Yes if the job is running, ``worker_id`` holds it or assists it (:func:`assist_job`), and,
    for a record that ``counts`` as an evaluation (:func:`job_evaluations`), the job has spent
    less than its budget. The job row is locked until the transaction ends (``FOR UPDATE`` on
    PostgreSQL; SQLite's transactions hold the write lock anyway), so the holder and its
    assistants tag their records one at a time and a job's evaluations never exceed its budget.
    A record that may not carry the job still serves the study.
    """
    job = session.execute(
        select(JobModel.worker_id, JobModel.budget_evals)
        .where(JobModel.id == job_id, JobModel.status == JobStatus.RUNNING)
        .with_for_update()
    ).first()
    if job is None:
        return False
    if job.worker_id != worker_id:
        assisting = session.scalars(
            select(JobAssistModel.worker_id).where(
                JobAssistModel.job_id == job_id, JobAssistModel.worker_id == worker_id
            )
        ).first()
        if assisting is None:
            return False
    return not counts or job_evaluations(session, job_id=job_id) < job.budget_evals


def _live_assistants(session: Session, *, job_id: int, since: datetime) -> int:
    query = (
        select(sa_func.count())
        .select_from(JobAssistModel)
        .where(JobAssistModel.job_id == job_id, JobAssistModel.heartbeat_at >= since)
    )
    return int(session.scalar(query) or 0)


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
    taken (the oldest on a tie). Any earlier registration of ``worker_id`` ends, and the job's
    stale assistants are removed (their records stop counting for it). The assistant refreshes
    its row with :func:`renew_assist` and removes it with :func:`end_assist`.

    Concurrency: the chosen job's row is locked (``FOR UPDATE``) before its assistants are
    counted, so concurrent workers never exceed ``max_assistants``; SQLite has one writer.
    """
    if not lease_seconds > 0:
        raise InputError(f"lease_seconds must be > 0, got {lease_seconds}")
    if max_assistants < 1:
        return None
    now = now or utcnow()
    since = now - timedelta(seconds=lease_seconds)
    query = select(JobModel.id, JobModel.budget_evals).where(
        JobModel.status == JobStatus.RUNNING,
        JobModel.lease_until >= now,
        JobModel.worker_id != worker_id,
    )
    if targets is not None:
        query = query.where(
            JobModel.workload_id.in_(
                select(WorkloadModel.id).where(WorkloadModel.target.in_(list(targets)))
            )
        )
    left = {
        job_id: budget - job_evaluations(session, job_id=job_id)
        for job_id, budget in session.execute(query).all()
    }
    for job_id in sorted((j for j, n in left.items() if n > 0), key=lambda j: (-left[j], j)):
        locked = session.scalars(
            select(JobModel.id)
            .where(
                JobModel.id == job_id,
                JobModel.status == JobStatus.RUNNING,
                JobModel.worker_id != worker_id,
            )
            .with_for_update()
        ).first()
        if locked is None:
            continue
        session.execute(
            delete(JobAssistModel)
            .where(
                or_(
                    JobAssistModel.worker_id == worker_id,
                    and_(JobAssistModel.job_id == job_id, JobAssistModel.heartbeat_at < since),
                )
            )
            .execution_options(synchronize_session=False)
        )
        if _live_assistants(session, job_id=job_id, since=since) >= max_assistants:
            continue
        session.add(JobAssistModel(job_id=job_id, worker_id=worker_id, heartbeat_at=now))
        session.flush()
        return get_job(session, job_id=job_id)
    return None


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
    return _rowcount(result) == 1


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


def cancel_job(session: Session, *, job_id: int, now: datetime | None = None) -> JobRow | None:
    """Cancel a queued or running job; a finished job is returned unchanged. None if no such job.

    A running job's worker learns it at its next ``renew_lease`` or ``update_job_progress``.
    """
    session.execute(
        update(JobModel)
        .where(
            JobModel.id == job_id,
            JobModel.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]),
        )
        .values(status=JobStatus.CANCELLED, finished_at=now or utcnow(), lease_until=None)
        .execution_options(synchronize_session=False)
    )
    return get_job(session, job_id=job_id)


# ---------------------------------------------------------------------------------------------
# Workers


def heartbeat_worker(
    session: Session,
    *,
    worker_id: str,
    host: str,
    pid: int,
    target: str,
    device: int | None = None,
    status: WorkerStatus | str = WorkerStatus.IDLE,
    now: datetime | None = None,
) -> WorkerRow:
    """Register a worker or refresh its heartbeat (an upsert keyed by ``worker_id``)."""
    status = _enum_value(WorkerStatus, status)
    now = now or utcnow()
    values: dict[str, Any] = {
        "host": host,
        "pid": pid,
        "target": target,
        "device": device,
        "status": status,
        "last_heartbeat": now,
    }
    for _ in range(2):
        model = session.get(WorkerModel, worker_id, with_for_update=True, populate_existing=True)
        if model is not None:
            for name, value in values.items():
                setattr(model, name, value)
            session.flush()
            return _worker_row(model)
        model = WorkerModel(id=worker_id, started_at=now, **values)
        try:
            with session.begin_nested():
                session.add(model)
        except IntegrityError:
            continue  # registered concurrently under the same id: update that row
        return _worker_row(model)
    raise InputError(f"cannot register worker {worker_id!r}")


def list_workers(
    session: Session,
    *,
    alive_within: float | None = None,
    now: datetime | None = None,
) -> list[WorkerRow]:
    """Workers by id; with ``alive_within`` (seconds), only those heard from since then and
    not stopped."""
    query = select(WorkerModel)
    if alive_within is not None:
        since = (now or utcnow()) - timedelta(seconds=alive_within)
        query = query.where(
            WorkerModel.last_heartbeat >= since, WorkerModel.status != WorkerStatus.STOPPED
        )
    return [
        _worker_row(m)
        for m in session.scalars(
            query.order_by(WorkerModel.id).execution_options(populate_existing=True)
        )
    ]
