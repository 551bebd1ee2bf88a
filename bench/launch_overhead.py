"""Benchmark: what ``tilewise.load_ops`` adds to a launch, per call, at a tiny shape.

    .venv/bin/python bench/launch_overhead.py [--calls 5000] [--op linear_add_gelu]
        [--shape M=1,N=16,K=16]

Times, with ``time.perf_counter_ns`` over ``--calls`` calls each (after a warm-up that builds
the variant):

* call: ``ops.<op>(*inputs, out=out)`` on a table holding the shape exactly: the input checks,
  the table lookup, the plan cache and the launch;
* launch: the same variant, tiling and arrays through the host's launch alone (the pool, the
  workspace and ``tw_run``: the kernel's own time on the host);

and reports their percentiles and the overhead (call minus launch, at p50). Prints the machine,
the date and the figures as one JSON object. Not a test: timings depend on the host.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tilewise.export import TableEntry
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.launch import load_ops
from tilewise.launch._twin import TwinLaunch
from tilewise.runtime import TilingTable
from tilewise.types import Shape


def percentiles(fn: Callable[[], object], calls: int) -> dict[str, float]:
    samples = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter_ns()
        fn()
        samples[i] = time.perf_counter_ns() - start
    p50, p99 = np.percentile(samples, [50, 99]) / 1e3
    return {"p50_us": round(float(p50), 2), "p99_us": round(float(p99), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--op", default="linear_add_gelu")
    parser.add_argument("--shape", default="M=1,N=16,K=16")
    args = parser.parse_args()

    spec, twin = get_op(args.op), get_target("cpu-twin")
    shape = spec.validate_shape(Shape.parse(args.shape))
    tiling = spec.default_tiling(shape, "float32", twin)
    entry = TableEntry(spec.name, spec.version, "cpu-twin", "float32", shape, tiling, 1.0, None,
                       None, 1)  # fmt: skip
    ops = load_ops(TilingTable([entry]))
    made = spec.make_inputs(shape, "float32", np.random.default_rng(0))
    layout = spec.array_shapes(shape)
    named = {n: np.ascontiguousarray(value.reshape(layout[n])) for n, value in made.items()}
    inputs = list(named.values())
    attributes = {a: shape[a] for a in spec.attributes}
    op = getattr(ops, spec.name)
    out = op(*inputs, **attributes)
    [output] = (n for n, role in spec.roles.items() if role == "out")
    named[output] = out

    plan = ops._plan(spec, "float32", {n: named[n].shape for n in made}, attributes)
    gm = [None if r == "workspace" else named[n].ctypes.data for n, r in spec.roles.items()]
    twin = plan.launch
    assert isinstance(twin, TwinLaunch)
    host = twin.host

    def launch() -> None:
        host.launch(twin.variant, gm, twin.workspace, twin.packed, twin.block_dim, twin.limits)

    def call() -> None:
        op(*inputs, out=out, **attributes)

    for fn in (launch, call):
        percentiles(fn, min(args.calls, 500))  # warm caches and the pool's threads
    timed_launch, timed_call = percentiles(launch, args.calls), percentiles(call, args.calls)
    print(json.dumps({
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "op": spec.name,
        "shape": dict(shape),
        "block_dim": twin.block_dim,
        "threads": host.threads,
        "calls": args.calls,
        "launch": timed_launch,
        "call": timed_call,
        "overhead_p50_us": round(timed_call["p50_us"] - timed_launch["p50_us"], 2),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
