"""The choice at shapes nobody tuned, precomputed as a grid the runtime and the C header read.

For an untuned shape the candidates are the tilings of the nearest tuned shapes, re-derived for
it by the op's carry rules, and the op's default tiling; a latency model fitted on every record
of the op (:mod:`tilewise.export._model`) predicts each, and a candidate wins only when it is
predicted faster than the default (the predicted log gain times the model's scale) by more than
the model's own held-out error. Evaluating the model needs the op's Python code, so the choice
is made at export, once per grid cell, and written into the table (``choices``); the runtime
and the C header look the asked shape's cell up and re-derive the chosen entry's tiling for
it, so both give the same answer.

The grid: each dim's *octave*, ``floor(log2(value + 1 - least))`` (``least`` is the dim's
lowest value, 1, or 0 for a padding; an integer bit length, exact in Python and C), over the
octaves the table's tuned shapes span (an asked octave outside them is clamped to the nearest
edge); cells in row-major order of the op's dims. Each cell holds the index of the chosen tuned
shape in ``shapes`` (-1: the default) and the predicted gain of the best candidate (the
default's predicted latency over its), both decided at the cell's middle shape (every dim at
``2 ** (octave + 0.5)``, rounded). A group whose grid would exceed :data:`MAX_CELLS` cells gets
none (the runtime then answers by the nearest rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from itertools import product
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tilewise.errors import InputError, TilewiseError
from tilewise.export._measured_cells import (
    KIND,
    MeasureCellFn,
    decide_measured,
    measured_samples,
    nearest_picks,
)
from tilewise.types import MAX_DIM, Shape, Tiling

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tilewise.export._document import TableEntry
    from tilewise.export._model import Model
    from tilewise.kernels.ops import OpSpec
    from tilewise.kernels.targets import TargetProfile
    from tilewise.store import TilingRow, WorkloadRow

MAX_CELLS = 4096
#: Candidates per cell besides the default: the tilings of this many nearest tuned shapes.
NEIGHBOURS = 4


class Choice(NamedTuple):
    """One (op version, target, dtype)'s grid, as read from a document."""

    op: str
    op_version: str
    target: str
    dtype: str
    model: dict[str, Any]
    shapes: list[Shape]
    low: tuple[int, ...]
    size: tuple[int, ...]
    cells: tuple[int, ...]
    gains: tuple[float | None, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "op_version": self.op_version,
            "target": self.target,
            "dtype": self.dtype,
            "model": self.model,
            "shapes": [dict(s) for s in self.shapes],
            "low": list(self.low),
            "size": list(self.size),
            "cells": list(self.cells),
            "gains": list(self.gains),
        }


def octave(value: int, least: int) -> int:
    """``floor(log2(value + 1 - least))``: a dim's grid coordinate before clamping."""
    return int(value + 1 - least).bit_length() - 1


def _samples(spec: OpSpec, octaves: Sequence[int], spans: Sequence[bool]) -> list[Shape]:
    """The shapes a cell is decided at: its middle, and for each dim the grid spans (the tuned
    shapes lie in more than one of its octaves) the cell's lowest and highest value of it with
    the other dims at the middle. A dim all tuned shapes share an octave of says nothing of how
    the candidates vary along it: sampling it would only cost export time."""
    middle = _middle(spec, octaves)
    out = [middle]
    for dim, o, span_dim in zip(spec.dims, octaves, spans, strict=True):
        if not span_dim:
            continue
        least = spec.dim_floors.get(dim, 1)
        for span in (2**o, 2 ** (o + 1) - 1):
            value = least - 1 + span
            if value != middle[dim]:
                out.append(Shape({**dict(middle), dim: value}))
    return out


