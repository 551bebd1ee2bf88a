"""Measured grids kept in the database, so that one measuring serves every later reader.

``tilewise export OP --measure`` decides each cell of a group's choice grid by measuring on the
target (:mod:`tilewise.export._measured_cells`): minutes of a device's time. The grid is kept
(``tw_measured_grids``) with its *basis*, a hash of what it was decided from: the group's tuned
shapes, each one's stored tiling and the toolchain that measured it, and whether it is the
shape's default. Every later export of the group (the CLI without ``--measure``, the service's
``GET /v1/tables``, ``TilingTable.from_db``) answers by the kept grid while its tuned shapes
hash to the same basis, and by the model's grid once they do not (a shape tuned since, a tiling
replaced, another toolchain). The basis is written in the grid's ``model`` entry too.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tilewise.export._measured_cells import KIND
from tilewise.types import canonical_json

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tilewise.export._choice import Choice
    from tilewise.export._document import TableEntry
    from tilewise.kernels.ops import OpSpec
    from tilewise.store import TilingRow, WorkloadRow

_log = logging.getLogger("tilewise.export")

#: A shape's identity within the basis: (op, op version, target, dtype, shape key).
_ShapeOf = tuple[str, str, str, str, str]


def toolchains_of(rows: Sequence[tuple[WorkloadRow, TilingRow]]) -> dict[_ShapeOf, str]:
    """The id of the toolchain that measured each workload's stored tiling."""
    return {(w.op, w.op_version, w.target, w.dtype, w.shape.key()): t.toolchain.id for w, t in rows}


def grid_basis(members: Sequence[TableEntry], toolchains: Mapping[_ShapeOf, str]) -> str:
    """The basis of a group's grid: a hash of its tuned shapes, their tilings, the toolchains
    that measured them and whether each is its shape's default."""
    parts = sorted(
        [
            e.shape.key(),
            e.tiling.key(),
            toolchains.get((e.op, e.op_version, e.target, e.dtype, e.shape.key()), ""),
            bool(e.is_default),
        ]
        for e in members
    )
    return hashlib.sha256(canonical_json(parts).encode()).hexdigest()[:32]


def with_basis(grid: Choice, basis: str) -> Choice:
    """A measured grid with the basis it was decided from in its model entry."""
    return grid._replace(model={**grid.model, "basis": basis})


def kept_grid(session: Session, spec: OpSpec, target: str, dtype: str, basis: str) -> Choice | None:
    """The grid kept for the group if it was decided from ``basis``, else None."""
    from tilewise.export._choice import parse_choices
    from tilewise.store import measured_grid

    raw = measured_grid(
        session, op=spec.name, op_version=spec.version, target=target, dtype=dtype, basis=basis
    )
    if raw is None:
        return None
    found, rejected = parse_choices([raw], where="kept measured grid")
    if rejected or not found:
        _log.warning("%s %s %s: %s", spec.name, target, dtype, "; ".join(rejected))
        return None
    return found[0]


def keep_measured_grids(session: Session, doc: Mapping[str, Any]) -> int:
    """Keep every grid of the table document ``doc`` that was decided by measuring (its model's
    kind, with its basis); returns how many."""
    from tilewise.store import save_measured_grid

    kept = 0
    for grid in doc.get("choices", []):
        model = grid.get("model", {})
        if model.get("kind") == KIND and isinstance(model.get("basis"), str):
            save_measured_grid(
                session,
                op=grid["op"],
                op_version=grid["op_version"],
                target=grid["target"],
                dtype=grid["dtype"],
                basis=model["basis"],
                grid=grid,
            )
            kept += 1
    return kept
