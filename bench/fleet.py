"""Benchmark: a fleet of N workers, each driving a simulated device, against one PostgreSQL
database.

    nice .venv/bin/python bench/fleet.py --workers 1,4,16,64 \\
        --db postgresql+psycopg://postgres@127.0.0.1:5432/test [--latency 0.5] [--json]

Each run starts N worker processes (``bench/fleet_worker.py``: tilewise's own ``Worker``, the
code behind ``tilewise worker``, with its job queue, leases, assists and shared Optuna studies)
on a fresh database created on the server of ``--db`` and dropped afterwards. A worker's device
plays back a recorded cpu-twin space of linear_add_gelu and takes ``--latency`` seconds per
evaluation, standing in for an NPU's compile and launch (``bench/fleet_device.py``). Two modes:

``queue``   ``--jobs-per-worker`` × N workloads, one job each of ``--budget`` evaluations.
``assist``  one workload, one job of ``--assist-evals`` × N evaluations: one worker holds it and
            the others assist it (``max_assistants_per_job`` = N - 1), all in one Optuna study.

Reported per run: evaluations per second (the jobs' evaluations over the time from the start
until the last job finished, its re-measure included), the efficiency (that over N times the
one-worker figure of the same mode), the workers' CPU seconds per evaluation and the host's CPU
use, the database's busy time (``pg_stat_activity`` sampled every 0.1 s: statements running or
waiting, summed over time; lock waits apart), the time the workers' SQL statements took as
they saw it (SQLAlchemy event hooks, round trips included) and the slowest one, and the count
of evaluations: expected (the budgets), counted (the jobs' records), the devices' launches,
lost (launched but not recorded), doubled (a tiling measured twice for one workload) and
untold (a record whose Optuna trial is not complete). pg_stat_statements is not used: it needs
the server's ``shared_preload_libraries``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_db import (
    FleetDatabase,
    ServerSampler,
    count_evaluations,
    host_cpu,
    seed_jobs,
    unfinished_jobs,
)
from fleet_device import fleet_shapes, load_spaces

from tilewise.bench.machine import machine_info
from tilewise.store import safe_url
from tilewise.store._models import JobModel

WORKER = Path(__file__).resolve().parent / "fleet_worker.py"
DEFAULT_DB = os.environ.get(
    "TILEWISE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _spawn(
    args: argparse.Namespace, url: str, mode: str, n: int, assistants: int, logs: Path
) -> list[subprocess.Popen[str]]:
    procs = []
    for i in range(n):
        cmd = [
            sys.executable, str(WORKER), "--db", url, "--index", str(i),
            "--latency", str(args.latency), "--remeasure-latency", str(args.remeasure_latency),
            "--assistants", str(assistants), "--strategy", args.strategy,
            "--report", str(logs / f"report-{i}.json"),
        ]  # fmt: skip
        if args.via is not None:
            cmd.append("--no-prepare")
        if args.optuna_storage == "journal":
            cmd += ["--journals", str(logs / "studies")]
        if args.profile is not None and i == 0:
            cmd += ["--profile", str(args.profile.with_suffix(f".{mode}.N{n}.pstats"))]
        err = (logs / f"worker-{i}.log").open("w")
        procs.append(
            subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
            )
        )
        err.close()
    return procs


def _stop(procs: list[subprocess.Popen[str]], timeout_s: float) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _log_tail(logs: Path, n: int) -> str:
    tails = []
    for i in range(n):
        text = (logs / f"worker-{i}.log").read_text(errors="replace").strip()
        if text:
            tails.append(f"worker {i}: " + text[-600:])
    return "\n".join(tails[:3])


def run_fleet(args: argparse.Namespace, mode: str, n: int) -> dict[str, Any]:
    spaces = load_spaces()
    if mode == "queue":
        shapes, budget, assistants = fleet_shapes(spaces, n * args.jobs_per_worker), args.budget, 1
    else:
        shapes, budget, assistants = fleet_shapes(spaces, 1), args.assist_evals * n, n - 1
    with FleetDatabase(args.db) as fdb, tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        seed_jobs(fdb.url, shapes, budget=budget)
        worker_url = fdb.url if args.via is None else fdb.url_via(args.via)
        procs = _spawn(args, worker_url, mode, n, assistants, logs)
        engine = sa.create_engine(fdb.url, poolclass=sa.pool.NullPool)
        sampler = ServerSampler(fdb.admin, fdb.name)
        timed_out = False
        try:
            for p in procs:
                assert p.stdout is not None and p.stdin is not None
                if p.stdout.readline().strip() != "ready":
                    raise SystemExit(f"a worker did not start:\n{_log_tail(logs, n)}")
            sampler.start()
            go = datetime.datetime.now(datetime.UTC)
            t0, cpu0 = time.monotonic(), host_cpu()
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            while unfinished_jobs(engine) > 0:
                if time.monotonic() - t0 > args.timeout:
                    timed_out = True
                    break
                if all(p.poll() is not None for p in procs):
                    raise SystemExit(f"every worker exited early:\n{_log_tail(logs, n)}")
                time.sleep(0.1)
            wall = time.monotonic() - t0
            cpu1 = host_cpu()
            host = {
                "host_busy": round((cpu1[0] - cpu0[0]) / max(1e-9, cpu1[1] - cpu0[1]), 3),
                "loadavg": round(os.getloadavg()[0], 1),
            }
            with engine.connect() as c:
                last = c.scalar(sa.select(sa.func.max(JobModel.finished_at)))
        finally:
            _stop(procs, timeout_s=60 + 4 * args.latency)
            sampler.stop()
            engine.dispose()
        reports = []
        for i in range(n):
            path = logs / f"report-{i}.json"
            if not path.exists():
                raise SystemExit(f"worker {i} wrote no report:\n{_log_tail(logs, n)}")
            reports.append(json.loads(path.read_text()))
        warnings = sum(
            1
            for i in range(n)
            for line in (logs / f"worker-{i}.log").read_text(errors="replace").splitlines()
            if line.strip()
        )
        journals = logs / "studies" if args.optuna_storage == "journal" else None
        counts = count_evaluations(fdb.url, journals=journals)
    makespan = (last - go).total_seconds() if last is not None and not timed_out else wall
    summary = _summary(mode, n, budget, makespan, reports, sampler, counts, warnings, timed_out)
    summary.update(host)
    print(
        f"{mode} N={n}: {summary['evals_per_s']} evals/s, host busy {host['host_busy']:.0%}"
        f" (the fleet's share {summary['host_cpu_use']:.0%}), devices busy"
        f" {summary['device_busy_frac']:.0%}, DB active {summary['db_busy_frac']:.2f},"
        f" CPU {summary['worker_cpu_per_eval_s']} s/eval, lost {summary['lost']},"
        f" doubled {summary['doubled']}, untold {summary['untold']}",
        file=sys.stderr,
        flush=True,
    )
    return summary


def _summary(
    mode: str,
    n: int,
    budget: int,
    makespan: float,
    reports: list[dict[str, Any]],
    sampler: ServerSampler,
    counts: dict[str, Any],
    log_lines: int,
    timed_out: bool,
) -> dict[str, Any]:
    launched = sum(r["evaluations"] for r in reports)
    cpu = sum(r["cpu_s"] for r in reports)
    slowest = max(reports, key=lambda r: r["slowest_s"])
    merged: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in reports:
        for t in r["top"]:
            m = merged[t["statement"]]
            m[0] += t["count"]
            m[1] += t["total_s"]
            m[2] = max(m[2], t["max_s"])
    top = sorted(merged.items(), key=lambda kv: -kv[1][1])[:5]
    cores = os.cpu_count() or 1
    return {
        "mode": mode,
        "workers": n,
        "jobs": counts["jobs"],
        "budget_per_job": budget,
        "timed_out": timed_out,
        "seconds": round(makespan, 2),
        "evaluations": counts["counted"],
        "evals_per_s": round(counts["counted"] / makespan, 3) if makespan > 0 else None,
        "efficiency": None,  # filled in against the one-worker run
        "worker_cpu_s": round(cpu, 2),
        "worker_cpu_per_eval_s": round(cpu / launched, 4) if launched else None,
        "db_backend_cpu_s": round(sampler.backend_cpu_s, 2),
        "host_cpu_use": round((cpu + sampler.backend_cpu_s) / (makespan * cores), 3),
        "device_busy_frac": round(sum(r["device_busy_s"] for r in reports) / (makespan * n), 3),
        "db_busy_s": round(sampler.active_s, 2),
        "db_busy_frac": round(sampler.active_s / makespan, 3),
        "db_waits_s": {
            k: round(v, 2) for k, v in sorted(sampler.waits_s.items(), key=lambda kv: -kv[1])
        },
        "db_lock_wait_s": round(sampler.waits_s.get("Lock", 0.0), 2),
        "db_max_active": sampler.max_active,
        "db_max_connections": sampler.max_connections,
        "db_samples": sampler.samples,
        "query_s": round(sum(r["query_s"] for r in reports), 2),
        "queries": sum(r["queries"] for r in reports),
        "queries_per_eval": round(sum(r["queries"] for r in reports) / launched, 1)
        if launched
        else None,
        "connects": sum(r["connects"] for r in reports),
        # Connections one worker used at once (its store's, its Optuna storage's), the most.
        "max_connections_per_worker": max(r["max_checked_out"] for r in reports),
        "slowest_query_s": slowest["slowest_s"],
        "slowest_query": slowest["slowest"],
        "top_statements": [
            {"statement": k, "count": int(v[0]), "total_s": round(v[1], 3), "max_s": round(v[2], 4)}
            for k, v in top
        ],
        "device_launches": launched,
        "not_recorded_launches": sum(r["not_recorded"] for r in reports),
        "remeasure_launches": sum(r["remeasures"] for r in reports),
        "worker_log_lines": log_lines,
        "expected": counts["expected"],
        "counted": counts["counted"],
        "records": counts["records"],
        "over_budget": counts["records"] - counts["counted"],
        "lost": launched - counts["records"],
        "missing": counts["expected"] - counts["counted"],
        "doubled": counts["doubled"],
        "doubled_records": counts["doubled_records"],
        "untold": counts["untold"],
        "untold_records": counts["untold_records"],
        "over_budget_jobs": counts["over_budget_jobs"],
        "jobs_by_status": counts["jobs_by_status"],
    }


def _efficiency(runs: list[dict[str, Any]]) -> None:
    one = {r["mode"]: r["evals_per_s"] for r in runs if r["workers"] == 1}
    for r in runs:
        base = one.get(r["mode"])
        if base and r["evals_per_s"]:
            r["efficiency"] = round(r["evals_per_s"] / (r["workers"] * base), 3)


def _table(runs: list[dict[str, Any]]) -> str:
    head = (
        f"{'mode':<7}{'N':>4}{'evals':>7}{'s':>8}{'evals/s':>9}{'eff':>6}{'cpu/eval':>10}"
        f"{'host cpu':>9}{'db busy':>9}{'lock':>7}{'slowest':>9}{'lost':>6}{'doubled':>8}"
        f"{'untold':>7}"
    )
    lines = [head]
    for r in runs:
        eff = "-" if r["efficiency"] is None else f"{r['efficiency']:.2f}"
        lines.append(
            f"{r['mode']:<7}{r['workers']:>4}{r['evaluations']:>7}{r['seconds']:>8.1f}"
            f"{r['evals_per_s']:>9.2f}{eff:>6}{r['worker_cpu_per_eval_s'] or 0:>9.3f}s"
            f"{r['host_cpu_use']:>9.0%}{r['db_busy_frac']:>9.2f}{r['db_lock_wait_s']:>6.1f}s"
            f"{r['slowest_query_s'] * 1e3:>7.0f}ms{r['lost']:>6}{r['doubled']:>8}{r['untold']:>7}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,4,16,64", help="fleet sizes, comma-separated")
    parser.add_argument("--db", default=DEFAULT_DB, help="a PostgreSQL server (URL of any DB)")
    parser.add_argument(
        "--via",
        help="workers connect through this server instead (a PgBouncer in transaction mode in"
        " front of --db's server; the run's database name is put in); prepared statements off",
    )
    parser.add_argument(
        "--mode", default="queue,assist", help="queue, assist, or both: queue,assist"
    )
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per evaluation")
    parser.add_argument(
        "--remeasure-latency", type=float, default=0.05, help="seconds per re-measure launch"
    )
    parser.add_argument("--jobs-per-worker", type=int, default=2)
    parser.add_argument("--budget", type=int, default=20, help="evaluations per queued job")
    parser.add_argument(
        "--assist-evals", type=int, default=10, help="assist mode: evaluations per worker"
    )
    parser.add_argument("--strategy", default="default", help="the workers' search strategy")
    parser.add_argument(
        "--optuna-storage",
        choices=("rdb", "journal"),
        default="rdb",
        help="journal: the studies in Optuna journal files (TILEWISE_STUDY_JOURNAL_DIR, one"
        " host here) instead of the database",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument(
        "--profile",
        type=Path,
        help="cProfile the first worker of each run: PATH.<mode>.N<n>.pstats",
    )
    parser.add_argument("--partial", type=Path, help="append each run's figures here (JSON lines)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        sizes = [int(w) for w in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers: comma-separated counts, not {args.workers!r}")
    modes = [m.strip() for m in args.mode.split(",")]
    if any(m not in ("queue", "assist") for m in modes) or any(n < 1 for n in sizes):
        parser.error("--mode is queue, assist or queue,assist; --workers are counts >= 1")
    started = datetime.datetime.now(datetime.UTC)
    runs = []
    for mode in modes:
        for n in sizes:
            runs.append(run_fleet(args, mode, n))
            if args.partial is not None:  # each run as it ends: a long table may be cut short
                with args.partial.open("a") as f:
                    f.write(json.dumps(runs[-1]) + "\n")
    _efficiency(runs)
    out: dict[str, Any] = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_info(),
        "pid": os.getpid(),
        "pooler": None
        if args.via is None
        else "workers through "
        + safe_url(args.via),  # the runs' databases are named tw_fleet_<pid>_...
        "config": {
            k: v
            for k, v in vars(args).items()
            if k not in ("json", "db", "profile", "via", "partial")
        },
        "runs": runs,
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    m = out["machine"]
    print(f"{out['date']}, {m['host']}: {m['cpu']}, {m['cores']} cores")
    print(f"latency {args.latency} s per evaluation, strategy {args.strategy}")
    print(_table(runs))


if __name__ == "__main__":
    main()