def _decide(
    spec: OpSpec,
    target: TargetProfile,
    dtype: str,
    model: Model,
    group: str,
    octaves: Sequence[int],
    spans: Sequence[bool],
    logs: np.ndarray,
    candidate: np.ndarray,
    relatives: Sequence[Tiling],
    rules: Any,
    neighbours: int,
) -> tuple[int, float | None]:
    """One cell: (the chosen entry's index or -1, the predicted gain of the best candidate).

    The candidates are the tilings of the ``neighbours`` nearest tuned shapes to the cell's
    middle; each is carried to every sample shape of the cell (:func:`_samples`) and must be
    valid at all of them; its predicted gain is the smallest over them (the default's predicted
    latency over its). A gain that is not above the model's error is no reason to leave the
    default: a carried tiling's waves over the cores jump between nearby shapes, and the default
    is re-derived for each shape by its own heuristic."""
    from tilewise.export._model import features

    samples = _samples(spec, octaves, spans)
    here = np.array([spec.log_position(d, samples[0][d]) for d in spec.dims])
    picks = nearest_picks(logs, candidate, here, neighbours)
    if not picks:
        return -1, None
    worst = dict.fromkeys(picks, math.inf)
    for shape in samples:
        try:
            spec.validate_shape(shape)
            default = spec.default_tiling(shape, dtype, target)
        except TilewiseError:
            return -1, None
        units = model.units.get(group)
        base = features(spec, default, shape, dtype, target, units)
        if base is None:
            return -1, None
        p_default = float(model.predict(np.array([base]), group)[0])
        for i in list(worst):
            tiling = rules.derive(relatives[i], shape)
            x = None
            if tiling is not None:
                try:
                    if spec.valid(tiling, shape, dtype, target):
                        x = features(spec, tiling, shape, dtype, target, units)
                except TilewiseError:
                    x = None
            if x is None:
                del worst[i]
                continue
            log_gain = model.scale * (p_default - float(model.predict(np.array([x]), group)[0]))
            worst[i] = min(worst[i], log_gain)
        if not worst:
            return -1, None
    best = max(worst, key=lambda i: (worst[i], -picks.index(i)))
    gain = round(math.exp(worst[best]), 4)
    return (best if worst[best] > model.error else -1), gain


def cell_index(choice: Choice, spec: OpSpec, shape: Shape) -> int:
    """The flat index of ``shape``'s cell (the Python twin of the header's)."""
    index = 0
    for dim, low, size in zip(spec.dims, choice.low, choice.size, strict=True):
        o = octave(shape[dim], spec.dim_floors.get(dim, 1)) - low
        index = index * size + min(max(o, 0), size - 1)
    return index


def _middle(spec: OpSpec, octaves: Sequence[int]) -> Shape:
    out = {}
    for dim, o in zip(spec.dims, octaves, strict=True):
        least = spec.dim_floors.get(dim, 1)
        span = min(max(round(2 ** (o + 0.5)), 2**o), 2 ** (o + 1) - 1)
        out[dim] = least - 1 + span
    return Shape(out)


