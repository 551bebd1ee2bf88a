"""Benchmark: what tuned shapes of an op are worth for shapes that were not tuned (cpu-twin).

    .venv/bin/python bench/transfer.py [--op linear_add_gelu] [--budget 30] [--json]

1. Tunes the op at the training shapes (one SQLite database, the default strategy).
2. For every held-out shape:
   * the runtime library's answer (``TilingTable.from_db``: exact → nearest → default) is
     looked up in that database — it is ``nearest`` there, since the shape was not tuned —
     with the tuned shape it came from and that shape's own tuned speedup over its default;
   * the shape is tuned *cold* (a fresh database) and *warm* (a copy of the training database,
     so the Tuner starts from the best tilings of the nearest tuned shapes), same budget;
   * the runtime's answer, the default tiling and both tuned winners are then measured side by
     side, interleaved, on the same backend (medians of ``--rounds`` rounds);
   * from the records: the evaluations each tune needed to get within 5% of the best time
     either of them found (the tuned optimum as far as this budget knows).

Prints the machine and date with the figures. Every number is measured on this machine's CPU
twin; nothing here ran on an NPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from tune_e2e import cpu_model

from tilewise import store
from tilewise.kernels.backends import MeasureOptions, create_backend
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.runtime import TilingTable
from tilewise.search import Budget, Tuner
from tilewise.settings import Settings
from tilewise.status import RecordSource
from tilewise.types import Shape, Tiling

TRAIN = {
    "linear_add_gelu": [
        {"M": m, "N": n, "K": k} for m in (128, 512) for n in (128, 512) for k in (128, 512)
    ],
}
HELD_OUT = {
    "linear_add_gelu": [
        {"M": 256, "N": 256, "K": 256},
        {"M": 384, "N": 192, "K": 320},
        {"M": 128, "N": 1024, "K": 256},
        {"M": 768, "N": 256, "K": 512},
    ],
}
TARGET, DTYPE = "cpu-twin", "float32"
MEASURE = MeasureOptions(warmup=2, repeats=15, max_seconds=5.0)


def tune(db_url: str, op: str, shape: Shape, budget: int, seed: int) -> dict[str, Any]:
    spec, target = get_op(op), get_target(TARGET)
    settings = Settings(db_url=db_url)
    db = store.open_store(db_url)
    try:
        with create_backend(TARGET) as backend:
            tuner = Tuner(
                spec=spec,
                shape=shape,
                dtype=DTYPE,
                target=target,
                backend=backend,
                db=db,
                settings=settings,
            )
            result = tuner.run(Budget(budget), seed=seed)
        with db.session() as s:
            times = [
                r.latency_us if r.latency_us is not None else math.inf
                for r in store.records_for(s, workload_id=tuner.workload_id)
                if r.source != RecordSource.REMEASURE
            ]
    finally:
        db.close()
    return {
        "best": result.best.tiling if result.best else None,
        "speedup": result.speedup,
        "evaluations": result.progress.evaluations,
        "times_us": times,
    }


def evals_to(times_us: list[float], threshold_us: float) -> int | None:
    best = math.inf
    for n, t in enumerate(times_us, start=1):
        best = min(best, t)
        if best <= threshold_us:
            return n
    return None


def measure_side_by_side(
    op: str, shape: Shape, tilings: dict[str, Tiling], rounds: int
) -> dict[str, float | None]:
    spec, target = get_op(op), get_target(TARGET)
    samples: dict[str, list[float]] = {label: [] for label in tilings}
    with create_backend(TARGET) as backend:
        builds = {
            label: backend.build(spec, spec.compile_key(t, DTYPE)) for label, t in tilings.items()
        }
        for _ in range(rounds):
            for label, tiling in tilings.items():
                build = builds[label]
                if not build.ok:
                    continue
                run = backend.run(
                    build,
                    spec,
                    shape=shape,
                    dtype=DTYPE,
                    target=target,
                    tiling=tiling,
                    check=False,
                    measure=MEASURE,
                )
                if run.ok and run.median_us is not None:
                    samples[label].append(run.median_us)
    return {k: (statistics.median(v) if v else None) for k, v in samples.items()}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="linear_add_gelu", choices=sorted(TRAIN))
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    op = args.op

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tilewise-transfer-") as tmp:
        train_db = Path(tmp) / "train.db"
        train_url = f"sqlite:///{train_db}"
        # Each training shape's tuned speedup over its own default tiling.
        gains: dict[frozenset[tuple[str, int]], float | None] = {}
        for shape in TRAIN[op]:
            print(f"train {op} {shape}", file=sys.stderr, flush=True)
            trained = tune(train_url, op, Shape(shape), args.budget, args.seed)
            gains[frozenset(shape.items())] = trained["speedup"]
        table = TilingTable.from_db(train_url)
        for i, dims in enumerate(HELD_OUT[op]):
            shape = Shape(dims)
            answer = table.lookup(op, target=TARGET, dtype=DTYPE, shape=dims)
            print(f"held out {dims}: runtime says {answer.source}", file=sys.stderr, flush=True)
            cold = tune(f"sqlite:///{Path(tmp) / f'cold{i}.db'}", op, shape, args.budget, args.seed)
            warm_db = Path(tmp) / f"warm{i}.db"
            shutil.copy(train_db, warm_db)
            warm = tune(f"sqlite:///{warm_db}", op, shape, args.budget, args.seed)
            spec = get_op(op)
            tilings = {
                "runtime": answer.tiling,
                "default": spec.default_tiling(shape, DTYPE, get_target(TARGET)),
            }
            if cold["best"] is not None:
                tilings["cold"] = cold["best"]
            if warm["best"] is not None:
                tilings["warm"] = warm["best"]
            ms = measure_side_by_side(op, shape, tilings, args.rounds)
            tuned = min((v for k, v in ms.items() if k in ("cold", "warm") and v), default=None)
            optimum = min(min(cold["times_us"]), min(warm["times_us"]))
            neighbour = dict(answer.workload.shape) if answer.workload else {}
            rows.append(
                {
                    "shape": dims,
                    "runtime_source": answer.source,
                    "neighbour": neighbour,
                    "neighbour_speedup": gains.get(frozenset(neighbour.items())),
                    "us": ms,
                    "runtime_over_tuned": _ratio(ms["runtime"], tuned),
                    "default_over_tuned": _ratio(ms["default"], tuned),
                    "evals_to_5pct": {
                        "cold": evals_to(cold["times_us"], optimum * 1.05),
                        "warm": evals_to(warm["times_us"], optimum * 1.05),
                    },
                }
            )
    report = {
        "op": op,
        "budget": args.budget,
        "train_shapes": TRAIN[op],
        "machine": cpu_model(),
        "date": datetime.date.today().isoformat(),
        "held_out": rows,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{op}, budget {args.budget}, {report['machine']}, {report['date']}")
    print("shape | runtime answer | runtime/tuned | default/tuned | evals to 5%: cold / warm")
    for r in rows:
        e = r["evals_to_5pct"]
        print(
            f"{r['shape']} | {r['runtime_source']} | {r['runtime_over_tuned']:.3f} | "
            f"{r['default_over_tuned']:.3f} | {e['cold']} / {e['warm']}"
        )


if __name__ == "__main__":
    main()
