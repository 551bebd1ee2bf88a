"""The nearest tuned shape without measuring the distance to every entry of a group.

The nearest rule measures the log2 (L1) distance from the asked shape to each tuned shape and
takes the first minimum. Over 10,000 entries that is tens of microseconds of vector work per
first-time shape; :class:`Cells` answers the same index from a few hundred candidates.

The log space of a group is cut into cells one octave wide per dim (the integer part of each
log position, so the asked shape's cell is found from its values' bit lengths, exactly). For
each cell, the candidates are the entries that can be nearest to some point of it: every
entry whose distance to the cell (its nearest point) is at most the least, over the entries,
of the distance to the cell's farthest point. An entry left out is farther from every point of
the cell than some other entry is from every point, so it is never the nearest nor tied with
it. Within a cell's candidates (in entry order) the distance is summed as the full search sums
it (the same float operations, dims in order), so the first minimum is the same entry.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import numpy as np

__all__ = ["Cells"]

#: Cells per group at most (a group of many dims or a wide spread of sizes has no index) and
#: candidates kept over all cells at most (3 columns of float64 each, and an index).
MAX_CELLS = 4096
MAX_KEPT = 1_000_000
#: Slack for rounding in the bounds (distances are sums of a few log2 values below 64).
_SLACK = 1e-9
_abs = np.abs


class Cells:
    """The candidates of each octave cell of one group; see the module docstring."""

    __slots__ = ("axes", "candidates", "dims", "low", "size")

    def __init__(
        self,
        dims: tuple[tuple[str, int], ...],
        low: tuple[int, ...],
        size: tuple[int, ...],
        candidates: list[tuple[np.ndarray, list[np.ndarray]]],
    ) -> None:
        #: Per dim (name, least value), the lowest octave and the number of octaves.
        self.dims, self.low, self.size = dims, low, size
        self.axes = tuple(
            (dim, least, lo, n) for (dim, least), lo, n in zip(dims, low, size, strict=True)
        )
        #: Per cell (in row-major order of the octaves): the candidates' entry indices,
        #: ascending, and their log positions, one column per dim.
        self.candidates = candidates

    @classmethod
    def build(
        cls, dims: tuple[tuple[str, int], ...], values: list[list[int]], logs: list[np.ndarray]
    ) -> Cells | None:
        """The index of a group whose entries hold ``values`` (per dim, in entry order) at the
        log positions ``logs`` (per dim); None where the cells or the candidates would be too
        many."""
        octaves = [
            [(v + 1 - least).bit_length() - 1 for v in column]
            for (_, least), column in zip(dims, values, strict=True)
        ]
        low = tuple(min(o) - 1 for o in octaves)
        size = tuple(max(o) - lo + 2 for o, lo in zip(octaves, low, strict=True))
        if not logs or len(logs[0]) == 0 or math.prod(size) > MAX_CELLS:
            return None
        near, far = [], []
        for column, lo, n in zip(logs, low, size, strict=True):
            start = np.arange(lo, lo + n, dtype=np.float64)[:, None]
            # Per octave of this dim, each entry's distance to the octave's nearest and farthest
            # point along the dim.
            near.append(np.maximum(np.maximum(start - column, column - (start + 1)), 0.0))
            far.append(np.maximum(np.abs(column - start), np.abs(column - (start + 1))))
        candidates = []
        kept = 0
        for cell in itertools.product(*(range(n) for n in size)):
            lower = near[0][cell[0]].copy()
            upper = far[0][cell[0]].copy()
            for d in range(1, len(cell)):
                lower += near[d][cell[d]]
                upper += far[d][cell[d]]
            index = np.flatnonzero(lower <= upper.min() + _SLACK)
            kept += len(index)
            if kept > MAX_KEPT:
                return None
            candidates.append((index, [np.ascontiguousarray(c[index]) for c in logs]))
        return cls(dims, low, size, candidates)

    def first(self, values: Mapping[str, int], positions: list[float]) -> tuple[int, float] | None:
        """(index, distance) of the entry nearest to the shape of ``values`` (the first of
        equals), whose log positions are ``positions`` (per dim); None for a shape outside the
        cells."""
        cell = 0
        for dim, least, low, size in self.axes:
            octave = (values[dim] + 1 - least).bit_length() - 1 - low
            if octave < 0 or octave >= size:
                return None
            cell = cell * size + octave
        index, columns = self.candidates[cell]
        distance = _abs(columns[0] - positions[0])
        for i in range(1, len(columns)):
            distance += _abs(columns[i] - positions[i])
        k = distance.argmin()
        return int(index[k]), float(distance[k])
