"""A table of at most K tilings: ``tilewise export --portfolio K``.

For each op version, target and dtype of the table, the candidates are the tuned shapes' best
tilings in their relative form (:func:`tilewise.export.relative_form`; repeats merged) and the
op's default tiling (a best tiling that is its shape's default is that candidate). Candidate c's
latency at tuned shape s is the median of the records of s that measured c *as carried to s*
(the op's carry rules re-derive it from the relative form; the default is s's own default):
the key must match exactly, a snapped neighbour of the carried tiling does not count, since the
header would run the carried one. Where the records did not measure it, ``measure`` (the CLI's
``--measure``) measures it now on the target; without it the pair counts as not covering. The
shape's own latency is the median of its best tiling's records (the stored latency without
records); a pair measured now is compared with the shape's best tiling measured now as well
(after the others). Each pair's slowdown is its latency over that reference, and
:mod:`tilewise.export._cover` picks the portfolio on slowdowns and assigns each shape the
member with the least slowdown there.

The document is the table document with each tuned shape's tiling replaced by its member as
carried to it (see :mod:`tilewise.export._portfolio_doc` for the ``portfolio`` section, which
lists the members and the selection).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tilewise.errors import InputError
from tilewise.export._cover import Coverage, assign, coverage
from tilewise.export._document import TableEntry, relative_form, table_document
from tilewise.export._evidence import _measured
from tilewise.types import Shape, Tiling

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tilewise.kernels.ops import OpSpec
    from tilewise.kernels.targets import TargetProfile

#: Measures one tiling at one shape now: (spec, target, dtype, shape, tiling) -> median µs, or
#: None when it does not run (invalid for the shape, fails to build or run).
MeasureFn = Callable[["OpSpec", "TargetProfile", str, Shape, Tiling], "float | None"]

#: The portfolio sizes the coverage report lists.
REPORT_SIZES = tuple(range(1, 9))


@dataclass(frozen=True)
class Candidate:
    """A tiling strategy: a relative form, or (``relative`` None) the op's default tiling."""

    relative: Tiling | None
    origin: Shape | None  # the first tuned shape whose best tiling it is (None: the default)
    tiling: Tiling | None = None  # that best tiling

    def at(self, spec: OpSpec, target: TargetProfile, dtype: str, shape: Shape) -> Tiling | None:
        """The tiling at ``shape``: at its origin the tuned tiling itself (as the runtime and
        ``OpSpec.carry`` keep it), elsewhere re-derived."""
        if self.relative is None:
            return spec.default_tiling(shape, dtype, target)
        if shape == self.origin:
            return self.tiling
        return spec.carry_rules(dtype, target).derive(self.relative, shape)


@dataclass(frozen=True)
class GroupPortfolio:
    """One op version, target and dtype: its candidates, the measured matrix, the portfolio."""

    op: str
    op_version: str
    target: str
    dtype: str
    shapes: list[Shape]  # the tuned shapes, in the table's order
    candidates: list[Candidate]
    latency: list[list[float | None]]  # [shape][candidate], µs
    ratio: list[list[float | None]]  # [shape][candidate], over the shape's own latency
    optimum: list[float]  # per shape: its own tuned latency (of the records)
    chosen: list[int]  # candidate indices, in the order picked
    assigned: list[int]  # per shape: the index into ``chosen`` of its member
    measured: list[bool]  # per shape: whether its member was measured there
    report: list[Coverage]  # for REPORT_SIZES
    pairs: dict[str, int]  # how the (shape, candidate) pairs were filled

    def slowdown(self, s: int) -> float | None:
        return self.ratio[s][self.chosen[self.assigned[s]]]


def _candidates(
    spec: OpSpec, target: TargetProfile, dtype: str, tuned: list[tuple[Shape, Tiling]]
) -> list[Candidate]:
    out: dict[Tiling | None, Candidate] = {}
    for shape, tiling in tuned:
        if tiling == spec.default_tiling(shape, dtype, target):
            continue
        relative = spec.carry_rules(dtype, target).relative(tiling, shape)
        out.setdefault(relative, Candidate(relative, shape, tiling))
    out[None] = Candidate(None, None)  # always measured: every tune measures its default
    return list(out.values())


