"""One (op, target, dtype) of a loaded table: its entries indexed for the answers to shapes
nobody tuned, by the table's choice grid (:func:`chosen`) or by the nearest rule
(:func:`nearest`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from math import log2
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from tilewise.errors import TilewiseError
from tilewise.export import Choice, TableEntry, is_default_tiling
from tilewise.export._measured_cells import KIND as MEASURED
from tilewise.kernels.ops import OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.runtime._answer import Answer, Rule
from tilewise.runtime._cells import Cells
from tilewise.types import Shape

if TYPE_CHECKING:
    from tilewise.runtime._portfolio import Portfolio

_log = logging.getLogger("tilewise.runtime")

#: Entries from which a group indexes its nearest candidates per cell (:class:`Cells`).
NEAR_INDEX_ENTRIES = 256


class Group:
    """The entries of one (op, target, dtype), sorted by shape in dims order."""

    __slots__ = (
        "cache",
        "carry",
        "cells",
        "defaults",
        "dims",
        "dtype",
        "entries",
        "entry_logs",
        "entry_meta",
        "exact",
        "fast",
        "gains",
        "grid",
        "grid_rules",
        "key",
        "least",
        "logs",
        "misses",
        "ndims",
        "near",
        "portfolio",
        "profile",
        "relatives",
        "spec",
        "valid",
    )

    def __init__(
        self,
        spec: OpSpec,
        profile: TargetProfile,
        dtype: str,
        entries: list[TableEntry],
        choice: Choice | None = None,
    ) -> None:
        self.spec, self.profile, self.dtype, self.dims = spec, profile, dtype, spec.dims
        self.ndims = len(self.dims)
        # Whether the op checks shapes by OpSpec's rules alone (dims within their bounds), which
        # the table's first-time path checks inline.
        self.fast = type(spec).validate_shape is OpSpec.validate_shape
        self.least = tuple((d, spec.dim_floors.get(d, 1)) for d in self.dims)
        # The dict key of a shape: its value for one dim, else the tuple in dims order.
        self.key = itemgetter(*self.dims)
        self.entries = sorted(entries, key=lambda e: tuple(e.shape[d] for d in self.dims))
        self.carry = spec.carry_rules(dtype, profile)
        # OpSpec.valid of a carried tiling (its fields are the relative form's, checked at load).
        self.valid = spec.validator(dtype, profile)
        # Checked against the carry rules when the table loaded (TilingTable._foreign).
        self.relatives = [
            e.relative or self.carry.relative(e.tiling, e.shape) for e in self.entries
        ]
        # Whether each entry's tiling is its default: as the table says, else found out the
        # first time the entry is a candidate (a default tiling costs up to a millisecond).
        self.defaults: list[bool | None] = [e.is_default for e in self.entries]
        self.exact: dict[Any, Answer] = {
            self.key(e.shape): Answer(e.tiling, "exact", e.workload, e.latency_us, 0.0)
            for e in self.entries
        }
        # One contiguous column per dim: the nearest search is a few vector ops per column.
        self.logs = [
            np.array([spec.log_position(d, e.shape[d]) for e in self.entries], dtype=np.float64)
            for d in self.dims
        ]
        # The same by entry (the grid's answer reports its distance to the chosen entry), and
        # per dim what the first-time path needs: (name, least value).
        self.entry_logs = [tuple(float(c[i]) for c in self.logs) for i in range(len(self.entries))]
        self.entry_meta = [
            (self.exact[self.key(e.shape)].workload, e.latency_us) for e in self.entries
        ]
        # The nearest entry's candidates per octave cell, for a group large enough that
        # measuring the distance to every entry costs more.
        self.near = (
            Cells.build(
                self.least,
                [[e.shape[d] for e in self.entries] for d in self.dims],
                self.logs,
            )
            if len(self.entries) >= NEAR_INDEX_ENTRIES
            else None
        )
        # The table's load checked each entry's tiling at its own shape (checked_entry): the op's
        # footprint memo already holds the buffer plans that tilings carried from the entries
        # mostly repeat (a first-time answer checks one; a plan met first costs its buffers).
        # And what the op's default heuristic keeps for any shape: a first-time answer of the
        # default (predicted_default, kept_default, measured_slower) then pays only its own part.
        if self.entries:
            spec.warm_defaults(dtype, profile)
        self.cache: dict[Any, Answer] = {}
        # Asked shapes without an exact entry, by dict key: [count, source of the answer].
        self.misses: dict[Any, list[Any]] = {}
        # The choice grid: per dim (name, least value, lowest octave, octaves, stride), and per
        # cell the chosen entry's index (-1: the default) and the predicted gain.
        self.grid: tuple[tuple[str, int, int, int], ...] | None = None
        self.cells: list[int] = []
        self.gains: list[float | None] = []
        # The rules a grid's answers name: (a candidate chosen, the default kept).
        self.grid_rules: tuple[Rule, Rule] = ("chosen", "predicted_default")
        # The table's portfolio for the group (tilewise.runtime._portfolio.attach): it then
        # answers every shape.
        self.portfolio: Portfolio | None = None
        if choice is not None:
            self._index_choice(choice)

    def _index_choice(self, choice: Choice) -> None:
        """Map the grid's shapes to this group's entries; a grid naming a shape the group does
        not hold (an entry left out at load) is not used."""
        where = {self.key(e.shape): i for i, e in enumerate(self.entries)}
        indices = []
        for shape in choice.shapes:
            index = where.get(self.key(shape)) if set(shape) == set(self.dims) else None
            if index is None:
                _log.warning(
                    "%s %s %s: the choice grid names the shape %s, not in the table: "
                    "answering by the nearest rule",
                    self.spec.name,
                    self.profile.name,
                    self.dtype,
                    dict(shape),
                )
                return
            indices.append(index)
        if len(choice.low) != self.ndims:
            return
        self.grid = tuple(
            (d, self.spec.dim_floors.get(d, 1), low, size)
            for d, low, size in zip(self.dims, choice.low, choice.size, strict=True)
        )
        self.cells = [-1 if c < 0 else indices[c] for c in choice.cells]
        self.gains = list(choice.gains)
        if choice.model.get("kind") == MEASURED:
            self.grid_rules = ("measured_faster", "measured_default")


def chosen(
    group: Group, asked: Shape, values: Mapping[str, int], max_candidates: int
) -> Answer | None:
    """The grid's answer for ``asked`` (the grid exists; ``values`` holds the same dims, read
    faster: a plain dict where the caller has one); the nearest rule's when the chosen tiling
    is not valid at ``asked``."""
    index = 0
    assert group.grid is not None
    positions = []
    for dim, least, low, size in group.grid:
        value = values[dim] + 1 - least
        positions.append(value)
        o = value.bit_length() - 1 - low
        index = index * size + (0 if o < 0 else size - 1 if o >= size else o)
    pick, gain = group.cells[index], group.gains[index]
    spec, dtype, profile = group.spec, group.dtype, group.profile
    if pick < 0:
        default = spec.default_tiling(asked, dtype, profile)
        return Answer(default, "default", None, None, None, group.grid_rules[1], gain)
    tiling = group.carry.derive(group.relatives[pick], asked)
    try:
        valid = tiling is not None and group.valid(tiling, asked)
    except TilewiseError:
        valid = False
    if not valid or tiling is None:
        return nearest(group, asked, max_candidates)
    workload, latency_us = group.entry_meta[pick]
    away = 0.0
    # Both one per dim: not checked again (strict zip costs a tenth of a microsecond here).
    for tuned_log, value in zip(group.entry_logs[pick], positions, strict=False):
        away += abs(tuned_log - log2(value))  # OpSpec.log_position: log2(value + 1 - least)
    return Answer(tiling, "nearest", workload, latency_us, away, group.grid_rules[0], gain)


def nearest(group: Group, asked: Shape, max_candidates: int) -> Answer | None:
    """The nearest rule (see :mod:`tilewise.runtime`); None without a valid candidate."""
    if not group.entries:
        return None
    values = asked._index if type(asked) is Shape else asked  # type: ignore[attr-defined]
    # OpSpec.log_position of each dim, inline: log2(value + 1 - least).
    positions = [log2(values[dim] + 1 - least) for dim, least in group.least]
    if group.near is not None:
        # The nearest entry from its cell's candidates: usually the answer, else the walk below
        # (which meets it first again).
        first = group.near.first(values, positions)
        if first is not None:
            answer = _candidate(group, asked, *first)
            if answer is not None:
                return answer
    # Column by column, in dims order: the same sum, in the same order, as the C header's.
    distance = np.abs(group.logs[0] - positions[0])
    for column, position in zip(group.logs[1:], positions[1:], strict=True):
        distance += np.abs(column - position)
    for index, away in nearest_first(distance, max_candidates):
        answer = _candidate(group, asked, index, away)
        if answer is not None:
            return answer
    return None


def _candidate(group: Group, asked: Shape, index: int, away: float) -> Answer | None:
    """The answer the nearest rule gives by the entry ``index`` (``away`` from ``asked``); None
    when its tiling, carried to ``asked``, is not valid there."""
    entry = group.entries[index]
    workload, latency_us = group.entry_meta[index]
    is_default = group.defaults[index]
    if is_default is None:
        is_default = group.defaults[index] = is_default_tiling(entry)
    if is_default or entry.carry_slower:
        return Answer(
            group.spec.default_tiling(asked, group.dtype, group.profile),
            "default",
            workload,
            latency_us,
            away,
            "kept_default" if is_default else "measured_slower",
            entry.carry_gain,
        )
    tiling = group.carry.derive(group.relatives[index], asked)
    try:
        valid = tiling is not None and group.valid(tiling, asked)
    except TilewiseError:
        valid = False
    if valid and tiling is not None:
        return Answer(tiling, "nearest", workload, latency_us, away, "carried", entry.carry_gain)
    return None


def nearest_first(distance: np.ndarray, limit: int) -> Iterator[tuple[int, float]]:
    """(index, distance) of up to ``limit`` entries in the order of a stable sort of
    ``distance`` (ties: the smaller index first), one argmin at a time. The walk usually stops
    at the first entry, and a full sort of a 10,000-entry group took 650 µs where an argmin
    takes a few. Overwrites ``distance``."""
    for _ in range(min(limit, len(distance))):
        index = int(distance.argmin())  # the first minimum
        yield index, float(distance[index])
        distance[index] = np.inf
