"""What the records say about carrying a tuned tiling over: measured, at the other tuned shapes.

A tune's warm start measures the nearest tuned shapes' tilings carried over to its shape
(:func:`tilewise.search._warm.nearest_tuned_tilings`), and every tune measures its shape's
default tiling. So the records of a table's tuned shapes already hold, for many entries, how
their tiling did when carried to another tuned shape against that shape's default. Before a
runtime answers an entry's carried tiling for a shape nobody tuned, that is the evidence of
whether carrying it beats the default (:func:`carry_evidence`): the ratio of the default's
latency to the carried tiling's at each such shape, the geometric mean of them as the
predicted gain, and *slower* when that mean falls below 1 by more than the measurements' own
spread. An entry with no such measurement has no evidence (None).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from tilewise.types import Tiling

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from tilewise.kernels.ops import OpSpec
    from tilewise.kernels.targets import TargetProfile
    from tilewise.store import RecordRow, WorkloadRow


class Evidence(NamedTuple):
    """An entry's carried tiling measured at other tuned shapes against their defaults."""

    gain: float  # geometric mean of default latency / carried latency (> 1: carried faster)
    shapes: int  # tuned shapes it was measured at
    slower: bool  # gain below 1 by more than the spread of the measurements


class _Measured(NamedTuple):
    latency_us: float
    spread: float


def _measured(records: Iterable[RecordRow]) -> dict[str, _Measured]:
    """Per tiling key: the median latency of its measured (ok, not predicted) records and the
    largest spread (interquartile range over median) among them."""
    from tilewise.status import RecordSource
    from tilewise.store import RecordStatus

    latencies: dict[str, list[float]] = {}
    spreads: dict[str, float] = {}
    for r in records:
        if r.status != RecordStatus.OK or r.latency_us is None:
            continue
        if r.source == RecordSource.PREDICTED:
            continue
        latencies.setdefault(r.tiling_key, []).append(r.latency_us)
        spreads[r.tiling_key] = max(spreads.get(r.tiling_key, 0.0), r.spread or 0.0)
    return {k: _Measured(statistics.median(v), spreads[k]) for k, v in latencies.items()}


def carry_evidence(
    session: Session,
    *,
    spec: OpSpec,
    target: TargetProfile,
    dtype: str,
    tuned: list[tuple[WorkloadRow, Tiling]],
) -> list[Evidence | None]:
    """For each (workload, best tiling) of one op version, target and dtype: the evidence of
    its tiling carried over to the others (see the module docstring), None without any."""
    from tilewise.store import records_for

    measured = {w.id: _measured(records_for(session, workload_id=w.id)) for w, _ in tuned}
    defaults = {w.id: spec.default_tiling(w.shape, dtype, target).key() for w, _ in tuned}
    out: list[Evidence | None] = []
    for workload, tiling in tuned:
        ratios: list[float] = []
        spreads: list[float] = []
        for other, _ in tuned:
            if other.id == workload.id:
                continue
            default = measured[other.id].get(defaults[other.id])
            carried = spec.carry(tiling, workload.shape, other.shape, dtype, target)
            if default is None or carried is None:
                continue
            snapped = spec.snap(carried, other.shape, dtype, target)
            found = measured[other.id].get(carried.key()) or measured[other.id].get(snapped.key())
            if found is None or carried.key() == defaults[other.id]:
                continue
            ratios.append(default.latency_us / found.latency_us)
            spreads.append(max(default.spread, found.spread))
        if not ratios:
            out.append(None)
            continue
        gain = math.exp(statistics.fmean(math.log(r) for r in ratios))
        noise = statistics.fmean(spreads)
        out.append(Evidence(gain, len(ratios), gain < 1 / (1 + noise)))
    return out
