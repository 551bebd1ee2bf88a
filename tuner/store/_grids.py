"""Choice grids decided by measuring, kept with the basis they were decided from.

A measured grid costs minutes of a device's time (``tilewise export OP --measure``). It is kept
per op version, target and dtype, the latest replacing the one before, with its basis: a hash
of what it was decided from, computed by the export. A reader asks for the grid of a basis and
gets it only while that basis holds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tilewise.store._coerce import conflict_insert
from tilewise.store._models import MeasuredGridModel


def save_measured_grid(
    session: Session,
    *,
    op: str,
    op_version: str,
    target: str,
    dtype: str,
    basis: str,
    grid: dict[str, Any],
) -> None:
    """Keep ``grid`` (a choice grid as its document holds it) as the measured grid of the op
    version, target and dtype, decided from ``basis``; it replaces the one kept before."""
    values = {
        "op": op,
        "op_version": op_version,
        "target": target,
        "dtype": dtype,
        "basis": basis,
        "grid": grid,
        "measured_at": datetime.now(UTC),
    }
    insert = conflict_insert(session)(MeasuredGridModel).values(**values)
    session.execute(
        insert.on_conflict_do_update(
            index_elements=["op", "op_version", "target", "dtype"],
            set_={k: insert.excluded[k] for k in ("basis", "grid", "measured_at")},
        )
    )


def measured_grid(
    session: Session, *, op: str, op_version: str, target: str, dtype: str, basis: str
) -> dict[str, Any] | None:
    """The measured grid kept for the op version, target and dtype if it was decided from
    ``basis``; None when none is kept or the kept one was decided from another."""
    query = select(MeasuredGridModel.grid).where(
        MeasuredGridModel.op == op,
        MeasuredGridModel.op_version == op_version,
        MeasuredGridModel.target == target,
        MeasuredGridModel.dtype == dtype,
        MeasuredGridModel.basis == basis,
    )
    grid: dict[str, Any] | None = session.execute(query).scalar_one_or_none()
    return grid