def build_group(
    session: Session,
    *,
    spec: OpSpec,
    target: TargetProfile,
    dtype: str,
    rows: list[tuple[Any, Any]],
    k: int,
    within: float,
    measure: MeasureFn | None = None,
) -> GroupPortfolio:
    """The portfolio of one group's (WorkloadRow, TilingRow) pairs (see the module docstring)."""
    from tilewise.store import records_for

    shapes = [w.shape for w, _ in rows]
    candidates = _candidates(spec, target, dtype, [(w.shape, t.tiling) for w, t in rows])
    pairs = {"records": 0, "measured_now": 0, "not_measured": 0, "not_carried": 0}
    latency: list[list[float | None]] = []
    optimum: list[float] = []
    ratio: list[list[float | None]] = []
    for w, t in rows:
        found = _measured(records_for(session, workload_id=w.id))
        own = found.get(t.tiling.key())
        optimum.append(own.latency_us if own is not None else t.latency_us)
        row: list[float | None] = []
        now: list[bool] = []  # measured now, not found in the records
        for c in candidates:
            tiling = c.at(spec, target, dtype, w.shape)
            value: float | None = None
            if tiling is None:
                pairs["not_carried"] += 1
            elif (hit := found.get(tiling.key())) is not None:
                value = hit.latency_us
                pairs["records"] += 1
            elif measure is not None:
                value = measure(spec, target, dtype, w.shape, tiling)
                pairs["measured_now" if value is not None else "not_measured"] += 1
            else:
                pairs["not_measured"] += 1
            row.append(value)
            now.append(tiling is not None and value is not None and tiling.key() not in found)
        reference = optimum[-1]
        if measure is not None and any(now):
            # What was measured now is compared with the shape's own tiling measured now too
            # (not with records of another hour of a shared machine): after the others, so that
            # it does not meet the shape's first, cold runs.
            reference = measure(spec, target, dtype, w.shape, t.tiling) or reference
        latency.append(row)
        ratio.append(
            [
                None if v is None else v / (reference if fresh else optimum[-1])
                for v, fresh in zip(row, now, strict=True)
            ]
        )
    # The cover compares slowdowns: each against its own reference, every optimum then 1.
    ones = [1.0] * len(rows)
    report = [coverage(ratio, ones, within=within, k=size)[1] for size in REPORT_SIZES]
    chosen, _ = coverage(ratio, ones, within=within, k=k)
    by_measure = assign(ratio, ones, chosen)
    assigned: list[int] = []
    for s, member in enumerate(by_measure):
        if member is not None:
            assigned.append(chosen.index(member))
            continue
        # No member measured here: the first picked that carries to the shape.
        fits = [
            i
            for i, c in enumerate(chosen)
            if candidates[c].at(spec, target, dtype, shapes[s]) is not None
        ]
        if not fits:
            raise InputError(
                f"{spec.name} {target.name} {dtype} {dict(shapes[s])}: no portfolio tiling "
                "carries over to this tuned shape"
            )
        assigned.append(fits[0])
    w0 = rows[0][0]
    return GroupPortfolio(
        op=spec.name,
        op_version=w0.op_version,
        target=target.name,
        dtype=dtype,
        shapes=shapes,
        candidates=candidates,
        latency=latency,
        ratio=ratio,
        optimum=optimum,
        chosen=chosen,
        assigned=assigned,
        measured=[m is not None for m in by_measure],
        report=report,
        pairs=pairs,
    )


