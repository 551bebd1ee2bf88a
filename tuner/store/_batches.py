"""Batches: a tuning manifest's workloads submitted at once, each linked to the job that tunes
it (or to none, when it was tuned already)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tilewise.errors import InputError
from tilewise.store._jobs import JobRow, job_row
from tilewise.store._models import (
    BatchItemModel,
    BatchModel,
    JobModel,
    WorkloadModel,
    utcnow,
)
from tilewise.store._records import WorkloadRow, workload_row
from tilewise.store._tilings import TilingRow, get_tiling


@dataclass(frozen=True)
class BatchRow:
    id: int
    name: str | None
    force: bool
    manifest: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class BatchItemRow:
    batch_id: int
    position: int
    workload_id: int
    weight: float
    budget: int | None
    job_id: int | None


def _batch_row(m: BatchModel) -> BatchRow:
    return BatchRow(
        id=m.id, name=m.name, force=m.force, manifest=dict(m.manifest), created_at=m.created_at
    )


def _item_row(m: BatchItemModel) -> BatchItemRow:
    return BatchItemRow(
        batch_id=m.batch_id,
        position=m.position,
        workload_id=m.workload_id,
        weight=m.weight,
        budget=m.budget,
        job_id=m.job_id,
    )


def create_batch(
    session: Session,
    *,
    manifest: dict[str, Any],
    name: str | None = None,
    force: bool = False,
    now: datetime | None = None,
) -> BatchRow:
    """A new batch; its items follow with :func:`add_batch_item`."""
    model = BatchModel(name=name, force=force, manifest=manifest, created_at=now or utcnow())
    session.add(model)
    session.flush()
    return _batch_row(model)


def add_batch_item(
    session: Session,
    *,
    batch_id: int,
    position: int,
    workload_id: int,
    weight: float,
    budget: int | None,
    job_id: int | None,
) -> BatchItemRow:
    """One workload of a batch: ``job_id`` the job tuning it, None when it was tuned already."""
    if not weight > 0:
        raise InputError(f"weight must be > 0, got {weight}")
    if (budget is None) != (job_id is None):
        raise InputError("a batch item has a budget and a job, or neither (tuned already)")
    model = BatchItemModel(
        batch_id=batch_id,
        position=position,
        workload_id=workload_id,
        weight=weight,
        budget=budget,
        job_id=job_id,
    )
    session.add(model)
    session.flush()
    return _item_row(model)


def get_batch(session: Session, *, batch_id: int) -> BatchRow | None:
    m = session.get(BatchModel, batch_id, populate_existing=True)
    return None if m is None else _batch_row(m)


def list_batches(session: Session, *, limit: int | None = None) -> list[BatchRow]:
    """Batches, newest first."""
    query = select(BatchModel).order_by(BatchModel.id.desc())
    if limit is not None:
        query = query.limit(limit)
    return [_batch_row(m) for m in session.scalars(query)]


@dataclass(frozen=True)
class BatchItemView:
    """A batch item with its workload, its job (None when it was tuned already) and the
    workload's stored tiling (None while it is not tuned)."""

    item: BatchItemRow
    workload: WorkloadRow
    job: JobRow | None
    tiling: TilingRow | None


def batch_view(
    session: Session, *, batch_id: int, toolchains: Mapping[str, str | None] | None = None
) -> list[BatchItemView]:
    """A batch's items with their workloads, jobs and tilings, in manifest order.

    An item's tiling is that of its target's current toolchain (``toolchains``: target name to
    toolchain id, as in :func:`best_tilings`); for a target whose toolchain is not known, the
    most recently stored of any.
    """
    query = (
        select(BatchItemModel, WorkloadModel, JobModel)
        .join(WorkloadModel, WorkloadModel.id == BatchItemModel.workload_id)
        .outerjoin(JobModel, JobModel.id == BatchItemModel.job_id)
        .where(BatchItemModel.batch_id == batch_id)
        .order_by(BatchItemModel.position)
        .execution_options(populate_existing=True)
    )
    current = toolchains or {}
    return [
        BatchItemView(
            _item_row(item),
            workload_row(workload),
            None if job is None else job_row(job),
            get_tiling(session, workload_id=workload.id, toolchain=current.get(workload.target)),
        )
        for item, workload, job in session.execute(query).all()
    ]
