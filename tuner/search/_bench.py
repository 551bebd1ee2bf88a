"""The search benchmark: strategies against a recorded space, several seeds each.

For every strategy and seed one :func:`~tilewise.search._replay.replay_search` runs on the space
(in-memory Optuna storage); the replay target counts the evaluations. Per strategy the report
gives the evaluations needed to get within 5% and 1% of the optimum (median and quartiles over
the seeds; a run that never got there counts as ``budget + 1`` and is counted in ``missed``) and
the median best-found / optimum ratio after 25, 50, 100 and 200 evaluations. Each threshold also
lists every run's count (``runs``, seed order), and where TPE ran, each other strategy's median
over TPE's with a 90% bootstrap interval (``against_tpe``; a ``+warm`` run's over TPE's
``+warm``): how firm a verdict such as "at most 2/3 of TPE's evaluations" is on that many seeds.

With ``warm_from`` (another recorded space of the same op, e.g. a neighbouring shape) each
strategy also runs as ``NAME+warm``: the best few configurations of that space which are feasible
here are evaluated first, as the Tuner's warm start does with the nearest tuned shapes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tilewise.errors import InputError
from tilewise.search._replay import ReplayRun, ReplaySpace, replay_search
from tilewise.search._space import SearchSpace
from tilewise.search._strategies import make_sampler
from tilewise.search._timing import summarize_times

CHECKPOINTS: tuple[int, ...] = (25, 50, 100, 200)
THRESHOLDS: dict[str, float] = {"evals_to_5pct": 0.05, "evals_to_1pct": 0.01}
WARM_SUFFIX = "+warm"


@dataclass
class StrategyRuns:
    name: str
    runs: list[ReplayRun] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    seconds: float = 0.0


def search_space_of(space: ReplaySpace) -> SearchSpace:
    """What a strategy may know of a recorded space: its rows, without their times."""
    return SearchSpace(space.distributions, feasible=space.feasible, candidates=space.candidates)


def warm_configs(space: ReplaySpace, source: ReplaySpace, *, top: int = 3) -> list[dict[str, Any]]:
    """The ``top`` fastest configurations of ``source`` that are feasible in ``space``."""
    if set(source.names) != set(space.names):
        raise InputError(f"warm start: {source.name} and {space.name} have different tunables")
    ranked = sorted(source.recorded(), key=lambda item: item[1])
    out = [dict(c) for c, t in ranked if math.isfinite(t) and space.feasible(c)]
    return out[:top]


def run_strategies(
    space: ReplaySpace,
    *,
    strategies: Sequence[str],
    budget: int,
    seeds: int | Sequence[int],
    warm_start: Sequence[Mapping[str, Any]] = (),
    on_run: Callable[[str, int], None] | None = None,
    stop_at_optimum: bool = False,
) -> list[StrategyRuns]:
    """Each strategy (and its ``+warm`` variant) once per seed. ``stop_at_optimum`` ends a run
    once it has found the optimum: every figure of the report is the same (a run's best then
    stays the optimum to the budget), only proposals after it are not made or timed."""
    results: list[StrategyRuns] = []
    variants: list[tuple[str, Sequence[Mapping[str, Any]]]] = [(n, ()) for n in strategies]
    if warm_start:
        variants += [(name + WARM_SUFFIX, warm_start) for name in strategies]
    known = search_space_of(space)
    for label, warm in variants:
        strategy = label.removesuffix(WARM_SUFFIX)
        result = StrategyRuns(label)
        started = time.perf_counter()
        for seed in range(seeds) if isinstance(seeds, int) else seeds:
            result.seeds.append(seed)
            sampler = make_sampler(seed, strategy=strategy, space=known)
            stop = space.optimum_ms if stop_at_optimum else None
            result.runs.append(
                replay_search(space, sampler, budget=budget, warm_start=warm, stop_at_ms=stop)
            )
            if on_run is not None:
                on_run(label, seed)
        result.seconds = time.perf_counter() - started
        results.append(result)
    return results


def _quartiles(values: Sequence[float]) -> dict[str, float]:
    q1, median, q3 = np.percentile(np.asarray(values, dtype=float), [25, 50, 75])
    return {"median": float(median), "q1": float(q1), "q3": float(q3)}


def ratio_curve(runs: Sequence[ReplayRun], optimum: float, budget: int) -> list[float]:
    """Median over runs of best-so-far / optimum after 1 .. budget evaluations."""
    curve = []
    for n in range(1, budget + 1):
        ratios = [_best_at(run, n) / optimum for run in runs]
        curve.append(float(np.median(ratios)))
    return curve


def _best_at(run: ReplayRun, n: int) -> float:
    # A run that stopped early had nothing left to evaluate: its best stays.
    if not run.best_after:
        return math.inf
    return run.best_after[min(n, len(run.best_after)) - 1]


def rule_budget(space: ReplaySpace) -> int:
    """The benchmark's budget for ``space`` (``--budget auto``): max(200, ceil(E / 5) + 50),
    E random search's expected draws to 5% of the optimum; enough for a strategy several times
    better than random search to reach 5% on a space where random search needs long."""
    return max(200, math.ceil(space.random_draws_to(0.05) / 5) + 50)


def summarize(
    space: ReplaySpace, results: Sequence[StrategyRuns], *, budget: int
) -> dict[str, Any]:
    optimum = space.optimum_ms
    strategies: dict[str, Any] = {}
    for result in results:
        entry: dict[str, Any] = {}
        for key, fraction in THRESHOLDS.items():
            reached = [run.evaluations_to(optimum * (1 + fraction)) for run in result.runs]
            counts = [budget + 1 if r is None else r for r in reached]
            entry[key] = {
                **_quartiles(counts),
                "missed": sum(r is None for r in reached),
                "runs": counts,
            }
        entry["ratio_at"] = {
            str(n): _finite(float(np.median([_best_at(run, n) / optimum for run in result.runs])))
            for n in CHECKPOINTS
            if n <= budget
        }
        entry["seconds"] = round(result.seconds, 1)
        entry["propose_s"] = summarize_times([run.propose for run in result.runs])
        strategies[result.name] = entry
    for name, entry in strategies.items():
        # A warm-started run against TPE warm-started from the same configurations.
        tpe = "tpe" + (WARM_SUFFIX if name.endswith(WARM_SUFFIX) else "")
        baseline = strategies.get(tpe)
        if baseline is not None and name != tpe:
            entry["against_tpe"] = {
                key: median_ratio(entry[key]["runs"], baseline[key]["runs"]) for key in THRESHOLDS
            }
    return {
        "space": str(space.path),
        "configs": space.configs,
        "valid": space.valid,
        "optimum_ms": optimum,
        "budget": budget,
        "random_draws_to_5pct": round(space.random_draws_to(0.05), 1),
        "seeds": len(results[0].runs) if results else 0,
        "first_seed": results[0].seeds[0] if results and results[0].seeds else 0,
        "strategies": strategies,
    }


def median_ratio(
    runs: Sequence[float], baseline: Sequence[float], *, resamples: int = 10_000
) -> dict[str, Any]:
    """median(runs) / median(baseline), and the 5th and 95th percentiles of that ratio over
    ``resamples`` bootstrap resamples of each side's runs (drawn apart: the two strategies'
    runs of one seed share nothing but the seed's number). Seeded: the same runs give the same
    interval."""
    rng = np.random.default_rng(0)
    a, b = np.asarray(runs, dtype=float), np.asarray(baseline, dtype=float)
    ratios = np.median(rng.choice(a, (resamples, len(a))), axis=1) / np.median(
        rng.choice(b, (resamples, len(b))), axis=1
    )
    low, high = np.percentile(ratios, [5, 95])
    return {
        "ratio": round(float(np.median(a) / np.median(b)), 4),
        "interval90": [round(float(low), 4), round(float(high), 4)],
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def plot(space: ReplaySpace, results: Sequence[StrategyRuns], *, budget: int, path: Path) -> None:
    """Median best-so-far ratio against evaluations, one line per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    evaluations = np.arange(1, budget + 1)
    for result in results:
        curve = ratio_curve(result.runs, space.optimum_ms, budget)
        ax.plot(evaluations, curve, label=result.name)
    ax.axhline(1.05, color="grey", linestyle=":", linewidth=1)
    ax.axhline(1.01, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best found / optimum (median over seeds)")
    ax.set_title(f"{space.name}: {space.configs} configs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