def portfolio_document(
    session: Session,
    *,
    op: str | None,
    target: str | None = None,
    dtype: str | None = None,
    k: int,
    within: float,
    measure: MeasureFn | None = None,
    any_toolchain: bool = False,
) -> tuple[dict[str, Any], list[GroupPortfolio]]:
    """The table document of ``op`` (None: of every op) with every current-version tuned
    shape's tiling replaced by its portfolio member (at most ``k`` per op, target and dtype,
    covering within ``within``, a share: 0.05 is 5%), its ``portfolio`` section, and each
    group's portfolio. The tuned shapes are those of :func:`table_document` (this host's
    toolchain, or ``any_toolchain``).

    Raises:
        InputError: unknown op, target or dtype; k below 1; within negative.
    """
    from tilewise.export._portfolio_doc import section
    from tilewise.kernels.ops import get_op
    from tilewise.kernels.targets import get_target
    from tilewise.store import best_tilings

    if k < 1:
        raise InputError(f"--portfolio takes a size of at least 1, got {k}")
    if not 0 <= within < 10:
        raise InputError(f"--within takes a share between 0 and 10 (1000%), got {within}")
    doc = table_document(session, op=op, target=target, dtype=dtype, any_toolchain=any_toolchain)
    groups: dict[tuple[str, str, str], list[tuple[Any, Any]]] = {}
    tuned = best_tilings(
        session,
        op=op,
        target=doc["filters"]["target"],
        dtype=dtype,
        toolchains=doc["toolchains"]["current"],
        any_toolchain=any_toolchain,
    )
    for w, t in tuned:
        if relative_form(w.workload, t.tiling) is not None:  # the running version only
            groups.setdefault((w.op, w.target, w.dtype), []).append((w, t))
    built = [
        build_group(
            session,
            spec=get_op(o),
            target=get_target(t),
            dtype=d,
            rows=rows,
            k=k,
            within=within,
            measure=measure,
        )
        for (o, t, d), rows in sorted(groups.items())
    ]
    where = {
        (g.op, g.op_version, g.target, g.dtype, shape): (g, s)
        for g in built
        for s, shape in enumerate(g.shapes)
    }
    entries = []
    for e in doc["entries"]:
        key = (e["op"], e["op_version"], e["target"], e["dtype"], Shape(e["shape"]))
        found = where.get(key)
        entries.append(e if found is None else _member_entry(get_op(e["op"]), e, *found))
    doc["entries"] = entries
    doc["portfolio"] = section(built, k=k, within=within)
    return doc, built


def _member_entry(spec: OpSpec, tuned: dict[str, Any], g: GroupPortfolio, s: int) -> dict[str, Any]:
    """The tuned shape's entry with its member's tiling, as carried to the shape, in place of
    the tuned one. ``latency_us`` is the member's measured latency there and ``slowdown`` that
    over the tuned latency, ``speedup`` the tune's over that slowdown; where the member was not
    measured at the shape (``member_measured`` false) ``latency_us`` stays the tuned one and
    ``slowdown`` and ``speedup`` are null."""
    from tilewise.export._document import is_default_tiling
    from tilewise.kernels.targets import get_target

    shape = g.shapes[s]
    tiling = g.candidates[g.chosen[g.assigned[s]]].at(spec, get_target(g.target), g.dtype, shape)
    assert tiling is not None  # build_group assigned only members that carry to the shape
    value = g.latency[s][g.chosen[g.assigned[s]]]
    entry = TableEntry(
        op=g.op,
        op_version=g.op_version,
        target=g.target,
        dtype=g.dtype,
        shape=shape,
        tiling=tiling,
        latency_us=value if value is not None else tuned["latency_us"],
        default_latency_us=tuned["default_latency_us"],
        speedup=None,
        evaluations=tuned["evaluations"],
    )
    entry = replace(entry, relative=relative_form(entry.workload, tiling))
    entry = replace(entry, is_default=is_default_tiling(entry))
    slowdown = g.slowdown(s)
    if slowdown is not None and tuned["speedup"] is not None:
        # The tune's speedup over the default, less the measured slowdown (both ratios of one
        # hour's measurements, where the member was measured now).
        entry = replace(entry, speedup=tuned["speedup"] / slowdown)
    out = entry.to_dict()
    out["member"] = g.assigned[s]
    out["member_measured"] = value is not None
    out["slowdown"] = slowdown
    return out
