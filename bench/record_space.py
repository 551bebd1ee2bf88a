"""Record an exhaustive tuning space of one op on the cpu-twin, as a replay CSV.

    TILEWISE_REPEATS=3 .venv/bin/python bench/record_space.py --shape M=64,N=64,K=64 \\
        --out tests/data/linear_add_gelu_M64_N64_K64.csv

Every tiling of the (sub-)space that passes the op's static check (``spec.check``) is built
and run on the real cpu-twin backend, its output checked against the numpy reference, then
timed (settings' warm-up and repeats: set ``TILEWISE_REPEATS``). The CSV has one column per
tunable (fixed ones kept, as constant columns), then ``time_ms`` = the median; ``inf`` = the
build failed, the launch crashed or timed out, or the answer was wrong. A tiling that fails the
static check is not a row: for the replay target it breaks the restrictions.

The full space of linear_add_gelu has millions of valid tilings even at 64³, so by default the
tunables that do not change the time at these sizes are fixed (``--fix``): the L1 steps and
depths (K is one or two base blocks deep, so they only reorder the same copies), the L0C double
buffering and the iteration order (one or two blocks per core). On the twin at 64³ changing
any of them one at a time from the default tiling moves the time by less than the run-to-run
spread.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import sys
import time
from pathlib import Path

from tilewise.kernels.backends import MeasureOptions, create_backend
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.settings import get_settings
from tilewise.types import Shape, Tiling

DEFAULT_FIX = "stepM=1,stepN=1,depthA1=2,depthB1=2,dbL0C=1,iterateOrder=0"


def enumerate_tilings(
    op: str, shape: Shape, dtype: str, target_name: str, fixed: dict[str, int]
) -> tuple[list[str], list[Tiling]]:
    """Column names (the op's tunables in order) and every tiling of the sub-space that passes
    the static check."""
    spec, target = get_op(op), get_target(target_name)
    tunables = spec.tunables(shape, dtype, target)
    names = [t.name for t in tunables]
    unknown = set(fixed) - set(names)
    if unknown:
        raise SystemExit(f"--fix: unknown tunables {', '.join(sorted(unknown))}")
    domains = [(fixed[t.name],) if t.name in fixed else t.values for t in tunables]
    tilings = []
    for values in itertools.product(*domains):
        tiling = Tiling(dict(zip(names, values, strict=True)))
        if spec.check(tiling, shape, dtype, target).valid:
            tilings.append(tiling)
    return names, tilings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="linear_add_gelu")
    parser.add_argument("--shape", required=True)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--target", default="cpu-twin")
    parser.add_argument("--fix", default=DEFAULT_FIX, help="NAME=VALUE,... held constant")
    parser.add_argument("--max-rows", type=int, default=3000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    spec, target = get_op(args.op), get_target(args.target)
    shape = spec.validate_shape(Shape.parse(args.shape))
    fixed = {k: int(v) for k, v in (p.split("=") for p in args.fix.split(",") if p)}
    names, tilings = enumerate_tilings(args.op, shape, args.dtype, args.target, fixed)
    if len(tilings) > args.max_rows:
        raise SystemExit(f"{len(tilings)} valid tilings, above --max-rows: fix more tunables")
    settings = get_settings()
    measure = MeasureOptions(settings.warmup, settings.repeats, settings.max_measure_s)
    print(
        f"{args.op} {shape} {args.dtype}: {len(tilings)} tilings, "
        f"warm-up {measure.warmup}, repeats {measure.repeats}",
        file=sys.stderr,
    )
    started = time.perf_counter()
    rows = []
    with create_backend(target.backend) as backend:
        builds = {}
        for i, tiling in enumerate(tilings):
            defines = spec.compile_key(tiling, args.dtype)
            key = repr(sorted(defines.items()))
            if key not in builds:
                builds[key] = backend.build(spec, defines)
            build = builds[key]
            time_ms = math.inf
            if build.ok:
                run = backend.run(
                    build,
                    spec,
                    shape=shape,
                    dtype=args.dtype,
                    target=target,
                    tiling=tiling,
                    check=True,
                    measure=measure,
                )
                if run.ok and run.median_us is not None:
                    time_ms = run.median_us / 1000.0
            rows.append([tiling[n] for n in names] + [f"{time_ms:.6g}"])
            if (i + 1) % 500 == 0:
                print(f"  {i + 1}/{len(tilings)}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*names, "time_ms"])
        writer.writerows(rows)
    failed = sum(1 for r in rows if r[-1] == "inf")
    print(
        f"wrote {args.out}: {len(rows)} rows, {failed} failed, "
        f"{time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
