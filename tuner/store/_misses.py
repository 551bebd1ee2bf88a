"""Misses: the shapes the service answered without an exact entry, and how often.

The API counts them in memory and adds the counts here in batches (:func:`record_misses`), so a
lookup never writes. The table is bounded: past ``max_rows`` shapes, asks of new ones are
dropped (and counted by the caller), those of known ones still add up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, case, exists, or_, select, true, tuple_, update
from sqlalchemy import func as sa_func
from sqlalchemy.orm import Session

from tilewise.errors import InputError
from tilewise.store._coerce import conflict_insert
from tilewise.store._models import MissModel, TilingModel, WorkloadModel
from tilewise.types import Shape

#: Rows per statement (SQLite allows 32,766 bound parameters; a row binds 9).
_CHUNK = 500


@dataclass(frozen=True)
class MissRow:
    op: str
    target: str
    dtype: str
    shape: Shape
    count: int
    source: str  # the rule (nearest, default) of the latest answer
    first_at: datetime
    last_at: datetime


def _miss_row(m: MissModel) -> MissRow:
    return MissRow(
        op=m.op,
        target=m.target,
        dtype=m.dtype,
        shape=Shape(m.shape),
        count=m.count,
        source=m.source,
        first_at=m.first_at,
        last_at=m.last_at,
    )


def _key(m: MissRow) -> tuple[str, str, str, str]:
    return (m.op, m.target, m.dtype, m.shape.key())


def record_misses(session: Session, *, misses: Sequence[MissRow], max_rows: int) -> int:
    """Add ``misses`` (each: a shape's count, source and times since the last record) to the
    table: a known shape's count grows, its ``last_at`` and ``source`` are the new ones; a new
    shape is inserted while the table holds fewer than ``max_rows`` (the most asked first).

    Returns the asks left out (of new shapes past ``max_rows``). Safe against another process
    recording the same shapes at once (an insert that meets a row updates it).
    """
    if max_rows < 0:
        raise InputError(f"max_rows must be >= 0, got {max_rows}")
    if any(m.count < 1 for m in misses):
        raise InputError("a miss is counted once or more")
    by_key = {_key(m): m for m in misses}
    if len(by_key) != len(misses):
        raise InputError("each shape once per call")
    cols = (MissModel.op, MissModel.target, MissModel.dtype, MissModel.shape_key)
    known: set[tuple[str, str, str, str]] = set()
    keys = list(by_key)
    for i in range(0, len(keys), _CHUNK):
        query = select(*cols).where(tuple_(*cols).in_(keys[i : i + _CHUNK]))
        known.update((op, t, d, k) for op, t, d, k in session.execute(query))
    if known:
        table = cast(Table, MissModel.__table__)
        grow = (
            update(table)
            .where(
                and_(
                    table.c.op == bindparam("k_op"),
                    table.c.target == bindparam("k_target"),
                    table.c.dtype == bindparam("k_dtype"),
                    table.c.shape_key == bindparam("k_shape"),
                )
            )
            .values(
                count=table.c.count + bindparam("n"),
                source=bindparam("k_source"),
                last_at=bindparam("k_last"),
            )
        )
        params = [
            {"k_op": k[0], "k_target": k[1], "k_dtype": k[2], "k_shape": k[3], "n": m.count,
             "k_source": m.source, "k_last": m.last_at}
            for k, m in sorted(by_key.items())
            if k in known
        ]  # fmt: skip
        session.execute(grow, params)
    new = sorted((m for k, m in by_key.items() if k not in known), key=lambda m: -m.count)
    rows = int(session.scalar(select(sa_func.count()).select_from(MissModel)) or 0)
    room = max(0, max_rows - rows)
    # Rows are written in key order: two processes recording the same shapes lock them in the
    # same order, and cannot deadlock on PostgreSQL.
    _insert(session, sorted(new[:room], key=_key))
    session.flush()
    return sum(m.count for m in new[room:])


def _insert(session: Session, misses: Sequence[MissRow]) -> None:
    insert = conflict_insert(session)
    for i in range(0, len(misses), _CHUNK):
        values = [
            {"op": m.op, "target": m.target, "dtype": m.dtype, "shape_key": m.shape.key(),
             "shape": dict(m.shape), "count": m.count, "source": m.source,
             "first_at": m.first_at, "last_at": m.last_at}
            for m in misses[i : i + _CHUNK]
        ]  # fmt: skip
        statement = insert(MissModel).values(values)
        session.execute(
            statement.on_conflict_do_update(
                index_elements=["op", "target", "dtype", "shape_key"],
                set_={
                    "count": MissModel.count + statement.excluded.count,
                    "source": statement.excluded.source,
                    "last_at": statement.excluded.last_at,
                },
            )
        )


def _served(toolchains: Mapping[str, str | None] | None) -> Any:
    """The condition that a tiling is of its target's current toolchain (or that toolchain is
    not known)."""
    known = {target: ident for target, ident in (toolchains or {}).items() if ident is not None}
    if not known:
        return true()
    current = case(known, value=WorkloadModel.target, else_=None)
    return or_(current.is_(None), TilingModel.toolchain == current)


def list_misses(
    session: Session,
    *,
    op: str | None = None,
    target: str | None = None,
    dtype: str | None = None,
    untuned: Mapping[str, str] | None = None,
    toolchains: Mapping[str, str | None] | None = None,
    limit: int | None = None,
) -> list[MissRow]:
    """Recorded misses, most asked first (then the latest asked). With ``untuned`` (op name →
    the op's current version) only shapes with no stored tiling at that version: the ones
    still to tune. With ``toolchains`` too (target name → its current toolchain's id, None:
    not known), a tiling of another toolchain than its target's current one does not count
    as tuned (lookups do not serve it)."""
    query = select(MissModel)
    for column, value in ((MissModel.op, op), (MissModel.target, target), (MissModel.dtype, dtype)):
        if value is not None:
            query = query.where(column == value)
    if untuned is not None:
        version: Any = case(dict(untuned), value=MissModel.op, else_=None) if untuned else None
        tuned = exists(
            select(WorkloadModel.id)
            .join(TilingModel, TilingModel.workload_id == WorkloadModel.id)
            .where(
                WorkloadModel.op == MissModel.op,
                WorkloadModel.target == MissModel.target,
                WorkloadModel.dtype == MissModel.dtype,
                WorkloadModel.shape_key == MissModel.shape_key,
                WorkloadModel.op_version == version,
                _served(toolchains),
            )
        )
        query = query.where(~tuned)
    query = query.order_by(MissModel.count.desc(), MissModel.last_at.desc())
    if limit is not None:
        query = query.limit(limit)
    return [_miss_row(m) for m in session.scalars(query.execution_options(populate_existing=True))]
