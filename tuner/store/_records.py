"""Workloads and their records.

A workload is inserted once and then only read (:func:`commit_workload` is a get-or-insert).
Records are append-only: there is no function that updates or deletes one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func as sa_func
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tilewise.errors import InputError
from tilewise.status import RecordSource, RecordStatus
from tilewise.store._coerce import enum_value
from tilewise.store._models import RecordModel, WorkloadModel, utcnow
from tilewise.store._toolchains import commit_toolchain
from tilewise.types import UNKNOWN_TOOLCHAIN, Shape, Tiling, Toolchain, Workload

#: The two sources callers filter records on, under the names tilewise.store exports.
SOURCE_PREDICTED = RecordSource.PREDICTED
SOURCE_REMEASURE = RecordSource.REMEASURE


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
    source: RecordSource
    trial_number: int | None
    env: Mapping[str, Any]
    created_at: datetime
    job_id: int | None = None
    toolchain: str = UNKNOWN_TOOLCHAIN  # the id of the toolchain that measured it


def workload_row(m: WorkloadModel) -> WorkloadRow:
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


def record_row(m: RecordModel) -> RecordRow:
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
        source=RecordSource(m.source),
        trial_number=m.trial_number,
        env=m.env,
        created_at=m.created_at,
        job_id=m.job_id,
        toolchain=m.toolchain,
    )


def find_workload(session: Session, *, key: str) -> WorkloadRow | None:
    m = session.scalars(select(WorkloadModel).where(WorkloadModel.key == key)).one_or_none()
    return None if m is None else workload_row(m)


def get_workload(session: Session, *, workload_id: int) -> WorkloadRow | None:
    m = session.get(WorkloadModel, workload_id)
    return None if m is None else workload_row(m)


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
    return workload_row(model)


def lock_workload(session: Session, *, workload_id: int) -> None:
    """Lock a workload's row until the transaction ends, so that callers deciding something per
    workload (one active job each) decide one at a time.

    PostgreSQL takes ``FOR NO KEY UPDATE``, the weaker row lock: the foreign keys of records and
    tilings inserted meanwhile take KEY SHARE on the row and are not blocked. SQLite's
    transactions hold the write lock anyway.
    """
    session.execute(
        select(WorkloadModel.id)
        .where(WorkloadModel.id == workload_id)
        .with_for_update(key_share=True)
    )


def workload_targets(session: Session) -> list[str]:
    """The targets that have workloads, by name."""
    query = select(WorkloadModel.target).distinct().order_by(WorkloadModel.target)
    return list(session.scalars(query))


def count_workloads(session: Session) -> int:
    return int(session.scalar(select(sa_func.count()).select_from(WorkloadModel)) or 0)


def count_evaluations_by_status(session: Session) -> dict[RecordStatus, int]:
    """The number of tilings the searches tried, by outcome (re-measures and predictions left
    out; ``infeasible`` ones were refused before a build)."""
    query = (
        select(RecordModel.status, sa_func.count())
        .where(RecordModel.source.in_([RecordSource.DEFAULT, RecordSource.SEARCH]))
        .group_by(RecordModel.status)
    )
    return {RecordStatus(status): int(n) for status, n in session.execute(query)}


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
    source: RecordSource | str,
    trial_number: int | None = None,
    env: Mapping[str, Any],
    toolchain: Toolchain,
    job_id: int | None = None,
) -> RecordRow:
    """Append one record.

    ``latency_us`` (the median, µs) is required for ``ok`` records and refused for the others;
    ``spread`` is relative, ``(p75 - p25) / median``, and likewise only for ``ok``. ``job_id``
    names the job whose worker measured it; follow it with :func:`tag_record` in the same
    transaction, which keeps it only where the job counts it, so that :func:`job_evaluations` is
    exact.
    ``toolchain`` is what measured it (the backend's, ``Backend.toolchain``).

    Raises:
        InputError: unknown status or source, or latency/spread given for a non-ok record or
            missing for an ok one.
    """
    status = enum_value(RecordStatus, status)
    source = enum_value(RecordSource, source)
    if status is RecordStatus.OK:
        if latency_us is None:
            raise InputError("an ok record needs latency_us")
    elif latency_us is not None or spread is not None:
        raise InputError(f"a {status.value} record has no latency_us or spread")
    commit_toolchain(session, toolchain)
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
        toolchain=toolchain.id,
    )
    session.add(model)
    session.flush()
    return record_row(model)


def records_for(
    session: Session, *, workload_id: int, status: RecordStatus | str | None = None
) -> list[RecordRow]:
    """Every record of a workload (optionally of one status), oldest first."""
    query = select(RecordModel).where(RecordModel.workload_id == workload_id)
    if status is not None:
        query = query.where(RecordModel.status == enum_value(RecordStatus, status))
    return [record_row(m) for m in session.scalars(query.order_by(RecordModel.id))]


def find_record(session: Session, *, workload_id: int, tiling_key: str) -> RecordRow | None:
    """The latest measured record (any status; predictions excluded) of one tiling."""
    query = (
        select(RecordModel)
        .where(
            RecordModel.workload_id == workload_id,
            RecordModel.tiling_key == tiling_key,
            RecordModel.source != RecordSource.PREDICTED,
        )
        .order_by(RecordModel.id.desc())
        .limit(1)
    )
    m = session.scalars(query).one_or_none()
    return None if m is None else record_row(m)
