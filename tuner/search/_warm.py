"""Warm start: what the tuned shapes of an op suggest for a new shape.

A tiling that won on a nearby shape of the same op, target and dtype is a good first guess: the
best tilings of the nearest tuned shapes (distance: :meth:`OpSpec.shape_distance`, the sum over
dims of |log2 ratio|), carried over to the new shape as the runtime carries them
(:meth:`OpSpec.carry`: the same core split in pieces, base blocks within the new core blocks;
a neighbour's default tiling as this shape's default) and moved into the new shape's domains
(:meth:`OpSpec.snap`; a study only takes values of its distributions), that pass the op's
static check there are measured before anything else.
"""

from __future__ import annotations

import math

from sqlalchemy.orm import Session

from tilewise import store
from tilewise.kernels.ops import OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.types import Shape, Tiling


def shape_distance(spec: OpSpec, a: Shape, b: Shape) -> float:
    """``spec.shape_distance``; shapes with other dims are infinitely far."""
    if set(a) != set(b) or set(a) != set(spec.dims):
        return math.inf
    return spec.shape_distance(a, b)


def nearest_tuned_tilings(
    session: Session,
    *,
    spec: OpSpec,
    shape: Shape,
    dtype: str,
    target: TargetProfile,
    shapes: int = 3,
    per_shape: int = 2,
    limit: int = 4,
) -> list[Tiling]:
    """Up to ``limit`` tilings: the best ``per_shape`` of each of the ``shapes`` nearest tuned
    shapes (nearest first, the stored winner first), carried over to ``shape`` and snapped into
    its domains, valid for it, without repeats."""
    tuned = [
        (shape_distance(spec, w.shape, shape), w, t)
        for w, t in store.best_tilings(session, op=spec.name, target=target.name, dtype=dtype)
        if w.shape != shape
    ]
    tuned = sorted((x for x in tuned if math.isfinite(x[0])), key=lambda x: x[0])[:shapes]
    names = {t.name for t in spec.tunables(shape, dtype, target)}
    out: dict[str, Tiling] = {}
    for _, workload, best in tuned:
        top = store.top_k(session, workload_id=workload.id, k=per_shape + 2)
        found = 0
        for tuned_tiling in [best.tiling, *(Tiling(r.tiling) for r in top)]:
            if found >= per_shape or len(out) >= limit:
                break
            if set(tuned_tiling) != names:
                continue
            if tuned_tiling == spec.default_tiling(workload.shape, dtype, target):
                # Nothing beat the default there: the default carries over (as in the runtime).
                carried: Tiling | None = spec.default_tiling(shape, dtype, target)
            else:
                carried = spec.carry(tuned_tiling, workload.shape, shape, dtype, target)
            if carried is None:
                continue
            tiling = spec.snap(carried, shape, dtype, target)
            if tiling.key() not in out and spec.valid(tiling, shape, dtype, target):
                out[tiling.key()] = tiling
                found += 1
    return list(out.values())
