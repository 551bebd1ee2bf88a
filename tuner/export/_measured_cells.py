"""Grid cells decided by measuring on the target, for an export that may (``tilewise export
--measure``).

A model fitted on a tune's records predicts how a carried tiling compares with the default, and on
the twin those predictions were often not borne out (the records over-state a search's winners; a
carried tiling's waves over the cores change between nearby shapes). Where the export can launch
the op, it asks the device instead. For each cell of the grid (:mod:`tilewise.export._choice`), the
tilings of the nearest tuned shapes are carried to the cell's sample shapes — its middle, each
spanned dim's lowest and highest value in the cell, and, in a cell at the lowest octave of a
spanned dim, that dim's least value, since every smaller asked value is clamped into the cell; a
dim the grid does not span (all tuned shapes in one of its octaves, as an LLM's projection sizes
are) is held at the tuned shapes' median value — and each sample shape measures its candidates and
its own default side by side (:data:`MeasureCellFn`). A candidate is chosen when, against the
default, it is faster beyond the noise (:func:`tilewise.stats.faster`) at most of the sample shapes
where the two differ, slower beyond the noise at none, and ahead over them all (the geometric mean
of the default's median time over its own, its *gain*, above 1); among those, the one with the
largest gain. A candidate slower at one sample shape is not measured at the next; where a candidate
is the shape's default itself it neither gains nor loses there. The cell's gain is the chosen
candidate's or, where none was chosen, the best candidate's over the sample shapes it was measured
at: a measured figure, not a prediction.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tilewise.errors import TilewiseError
from tilewise.stats import faster
from tilewise.types import Shape, Tiling

if TYPE_CHECKING:
    from tilewise.kernels.ops import OpSpec
    from tilewise.kernels.targets import TargetProfile

#: Measures tilings at one shape side by side (interleaved rounds) on the target: the
#: per-launch times of each (µs) by label; a label whose tiling failed to build or run is left
#: out. Arguments: op, target, dtype, shape, tilings by label.
MeasureCellFn = Callable[
    ["OpSpec", "TargetProfile", str, Shape, Mapping[str, Tiling]], dict[str, list[float]]
]

#: The model entry of a grid decided by measuring (``Choice.model["kind"]``).
KIND = "measured"


def measured_samples(
    spec: OpSpec,
    octaves: Sequence[int],
    spans: Sequence[bool],
    lowest: Sequence[bool],
    fixed: Mapping[str, int] | None = None,
) -> list[Shape]:
    """The shapes a cell is measured at (see the module docstring); ``spans`` says per dim
    whether the grid spans more than one octave of it, ``lowest`` whether the cell is at the
    grid's lowest octave of it; ``fixed`` holds the value of each dim the grid does not span
    (the tuned shapes', rather than the octave's middle, which nobody may ask)."""
    from tilewise.export._choice import _samples

    out = _samples(spec, octaves, spans)
    if fixed:
        out = [Shape({**dict(s), **fixed}) for s in out]
    middle = out[0]
    for dim, span, at_lowest in zip(spec.dims, spans, lowest, strict=True):
        least = spec.dim_floors.get(dim, 1)
        if span and at_lowest and least < min(s[dim] for s in out):
            out.append(Shape({**dict(middle), dim: least}))
    return out


def decide_measured(
    spec: OpSpec,
    target: TargetProfile,
    dtype: str,
    samples: Sequence[Shape],
    picks: Sequence[int],
    relatives: Sequence[Tiling],
    rules: Any,
    measure: MeasureCellFn,
) -> tuple[int, float | None]:
    """One cell: (the chosen entry's index of ``picks`` or -1, the gain) by measuring each
    pick's tiling carried to every shape of ``samples`` against its default (see the module
    docstring)."""
    carried: dict[int, list[Tiling]] = {}
    for i in picks:
        tilings = [_carried(spec, target, dtype, rules, relatives[i], s) for s in samples]
        if all(t is not None for t in tilings):
            carried[i] = tilings  # type: ignore[assignment]
    # Per candidate, its log gain at each sample shape where it is not the default, and how
    # many of those found it faster beyond the noise.
    logs: dict[int, list[float]] = {i: [] for i in carried}
    wins = dict.fromkeys(carried, 0)
    alive = set(carried)
    for s, shape in enumerate(samples):
        if not alive:
            break
        default = spec.default_tiling(shape, dtype, target)
        contenders = {"default": default}
        for i in sorted(alive):
            if carried[i][s] != default:
                contenders[carried[i][s].key()] = carried[i][s]
        times = measure(spec, target, dtype, shape, contenders) if len(contenders) > 1 else {}
        base = times.get("default")
        for i in sorted(alive):
            tiling = carried[i][s]
            if tiling == default:
                continue  # the default itself at this shape: nothing to lose or gain
            mine = times.get(tiling.key())
            if not base or not mine:
                alive.discard(i)
                continue
            logs[i].append(math.log(statistics.median(base) / statistics.median(mine)))
            if faster(base, mine):  # the default faster: slower beyond the noise
                alive.discard(i)
            elif faster(mine, base):
                wins[i] += 1
    gains = {i: math.exp(statistics.fmean(v)) for i, v in logs.items() if v}
    # Faster at most of its sample shapes, slower at none, and ahead over them all; one equal
    # to the default at every sample shape (nothing measured) is no choice.
    chosen = [i for i in alive if i in gains and 2 * wins[i] > len(logs[i]) and gains[i] > 1.0]
    if not chosen:
        return -1, round(max(gains.values()), 4) if gains else None
    best = max(chosen, key=lambda i: (gains[i], -picks.index(i)))
    return best, round(gains[best], 4)


def _carried(
    spec: OpSpec, target: TargetProfile, dtype: str, rules: Any, relative: Tiling, shape: Shape
) -> Tiling | None:
    """``relative`` re-derived at ``shape`` when it is valid there, else None."""
    try:
        spec.validate_shape(shape)
        tiling = rules.derive(relative, shape)
        return tiling if tiling is not None and spec.valid(tiling, shape, dtype, target) else None
    except TilewiseError:
        return None


def nearest_picks(
    logs: np.ndarray, candidate: np.ndarray, here: np.ndarray, neighbours: int
) -> list[int]:
    """The indices of the ``neighbours`` candidate entries nearest (log2, L1) to ``here``,
    nearest first (ties: the smaller index)."""
    distance = np.abs(logs - here).sum(axis=1)
    distance[~candidate] = np.inf
    return [
        int(i) for i in np.argsort(distance, kind="stable")[:neighbours] if np.isfinite(distance[i])
    ]
