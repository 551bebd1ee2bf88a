"""Budgets: a manifest's ``budget`` per workload, or its ``total_budget`` spread by weight."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tilewise.errors import InputError
from tilewise.manifest._model import Manifest, ManifestError

#: Evaluations every workload gets first when a total budget is spread (see
#: :mod:`tilewise.manifest`): the default tiling plus the nearest tuned shapes' best four.
BUDGET_FLOOR = 5


def spread_budget(
    total: int, weights: Sequence[float], *, floor: int = BUDGET_FLOOR, cap: int | None = None
) -> list[int]:
    """Split ``total`` evaluations over workloads of ``weights`` (see :mod:`tilewise.manifest`):
    ``min(floor, total // n)`` each, then the rest in proportion to the weights, by largest
    remainder (ties: the earlier workload). With ``cap``, no workload gets more: what it would
    have had goes to the others, and the total is spent only as far as the caps allow.

    Raises:
        InputError: ``total`` is below the number of workloads (each needs one evaluation), or
            a weight is not positive.
    """
    n = len(weights)
    if n == 0:
        return []
    if any(not (math.isfinite(w) and w > 0) for w in weights):
        raise InputError("weights must be positive, finite numbers")
    if total < n:
        raise InputError(
            f"total_budget {total} is below the {n} workloads to tune: each needs at least one"
            " evaluation"
        )
    if cap is not None and cap < 1:
        raise InputError(f"cap must be at least 1, got {cap}")
    # Relative to the largest: weights near the float maximum would sum to infinity.
    largest = max(weights)
    weights = [w / largest for w in weights]
    base = min(floor, total // n)
    if cap is not None:
        base = min(base, cap)
    budgets = [base] * n
    rest = total - base * n
    open_ = [i for i in range(n) if cap is None or budgets[i] < cap]
    while rest > 0 and open_:
        weight = sum(weights[i] for i in open_)
        shares = {i: rest * weights[i] / weight for i in open_}
        given = {i: math.floor(shares[i]) for i in open_}
        left = rest - sum(given.values())
        by_remainder = sorted(open_, key=lambda i: (-(shares[i] - given[i]), i))
        for i in by_remainder[:left]:
            given[i] += 1
        rest = 0
        for i in open_:
            room = given[i] if cap is None else min(given[i], cap - budgets[i])
            budgets[i] += room
            rest += given[i] - room
        open_ = [i for i in open_ if cap is None or budgets[i] < cap]
    return budgets


def assign_budgets(
    manifest: Manifest, weights: Sequence[float], *, default: int, cap: int | None = None
) -> list[int]:
    """The budget of each workload to tune (those of ``weights``, in order): ``budget``, or
    ``total_budget`` spread by weight, or ``default``.

    Raises:
        ManifestError: a budget above ``cap``, or a total below the workloads to tune.
    """
    if manifest.total_budget is not None:
        try:
            return spread_budget(manifest.total_budget, weights, cap=cap)
        except InputError as exc:
            raise ManifestError(("total_budget",), str(exc), source=manifest.source) from None
    per = manifest.budget if manifest.budget is not None else default
    if cap is not None and per > cap:
        raise ManifestError(
            ("budget",), f"budget must be between 1 and {cap}, got {per}", source=manifest.source
        )
    return [per] * len(weights)
