"""Benchmark: what ``tilewise.load_ops`` and ``torch.ops.tilewise`` add to a launch, per call,
at a tiny shape (``tilewise bench models`` reports the same at its end).

    .venv/bin/python bench/launch_overhead.py [--calls 5000] [--op linear_add_gelu]
        [--shape M=1,N=16,K=16] [--no-torch]

Without PyTorch installed, the torch call is left out.

Times the launch alone (the kernel's own time on the host), ``ops.<op>(..., out=out)`` and
``torch.ops.tilewise.<op>(...)`` on a table holding the shape exactly, interleaved, and prints
the machine, the date, their percentiles and the overheads at p50 as one JSON object (see
:mod:`tilewise.bench.overhead`). Not a test: timings depend on the host.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tilewise.bench.machine import machine_info
from tilewise.bench.overhead import CALLS, OP, SHAPE, measure_overhead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--op", default=OP)
    parser.add_argument("--shape", default=SHAPE)
    parser.add_argument("--no-torch", action="store_true", help="skip the torch.ops call")
    args = parser.parse_args()
    with_torch = not args.no_torch and importlib.util.find_spec("torch") is not None
    measured = measure_overhead(
        op=args.op, shape=args.shape, calls=args.calls, with_torch=with_torch
    )
    print(json.dumps({
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
        "machine": machine_info(),
        **measured,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
