"""Benchmark: one end-to-end tune on the cpu-twin, as the README reports it.

    .venv/bin/python bench/tune_e2e.py [--shape M=1024,N=1024,K=1024] [--budget 40]

Runs `tilewise tune` in a fresh SQLite database (and a fresh build cache, so compile time is
included) and prints the wall time, the speedup of the best tiling over the default tiling, and
the fraction of proposals rejected before compiling. Prints the machine and date with the
figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="linear_add_gelu")
    parser.add_argument("--shape", default="M=1024,N=1024,K=1024")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategy", default="default")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TILEWISE_CACHE_DIR=str(Path(tmp) / "cache"))
        cmd = [
            sys.executable,
            "-m",
            "tilewise.cli",
            "tune",
            args.op,
            "--shape",
            args.shape,
            "--dtype",
            args.dtype,
            "--budget",
            str(args.budget),
            "--seed",
            str(args.seed),
            "--strategy",
            args.strategy,
            "--db",
            f"sqlite:///{tmp}/bench.db",
            "--json",
        ]
        started = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - started
    result = json.loads(done.stdout)
    proposals = result["evaluations"] + result["infeasible"]
    report = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, {platform.platform(terse=True)}",
        "op": args.op,
        "shape": args.shape,
        "dtype": args.dtype,
        "budget": args.budget,
        "strategy": args.strategy,
        "wall_s": round(wall, 1),
        "best_us": result["best"]["latency_us"],
        "default_us": result["default"]["latency_us"],
        "speedup": round(result["speedup"], 3),
        "evaluations": result["evaluations"],
        "rejected_before_compile": result["rejected_before_compile"],
        "fraction_rejected_before_compile": round(result["rejected_before_compile"] / proposals, 3),
        # The default strategy proposes only tilings that pass the static check: what it
        # screened out never reached the compiler either.
        "screened": result["screened"],
        "screened_out": result["screened_out"],
        "fraction_rejected_before_compile_incl_screening": round(
            (result["rejected_before_compile"] + result["screened_out"])
            / max(1, proposals + result["screened_out"]),
            3,
        ),
        "best_tiling": result["best"]["tiling"],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
