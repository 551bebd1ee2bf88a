"""Benchmark: the default strategy with K workers on one study, replayed on a recorded space.

    .venv/bin/python bench/shared_study.py [--space CSV ...] [--workers 32] [--budget 200]
                                           [--seeds 10] [--batch 1,8] [--json]

What a job's holder and its assistants do to one shared study, without a database or devices:
K samplers of the default strategy (each its own seed, as each worker process has its own) on
one in-memory Optuna study; the workers ask in turn, and once each has a trial running, a
random one of the running trials is told its recorded time (evaluations complete out of
order, as on devices of equal speed). For each ``--batch`` (the sampler's ``shared_batch``: 1,
every worker proposes for itself; k, a model step also proposes for up to k - 1 others, queued)
and seed, up to ``--budget`` evaluations:

* the evaluations until the best found is within 5% of the space's optimum (missed: not within
  the budget);
* the sampler's CPU seconds per ask (a queued proposal costs the asker none) and the GP
  hyperparameter fits of the run, all workers together.

A lone worker (K = 1) is run beside them for reference. Not a test: the seconds depend on the
host; the evaluations do not (a replay is deterministic per seed and order).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tilewise.search import ReplaySpace
from tilewise.search._bench import search_space_of
from tilewise.search._surrogate import SurrogateSampler

ROOT = Path(__file__).resolve().parent.parent
SPACES = [ROOT / "tests/data/linear_add_gelu_M128_N64_K96.csv"]


def run(space: ReplaySpace, workers: int, batch: int, seed: int, budget: int) -> dict[str, Any]:
    """One replay of ``workers`` samplers on one study (see the module docstring)."""
    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(storage=storage, study_name="shared", direction="minimize")
    samplers = [
        SurrogateSampler(
            space=search_space_of(space), seed=seed * 1000 + i, spread=True, shared_batch=batch
        )
        for i in range(workers)
    ]
    studies = [optuna.load_study(study_name="shared", storage=storage, sampler=s) for s in samplers]
    order = random.Random(seed)
    running: list[optuna.Trial] = []
    cpu: list[float] = []
    optimum, best, told, to_5 = space.optimum_ms, float("inf"), 0, None
    asks = 0
    while told < budget and asks < 25 * budget:
        start = time.process_time()
        running.append(studies[asks % workers].ask(space.distributions))
        cpu.append(time.process_time() - start)
        asks += 1
        if len(running) < workers:
            continue
        trial = running.pop(order.randrange(len(running)))
        result = space.evaluate(trial.params)
        studies[0].tell(trial, result.value if result.value is not None else float("inf"))
        if result.status == "infeasible":
            continue
        told += 1
        if result.time_ms is not None and result.time_ms < best:
            best = result.time_ms
        if to_5 is None and best <= 1.05 * optimum:
            to_5 = told
    return {
        "evals_to_5pct": to_5,
        "cpu_per_ask_s": float(np.mean(cpu)),
        "gp_fits": sum(len(s.gp_fits) for s in samplers),
        "asks": asks,
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    reached = [r["evals_to_5pct"] for r in runs if r["evals_to_5pct"] is not None]
    q1, med, q3 = np.percentile(reached, [25, 50, 75]) if reached else (None,) * 3
    mean = np.mean(reached) if reached else None
    return {
        "evals_to_5pct": {"median": med, "q1": q1, "q3": q3, "mean": mean},
        "missed": len(runs) - len(reached),
        "cpu_per_ask_s": float(np.median([r["cpu_per_ask_s"] for r in runs])),
        "gp_fits_per_run": float(np.median([r["gp_fits"] for r in runs])),
        "runs": [r["evals_to_5pct"] for r in runs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", action="append", type=Path, help="recorded space (CSV)")
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--batch", default="1,8", help="shared_batch values, comma-separated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    batches = [int(b) for b in args.batch.split(",")]
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "config": {"workers": args.workers, "budget": args.budget, "seeds": args.seeds},
        "spaces": {},
    }
    for path in args.space or SPACES:
        space = ReplaySpace(path)
        figures: dict[str, Any] = {}
        cases = [(1, 1)] + [(args.workers, b) for b in batches]
        for workers, batch in cases:
            runs = [run(space, workers, batch, s, args.budget) for s in range(args.seeds)]
            case = f"K={workers} batch={batch}"
            figures[case] = summarize(runs)
            if not args.json:
                print(space.name, case, figures[case], flush=True)
        report["spaces"][space.name] = figures
    print(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
