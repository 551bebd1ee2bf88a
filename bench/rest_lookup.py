"""Benchmark: `GET /v1/tilings` over loopback at a fixed request rate.

    .venv/bin/python bench/rest_lookup.py [--rate 200] [--seconds 20] [--workloads 200]

Seeds a fresh SQLite database with tuned linear_add_gelu workloads, starts the API the way a
user does (`tilewise serve --workers 0`, one API process), and sends requests on a fixed
schedule from one client: half for tuned shapes (exact), half for untuned ones (nearest or
default). Prints p50/p99 latency, the throughput held, errors, and the CPU time the API process
spent per request (Linux; unlike the latency, barely moved by other load on the host), with the
machine and date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tilewise import store
from tilewise.kernels.backends import current_toolchain
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.status import RecordSource, RecordStatus
from tilewise.types import Shape, Workload


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed(url: str, n: int, rng: random.Random) -> list[dict[str, int]]:
    spec, target = get_op("linear_add_gelu"), get_target("cpu-twin")
    # The toolchain the service serves: this host's (a stale entry is not served).
    toolchain = current_toolchain(target)
    if toolchain is None:
        raise SystemExit("no C++ compiler for the cpu-twin")
    db = store.open_store(url)
    shapes: list[dict[str, int]] = []
    with db.session() as s:
        while len(shapes) < n:
            shape = {d: rng.choice((64, 128, 256, 512, 1024, 2048, 4096)) for d in ("M", "N", "K")}
            if shape in shapes:
                continue
            parsed = Shape(shape)
            tiling = spec.default_tiling(parsed, "float32", target)
            row = store.commit_workload(
                s, Workload(spec.name, spec.version, target.name, "float32", parsed)
            )
            rec = store.add_record(
                s,
                toolchain=toolchain,
                workload_id=row.id,
                tiling=tiling,
                status=RecordStatus.OK,
                latency_us=100.0,
                spread=0.01,
                samples_us=[100.0],
                source=RecordSource.SEARCH,
                env={"bench": True},
            )
            store.upsert_tiling(
                s,
                toolchain=toolchain,
                workload_id=row.id,
                record_id=rec.id,
                tiling=tiling,
                latency_us=100.0,
                default_latency_us=100.0,
                speedup=1.0,
                evaluations=1,
            )
            shapes.append(shape)
    db.close()
    return shapes


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` so far (None where /proc is not there)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--workloads", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(0)

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        tuned = seed(url, args.workloads, rng)
        port = free_port()
        env = dict(os.environ, TILEWISE_CACHE_DIR=str(Path(tmp) / "cache"))
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tilewise.cli",
                "serve",
                "--port",
                str(port),
                "--workers",
                "0",
                "--db",
                url,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, timeout=10.0) as client:
                for _ in range(200):  # wait for the API
                    try:
                        if client.get("/healthz").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(0.1)
                latencies: list[float] = []
                errors = 0
                cpu_before = cpu_seconds(server.pid)
                interval, start = 1.0 / args.rate, time.perf_counter()
                total = int(args.rate * args.seconds)
                for i in range(total):
                    due = start + i * interval
                    now = time.perf_counter()
                    if due > now:
                        time.sleep(due - now)
                    shape = (
                        tuned[i % len(tuned)]
                        if i % 2 == 0
                        else {
                            d: rng.choice((96, 200, 300, 700, 1500, 3000)) for d in ("M", "N", "K")
                        }
                    )
                    query = ",".join(f"{k}={v}" for k, v in shape.items())
                    t0 = time.perf_counter()
                    response = client.get("/v1/tilings/linear_add_gelu", params={"shape": query})
                    latencies.append((time.perf_counter() - t0) * 1e6)
                    errors += response.status_code != 200
                elapsed = time.perf_counter() - start
                cpu_after = cpu_seconds(server.pid)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)

    q = statistics.quantiles(latencies, n=100)
    print(
        json.dumps(
            {
                "benchmark": "GET /v1/tilings over loopback, fixed rate, one client",
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "machine": f"{os.cpu_count()} cores, {platform.platform(terse=True)}",
                "api_processes": 1,
                "rate_asked": args.rate,
                "requests": len(latencies),
                "seconds": round(elapsed, 2),
                "throughput_rps": round(len(latencies) / elapsed, 1),
                "errors": errors,
                "p50_us": round(statistics.median(latencies), 1),
                "p99_us": round(q[98], 1),
                "api_cpu_us_per_request": (
                    None
                    if cpu_before is None or cpu_after is None
                    else round((cpu_after - cpu_before) / len(latencies) * 1e6, 1)
                ),
                "tuned_workloads": len(tuned),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
