"""What a lookup answers: :class:`Answer`, and the names of its source and rule."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from tilewise.types import Tiling, Workload

Source = Literal["exact", "nearest", "default"]
#: How the tiling was chosen: as tuned (``exact``); by the table's choice grid, the tiling of a
#: tuned shape re-derived for the asked shape, predicted faster than the default by more than the
#: model's error (``chosen``), or the default because no candidate was (``predicted_default``); by a
#: grid decided by measuring each cell on the target, a carried tiling measured faster than the
#: default beyond the noise at most sample shapes of the cell and slower at none
#: (``measured_faster``), or the default because none was (``measured_default``); without a grid,
#: the nearest tuned shape's tiling re-derived for the asked shape (``carried``); the asked shape's
#: default because the nearest tuned shape kept its default (``kept_default``) or because its
#: tiling, carried to other tuned shapes, was measured slower than their default
#: (``measured_slower``); the default with no tuned shape to go by (``default``); by the table's
#: portfolio, the member of the asked shape, or of the nearest tuned shape, re-derived for the asked
#: shape (``portfolio``).
Rule = Literal[
    "exact",
    "portfolio",
    "chosen",
    "predicted_default",
    "measured_faster",
    "measured_default",
    "carried",
    "kept_default",
    "measured_slower",
    "default",
]


class Answer(NamedTuple):
    """A tiling for one asked shape, and where it came from (immutable: a named tuple, built
    in a quarter of a frozen dataclass's time on the first answer's path).

    ``workload`` and ``latency_us`` are those of the table entry the tiling was tuned for
    (for ``nearest`` the tuned shape whose tiling was re-derived for the asked shape; for a
    ``default`` of rule ``kept_default`` or ``measured_slower`` the neighbour's that decided it;
    None for the plain ``default`` and ``predicted_default``); ``distance`` is 0 for ``exact``,
    the log2 distance to that tuned shape otherwise. ``predicted_gain`` is the default's latency
    over the answered tiling's as predicted: by the table's model for ``chosen`` (and, for
    ``predicted_default``, that of the best candidate, which did not beat the model's error);
    for ``measured_faster`` the default's measured median time over the tiling's, the geometric
    mean over the cell's sample shapes (for ``measured_default``, that of the best candidate);
    else that neighbour's tiling's measured gain where it was carried to other tuned shapes
    (None without such measurements; always None for ``portfolio``).

    ``member`` is, for rule ``portfolio``, the index of the portfolio member answering (into
    the section's ``members``; the C header's ``<prefix>_member``), None otherwise. A
    portfolio's tuned shape answers with source ``exact``, also where its member is the op's
    default tiling (the header's "use your default" is then the same tiling); any other shape
    ``nearest``, or ``default`` where the member is the op's default tiling or its re-derived
    values do not fit int32 (the header's "use your default"); ``workload``, ``latency_us``
    and ``distance`` are then those of the tuned shape whose member it is.
    """

    tiling: Tiling
    source: Source
    workload: Workload | None
    latency_us: float | None
    distance: float | None = None
    rule: Rule = "exact"
    predicted_gain: float | None = None
    member: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tiling": dict(self.tiling),
            "source": self.source,
            "workload": None if self.workload is None else self.workload.to_dict(),
            "latency_us": self.latency_us,
            "distance": self.distance,
            "rule": self.rule,
            "predicted_gain": self.predicted_gain,
            "member": self.member,
        }
