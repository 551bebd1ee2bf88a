"""The tiling table: the chosen tiling per workload, and the records it is chosen from.

The tiling table is the one upserted table (:func:`upsert_tiling`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func as sa_func
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tilewise.errors import InputError
from tilewise.status import RecordSource, RecordStatus
from tilewise.store._models import RecordModel, TilingModel, WorkloadModel, utcnow
from tilewise.store._records import (
    RecordRow,
    WorkloadRow,
    record_row,
    workload_row,
)
from tilewise.types import Tiling


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


def tiling_row(m: TilingModel) -> TilingRow:
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
        query = query.where(RecordModel.source != RecordSource.PREDICTED)
    query = query.order_by(RecordModel.latency_us, RecordModel.id).limit(k)
    return [record_row(m) for m in session.scalars(query)]


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
            return tiling_row(model)
        model = TilingModel(workload_id=workload_id, **values)
        try:
            with session.begin_nested():
                session.add(model)
        except IntegrityError:
            # Lost an insert race (or a bad foreign key: then the second pass raises it).
            continue
        return tiling_row(model)
    session.add(TilingModel(workload_id=workload_id, **values))
    session.flush()  # raises the IntegrityError that is not a race
    raise AssertionError("unreachable")  # pragma: no cover


def get_tiling(session: Session, *, workload_id: int) -> TilingRow | None:
    m = session.get(TilingModel, workload_id)
    return None if m is None else tiling_row(m)


def count_tilings(session: Session) -> int:
    """The workloads that have a tiling in the table."""
    return int(session.scalar(select(sa_func.count()).select_from(TilingModel)) or 0)


def tiling_table_fingerprint(session: Session) -> tuple[int, int, datetime | None]:
    """A cheap summary of the tiling table that every upsert changes: its row count, the sum of
    its record ids and its latest ``updated_at``. A new row changes the count; a replaced one
    points at a newer record, whose id is larger."""
    query = select(
        sa_func.count(),
        sa_func.coalesce(sa_func.sum(TilingModel.record_id), 0),
        sa_func.max(TilingModel.updated_at),
    )
    rows, record_ids, updated_at = session.execute(query).one()
    return int(rows), int(record_ids), updated_at


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
    return [(workload_row(w), tiling_row(t)) for w, t in session.execute(query)]
