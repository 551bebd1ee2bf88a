"""Chart axes at round numbers: ticks at 1, 2 and 5 × 10^k, on a linear or a log scale.

An axis maps a value to a pixel between two ends; its range is widened to ticks so that both
ends carry a round label (a chart that ends at 47.3 µs reads worse than one that ends at 50).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Scale = Literal["linear", "log"]
SCALES: tuple[str, ...] = ("linear", "log")
MANTISSAS = (1, 2, 5)
#: More ticks than this on a log axis: only the powers of ten are kept.
MAX_LOG_TICKS = 8


def _round_step(span: float, max_ticks: int) -> float:
    """The smallest of 1, 2, 5 × 10^k that cuts ``span`` into at most ``max_ticks`` steps."""
    k = math.floor(math.log10(span / max_ticks)) if span > 0 else 0
    while True:
        for m in MANTISSAS:
            step = m * 10.0**k
            if span / step <= max_ticks + 1e-9:
                return step
        k += 1


def _decimals(step: float) -> int:
    return max(0, -math.floor(math.log10(step) + 1e-9))


def label(value: float, step: float | None = None) -> str:
    """A tick's text: as many decimals as the step needs (50, 2.5, 0.02), no float noise."""
    if step is None:  # a log tick: its own value is m × 10^k
        step = 10.0 ** math.floor(math.log10(value) + 1e-9) if value > 0 else 1.0
    return f"{value:.{_decimals(step)}f}"


def _log_candidates(lo: float, hi: float) -> list[float]:
    out: list[float] = []
    for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        out.extend(round(m * 10.0**k, 12) for m in MANTISSAS)
    return out


@dataclass(frozen=True)
class Axis:
    """Values ``lo``..``hi`` (already round) drawn from pixel ``start`` to pixel ``end``."""

    lo: float
    hi: float
    start: float
    end: float
    scale: Scale
    ticks: tuple[float, ...]
    labels: tuple[str, ...]

    def __call__(self, value: float) -> float:
        if self.scale == "log":
            t = (math.log10(value) - math.log10(self.lo)) / (
                math.log10(self.hi) - math.log10(self.lo)
            )
        else:
            t = (value - self.lo) / (self.hi - self.lo)
        return self.start + (self.end - self.start) * t


def axis(
    values: Sequence[float],
    start: float,
    end: float,
    *,
    scale: Scale = "linear",
    zero: bool = False,
    integer: bool = False,
    max_ticks: int = 6,
) -> Axis:
    """An axis over ``values`` with round ticks: on a linear scale from 0 (``zero``) or a round
    number below the smallest value; on a log scale (positive values only) from the largest
    1-2-5 tick at or below the smallest value to the smallest at or above the largest.
    ``integer``: linear ticks at whole numbers only (counts)."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; one of {', '.join(SCALES)}")
    if not values:
        raise ValueError("an axis needs at least one value")
    lo, hi = min(values), max(values)
    if scale == "log":
        if lo <= 0:
            raise ValueError(f"a log axis needs positive values, got {lo}")
        candidates = _log_candidates(lo, hi)
        lo_t = max(c for c in candidates if c <= lo * (1 + 1e-9))
        hi_t = min(c for c in candidates if c >= hi * (1 - 1e-9))
        if hi_t == lo_t:  # one value on a tick: the next tick up shows the scale
            hi_t = min(c for c in candidates if c > lo_t)
        ticks = [c for c in candidates if lo_t <= c <= hi_t]
        if len(ticks) > MAX_LOG_TICKS:
            decades = [c for c in ticks if math.isclose(math.log10(c) % 1, 0, abs_tol=1e-9)]
            ticks = [lo_t, *[c for c in decades if lo_t < c < hi_t], hi_t]
        return Axis(lo_t, hi_t, start, end, "log", tuple(ticks), tuple(label(t) for t in ticks))
    low = 0.0 if zero else lo
    if hi == low:
        hi = low + (abs(low) or 1.0)
    step = _round_step(hi - low, max_ticks)
    if integer:
        step = max(step, 1.0)
    lo_t = math.floor(low / step + 1e-9) * step
    hi_t = math.ceil(hi / step - 1e-9) * step
    count = round((hi_t - lo_t) / step)
    ticks = [round(lo_t + i * step, 12) for i in range(count + 1)]
    return Axis(
        lo_t, hi_t, start, end, "linear", tuple(ticks), tuple(label(t, step) for t in ticks)
    )
