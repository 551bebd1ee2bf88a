"""``tilewise bench kernels``: the twin's kernels against numpy, PyTorch and the roofline.

For every op at each of its ``benchmark_shapes``, fp32, in one run on this machine:

* ``default_ms`` / ``tuned_ms`` — the kernel on the CPU twin with the op's default tiling and with
  the best tiling of a tune run of ``budget`` evaluations (a throw-away SQLite database; budget 0
  skips tuning, tuned = default). Checked against the reference at its first launch.
* ``numpy_ms`` — unfused numpy, one call per original operator (several ufuncs where the
  operator has no single numpy call: GELU, SiLU, LayerNorm), preallocated and in place.
  ``numpy_2t_ms`` — the same for the elementwise chains, split in two halves over two threads.
* ``torch_eager_ms`` / ``torch_compile_ms`` — when torch is installed (extra ``bench``).
* ``roofline_ms`` — max(flops / peak FLOP/s, fused GM bytes / bandwidth) with the peak measured
  here at the start (:func:`tilewise.bench.machine.measure_machine`) and the bandwidth of a
  plain copy that moves as many bytes as the fused kernel (so a working set that stays in the
  caches is held to cache speed, as a copy of it would be), measured in the row's rounds.

Everything a row times is timed in ``ROUNDS`` interleaved rounds: each round measures every
contender once (a median of ``ROUND_REPEATS`` runs after a warm-up), and a row reports the
median of its rounds. These machines are shared: a busy minute then slows every contender of
the row, not the one that happened to be measured during it, and the ratios hold.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from tilewise.bench.machine import Machine, machine_info, measure_machine
from tilewise.bench.timing import (
    ROUND_REPEATS,
    ROUNDS,
    SETTLE_S,
    Timer,
    halves,
    interleaved,
    keep_freed_memory,
    median_ms,
    spread,
)
from tilewise.kernels.backends import MeasureOptions
from tilewise.kernels.ops import OpSpec, get_op, list_ops
from tilewise.kernels.ops._base import Fn
from tilewise.kernels.targets import twin_target
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling

DTYPE = "float32"
DEFAULT_BUDGET = 40  # enough for the search to move most rows off the default (see README)
ROW_KEYS = (
    "op",
    "shape",
    "dtype",
    "default_ms",
    "tuned_ms",
    "numpy_ms",
    "numpy_2t_ms",
    "torch_eager_ms",
    "torch_compile_ms",
    "roofline_ms",
)

__all__ = [
    "DEFAULT_BUDGET",
    "ROUNDS",
    "ROW_KEYS",
    "Machine",
    "Timer",
    "bench_case",
    "cases",
    "interleaved",
    "print_report",
    "run",
    "spread",
    "table",
]


# -- the alternatives --------------------------------------------------------------------------
def torch_callables(
    spec: OpSpec, shape: Shape, inputs: Mapping[str, np.ndarray], notes: list[str]
) -> tuple[Fn | None, Fn | None]:
    """(eager, compiled) calls of the op in torch, compiled already; None where unavailable."""
    try:
        import torch
    except ImportError:
        notes.append("torch not installed (pip install 'tilewise[bench]')")
        return None, None
    torch.set_num_threads(os.cpu_count() or 1)
    keep_freed_memory()
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in inputs.items()}
    f, args = spec.baselines().torch_baseline(shape, tensors)

    def eager() -> None:
        with torch.inference_mode():
            f(*args)

    compiled_call: Fn | None = None
    try:
        compiled: Any = torch.compile(f)
        with torch.inference_mode():
            compiled(*args)  # compile outside the timing

        def compiled_call() -> None:
            with torch.inference_mode():
                compiled(*args)

    except Exception as exc:  # torch.compile's failures are many and varied
        notes.append(
            f"torch.compile failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        )
    return eager, compiled_call


def kernel_timer(
    backend: Any, spec: OpSpec, shape: Shape, tiling: Tiling, notes: list[str], label: str
) -> Timer:
    """Times the kernel with ``tiling`` (ms), checking its output against the reference the
    first time; None (and a note) once it failed to build or run."""
    target = twin_target()
    build = backend.build(spec, spec.compile_key(tiling, DTYPE))
    if not build.ok:
        notes.append(f"{label}: build failed: {build.error}")
        return lambda _: None
    state = {"checked": False, "failed": False}

    def measure(warmup: int) -> float | None:
        if state["failed"]:
            return None
        run = backend.run(
            build,
            spec,
            shape=shape,
            dtype=DTYPE,
            target=target,
            tiling=tiling,
            check=not state["checked"],
            measure=MeasureOptions(warmup=warmup, repeats=ROUND_REPEATS, max_seconds=60.0),
        )
        state["checked"] = True
        if not run.ok or run.median_us is None:
            notes.append(f"{label}: {run.status}: {run.error}")
            state["failed"] = True
            return None
        return float(run.median_us) / 1e3

    return measure


def tune_best(
    backend: Any, spec: OpSpec, shape: Shape, settings: Settings, budget: int, seed: int
) -> tuple[Tiling | None, dict[str, Any]]:
    """Tune in a throw-away SQLite database; the best tiling and the run's summary."""
    from tilewise import store
    from tilewise.search import Budget, Tuner

    with tempfile.TemporaryDirectory(prefix="tilewise-bench-") as tmp:
        local = settings.model_copy(update={"db_url": f"sqlite:///{Path(tmp) / 'bench.db'}"})
        db = store.open_store(local.db_url)
        try:
            tuner = Tuner(
                spec=spec,
                shape=shape,
                dtype=DTYPE,
                target=twin_target(),
                backend=backend,
                db=db,
                settings=local,
            )
            result = tuner.run(Budget(budget), seed=seed)
        finally:
            db.close()
    summary = {
        "evaluations": result.progress.evaluations,
        "failed": result.progress.failed,
        "seconds": round(result.seconds, 1),
    }
    return (result.best.tiling if result.best else None), summary