def build_choice(
    spec: OpSpec,
    target: TargetProfile,
    dtype: str,
    entries: Sequence[TableEntry],
    model: Model | None,
    *,
    max_cells: int = MAX_CELLS,
    neighbours: int = NEIGHBOURS,
    measure: MeasureCellFn | None = None,
) -> Choice | None:
    """The grid of one (target, dtype) group of ``spec``'s current-version ``entries`` (see
    the module docstring); None when it would exceed ``max_cells`` cells or has no entry.
    With ``measure`` each cell is decided by measuring on the target
    (:mod:`tilewise.export._measured_cells`), else by ``model`` (needed then)."""
    from tilewise.export._document import checked_relative, is_default_tiling

    if not entries:
        return None
    dims = spec.dims
    floors = [spec.dim_floors.get(d, 1) for d in dims]
    tuned = sorted(entries, key=lambda e: tuple(e.shape[d] for d in dims))
    octs = np.array(
        [[octave(e.shape[d], f) for d, f in zip(dims, floors, strict=True)] for e in tuned]
    )
    low, high = octs.min(axis=0), octs.max(axis=0)
    if measure is not None:
        # Measured, the grid reaches one octave past the tuned ones on each side of a dim it
        # spans, where the cells stay few: the shapes just outside (a decode step's few tokens,
        # a longer prompt) are decided where they are, not by the edge cell's samples.
        spanned = high > low
        wider = np.where(spanned, np.maximum(low - 1, 0), low), high + spanned
        if math.prod(int(h - lo + 1) for lo, h in zip(*wider, strict=True)) <= max_cells:
            low, high = wider
    size = tuple(int(h - lo + 1) for lo, h in zip(low, high, strict=True))
    if math.prod(size) > max_cells:
        return None
    logs = np.array([[spec.log_position(d, e.shape[d]) for d in dims] for e in tuned])
    relatives = [checked_relative(e, spec, target) for e in tuned]
    # An entry that kept its default has no tiling of its own to carry. One measured slower
    # than the default where it was carried to the other tuned shapes is no candidate for the
    # model; measuring a cell asks the device at the cell itself, which says more.
    candidate = np.array(
        [
            not (e.is_default if e.is_default is not None else is_default_tiling(e))
            and (measure is not None or not e.carry_slower)
            for e in tuned
        ]
    )
    rules = spec.carry_rules(dtype, target)
    group = f"{target.name}/{dtype}"
    cells: list[int] = []
    gains: list[float | None] = []
    spans = [n > 1 for n in size]
    # A dim the grid does not span is measured at the tuned shapes' (lower) median value.
    fixed = {
        d: sorted(e.shape[d] for e in tuned)[(len(tuned) - 1) // 2]
        for d, span in zip(dims, spans, strict=True)
        if not span
    }
    measured_shapes = 0
    for octaves in product(*(range(int(lo), int(h) + 1) for lo, h in zip(low, high, strict=True))):
        if measure is not None:
            lowest = [o == lo for o, lo in zip(octaves, low, strict=True)]
            samples = measured_samples(spec, octaves, spans, lowest, fixed)
            here = np.array([spec.log_position(d, samples[0][d]) for d in dims])
            picks = nearest_picks(logs, candidate, here, neighbours)
            measured_shapes += len(samples) if picks else 0
            chosen, gain = decide_measured(
                spec, target, dtype, samples, picks, relatives, rules, measure
            )
            cells.append(chosen)
            gains.append(gain)
            continue
        assert model is not None
        chosen, gain = _decide(
            spec,
            target,
            dtype,
            model,
            group,
            octaves,
            spans,
            logs,
            candidate,
            relatives,
            rules,
            neighbours,
        )
        cells.append(chosen)
        gains.append(gain)
    return Choice(
        spec.name,
        spec.version,
        target.name,
        dtype,
        _model_entry(model, measure is not None, measured_shapes),
        [e.shape for e in tuned],
        tuple(int(v) for v in low),
        size,
        tuple(cells),
        tuple(gains),
    )


def _model_entry(model: Model | None, measured: bool, shapes: int) -> dict[str, Any]:
    """What a grid's ``model`` says: the model's parameters, or for a grid decided by
    measuring its kind, the sample shapes of its cells that had a candidate (each measured
    until the cell's candidates dropped out) and the model it stands in for (if any)."""
    if not measured:
        assert model is not None
        return model.to_dict()
    return {
        "kind": KIND,
        "sample_shapes": shapes,
        "model": None if model is None else model.to_dict(),
    }


def choices_of(
    session: Session,
    rows: Sequence[tuple[WorkloadRow, TilingRow]],
    entries: Sequence[TableEntry],
    measure: MeasureCellFn | None = None,
) -> list[Choice]:
    """Each current-version (op, target, dtype) group's grid, from a model of the op fitted on
    every measured record of its current-version workloads in ``rows``; with ``measure``
    decided by measuring each cell on the target instead (a grid even where no model fits, its
    basis in its model entry: :mod:`tilewise.export._kept_grids`). Without ``measure``, a grid
    measured before from the same tuned shapes and tilings, kept in the database, comes first:
    the op's records are read and its model fitted only for groups without one."""
    from tilewise.export._kept_grids import grid_basis, kept_grid, toolchains_of, with_basis
    from tilewise.kernels.ops import get_op
    from tilewise.kernels.targets import get_target

    toolchains = toolchains_of(rows)
    by_op: dict[str, list[WorkloadRow]] = {}
    for w, _ in rows:
        try:
            spec = get_op(w.op)
            get_target(w.target)
        except InputError:
            continue
        if w.op_version == spec.version:
            by_op.setdefault(w.op, []).append(w)
    out: list[Choice] = []
    for op, workloads in sorted(by_op.items()):
        spec = get_op(op)
        groups: dict[tuple[str, str], list[TableEntry]] = {}
        for e in entries:
            if e.op == op and e.op_version == spec.version:
                groups.setdefault((e.target, e.dtype), []).append(e)
        bases = {key: grid_basis(members, toolchains) for key, members in groups.items()}
        kept: dict[tuple[str, str], Choice] = {}
        if measure is None:
            for (target, dtype), basis in bases.items():
                grid = kept_grid(session, spec, target, dtype, basis)
                if grid is not None:
                    kept[(target, dtype)] = grid
        model = _op_model(session, spec, workloads) if len(kept) < len(groups) else None
        for (target, dtype), members in sorted(groups.items()):
            if (target, dtype) in kept:
                out.append(kept[(target, dtype)])
                continue
            if measure is None and model is None:
                continue
            grid = build_choice(spec, get_target(target), dtype, members, model, measure=measure)
            if grid is not None:
                basis = bases[(target, dtype)]
                out.append(grid if measure is None else with_basis(grid, basis))
    return out


def _op_model(session: Session, spec: OpSpec, workloads: Sequence[WorkloadRow]) -> Model | None:
    """The latency model of ``spec`` fitted on every measured record of ``workloads``: each
    record's time, and each tune's side-by-side re-measures against its default; None where
    the records do not allow one."""
    from tilewise.export._model import (
        Pair,
        Sample,
        features,
        fit_model,
        measured_records,
        thread_units,
    )
    from tilewise.kernels.targets import get_target

    measured = {w.id: measured_records(session, w.id) for w in workloads}
    units = thread_units(workloads, measured)
    samples, pairs = [], []
    for w in workloads:
        profile = get_target(w.target)
        group = f"{profile.name}/{w.dtype}"
        default = spec.default_tiling(w.shape, w.dtype, profile)
        default_key = default.key()
        found = measured[w.id]
        for tiling, latency in found.latencies.items():
            x = features(spec, tiling, w.shape, w.dtype, profile, units.get(group))
            if x is not None:
                is_default = tiling.key() == default_key
                samples.append(Sample(group, w.shape, x, math.log(latency), is_default))
        base = found.remeasured.get(default)
        x_default = features(spec, default, w.shape, w.dtype, profile, units.get(group))
        if base is None or x_default is None:
            continue
        for tiling, latency in found.remeasured.items():
            x = features(spec, tiling, w.shape, w.dtype, profile, units.get(group))
            if tiling != default and x is not None:
                pairs.append(Pair(group, w.shape, x, x_default, math.log(latency / base)))
    model = fit_model(samples, pairs)
    return None if model is None else replace(model, units=units)


# -- reading -------------------------------------------------------------------------------------
def parse_choices(raw: object, where: str = "choices") -> tuple[list[Choice], list[str]]:
    """The valid grids of a document's ``choices`` (absent: none), and one message per grid
    left out."""
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], [f"{where}: expected a list, got {type(raw).__name__}"]
    found, rejected = [], []
    for i, item in enumerate(raw):
        try:
            found.append(_choice(item, f"{where}[{i}]"))
        except InputError as exc:
            rejected.append(str(exc))
    return found, rejected


