"""What a call of a tuned op adds to its kernel, per call, at a tiny shape.

Three ways to run the same kernel with the same tiling on the same arrays, timed one call at a
time with ``time.perf_counter_ns``:

* ``launch`` — the variant through the host's launch alone (the thread pool, the workspace and
  ``tw_run``): the kernel's own time on the host;
* ``call`` — ``ops.<op>(*inputs, out=out)`` on a table holding the shape exactly: the input
  checks, the table lookup (the plan cache), and the launch;
* ``torch`` — ``torch.ops.tilewise.<op>(*tensors)`` through the same table (when torch is
  installed): PyTorch's dispatch of the custom op, the tensors' wrapping as arrays, a fresh
  output tensor, and the call.

They are timed in interleaved rounds (a slice of each per round), so a busy moment of a shared
machine slows all three; the overhead is a call's median minus the launch's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import numpy as np

from tilewise.export import TableEntry
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.launch import load_ops
from tilewise.launch._twin import TwinLaunch
from tilewise.runtime import TilingTable
from tilewise.settings import Settings
from tilewise.types import Shape

OP = "linear_add_gelu"
SHAPE = "M=1,N=16,K=16"
CALLS = 5000
DTYPE = "float32"


def _samples_ns(fn: Callable[[], object], calls: int) -> list[int]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return samples


def _percentiles(samples: list[int]) -> dict[str, float]:
    p50, p99 = np.percentile(np.asarray(samples, dtype=np.float64), [50, 99]) / 1e3
    return {"p50_us": round(float(p50), 2), "p99_us": round(float(p99), 2)}


def measure_overhead(
    *,
    op: str = OP,
    shape: str = SHAPE,
    calls: int = CALLS,
    rounds: int = 5,
    with_torch: bool = True,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """The percentiles of each way (``calls`` calls each, over ``rounds`` interleaved rounds)
    and the overheads at p50: ``overhead_us`` = call - launch, ``torch_overhead_us`` = torch -
    launch (None without torch). The variant is built first (the settings' build cache)."""
    spec, twin = get_op(op), get_target("cpu-twin")
    parsed = spec.validate_shape(Shape.parse(shape))
    tiling = spec.default_tiling(parsed, DTYPE, twin)
    entry = TableEntry(spec.name, spec.version, "cpu-twin", DTYPE, parsed, tiling, 1.0, None,
                       None, 1)  # fmt: skip
    ops = load_ops(TilingTable([entry]), settings=settings)
    made = spec.make_inputs(parsed, DTYPE, np.random.default_rng(0))
    layout = spec.array_shapes(parsed)
    named = {n: np.ascontiguousarray(value.reshape(layout[n])) for n, value in made.items()}
    inputs = list(named.values())
    attributes = {a: parsed[a] for a in spec.attributes}
    call_op = getattr(ops, spec.name)
    out = call_op(*inputs, **attributes)
    [output] = (n for n, role in spec.roles.items() if role == "out")
    named[output] = out

    # The launch as Ops.call makes it, without the checks and the lookup around it.
    plan = ops._plan(spec, DTYPE, {n: named[n].shape for n in made}, attributes).launch
    assert isinstance(plan, TwinLaunch)  # a cpu-twin table
    gm = [None if r == "workspace" else named[n].ctypes.data for n, r in spec.roles.items()]
    host = plan.host

    def launch() -> None:
        host.launch(plan.variant, gm, plan.workspace, plan.packed, plan.block_dim, plan.limits)

    def call() -> None:
        call_op(*inputs, out=out, **attributes)

    ways: dict[str, Callable[[], object]] = {"launch": launch, "call": call}
    with ExitStack() as stack:
        if with_torch:
            import torch

            stack.enter_context(torch.inference_mode())  # as a model runs: no autograd
            ways["torch"] = _torch_call(spec.name, inputs, attributes, ops.table, settings)
        for fn in ways.values():
            _samples_ns(fn, min(calls, 500))  # warm the caches and the pool's threads
        per_round = max(1, calls // rounds)
        samples: dict[str, list[int]] = {name: [] for name in ways}
        for _ in range(rounds):
            for name, fn in ways.items():
                samples[name] += _samples_ns(fn, per_round)
    timed = {name: _percentiles(values) for name, values in samples.items()}
    launch_p50 = timed["launch"]["p50_us"]
    torch_p50 = timed["torch"]["p50_us"] if "torch" in timed else None
    return {
        "op": spec.name,
        "shape": dict(parsed),
        "dtype": DTYPE,
        "block_dim": plan.block_dim,
        "threads": host.threads,
        "calls": per_round * rounds,
        "rounds": rounds,
        "launch_us": launch_p50,
        "call_us": timed["call"]["p50_us"],
        "overhead_us": round(timed["call"]["p50_us"] - launch_p50, 2),
        "torch_call_us": torch_p50,
        "torch_overhead_us": None if torch_p50 is None else round(torch_p50 - launch_p50, 2),
        "percentiles": timed,
    }


def _torch_call(
    op: str,
    inputs: list[np.ndarray],
    attributes: dict[str, int],
    table: TilingTable,
    settings: Settings | None,
) -> Callable[[], object]:
    """``torch.ops.tilewise.<op>`` on tensors over ``inputs``, through ``table`` (this makes
    it the table of every torch op of the process: see :func:`tilewise.torch.use_table`)."""
    import torch

    import tilewise.torch

    tilewise.torch.use_table(table, settings=settings)
    tensors = [torch.from_numpy(a) for a in inputs]
    fn = getattr(torch.ops.tilewise, op)

    def call() -> None:
        fn(*tensors, **attributes)

    call()
    return call
