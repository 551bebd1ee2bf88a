"""The per-op page: the stored speedup of every tuned shape of one op, as a chart against the
shape and as a table.

The shape axis is the one dim that varies among the op's tuned shapes when only one does (the
tokens of a model's layers, say), else the product of the dims that vary (each counted as at
least 1, so that a zero padding does not zero a size): a size that orders the shapes. It is
drawn on a log scale when the sizes span ten times or more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape
from sqlalchemy.orm import Session

from tilewise import store
from tilewise.api.axes import axis
from tilewise.api.errors import NotFound
from tilewise.api.listing import Filters, choices
from tilewise.errors import InputError
from tilewise.kernels.ops import get_op
from tilewise.store import TilingRow, WorkloadRow
from tilewise.types import Shape

#: One colour per (target, dtype) series, in turn.
COLOURS = ("#2563eb", "#dc2626", "#15803d", "#9333ea", "#ea580c", "#0891b2")
#: Sizes spanning this ratio or more are drawn on a log axis.
LOG_RATIO = 10.0


@dataclass(frozen=True)
class Point:
    workload: WorkloadRow
    tiling: TilingRow
    size: int  # its place on the shape axis

    @property
    def series(self) -> str:
        return f"{self.workload.target} {self.workload.dtype}"


def shape_axis(dims: Sequence[str], shapes: Sequence[Shape]) -> tuple[str, list[str]]:
    """The shape axis's title and the dims it multiplies (see the module's docstring)."""
    varying = [d for d in dims if len({s.get(d) for s in shapes}) > 1]
    if len(varying) == 1:
        return varying[0], varying
    if not varying:
        return f"{dims[0]}", [dims[0]]
    return f"{'·'.join(varying)} (product)", varying


def _size(shape: Shape, dims: Sequence[str]) -> int:
    return math.prod(max(1, int(shape.get(d, 1))) for d in dims)


def op_page(session: Session, op: str, f: Filters) -> dict[str, Any]:
    try:
        spec = get_op(op)
    except InputError as exc:
        raise NotFound(str(exc)) from exc
    rows = store.best_tilings(session, op=spec.name, target=f.target, dtype=f.dtype)
    title, dims = shape_axis(spec.dims, [w.shape for w, _ in rows])
    points = sorted(
        (Point(w, t, _size(w.shape, dims)) for w, t in rows),
        key=lambda p: (p.size, p.workload.shape.key(), p.series),
    )
    return {
        "op": spec.name,
        "filters": f,
        "choices": choices(),
        "axis_title": title,
        "points": points,
        "unmeasured": sum(1 for p in points if p.tiling.speedup is None),
        "chart": speedup_chart(points, title),
    }


def compact(value: float) -> str:
    """A size tick's text: 500, 2k, 10k, 1M (a shape axis's round numbers are large)."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:g}{suffix}"
    return f"{value:g}"


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def speedup_chart(points: Sequence[Point], x_title: str, *, width: int = 760) -> Markup:
    """Speedup over the default tiling against the shape axis, one line per target and dtype;
    each point links to its workload's page. Points without a speedup are left out."""
    shown = [p for p in points if p.tiling.speedup is not None]
    if not shown:
        return Markup('<p class="muted">No tuned shape has a measured speedup yet.</p>')
    height, left, right, top, bottom = 340, 64, 32, 16, 76
    pw, ph = width - left - right, height - top - bottom
    sizes = [p.size for p in shown]
    log_x = max(sizes) / min(sizes) >= LOG_RATIO
    x = axis(sizes, left, left + pw, scale="log" if log_x else "linear", max_ticks=8)
    y = axis([1.0, *(p.tiling.speedup or 1.0 for p in shown)], top + ph, top, zero=True)
    parts = [
        f'<svg class="speedups" data-xscale="{x.scale}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="speedup against shape">',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ddd"/>',
    ]
    for v, text in zip(y.ticks, y.labels, strict=True):
        parts.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{_fmt(y(v))}" y2="{_fmt(y(v))}" '
            f'stroke="#eee"/><text class="ytick" x="{left - 6}" y="{_fmt(y(v) + 4)}" '
            f'text-anchor="end" font-size="11">{text}</text>'
        )
    for v in x.ticks:
        text = compact(v)
        parts.append(
            f'<line x1="{_fmt(x(v))}" x2="{_fmt(x(v))}" y1="{top}" y2="{top + ph}" '
            f'stroke="#eee"/><text class="xtick" x="{_fmt(x(v))}" y="{top + ph + 16}" '
            f'text-anchor="middle" font-size="11">{text}</text>'
        )
    parts.append(
        f'<line class="parity" x1="{left}" x2="{left + pw}" y1="{_fmt(y(1.0))}" '
        f'y2="{_fmt(y(1.0))}" stroke="#6b7280" stroke-dasharray="6 4"/>'
        f'<text x="{left + pw / 2}" y="{top + ph + 34}" text-anchor="middle" font-size="12">'
        f"{escape(x_title)}{', log' if log_x else ''}</text>"
        f'<text x="14" y="{top + ph / 2}" text-anchor="middle" font-size="12" '
        f'transform="rotate(-90 14 {top + ph / 2})">speedup over default (×)</text>'
    )
    series: dict[str, list[Point]] = {}
    for p in shown:
        series.setdefault(p.series, []).append(p)
    legend_x = float(left)
    for i, (name, members) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        line = " ".join(f"{_fmt(x(p.size))},{_fmt(y(p.tiling.speedup or 1.0))}" for p in members)
        parts.append(
            f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="1.5" '
            f'points="{line}"/>'
        )
        for p in members:
            speedup = p.tiling.speedup or 1.0
            parts.append(
                f'<a href="/workloads/{p.workload.key}"><circle class="pt" '
                f'cx="{_fmt(x(p.size))}" cy="{_fmt(y(speedup))}" r="4" fill="{colour}">'
                f"<title>{escape(p.workload.shape.key())} {escape(name)}: "
                f"{speedup:.2f}×</title></circle></a>"
            )
        parts.append(
            f'<circle cx="{legend_x + 5}" cy="{height - 14}" r="4" fill="{colour}"/>'
            f'<text class="legend-entry" x="{legend_x + 14}" y="{height - 10}" '
            f'font-size="11">{escape(name)}</text>'
        )
        legend_x += 30 + 6.2 * len(name)
    parts.append("</svg>")
    return Markup("".join(parts))
