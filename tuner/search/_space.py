"""From an op's tunables to Optuna distributions and back."""

from __future__ import annotations

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
