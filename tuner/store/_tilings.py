"""The tiling table: the chosen tiling per workload and toolchain, the records it is chosen
from, and the history of its changes.

The tiling table is the one upserted table (:func:`upsert_tiling`); every change of a stored
winner appends a row to the winner history in the same transaction (:func:`winner_history`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func as sa_func
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tilewise.errors import InputError
from tilewise.status import RecordSource, RecordStatus
from tilewise.store._models import (
    MeasuredGridModel,
    RecordModel,
    TilingModel,
    ToolchainModel,
    WinnerHistoryModel,
    WorkloadModel,
    utcnow,
)
from tilewise.store._records import (
    RecordRow,
    WorkloadRow,
    record_row,
    workload_row,
)
from tilewise.store._toolchains import commit_toolchain, toolchain_of
from tilewise.types import Tiling, Toolchain

#: The reason of a history row when the caller gives none.
FIRST_WINNER = "first winner"


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
    toolchain: Toolchain


@dataclass(frozen=True)
class WinnerRow:
    """One change of a workload's stored winner: the new winner and why it took the place."""

    id: int
    workload_id: int
    toolchain: str
    record_id: int
    tiling: Tiling
    latency_us: float
    default_latency_us: float | None
    speedup: float | None
    reason: str
    created_at: datetime


