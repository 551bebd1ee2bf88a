"""Tuning curves as inline SVG, drawn on the server (no JavaScript, no front-end build).

A curve is the best-so-far latency against the number of evaluations: the ``ok`` records of a
workload in id order, leaving out re-measures (``source == "remeasure"``, measured again after
the search, not part of it) and model predictions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from tilewise.store import RecordRow, RecordSource, RecordStatus

EXCLUDED_SOURCES = frozenset({RecordSource.REMEASURE, RecordSource.PREDICTED})


@dataclass(frozen=True)
class Curve:
    latencies: tuple[float, ...]  # each evaluation's latency, µs
    best: tuple[float, ...]  # best so far after each evaluation, µs

    @classmethod
    def of(cls, records: Sequence[RecordRow]) -> Curve:
        latencies = tuple(
            r.latency_us
            for r in records
            if r.status is RecordStatus.OK
            and r.latency_us is not None
            and r.source not in EXCLUDED_SOURCES
        )
        best: list[float] = []
        for value in latencies:
            best.append(min(value, best[-1]) if best else value)
        return cls(latencies, tuple(best))

    def __len__(self) -> int:
        return len(self.best)


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def sparkline(curve: Curve, *, width: int = 120, height: int = 24) -> Markup:
    """A tiny best-so-far line for a table cell; empty markup for fewer than two points."""
    if len(curve) < 2:
        return Markup("")
    lo, hi = min(curve.best), max(curve.best)
    span = (hi - lo) or 1.0
    step = (width - 2) / (len(curve) - 1)
    points = " ".join(  # the slowest at the top, as in the full chart
        f"{_fmt(1 + i * step)},{_fmt(1 + (height - 2) * (hi - v) / span)}"
        for i, v in enumerate(curve.best)
    )
    return Markup(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="best latency over {len(curve)} evaluations">'
        f'<polyline fill="none" stroke="#2563eb" stroke-width="1.5" points="{points}"/></svg>'
    )


def chart(
    curve: Curve,
    *,
    default_us: float | None = None,
    width: int = 720,
    height: int = 320,
) -> Markup:
    """Best-so-far latency (line) and every evaluation (dots) against evaluations, with the
    default tiling's latency as a dashed line when known."""
    if not curve.best:
        return Markup('<p class="muted">No measured evaluations yet.</p>')
    left, right, top, bottom = 64, 16, 16, 40
    pw, ph = width - left - right, height - top - bottom
    values = [*curve.latencies, *([default_us] if default_us else [])]
    lo, hi = 0.0, max(values) * 1.05
    n = len(curve)

    def x(i: int) -> float:  # evaluation i (0-based) -> pixel
        return left + (pw * i / (n - 1) if n > 1 else pw / 2)

    def y(v: float) -> float:
        return top + ph * (1 - (v - lo) / (hi - lo))

    parts = [
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="best-so-far latency against evaluations">',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ddd"/>',
    ]
    for k in range(5):  # y grid and labels
        v = lo + (hi - lo) * k / 4
        parts.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{_fmt(y(v))}" y2="{_fmt(y(v))}" '
            f'stroke="#eee"/><text x="{left - 6}" y="{_fmt(y(v) + 4)}" text-anchor="end" '
            f'font-size="11">{v:.3g}</text>'
        )
    for i in sorted({0, (n - 1) // 2, n - 1}):  # x labels: first, middle, last
        parts.append(
            f'<text x="{_fmt(x(i))}" y="{height - bottom + 16}" text-anchor="middle" '
            f'font-size="11">{i + 1}</text>'
        )
    parts.append(
        f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle" font-size="12">'
        f"evaluations</text>"
        f'<text x="14" y="{top + ph / 2}" text-anchor="middle" font-size="12" '
        f'transform="rotate(-90 14 {top + ph / 2})">latency (µs)</text>'
    )
    if default_us:
        parts.append(
            f'<line class="default" x1="{left}" x2="{left + pw}" y1="{_fmt(y(default_us))}" '
            f'y2="{_fmt(y(default_us))}" stroke="#dc2626" stroke-dasharray="6 4"/>'
            f'<text x="{left + pw - 4}" y="{_fmt(y(default_us) - 4)}" text-anchor="end" '
            f'font-size="11" fill="#dc2626">default {default_us:.1f} µs</text>'
        )
    parts.extend(
        f'<circle cx="{_fmt(x(i))}" cy="{_fmt(y(v))}" r="2.5" fill="#93c5fd"/>'
        for i, v in enumerate(curve.latencies)
    )
    steps = " ".join(f"{_fmt(x(i))},{_fmt(y(v))}" for i, v in enumerate(curve.best))
    parts.append(
        f'<polyline class="best" fill="none" stroke="#2563eb" stroke-width="2" points="{steps}"/>'
    )
    parts.append("</svg>")
    return Markup("".join(parts))
