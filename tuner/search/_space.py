"""The space a strategy searches: an op's tunables as Optuna distributions and back, and what
is known about a configuration before it is evaluated (:class:`SearchSpace`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution

from tilewise.kernels.ops import Tunable
from tilewise.types import Tiling


def distributions(tunables: tuple[Tunable, ...]) -> dict[str, BaseDistribution]:
    # Categorical: domains are short, irregular lists (16, 48, 96 ...), and TPE's categorical
    # kernel learns which values win without assuming smoothness between them.
    return {t.name: CategoricalDistribution(list(t.values)) for t in tunables}


def space_size(tunables: tuple[Tunable, ...]) -> int:
    size = 1
    for t in tunables:
        size *= len(t.values)
    return size


def tiling_from_params(params: dict[str, object]) -> Tiling:
    return Tiling({k: int(v) for k, v in params.items()})  # type: ignore[call-overload]


@dataclass(frozen=True)
class SearchSpace:
    """The distributions searched, and what is known about feasibility without evaluating."""

    distributions: Mapping[str, BaseDistribution]
    #: True when the configuration passes the static restrictions; None = everything passes.
    feasible: Callable[[Mapping[str, Any]], bool] | None = None
    #: Every feasible configuration, when they can be listed (a recorded space).
    candidates: Callable[[], Sequence[Mapping[str, Any]]] | None = None
