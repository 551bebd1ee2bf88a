"""``tilewise bench models``: blocks of models on the tuned kernels against PyTorch.

Each block of :mod:`tilewise.bench.blocks` (the LLaMA MLP at several token counts, the
Conv+BN+ReLU block) runs through its tilewise modules, the plain PyTorch module eager, and the
same module under ``torch.compile``, float32 on the CPU, in one run on this machine:

1. **The workloads.** Each tilewise module runs once on a table that notes what it is asked:
   the (op, dtype, shape) of every kernel call the block makes.
2. **Tuning.** Each workload is tuned with ``budget`` evaluations into the database ``db_url``
   (default: a temporary SQLite file), unless that database already holds a tiling for
   exactly that shape (then it is used as it is); budget 0 tunes nothing. The torch ops then
   use that database's table (:func:`tilewise.torch.use_table`): a shape it does not hold gets
   the runtime's answer (nearest, else default), as any user's would.
3. **Correctness.** Each tilewise module's output is compared with the PyTorch module's, with
   the tolerance of the ops it calls (the loosest); a mismatch raises :class:`BlockMismatch`
   before anything is timed.
4. **Timing.** ``torch.compile(module, dynamic=False)`` (inductor, default mode: a graph per
   shape, the best case for a fixed-shape inference) is compiled and run once first: the
   compile is not in the timings (``compile_s`` says what it took). Then every contender of a
   block (the tilewise modules, eager, compiled, and the block's parts) is timed in
   ``rounds`` interleaved rounds (:func:`tilewise.bench.timing.interleaved`: a quarter-second
   pause and warm-up runs before each visit, which times at least ``TIMED_MS`` of runs and
   reports their median), all under ``torch.inference_mode()``; a row reports the median
   of its rounds, in µs.
5. **Per-call overhead.** :func:`tilewise.bench.overhead.measure_overhead` at its tiny shape.

``ratio_vs_compile`` is tilewise's time over torch.compile's: above 1, tilewise is slower.
"""

from __future__ import annotations

import datetime
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

import tilewise.torch
from tilewise.bench import overhead
from tilewise.bench.blocks import (
    CONV,
    HIDDEN,
    INTERMEDIATE,
    TOKENS,
    Block,
    conv_bn_relu_block,
    llama_mlp_blocks,
)
from tilewise.bench.machine import machine_info
from tilewise.bench.timing import (
    ROUND_REPEATS,
    ROUNDS,
    SETTLE_S,
    Timer,
    interleaved,
    keep_freed_memory,
    median_ms,
    spread,
)
from tilewise.errors import TilewiseError
from tilewise.kernels.ops import get_op
from tilewise.kernels.ops._base import Fn
from tilewise.runtime import Answer, TilingTable
from tilewise.settings import Settings
from tilewise.types import Shape

#: Tune evaluations per workload: enough for the search to try the default, the nearest tuned
#: shapes' best and a few of its own, within a run of a few minutes.
DEFAULT_BUDGET = 8
#: A timed visit runs a contender at least this long (and at least ROUND_REPEATS times): a
#: median of three runs of a 50 µs call says little.
TIMED_MS = 50.0
TARGET = "cpu-twin"
DTYPE = "float32"

Workload = tuple[str, str, Shape]  # op, dtype, shape

__all__ = ["DEFAULT_BUDGET", "TIMED_MS", "BlockMismatch", "print_report", "run", "table"]


class BlockMismatch(TilewiseError):
    """A tilewise module's output differs from the PyTorch module's beyond the tolerance."""


class _Asked(TilingTable):
    """An empty table (every shape gets its default tiling) that notes what it is asked."""

    def __init__(self) -> None:
        super().__init__([])
        self.asked: dict[Workload, None] = {}

    def lookup(self, op: str, *, target: str, dtype: str, shape: Mapping[str, int]) -> Answer:
        self.asked[(op, dtype, Shape(shape))] = None
        return super().lookup(op, target=target, dtype=dtype, shape=shape)


