"""Tuning curves as inline SVG, drawn on the server (no JavaScript, no front-end build).

A curve is the best-so-far search time against the number of evaluations: the ``ok`` records
of a workload in id order that the search made (``source`` ``default`` or ``search``). The
re-measures (``source == "remeasure"``: the side-by-side runs after a search that pick and
store the winner) are no evaluations: the chart draws them as their own marks, just after the
evaluations of the run that made them, with the stored winner's and the default's re-measured
latencies as lines, so that the best search time is never read as the stored latency. Model
predictions are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from tilewise.api.axes import Scale, axis
from tilewise.store import RecordRow, RecordSource, RecordStatus

EVALUATION_SOURCES = frozenset({RecordSource.DEFAULT, RecordSource.SEARCH})


@dataclass(frozen=True)
class Remeasure:
    after: int  # evaluations made before it: it is drawn just after the last of them
    latency_us: float
    record_id: int
    default: bool  # a re-measure of the default tiling


@dataclass(frozen=True)
class Curve:
    latencies: tuple[float, ...]  # each evaluation's search time, µs
    best: tuple[float, ...]  # best search time so far after each evaluation, µs
    defaults: tuple[int, ...] = ()  # the evaluations (0-based) of the default tiling
    remeasures: tuple[Remeasure, ...] = ()

    @classmethod
    def of(cls, records: Sequence[RecordRow]) -> Curve:
        ok = [r for r in records if r.status is RecordStatus.OK and r.latency_us is not None]
        default_keys = {r.tiling_key for r in ok if r.source is RecordSource.DEFAULT}
        latencies: list[float] = []
        defaults: list[int] = []
        remeasures: list[Remeasure] = []
        for r in ok:
            assert r.latency_us is not None
            if r.source in EVALUATION_SOURCES:
                if r.source is RecordSource.DEFAULT:
                    defaults.append(len(latencies))
                latencies.append(r.latency_us)
            elif r.source is RecordSource.REMEASURE:
                remeasures.append(
                    Remeasure(len(latencies), r.latency_us, r.id, r.tiling_key in default_keys)
                )
        best: list[float] = []
        for value in latencies:
            best.append(min(value, best[-1]) if best else value)
        return cls(tuple(latencies), tuple(best), tuple(defaults), tuple(remeasures))

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


#: Colours of the marks (also in the legend).
SEARCH, DEFAULT, REMEASURE, WINNER, BEST = "#93c5fd", "#dc2626", "#ea580c", "#15803d", "#2563eb"


def _path(*points: tuple[float, float]) -> str:
    return "M" + " L".join(f"{_fmt(px)},{_fmt(py)}" for px, py in points) + " Z"


def _marker(kind: str, x: float, y: float, *, cls: str = "", tip: str = "") -> str:
    """One mark: ``search`` a dot, ``default`` a diamond, ``remeasure``/``remeasure-default`` an
    open triangle, ``winner`` a filled triangle."""
    attrs = f' class="{cls}"' if cls else ""
    title = f"<title>{tip}</title>" if tip else ""
    if kind == "search":
        return (
            f'<circle{attrs} cx="{_fmt(x)}" cy="{_fmt(y)}" r="2.5" fill="{SEARCH}">{title}</circle>'
        )
    if kind == "default":
        d = _path((x, y - 4), (x + 4, y), (x, y + 4), (x - 4, y))
        return f'<path{attrs} d="{d}" fill="{DEFAULT}">{title}</path>'
    d = _path((x, y - 5), (x + 4.5, y + 3.5), (x - 4.5, y + 3.5))
    if kind == "winner":
        return f'<path{attrs} d="{d}" fill="{WINNER}" stroke="{WINNER}">{title}</path>'
    colour = DEFAULT if kind == "remeasure-default" else REMEASURE
    return f'<path{attrs} d="{d}" fill="#fff" stroke="{colour}" stroke-width="1.5">{title}</path>'


def _line(x: float, y: float, colour: str, dash: str = "") -> str:
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<line x1="{_fmt(x)}" x2="{_fmt(x + 18)}" y1="{_fmt(y)}" y2="{_fmt(y)}" '
        f'stroke="{colour}" stroke-width="2"{dashed}/>'
    )


def _legend(entries: list[tuple[str, str]], left: float, y: float) -> str:
    """A row of (mark, text) entries; marks are ``_marker`` kinds or ``line:COLOUR[:DASH]``."""
    parts, x = ['<g class="legend" font-size="11">'], left
    for kind, text in entries:
        if kind.startswith("line:"):
            _, colour, *dash = kind.split(":")
            parts.append(_line(x, y, colour, dash[0] if dash else ""))
        else:
            parts.append(_marker(kind, x + 9, y))
        parts.append(
            f'<text class="legend-entry" x="{_fmt(x + 22)}" y="{_fmt(y + 4)}">{text}</text>'
        )
        x += 30 + 6.2 * len(text)
    parts.append("</g>")
    return "".join(parts)


def chart(
    curve: Curve,
    *,
    default_us: float | None = None,
    winner_us: float | None = None,
    winner_record: int | None = None,
    scale: Scale = "linear",
    width: int = 760,
    height: int = 380,
) -> Markup:
    """Every evaluation's search time (dots; the default tiling's as diamonds) and the best
    search time so far (line) against evaluations; the re-measures after each run (triangles,
    the stored winner's filled) and, when known, the stored winner's and the default's
    re-measured latencies (solid green and dashed red lines). ``scale`` is the latency axis's:
    ``linear`` from 0, or ``log``; both ticked at 1, 2, 5 × 10^k."""
    if not curve.best:
        return Markup('<p class="muted">No measured evaluations yet.</p>')
    left, right, top, bottom = 64, 16, 16, 92
    pw, ph = width - left - right, height - top - bottom
    values = [
        *curve.latencies,
        *(m.latency_us for m in curve.remeasures),
        *(v for v in (default_us, winner_us) if v),
    ]
    if scale == "log" and min(values) <= 0:  # a zero time (a broken timer) has no log
        scale = "linear"
    y = axis(values, top + ph, top, scale=scale, zero=True)
    n = len(curve)
    x = axis(
        [0, n, *(m.after + 0.5 for m in curve.remeasures)],
        left,
        left + pw,
        zero=True,
        integer=True,
        max_ticks=10,
    )
    parts = [
        f'<svg class="chart" data-scale="{scale}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="search times and best so far against evaluations, and the re-measures">',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ddd"/>',
    ]
    for v, text in zip(y.ticks, y.labels, strict=True):
        parts.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{_fmt(y(v))}" y2="{_fmt(y(v))}" '
            f'stroke="#eee"/><text class="ytick" x="{left - 6}" y="{_fmt(y(v) + 4)}" '
            f'text-anchor="end" font-size="11">{text}</text>'
        )
    for v, text in zip(x.ticks, x.labels, strict=True):
        parts.append(
            f'<text class="xtick" x="{_fmt(x(v))}" y="{top + ph + 16}" text-anchor="middle" '
            f'font-size="11">{text}</text>'
        )
    parts.append(
        f'<text x="{left + pw / 2}" y="{top + ph + 34}" text-anchor="middle" font-size="12">'
        f"evaluations</text>"
        f'<text x="14" y="{top + ph / 2}" text-anchor="middle" font-size="12" '
        f'transform="rotate(-90 14 {top + ph / 2})">latency (µs{", log" if scale == "log" else ""})'
        f"</text>"
    )
    marks: list[tuple[str, str]] = [("search", "search time")]
    if curve.defaults:
        marks.append(("default", "default (search)"))
    legend: list[tuple[str, str]] = [(f"line:{BEST}", "best search time so far")]
    if default_us:
        parts.append(
            f'<line class="default" x1="{left}" x2="{left + pw}" y1="{_fmt(y(default_us))}" '
            f'y2="{_fmt(y(default_us))}" stroke="{DEFAULT}" stroke-dasharray="6 4"/>'
            f'<text x="{left + pw - 4}" y="{_fmt(y(default_us) - 4)}" text-anchor="end" '
            f'font-size="11" fill="{DEFAULT}">default, re-measured {default_us:.1f} µs</text>'
        )
        legend.append((f"line:{DEFAULT}:6 4", "default, re-measured"))
    if winner_us:
        parts.append(
            f'<line class="winner" x1="{left}" x2="{left + pw}" y1="{_fmt(y(winner_us))}" '
            f'y2="{_fmt(y(winner_us))}" stroke="{WINNER}" stroke-width="1.5"/>'
            f'<text x="{left + 4}" y="{_fmt(y(winner_us) + 13)}" font-size="11" '
            f'fill="{WINNER}">stored winner, re-measured {winner_us:.1f} µs</text>'
        )
        legend.append((f"line:{WINNER}", "stored winner, re-measured"))
    default_at = set(curve.defaults)
    for i, v in enumerate(curve.latencies):
        kind = "default" if i in default_at else "search"
        what = "default tiling" if kind == "default" else "search time"
        parts.append(
            _marker(kind, x(i + 1), y(v), cls=f"pt {kind}", tip=f"#{i + 1} {what} {v:.2f} µs")
        )
    steps = " ".join(f"{_fmt(x(i + 1))},{_fmt(y(v))}" for i, v in enumerate(curve.best))
    parts.append(
        f'<polyline class="best" fill="none" stroke="{BEST}" stroke-width="2" points="{steps}"/>'
    )
    kinds = set()
    for m in curve.remeasures:
        if m.record_id == winner_record:
            kind, what = "winner", "stored winner, re-measured"
        elif m.default:
            kind, what = "remeasure-default", "default, re-measured"
        else:
            kind, what = "remeasure", "re-measured"
        kinds.add(kind)
        parts.append(
            _marker(
                kind,
                x(m.after + 0.5),
                y(m.latency_us),
                cls=f"pt {kind}",
                tip=f"{what} after evaluation {m.after}: {m.latency_us:.2f} µs",
            )
        )
    for kind, text in (
        ("remeasure", "re-measure"),
        ("remeasure-default", "default re-measured"),
        ("winner", "stored winner"),
    ):
        if kind in kinds:
            marks.append((kind, text))
    parts.append(_legend(marks, left, height - 36))
    parts.append(_legend(legend, left, height - 14))
    parts.append("</svg>")
    return Markup("".join(parts))
