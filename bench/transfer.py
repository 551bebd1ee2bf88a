"""Benchmark: what tuned shapes of an op are worth for shapes that were not tuned (cpu-twin).

    .venv/bin/python bench/transfer.py [--split OP:SPLIT[,...] | --split all] [--budget 30]
                                       [--rounds 5] [--no-tune] [--json]

For each split (``SPLITS``: a grid of shapes asked in between and beyond, a token-count sweep
with the other dims fixed, one where every dim moves):

1. Tunes the op at the split's training shapes (one SQLite database, the default strategy).
2. For every held-out shape:
   * the runtime library's answer (``TilingTable.from_db``) is looked up in that database:
     where the table holds a choice grid (a model fitted on the records), the grid's
     ``chosen`` tiling or ``predicted_default``; else the nearest tuned shape's tiling
     *carried* over to this shape by the op's carry rules, or this shape's default where that
     shape kept its default or its tiling was measured slower than the default at the other
     tuned shapes (the answer's ``rule``), with the tuned shape it came from and that shape's
     own tuned speedup;
   * the answer of the same table exported with ``--measure`` (``measured``): its grid's cells
     decided by measuring their candidates and the default side by side at each cell's sample
     shapes on the twin (``measured_faster`` / ``measured_default``), none of them a held-out
     shape;
   * beside it, the *copied* answer of the rule before carry rules: the stored tiling of the
     nearest tuned shape for which it is valid as it is (the default when none is);
   * unless ``--no-tune``, the shape is tuned *cold* (a fresh database) and *warm* (a copy of the
     training database, so the Tuner starts from the nearest tuned shapes' tilings, carried
     over), same budget;
   * all of them and the default tiling are then measured side by side, interleaved, on the
     same backend, as an export measures a cell (``Measurer.side_by_side``: ``--rounds``
     rounds, the first checked against the reference; medians), and each answer's samples are
     compared with the default's by the test the tuner's final re-measure uses
     (``tilewise.stats.faster``: one-sided Mann-Whitney, p < 0.05): ``slower`` / ``faster``
     than the default, or neither;
   * from the records: the evaluations each tune needed to get within 5% of the best time
     either of them found (the tuned optimum as far as this budget knows);
   * the share of the tuned gain the runtime's answer captured (:func:`captured`), by the model's
     grid and by the measured one.
3. Per split, a summary for each grid: its answer faster / the same / slower than the default by
   the test, and the mean captured share over the shapes a tune sped up by more than 2%.

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
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tune_e2e import cpu_model

from tilewise import store
from tilewise.export import TableEntry, load_entries, table_document
from tilewise.kernels.backends import MeasureOptions, create_backend
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.runtime import TilingTable
from tilewise.search import Budget, Measurer, Tuner, cell_measurer
from tilewise.settings import Settings
from tilewise.stats import faster
from tilewise.status import RecordSource
from tilewise.types import Shape, Tiling

#: (op, split) -> (training shapes, held-out shapes).
SPLITS: dict[tuple[str, str], tuple[list[dict[str, int]], list[dict[str, int]]]] = {
    # A grid of small shapes, asked in between and beyond.
    ("linear_add_gelu", "grid"): (
        [{"M": m, "N": n, "K": k} for m in (128, 512) for n in (128, 512) for k in (128, 512)],
        [
            {"M": 256, "N": 256, "K": 256},
            {"M": 384, "N": 192, "K": 320},
            {"M": 128, "N": 1024, "K": 256},
            {"M": 768, "N": 256, "K": 512},
        ],
    ),
    # An LLM's token counts: tuned at three, asked at others, the projection fixed.
    ("linear_add_gelu", "tokens"): (
        [{"M": m, "N": 1024, "K": 1024} for m in (16, 128, 1024)],
        [{"M": m, "N": 1024, "K": 1024} for m in (1, 7, 48, 300, 700)],
    ),
    # The MLP's token counts: tuned at three, asked at others, the hidden sizes fixed.
    ("swiglu_mlp", "tokens"): (
        [{"T": t, "H": 256, "I": 1024} for t in (16, 128, 1024)],
        [{"T": t, "H": 256, "I": 1024} for t in (1, 7, 48, 300, 700)],
    ),
    # Every dim moves.
    ("swiglu_mlp", "grid"): (
        [{"T": t, "H": h, "I": i} for t in (16, 256) for h in (256,) for i in (512, 1024)],
        [
            {"T": 64, "H": 256, "I": 768},
            {"T": 1, "H": 384, "I": 512},
            {"T": 512, "H": 128, "I": 1024},
        ],
    ),
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
) -> dict[str, list[float]]:
    """Every tiling's per-launch samples (µs), by label, as an export measures a grid cell
    (:meth:`Measurer.side_by_side`): in ``rounds`` rounds that visit each in turn, so that a
    busy moment of the shared machine slows all of them, the first checked against the
    reference. Tilings equal to an earlier one are measured once and share its samples; one
    that fails has none."""
    spec, target = get_op(op), get_target(TARGET)
    settings = Settings(
        warmup=MEASURE.warmup, repeats=MEASURE.repeats, max_measure_s=MEASURE.max_seconds
    )
    with create_backend(TARGET, settings=settings, target=target) as backend:
        measurer = Measurer(
            spec=spec, shape=shape, dtype=DTYPE, target=target, backend=backend, settings=settings
        )
        samples = measurer.side_by_side(tilings, rounds=rounds, per_round=MEASURE)
    return {label: samples.get(label, []) for label in tilings}


def copied_answer(
    entries: list[TableEntry], op: str, shape: Shape
) -> tuple[Tiling, dict[str, int] | None]:
    """The rule before carry rules: the stored tiling of the nearest tuned shape (ties to the
    smaller shape in dims order) that is valid for ``shape`` as it is, else the default."""
    spec, target = get_op(op), get_target(TARGET)
    ranked = sorted(
        (e for e in entries if e.op == op and e.dtype == DTYPE and e.target == TARGET),
        key=lambda e: (spec.shape_distance(e.shape, shape), tuple(e.shape[d] for d in spec.dims)),
    )
    for e in ranked:
        if spec.valid(e.tiling, shape, DTYPE, target):
            return e.tiling, dict(e.shape)
    return spec.default_tiling(shape, DTYPE, target), None


def verdict(candidate: list[float], default: list[float]) -> str:
    """``slower`` / ``faster`` than the default beyond the noise by the tuner's own test
    (:func:`tilewise.stats.faster`, a one-sided Mann-Whitney test), else ``same``."""
    if not candidate or not default:
        return "not measured"
    if candidate == default:
        return "same tiling"
    if faster(default, candidate):
        return "slower"
    if faster(candidate, default):
        return "faster"
    return "same"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _median(samples: list[float]) -> float | None:
    return round(statistics.median(samples), 2) if samples else None


def captured(row: dict[str, Any], ratio: str) -> float | None:
    """The share of the tuned gain an answer kept at a held-out shape: (1 - its time over the
    default's, ``row[ratio]``) over (1 - the tuned time over the default's); None where no tune
    beat the default by more than 2% (no gain to capture)."""
    tuned, runtime = row.get("tuned_over_default"), row[ratio]
    if tuned is None or runtime is None or tuned > 0.98:
        return None
    return round((1.0 - runtime) / (1.0 - tuned), 3)


def summary(rows: list[dict[str, Any]], test: str, share: str) -> dict[str, Any]:
    """How often an answer was faster / the same / slower than the default by the test
    (``row[test]``), and the mean share of the tuned gain it captured (``row[share]``) over the
    shapes that had one."""
    verdicts = [r[test] for r in rows]
    shares = [r[share] for r in rows if r.get(share) is not None]
    return {
        "shapes": len(rows),
        "faster": verdicts.count("faster"),
        "same": sum(v in ("same", "same tiling") for v in verdicts),
        "slower": verdicts.count("slower"),
        "shapes_with_tuned_gain": len(shares),
        "mean_captured": round(statistics.mean(shares), 3) if shares else None,
    }


def run_split(op: str, split: str, args: argparse.Namespace) -> dict[str, Any]:
    """Tune the split's training shapes, then answer, tune and measure each held-out shape."""
    train, held_out = SPLITS[(op, split)]
    spec, target = get_op(op), get_target(TARGET)
    started = time.perf_counter()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tilewise-transfer-") as tmp:
        train_db = Path(tmp) / "train.db"
        train_url = f"sqlite:///{train_db}"
        # Each training shape's tuned speedup over its own default tiling.
        gains: dict[frozenset[tuple[str, int]], float | None] = {}
        for shape in train:
            print(f"train {op} {shape}", file=sys.stderr, flush=True)
            trained = tune(train_url, op, Shape(shape), args.budget, args.seed)
            gains[frozenset(shape.items())] = trained["speedup"]
        table = TilingTable.from_db(train_url)
        db = store.open_store(train_url)
        try:
            with db.session() as s:
                doc = table_document(s, op=op)
            print(f"export {op} --measure", file=sys.stderr, flush=True)
            measuring = time.perf_counter()
            with db.session() as s, ExitStack() as backends:
                measured_doc = table_document(
                    s, op=op, measure_cells=cell_measurer(Settings(db_url=train_url), backends)
                )
            measure_s = round(time.perf_counter() - measuring, 1)
        finally:
            db.close()
        measured_table = TilingTable.from_document(measured_doc)
        entries = load_entries(doc).entries
        # The choice grid's model: its kind, error and the share of its predicted gains kept.
        models = [
            {k: c["model"].get(k) for k in ("kind", "error", "scale", "records", "shapes")}
            for c in doc.get("choices", [])
        ]
        for i, dims in enumerate(held_out):
            shape = Shape(dims)
            answer = table.lookup(op, target=TARGET, dtype=DTYPE, shape=dims)
            by_measure = measured_table.lookup(op, target=TARGET, dtype=DTYPE, shape=dims)
            copied, copied_from = copied_answer(entries, op, shape)
            print(
                f"held out {dims}: runtime says {answer.source} ({answer.rule}), "
                f"measured grid {by_measure.source} ({by_measure.rule})",
                file=sys.stderr,
                flush=True,
            )
            tilings = {
                "carried": answer.tiling,
                "measured": by_measure.tiling,
                "copied": copied,
                "default": spec.default_tiling(shape, DTYPE, target),
            }
            tunes: dict[str, dict[str, Any]] = {}
            if not args.no_tune:
                cold_url = f"sqlite:///{Path(tmp) / f'cold{i}.db'}"
                tunes["cold"] = tune(cold_url, op, shape, args.budget, args.seed)
                warm_db = Path(tmp) / f"warm{i}.db"
                shutil.copy(train_db, warm_db)
                tunes["warm"] = tune(f"sqlite:///{warm_db}", op, shape, args.budget, args.seed)
                tilings |= {k: t["best"] for k, t in tunes.items() if t["best"] is not None}
            samples = measure_side_by_side(op, shape, tilings, args.rounds)
            us = {k: _median(v) for k, v in samples.items()}
            tuned = min((v for k, v in us.items() if k in ("cold", "warm") and v), default=None)
            neighbour = dict(answer.workload.shape) if answer.workload else {}
            row: dict[str, Any] = {
                "shape": dims,
                "runtime_source": answer.source,
                "runtime_rule": answer.rule,
                "predicted_gain": answer.predicted_gain,
                "measured_rule": by_measure.rule,
                "measured_gain": by_measure.predicted_gain,
                "neighbour": neighbour,
                "neighbour_speedup": gains.get(frozenset(neighbour.items())),
                "copied_from": copied_from,
                "tilings": {k: dict(t) for k, t in tilings.items()},
                "us": us,
                "samples": {k: len(v) for k, v in samples.items()},
                "carried_over_default": _ratio(us["carried"], us["default"]),
                "copied_over_default": _ratio(us["copied"], us["default"]),
                "measured_over_default": _ratio(us["measured"], us["default"]),
                "carried_vs_default": verdict(samples["carried"], samples["default"]),
                "measured_vs_default": verdict(samples["measured"], samples["default"]),
                "copied_vs_default": verdict(samples["copied"], samples["default"]),
            }
            if tunes:
                optimum = min(min(t["times_us"]) for t in tunes.values())
                row |= {
                    "tuned_over_default": _ratio(tuned, us["default"]),
                    "carried_over_tuned": _ratio(us["carried"], tuned),
                    "default_over_tuned": _ratio(us["default"], tuned),
                    "evals_to_5pct": {
                        k: evals_to(t["times_us"], optimum * 1.05) for k, t in tunes.items()
                    },
                }
            rows.append(row)
    for row in rows:
        row["captured"] = captured(row, "carried_over_default")
        row["measured_captured"] = captured(row, "measured_over_default")
    return {
        "op": op,
        "split": split,
        "budget": args.budget,
        "rounds": args.rounds,
        "train_shapes": train,
        "models": models,
        "measured_grid": {
            k: measured_doc["choices"][0]["model"].get(k) if measured_doc["choices"] else None
            for k in ("sample_shapes",)
        }
        | {
            "cells": len(measured_doc["choices"][0]["cells"]) if measured_doc["choices"] else 0,
            "chosen_cells": sum(c >= 0 for c in measured_doc["choices"][0]["cells"])
            if measured_doc["choices"]
            else 0,
            "seconds": measure_s,
        },
        "machine": cpu_model(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
        "seconds": round(time.perf_counter() - started, 1),
        "held_out": rows,
        "summary": summary(rows, "carried_vs_default", "captured"),
        "measured_summary": summary(rows, "measured_vs_default", "measured_captured"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = ", ".join(f"{o}:{s}" for o, s in SPLITS)
    parser.add_argument(
        "--split",
        default="linear_add_gelu:grid",
        help=f"OP:SPLIT[,OP:SPLIT...] or 'all' (splits: {names})",
    )
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-tune", action="store_true", help="do not tune the held-out shapes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    wanted: list[tuple[str, str]] = []
    for item in names.split(", ") if args.split == "all" else args.split.split(","):
        op, _, split = item.partition(":")
        if (op, split) not in SPLITS:
            parser.error(f"no split {item!r}; splits: {names}")
        wanted.append((op, split))
    reports = [run_split(op, split, args) for op, split in wanted]
    if args.json:
        print(json.dumps(reports, indent=2))
        return
    for report in reports:
        print(
            f"{report['op']} {report['split']}, budget {report['budget']}, {report['machine']}, "
            f"{report['date']}, {report['seconds']} s"
        )
        print(
            "shape | rule | runtime/default (test) | measured rule | measured/default (test) | "
            "copied/default (test) | tuned/default"
        )
        for r in report["held_out"]:
            tuned = r.get("tuned_over_default") or math.nan
            print(
                f"{r['shape']} | {r['runtime_rule']} | {r['carried_over_default']:.3f} "
                f"({r['carried_vs_default']}) | {r['measured_rule']} | "
                f"{r['measured_over_default']:.3f} ({r['measured_vs_default']}) | "
                f"{r['copied_over_default']:.3f} ({r['copied_vs_default']}) | {tuned:.3f}"
            )
        print(json.dumps(report["summary"]), json.dumps(report["measured_summary"]))


if __name__ == "__main__":
    main()