def workloads(block: Block, settings: Settings) -> dict[str, list[Workload]]:
    """The kernel calls of each of the block's tilewise modules, by contender name: each runs
    once on an empty table that notes what it is asked (every shape gets its default tiling;
    the torch ops keep that table until the next :func:`tilewise.torch.use_table`)."""
    found = {}
    with torch.inference_mode():
        for name, module in block.tilewise.items():
            asked = _Asked()
            tilewise.torch.use_table(asked, settings=settings)
            module(block.x)
            found[name] = list(asked.asked)
    return found


def tune(
    todo: Sequence[Workload],
    *,
    db_url: str,
    budget: int,
    settings: Settings,
    seed: int,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Tune each workload into ``db_url`` (see the module docstring); what was done for each."""
    from tilewise import store
    from tilewise.kernels.backends import create_backend
    from tilewise.kernels.targets import twin_target
    from tilewise.search import Budget, Tuner

    local = settings.model_copy(update={"db_url": db_url})
    db = store.open_store(db_url)  # a new database is created here
    done = []
    try:
        before = TilingTable.from_db(db_url, target=TARGET)
        with create_backend(TARGET, settings=local) as backend:
            for op, dtype, shape in todo:
                entry: dict[str, Any] = {"op": op, "dtype": dtype, "shape": dict(shape)}
                held = before.lookup(op, target=TARGET, dtype=dtype, shape=shape).source
                if held == "exact":
                    entry["tuned"] = "before: the database holds this shape"
                elif budget > 0:
                    log(f"tuning {op} {shape.key()}, budget {budget}")
                    tuner = Tuner(
                        spec=get_op(op),
                        shape=shape,
                        dtype=dtype,
                        target=twin_target(),
                        backend=backend,
                        db=db,
                        settings=local,
                    )
                    result = tuner.run(Budget(budget), seed=seed)
                    best, default = result.best, result.default
                    entry.update(
                        tuned="now",
                        evaluations=result.progress.evaluations,
                        seconds=round(result.seconds, 1),
                        best_us=None if best is None else round(best.latency_us, 1),
                        default_us=None if default is None else round(default.latency_us, 1),
                    )
                else:
                    entry["tuned"] = "no: budget 0"
                done.append(entry)
    finally:
        db.close()
    return done


def _timer(fn: Fn) -> Timer:
    """Warm-up runs, then the median of enough runs to fill TIMED_MS (by the last visit)."""
    last: list[float] = []

    def measure(warmup: int) -> float:
        repeats = ROUND_REPEATS
        if last:
            repeats = min(1000, max(repeats, math.ceil(TIMED_MS / max(last[-1], 1e-3))))
        value = median_ms(fn, repeats=repeats, warmup=warmup)
        last.append(value)
        return value

    return measure


def _us(value: float | None) -> float | None:
    return None if value is None else float(f"{value * 1e3:.4g}")


def tolerance(found: Sequence[Workload]) -> tuple[float, float]:
    """The loosest (rtol, atol) of the ops of ``found``."""
    pairs = [get_op(op).tolerance(dtype, shape) for op, dtype, shape in found]
    return max(r for r, _ in pairs), max(a for _, a in pairs)


def check(block: Block, found: Mapping[str, Sequence[Workload]]) -> dict[str, Any]:
    """Each tilewise module against the PyTorch module, on the table in use; what each call
    ran (its last kernel call's choice) and the largest difference.

    Raises:
        BlockMismatch: naming the block, the module and how far off it is.
    """
    ops = tilewise.torch.current_ops()
    checked: dict[str, Any] = {"tilings": {}, "max_abs_error": {}, "tolerance": {}}
    with torch.inference_mode():
        want = block.reference(block.x)
        for name, module in block.tilewise.items():
            got = module(block.x)
            choice = ops.last_choice
            rtol, atol = tolerance(found[name])
            error = float((got - want).abs().max())
            try:
                torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
            except AssertionError as exc:
                detail = " ".join(str(exc).split())
                raise BlockMismatch(
                    f"{block.name} {dict(block.config)}: {name} differs from the PyTorch "
                    f"module (rtol {rtol}, atol {atol}): {detail}"
                ) from None
            checked["max_abs_error"][name] = error
            checked["tolerance"][name] = [rtol, atol]
            if choice is not None:
                checked["tilings"][name] = {
                    "op": choice.op,
                    "shape": dict(choice.shape),
                    "tiling": dict(choice.tiling),
                    "source": choice.source,
                }
    return checked


def bench_block(
    block: Block,
    found: Mapping[str, Sequence[Workload]],
    *,
    rounds: int,
    settle: float,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """One row: the block checked, compiled, then timed (see the module docstring)."""
    checked = check(block, found)
    x = block.x
    with torch.inference_mode():
        started = time.perf_counter()
        compiled: Any = torch.compile(block.reference, dynamic=False)
        compiled(x)
        compile_s = time.perf_counter() - started
        contenders: dict[str, Timer] = {}
        for name, module in block.tilewise.items():
            contenders[name] = _timer(partial(module, x))
        contenders["eager"] = _timer(lambda: block.reference(x))
        contenders["compile"] = _timer(lambda: compiled(x))
        for name, part in block.parts.items():
            if name.startswith("compile_"):
                part = torch.compile(part, dynamic=False)
                part(x)
            contenders[name] = _timer(partial(part, x))
        log(f"{block.name} {dict(block.config)}: {rounds} rounds of {', '.join(contenders)}")
        samples = interleaved(contenders, rounds, settle=settle)
    got = {name: _us(statistics.median(v)) for name, v in samples.items() if v}
    ours, theirs, eager = got.get("tilewise"), got.get("compile"), got.get("eager")
    return {
        "block": block.name,
        "tokens": block.config.get("tokens"),
        "config": dict(block.config),
        "tilewise_us": ours,
        "tilewise_unfused_us": got.get("tilewise_unfused"),
        "eager_us": eager,
        "compile_us": theirs,
        "ratio_vs_compile": round(ours / theirs, 3) if ours and theirs else None,
        "ratio_vs_eager": round(ours / eager, 3) if ours and eager else None,
        "parts_us": {name: got.get(name) for name in block.parts},
        "compile_s": round(compile_s, 1),
        "rounds": rounds,
        "spread": {name: spread(v) for name, v in samples.items() if v},
        "load": round(os.getloadavg()[0], 2),  # the 1-minute load average as the row ended
        **checked,
    }


@contextmanager
def _database(db_url: str | None) -> Iterator[str]:
    if db_url is not None:
        yield db_url
        return
    with tempfile.TemporaryDirectory(prefix="tilewise-models-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'models.db'}"


def run(
    *,
    settings: Settings,
    hidden: int = HIDDEN,
    intermediate: int = INTERMEDIATE,
    tokens: Sequence[int] = TOKENS,
    conv: Mapping[str, int] = CONV,
    rounds: int = ROUNDS,
    budget: int = DEFAULT_BUDGET,
    db_url: str | None = None,
    seed: int = 0,
    settle: float = SETTLE_S,
    overhead_calls: int = overhead.CALLS,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """The whole benchmark; one JSON-serialisable report (see the module docstring).

    Raises:
        BlockMismatch: a tilewise module's output is wrong.
        StoreError, SchemaError: ``db_url`` cannot be used.
    """
    from tilewise.store import safe_url

    started = time.perf_counter()
    load_before = os.getloadavg()
    keep_freed_memory()
    torch.set_num_threads(os.cpu_count() or 1)
    # A graph per token count (dynamic=False); dynamo's default limit of recompilations per
    # function (8) would send the rest of a long --tokens list to eager without a word.
    torch._dynamo.config.recompile_limit = max(
        torch._dynamo.config.recompile_limit, len(tokens) + 2
    )
    blocks = [
        *llama_mlp_blocks(
            hidden=hidden, intermediate=intermediate, tokens=tuple(tokens), seed=seed
        ),
        conv_bn_relu_block(conv, seed=seed),
    ]
    log("running each block's tilewise modules once: which kernels they call")
    found = [workloads(block, settings) for block in blocks]
    todo = list(dict.fromkeys(w for per in found for ws in per.values() for w in ws))
    with _database(db_url) as url:
        tuning = tune(todo, db_url=url, budget=budget, settings=settings, seed=seed, log=log)
        ops = tilewise.torch.use_table(url, settings=settings)
    for entry in tuning:
        answer = ops.table.lookup(
            entry["op"], target=TARGET, dtype=entry["dtype"], shape=entry["shape"]
        )
        entry.update(source=answer.source, tiling=dict(answer.tiling))
    rows = [
        bench_block(block, per, rounds=rounds, settle=settle, log=log)
        for block, per in zip(blocks, found, strict=True)
    ]
    log("per-call overhead")
    calls = overhead.measure_overhead(calls=overhead_calls, rounds=rounds, settings=settings)
    return {
        "benchmark": "tilewise bench models",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
        "machine": {
            **machine_info(),
            "load_before": [round(v, 2) for v in load_before],
            "load_after": [round(v, 2) for v in os.getloadavg()],
        },
        "config": {
            "dtype": DTYPE,
            "hidden": hidden,
            "intermediate": intermediate,
            "tokens": list(tokens),
            "conv": dict(conv),
            "rounds": rounds,
            "budget": budget,
            "db": "temporary SQLite" if db_url is None else safe_url(db_url),
            "seed": seed,
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "compile": "torch.compile(module, dynamic=False), inductor default mode; compile "
            "and first call not timed",
        },
        "tuning": tuning,
        "rows": rows,
        "overhead": calls,
        "seconds": round(time.perf_counter() - started, 1),
    }


# -- the report --------------------------------------------------------------------------------
def _cell(value: float | None, suffix: str = "") -> str:
    return "-" if value is None else f"{value:g}{suffix}"


def _what(row: Mapping[str, Any]) -> str:
    if row["tokens"] is not None:
        return f"tokens={row['tokens']}"
    return ",".join(f"{k}={v}" for k, v in row["config"].items())


def table(report: Mapping[str, Any]) -> Table:
    """The rows as a table, µs medians."""
    config, machine = report["config"], report["machine"]
    t = Table(
        title=f"tilewise bench models, {config['dtype']}, {machine['cpu']} ({machine['cores']} "
        f"cores), {report['date']}; tune budget {config['budget']}; LLaMA MLP hidden "
        f"{config['hidden']}, intermediate {config['intermediate']}; medians of "
        f"{config['rounds']} interleaved rounds, µs"
    )
    columns = ("block", "size", "tilewise", "unfused", "eager", "compile", "tilewise/compile")
    parts = list(dict.fromkeys(p for row in report["rows"] for p in row["parts_us"]))
    for column in (*columns, *parts):
        t.add_column(column, justify="left" if column in ("block", "size") else "right")
    for row in report["rows"]:
        t.add_row(
            row["block"],
            _what(row),
            _cell(row["tilewise_us"]),
            _cell(row["tilewise_unfused_us"]),
            _cell(row["eager_us"]),
            _cell(row["compile_us"]),
            _cell(row["ratio_vs_compile"], "×"),
            *(_cell(row["parts_us"].get(p)) for p in parts),
        )
    return t


def print_report(report: Mapping[str, Any], width: int) -> None:
    """The table, the per-call overhead and the tuning done."""
    wide = Console(width=max(width, 160))
    wide.print(table(report))
    o = report["overhead"]
    torch_part = (
        ""
        if o["torch_call_us"] is None
        else f"; torch.ops.tilewise call {o['torch_call_us']} µs (+{o['torch_overhead_us']} µs)"
    )
    wide.print(
        f"per-call overhead, {o['op']} {o['shape']}: launch {o['launch_us']} µs, ops call "
        f"{o['call_us']} µs (+{o['overhead_us']} µs){torch_part}; p50 of {o['calls']} calls",
        markup=False,
    )
    for entry in report["tuning"]:
        extra = (
            f", {entry['evaluations']} evaluations in {entry['seconds']} s"
            if entry["tuned"] == "now"
            else ""
        )
        wide.print(
            f"{entry['op']} {entry['shape']}: tuned {entry['tuned']}{extra}; the table's "
            f"tiling: {entry['source']}",
            markup=False,
        )