def bench_case(
    op: str,
    shape_dims: Mapping[str, int],
    *,
    backend: Any,
    settings: Settings,
    machine: Machine,
    budget: int = DEFAULT_BUDGET,
    seed: int = 0,
    with_torch: bool = True,
    settle: float = SETTLE_S,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """One row: the kernel with the default and the tuned tiling, and every alternative."""
    spec = get_op(op)
    shape = spec.validate_shape(dict(shape_dims))
    target = twin_target()
    notes: list[str] = []
    default = spec.default_tiling(shape, DTYPE, target)

    tuned_tiling, tune_summary = default, None
    if budget > 0:
        log(f"{op} {shape.key()}: tuning, budget {budget}")
        best, tune_summary = tune_best(backend, spec, shape, settings, budget, seed)
        if best is None:
            notes.append("tuning found no tiling that ran; tuned = default")
        else:
            tuned_tiling = best
    inputs = spec.make_inputs(shape, DTYPE, np.random.default_rng(seed))
    traffic = spec.traffic(shape, DTYPE)
    with ThreadPoolExecutor(2) as pool:
        one, two = spec.baselines().numpy_baseline(shape, inputs, partial(halves, pool=pool))
        eager, compiled = (None, None)
        if with_torch:
            eager, compiled = torch_callables(spec, shape, inputs, notes)
        else:
            notes.append("torch skipped")

        def timed(fn: Fn) -> Timer:
            return lambda warmup: median_ms(fn, repeats=ROUND_REPEATS, warmup=warmup)

        contenders = {"default": kernel_timer(backend, spec, shape, default, notes, "default")}
        if tuned_tiling != default:
            contenders["tuned"] = kernel_timer(backend, spec, shape, tuned_tiling, notes, "tuned")
        for name, fn in (
            ("numpy", one),
            ("numpy_2t", two),
            ("torch_eager", eager),
            ("torch_compile", compiled),
        ):
            if fn is not None:
                contenders[name] = timed(fn)
        probe = machine.probe
        if probe is not None:
            contenders["bandwidth"] = lambda _: probe(traffic.fused_bytes)  # best of its runs
        log(f"{op} {shape.key()}: {ROUNDS} interleaved rounds of {', '.join(contenders)}")
        rounds = interleaved(contenders, ROUNDS, settle=settle)
    got = {name: statistics.median(v) for name, v in rounds.items() if v}
    default_ms = got.get("default")
    tuned_ms = default_ms if tuned_tiling == default else got.get("tuned")
    numpy_ms, numpy_2t_ms = got.get("numpy"), got.get("numpy_2t")
    eager_ms, compiled_ms = got.get("torch_eager"), got.get("torch_compile")

    bandwidth = got.get("bandwidth") or machine.bandwidth_for(traffic.fused_bytes)
    roofline = machine.roofline_ms(traffic.flops, traffic.fused_bytes, bandwidth)
    compute_bound = traffic.flops / machine.peak_flops > traffic.fused_bytes / bandwidth
    row: dict[str, Any] = {
        "op": op,
        "shape": {d: shape[d] for d in spec.dims},
        "dtype": DTYPE,
        "default_ms": _r(default_ms),
        "tuned_ms": _r(tuned_ms),
        "numpy_ms": _r(numpy_ms),
        "numpy_2t_ms": _r(numpy_2t_ms),
        "torch_eager_ms": _r(eager_ms),
        "torch_compile_ms": _r(compiled_ms),
        "roofline_ms": _r(roofline),
        # Beyond the schema of issue 6: what the verdicts need.
        "bound": "compute" if compute_bound else "memory",
        "budget": budget,
        "tune": tune_summary,
        "default_tiling": dict(default),
        "tuned_tiling": dict(tuned_tiling),
        "fused_bytes": traffic.fused_bytes,
        "bandwidth_gbs": round(bandwidth / 1e9, 2),  # what roofline and bw_fraction use
        "flops": traffic.flops,
        "matmul_flops": spec.matmul_flops(shape),
        "rounds": ROUNDS,
        "spread": {name: spread(v) for name, v in rounds.items() if v},
        "notes": notes,
    }
    row.update(goal_fractions(row, machine))
    return row


def _r(value: float | None) -> float | None:
    # Four significant digits: µs resolution at ms scale, and tiny shapes do not round to 0.
    return None if value is None else float(f"{value:.4g}")


def goal_fractions(row: Mapping[str, Any], machine: Machine) -> dict[str, Any]:
    """Issue 6 item 4: memory-bound chains as a fraction of the measured bandwidth (fused bytes
    over the tuned time, against the bandwidth the row's roofline used); matmul ops as a
    fraction of the measured peak (2·MNK-type flops of the matmul part over the whole tuned
    time, so the epilogue counts against it)."""
    tuned = row["tuned_ms"]
    others = [
        row[k]
        for k in ("numpy_ms", "numpy_2t_ms", "torch_eager_ms", "torch_compile_ms")
        if row[k] is not None
    ]
    out: dict[str, Any] = {"bw_fraction": None, "peak_fraction": None, "best_alternative_ms": None}
    if others:
        out["best_alternative_ms"] = min(others)
    if tuned is None:
        return out
    if not row["matmul_flops"]:  # an elementwise chain: memory-bound
        bandwidth = row["bandwidth_gbs"] * 1e9
        out["bw_fraction"] = round(row["fused_bytes"] / (tuned / 1e3) / bandwidth, 3)
    elif row["matmul_flops"]:
        out["peak_fraction"] = round(row["matmul_flops"] / (tuned / 1e3) / machine.peak_flops, 3)
    return out


def cases(op: str | None) -> list[tuple[str, dict[str, int]]]:
    """(op, shape) of every op's ``benchmark_shapes``, or of one op's."""
    specs = [get_op(op)] if op is not None else list_ops()
    return [
        (spec.name, dict(shape))
        for spec in specs
        for shape in spec.parse_shapes(spec.benchmark_shapes)
    ]


# -- a whole run -------------------------------------------------------------------------------
def run(
    todo: list[tuple[str, dict[str, int]]],
    *,
    backend: Any,
    settings: Settings,
    budget: int = DEFAULT_BUDGET,
    seed: int = 0,
    log: Callable[[str], None] = lambda _: None,
) -> tuple[list[dict[str, Any]], Machine]:
    """Measure the machine, then one row per (op, shape) of ``todo``."""
    started = time.perf_counter()
    log("measuring the machine: peak FLOP/s and bandwidth")
    machine = measure_machine()
    log(
        f"peak {machine.peak_flops / 1e9:.1f} GFLOP/s, bandwidth "
        f"{machine.bandwidth / 1e9:.1f} GB/s ({machine.how})"
    )
    rows = [
        bench_case(
            name,
            dims,
            backend=backend,
            settings=settings,
            machine=machine,
            budget=budget,
            seed=seed,
            log=log,
        )
        for name, dims in todo
    ]
    log(f"done in {time.perf_counter() - started:.0f} s")
    return rows, machine


def print_report(rows: list[dict[str, Any]], machine: Machine, budget: int, width: int) -> None:
    """The table, then each row's notes."""
    wide = Console(width=max(width, 200))
    wide.print(table(rows, machine, budget))
    for row in rows:
        for note in row["notes"]:
            wide.print(f"{row['op']} {_shape_text(row['shape'])}: {note}", markup=False)


def _shape_text(shape: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items() if k not in ("stride", "pad", "R", "S"))


def table(rows: list[dict[str, Any]], machine: Machine, budget: int) -> Table:
    info = machine_info()
    title = (
        f"tilewise bench kernels, fp32, {info['cpu']} ({info['cores']} cores), "
        f"{time.strftime('%Y-%m-%d')}; tuned = best of a {budget}-evaluation tune run; "
        f"peak {machine.peak_flops / 1e9:.1f} GFLOP/s, bandwidth "
        f"{machine.bandwidth / 1e9:.1f} GB/s (measured); medians in ms"
    )
    t = Table(title=title)
    for column in (
        "op",
        "shape",
        "default",
        "tuned",
        "numpy",
        "numpy 2t",
        "torch",
        "compile",
        "roofline",
        "best alt / tuned",
        "roofline / tuned",
        "goal metric",
    ):
        t.add_column(column, justify="left" if column in ("op", "shape") else "right")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    for row in rows:
        tuned, alt = row["tuned_ms"], row["best_alternative_ms"]
        ratio = f"{alt / tuned:.2f}x" if tuned and alt else "-"
        roof = f"{row['roofline_ms'] / tuned:.0%}" if tuned else "-"
        if row["bw_fraction"] is not None:
            goal = f"{row['bw_fraction']:.0%} of BW"
        elif row["peak_fraction"] is not None:
            goal = f"{row['peak_fraction']:.0%} of peak"
        else:
            goal = "-"
        t.add_row(
            row["op"],
            _shape_text(row["shape"]),
            ms(row["default_ms"]),
            ms(tuned),
            ms(row["numpy_ms"]),
            ms(row["numpy_2t_ms"]),
            ms(row["torch_eager_ms"]),
            ms(row["torch_compile_ms"]),
            ms(row["roofline_ms"]),
            ratio,
            roof,
            goal,
        )
    return t