def _ints(value: object, where: str, low: int, high: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and low <= v <= high for v in value
    ):
        raise InputError(f"{where}: expected a list of integers in {low}..{high}")
    return tuple(value)


def _choice(item: object, where: str) -> Choice:
    if not isinstance(item, dict):
        raise InputError(f"{where}: expected an object")
    names = {}
    for key in ("op", "op_version", "target", "dtype"):
        if not isinstance(item.get(key), str):
            raise InputError(f"{where}.{key}: expected a string")
        names[key] = item[key]
    model = item.get("model")
    if not isinstance(model, dict):
        raise InputError(f"{where}.model: expected an object")
    shapes_raw = item.get("shapes")
    if not isinstance(shapes_raw, list) or not shapes_raw:
        raise InputError(f"{where}.shapes: expected a non-empty list")
    shapes = []
    for j, s in enumerate(shapes_raw):
        if not isinstance(s, dict) or not all(
            isinstance(k, str)
            and isinstance(v, int)
            and not isinstance(v, bool)
            and 0 <= v <= MAX_DIM
            for k, v in s.items()
        ):
            raise InputError(f"{where}.shapes[{j}]: expected dims mapped to integers")
        shapes.append(Shape(s))
    low = _ints(item.get("low"), f"{where}.low", 0, 64)
    size = _ints(item.get("size"), f"{where}.size", 1, 65)
    if len(low) != len(size) or math.prod(size) > MAX_CELLS:
        raise InputError(f"{where}: low and size must be as long, at most {MAX_CELLS} cells")
    cells = _ints(item.get("cells"), f"{where}.cells", -1, len(shapes) - 1)
    gains_raw = item.get("gains")
    if (
        not isinstance(gains_raw, list)
        or len(cells) != math.prod(size)
        or len(gains_raw) != len(cells)
    ):
        raise InputError(f"{where}: cells and gains must hold one value per cell")
    gains: list[float | None] = []
    for g in gains_raw:
        if g is not None and (
            isinstance(g, bool) or not isinstance(g, int | float) or not 0 < g < math.inf
        ):
            raise InputError(f"{where}.gains: expected positive numbers or null")
        gains.append(None if g is None else float(g))
    return Choice(
        names["op"],
        names["op_version"],
        names["target"],
        names["dtype"],
        model,
        shapes,
        low,
        size,
        cells,
        tuple(gains),
    )
