"""A portfolio of tilings by greedy set cover, over a matrix of measured latencies.

The universe is a table's tuned shapes; each candidate tiling (a tuned shape's best, in the
form that carries over, or the op's default) *covers* the shapes where it was measured within
``within`` of that shape's own tuned latency. :func:`greedy_cover` picks, up to ``k`` times,
the candidate covering the most shapes not covered yet (ties: the one leaving the lower mean
slowdown over all shapes, then the earlier candidate) and stops once every shape is covered or
no candidate covers another; the first pick is made even when none covers any shape. A
candidate not measured at a shape (``None``) does not cover it and is never assigned to it by
measurement (:func:`assign`).

Pure arithmetic on lists: no database, no op specs (:mod:`tilewise.export._portfolio` builds the
matrix from the records).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: ``latency[s][c]``: candidate c's measured latency at shape s (µs), None where not measured.
Matrix = Sequence[Sequence[float | None]]


def _ratio(latency: Matrix, optimum: Sequence[float], s: int, c: int) -> float | None:
    value = latency[s][c]
    return None if value is None else value / optimum[s]


def _best_ratios(latency: Matrix, optimum: Sequence[float], chosen: Sequence[int]) -> list[float]:
    """Per shape, the least measured slowdown among ``chosen`` (inf where none was measured)."""
    out = []
    for s in range(len(optimum)):
        ratios = [r for c in chosen if (r := _ratio(latency, optimum, s, c)) is not None]
        out.append(min(ratios, default=math.inf))
    return out


def _mean_slowdown(ratios: Sequence[float]) -> float:
    """The mean over shapes with a measurement, and the count of those without (unmeasured
    shapes weigh more than any measured slowdown in comparisons)."""
    measured = [r for r in ratios if math.isfinite(r)]
    missing = len(ratios) - len(measured)
    return missing * 1e9 + (statistics.fmean(measured) if measured else 0.0)


def greedy_cover(latency: Matrix, optimum: Sequence[float], *, within: float, k: int) -> list[int]:
    """Up to ``k`` candidate indices, in the order picked (see the module docstring).

    Raises:
        ValueError: ``k`` below 1, ``within`` negative, or rows of unequal length.
    """
    if k < 1:
        raise ValueError(f"a portfolio holds at least 1 tiling, got k={k}")
    if within < 0 or not math.isfinite(within):
        raise ValueError(f"within must be a finite share >= 0, got {within}")
    candidates = len(latency[0]) if latency else 0
    if any(len(row) != candidates for row in latency) or len(latency) != len(optimum):
        raise ValueError("the latency matrix needs one row per shape, one column per candidate")
    covers = [
        {
            s
            for s in range(len(optimum))
            if (r := _ratio(latency, optimum, s, c)) is not None and r <= 1 + within
        }
        for c in range(candidates)
    ]
    chosen: list[int] = []
    uncovered = set(range(len(optimum)))
    while uncovered and len(chosen) < k:
        best: tuple[int, float, int] | None = None
        for c in range(candidates):
            if c in chosen:
                continue
            gain = len(covers[c] & uncovered)
            mean = _mean_slowdown(_best_ratios(latency, optimum, [*chosen, c]))
            key = (-gain, mean, c)
            if best is None or key < best:
                best = key
        if best is None or (best[0] == 0 and chosen):
            break  # no candidate covers another shape (the first pick is made regardless)
        chosen.append(best[2])
        uncovered -= covers[best[2]]
    return chosen


def assign(latency: Matrix, optimum: Sequence[float], chosen: Sequence[int]) -> list[int | None]:
    """Per shape, the chosen candidate measured fastest there (ties: picked earlier); None
    where no chosen candidate was measured at the shape."""
    out: list[int | None] = []
    for s in range(len(optimum)):
        measured = [(r, i) for i, c in enumerate(chosen) if (r := latency[s][c]) is not None]
        out.append(chosen[min(measured)[1]] if measured else None)
    return out


@dataclass(frozen=True)
class Coverage:
    """How a portfolio does over the tuned shapes (slowdown: the assigned member's measured
    latency over the shape's tuned latency)."""

    k: int  # the portfolio size asked for
    members: int  # tilings picked (fewer than k once every shape is covered)
    shapes: int
    within: float
    covered: float  # share of shapes within ``within``
    within_2: float  # share within 2%
    within_5: float  # share within 5%
    worst: float | None  # largest slowdown among measured shapes
    mean: float | None  # mean slowdown among measured shapes
    unmeasured: int  # shapes where no member was measured

    def to_dict(self) -> dict[str, object]:
        return {
            "k": self.k,
            "members": self.members,
            "shapes": self.shapes,
            "within": self.within,
            "covered": self.covered,
            "within_2": self.within_2,
            "within_5": self.within_5,
            "worst_slowdown": self.worst,
            "mean_slowdown": self.mean,
            "unmeasured": self.unmeasured,
        }


def coverage(
    latency: Matrix, optimum: Sequence[float], *, within: float, k: int
) -> tuple[list[int], Coverage]:
    """The greedy portfolio of at most ``k`` and how it covers the shapes."""
    chosen = greedy_cover(latency, optimum, within=within, k=k)
    ratios = _best_ratios(latency, optimum, chosen)
    measured = [r for r in ratios if math.isfinite(r)]
    n = len(ratios)

    def share(level: float) -> float:
        return sum(1 for r in measured if r <= 1 + level) / n if n else 0.0

    return chosen, Coverage(
        k=k,
        members=len(chosen),
        shapes=n,
        within=within,
        covered=share(within),
        within_2=share(0.02),
        within_5=share(0.05),
        worst=max(measured) if measured else None,
        mean=statistics.fmean(measured) if measured else None,
        unmeasured=n - len(measured),
    )