def tiling_row(m: TilingModel, toolchain: Toolchain) -> TilingRow:
    return TilingRow(
        toolchain=toolchain,
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


class _Any:
    """The type of :data:`ANY_WINNER`."""


#: ``upsert_tiling(expected=...)``'s default: whatever winner is stored is replaced.
ANY_WINNER = _Any()


def upsert_tiling(
    session: Session,
    *,
    workload_id: int,
    toolchain: Toolchain,
    record_id: int,
    tiling: Tiling,
    latency_us: float,
    default_latency_us: float | None,
    speedup: float | None,
    evaluations: int,
    reason: str | None = None,
    expected: Tiling | _Any | None = ANY_WINNER,
) -> TilingRow | None:
    """Set the chosen tiling of a workload under ``toolchain``, replacing any previous one of
    that toolchain, unconditionally or, with ``expected``, only while the stored winner is still
    that tiling (None: still none): a caller that compared its tiling with the winner it read
    learns (None returned, nothing written) that another process stored a new one meanwhile.

    Deciding whether the new tiling is better is the caller's job (e.g. a forced re-tune may
    legitimately replace a faster but stale entry). When the tiling changes (or is the first
    of the workload and toolchain), a winner-history row is appended in the same transaction,
    with ``reason`` (default: "first winner", or "replaced").
    """
    commit_toolchain(session, toolchain)
    values: dict[str, Any] = {
        "record_id": record_id,
        "tiling": dict(tiling),
        "latency_us": float(latency_us),
        "default_latency_us": None if default_latency_us is None else float(default_latency_us),
        "speedup": None if speedup is None else float(speedup),
        "evaluations": int(evaluations),
        "updated_at": utcnow(),
    }
    key = (workload_id, toolchain.id)
    for _ in range(2):
        model = session.get(TilingModel, key, with_for_update=True, populate_existing=True)
        if not isinstance(expected, _Any) and expected != (
            None if model is None else Tiling(model.tiling)
        ):
            return None
        if model is not None:
            changed = Tiling(model.tiling) != tiling
            for name, value in values.items():
                setattr(model, name, value)
            session.flush()
            if changed:
                _append_history(session, model, reason or "replaced")
            return tiling_row(model, toolchain)
        model = TilingModel(workload_id=workload_id, toolchain=toolchain.id, **values)
        try:
            with session.begin_nested():
                session.add(model)
        except IntegrityError:
            # Lost an insert race (or a bad foreign key: then the second pass raises it).
            continue
        _append_history(session, model, reason or FIRST_WINNER)
        return tiling_row(model, toolchain)
    session.add(TilingModel(workload_id=workload_id, toolchain=toolchain.id, **values))
    session.flush()  # raises the IntegrityError that is not a race
    raise AssertionError("unreachable")  # pragma: no cover


def _append_history(session: Session, m: TilingModel, reason: str) -> None:
    session.add(
        WinnerHistoryModel(
            workload_id=m.workload_id,
            toolchain=m.toolchain,
            record_id=m.record_id,
            tiling=dict(m.tiling),
            latency_us=m.latency_us,
            default_latency_us=m.default_latency_us,
            speedup=m.speedup,
            reason=reason,
            created_at=m.updated_at,
        )
    )
    session.flush()


def winner_history(session: Session, *, workload_id: int) -> list[WinnerRow]:
    """Every change of the workload's stored winners (all toolchains), oldest first."""
    query = (
        select(WinnerHistoryModel)
        .where(WinnerHistoryModel.workload_id == workload_id)
        .order_by(WinnerHistoryModel.id)
    )
    return [
        WinnerRow(
            id=m.id,
            workload_id=m.workload_id,
            toolchain=m.toolchain,
            record_id=m.record_id,
            tiling=Tiling(m.tiling),
            latency_us=m.latency_us,
            default_latency_us=m.default_latency_us,
            speedup=m.speedup,
            reason=m.reason,
            created_at=m.created_at,
        )
        for m in session.scalars(query)
    ]


def _with_toolchains(query: Any) -> Any:
    return query.join(ToolchainModel, ToolchainModel.id == TilingModel.toolchain)


def get_tiling(session: Session, *, workload_id: int, toolchain: str | None) -> TilingRow | None:
    """The stored tiling of a workload under the toolchain of id ``toolchain``; with None (the
    current toolchain is not known), the most recently stored of any toolchain."""
    query = _with_toolchains(select(TilingModel, ToolchainModel)).where(
        TilingModel.workload_id == workload_id
    )
    if toolchain is not None:
        query = query.where(TilingModel.toolchain == toolchain)
    query = query.order_by(TilingModel.updated_at.desc(), TilingModel.toolchain).limit(1)
    found = session.execute(query).one_or_none()
    return None if found is None else tiling_row(found[0], toolchain_of(found[1]))


def tilings_of(session: Session, *, workload_id: int) -> list[TilingRow]:
    """The stored tilings of a workload, one per toolchain, the most recently stored first."""
    query = (
        _with_toolchains(select(TilingModel, ToolchainModel))
        .where(TilingModel.workload_id == workload_id)
        .order_by(TilingModel.updated_at.desc(), TilingModel.toolchain)
    )
    return [tiling_row(t, toolchain_of(c)) for t, c in session.execute(query)]


def count_tilings(session: Session) -> int:
    """The workloads that have a tiling in the table (of any toolchain)."""
    query = select(sa_func.count(sa_func.distinct(TilingModel.workload_id)))
    return int(session.scalar(query) or 0)


def tiling_table_fingerprint(
    session: Session,
) -> tuple[int, int, datetime | None, datetime | None]:
    """A cheap summary of what a tiling table document is built from, that every change of it
    changes: the tiling table's row count, the sum of its record ids and its latest
    ``updated_at`` (a new row changes the count; a replaced one points at a newer record, whose
    id is larger), and the time the latest measured grid was kept."""
    grids = select(sa_func.max(MeasuredGridModel.measured_at)).scalar_subquery()
    query = select(
        sa_func.count(),
        sa_func.coalesce(sa_func.sum(TilingModel.record_id), 0),
        sa_func.max(TilingModel.updated_at),
        grids,
    ).select_from(TilingModel)
    rows, record_ids, updated_at, measured_at = session.execute(query).one()
    return int(rows), int(record_ids), updated_at, measured_at


def best_tilings(
    session: Session,
    *,
    op: str | None = None,
    target: str | None = None,
    dtype: str | None = None,
    toolchains: Mapping[str, str | None] | None = None,
    any_toolchain: bool = False,
) -> list[tuple[WorkloadRow, TilingRow]]:
    """The tiling table joined with its workloads, one tiling per workload, ordered by op,
    target, dtype and shape.

    ``toolchains`` maps a target name to the id of its current toolchain (None, or a target
    not in it: not known here). A workload's tiling is its current toolchain's; a workload with
    none is left out, unless ``any_toolchain`` (or its target's current toolchain is not known):
    then its most recently stored tiling of another toolchain stands in.
    """
    current = toolchains or {}
    query = (
        select(WorkloadModel, TilingModel, ToolchainModel)
        .join(TilingModel, TilingModel.workload_id == WorkloadModel.id)
        .join(ToolchainModel, ToolchainModel.id == TilingModel.toolchain)
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
        WorkloadModel.id,
        TilingModel.updated_at.desc(),
        TilingModel.toolchain,
    )
    chosen: dict[int, tuple[WorkloadRow, TilingRow]] = {}
    for w, t, c in session.execute(query):
        wanted = current.get(w.target)
        if (wanted is not None and t.toolchain == wanted) or (
            w.id not in chosen and (wanted is None or any_toolchain)
        ):
            chosen[w.id] = (workload_row(w), tiling_row(t, toolchain_of(c)))
    return list(chosen.values())
