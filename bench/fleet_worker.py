"""One worker process of the fleet benchmark (started by ``bench/fleet.py``, not by hand).

It runs tilewise's own :class:`tilewise.worker.Worker` (the code behind ``tilewise worker``) on a
simulated device (``bench/fleet_device.py``) against the benchmark's database, and writes a
report (JSON) when it stops: the device's launches, the process's CPU time, and the time its
SQL statements took as SQLAlchemy saw them (every engine of the process: tilewise's store and
Optuna's storage), with the slowest statement.

Protocol: prints ``ready`` once imported and connected, starts working when it reads ``go`` on
stdin, and stops (the evaluation in flight completes and is recorded) on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import Pool

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_device import ReplayDevice, load_spaces

#: Statements are grouped by their first characters (Optuna's vary in their IN lists).
STATEMENT_KEY_CHARS = 120


class QueryClock:
    """Times every SQL statement of the process (client side: the round trip, lock waits and the
    server's work)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.total_s = 0.0
        self.slowest_s = 0.0
        self.slowest = ""
        self.by_statement: dict[str, list[float]] = {}  # key -> [count, total_s, max_s]
        self.connects = 0
        self.checked_out = 0  # connections in use now, over every pool of the process
        self.max_checked_out = 0
        event.listen(Engine, "before_cursor_execute", self._before)
        event.listen(Engine, "after_cursor_execute", self._after)
        event.listen(Pool, "connect", self._connect)
        event.listen(Pool, "checkout", self._checkout)
        event.listen(Pool, "checkin", self._checkin)

    def _connect(self, *_: Any) -> None:
        with self._lock:
            self.connects += 1

    def _checkout(self, *_: Any) -> None:
        with self._lock:
            self.checked_out += 1
            self.max_checked_out = max(self.max_checked_out, self.checked_out)

    def _checkin(self, *_: Any) -> None:
        with self._lock:
            self.checked_out -= 1

    def _before(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        conn.info.setdefault("fleet_t0", []).append(time.perf_counter())

    def _after(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        took = time.perf_counter() - conn.info["fleet_t0"].pop()
        key = " ".join(statement.split())[:STATEMENT_KEY_CHARS]
        with self._lock:
            self.count += 1
            self.total_s += took
            if took > self.slowest_s:
                self.slowest_s, self.slowest = took, " ".join(statement.split())[:400]
            stats = self.by_statement.setdefault(key, [0, 0.0, 0.0])
            stats[0] += 1
            stats[1] += took
            stats[2] = max(stats[2], took)

    def reset(self) -> None:
        with self._lock:
            self.count, self.total_s, self.slowest_s, self.slowest = 0, 0.0, 0.0, ""
            self.by_statement = {}

    def report(self, top: int = 8) -> dict[str, Any]:
        with self._lock:
            ranked = sorted(self.by_statement.items(), key=lambda kv: -kv[1][1])[:top]
            return {
                "queries": self.count,
                "query_s": round(self.total_s, 4),
                "slowest_s": round(self.slowest_s, 4),
                "slowest": self.slowest,
                "connects": self.connects,
                "max_checked_out": self.max_checked_out,
                "top": [
                    {
                        "statement": k,
                        "count": int(v[0]),
                        "total_s": round(v[1], 4),
                        "max_s": round(v[2], 4),
                    }
                    for k, v in ranked
                ],
            }


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--latency", type=float, required=True)
    parser.add_argument("--remeasure-latency", type=float, required=True)
    parser.add_argument("--assistants", type=int, required=True)
    parser.add_argument("--strategy", default="default")
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--profile", type=Path, help="write cProfile stats of the run here")
    parser.add_argument(
        "--journals", type=Path, help="Optuna's studies in journal files in this directory"
    )
    parser.add_argument(
        "--no-prepare",
        action="store_true",
        help="no server-side prepared statements (behind PgBouncer in transaction mode)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format=f"worker {args.index}: %(message)s")

    clock = QueryClock()
    if args.no_prepare:
        # psycopg prepares a statement run 5 times on a connection; behind a transaction pooler
        # the next transaction may get another server connection, which does not have it.
        @event.listens_for(Engine, "do_connect")
        def _no_prepare(dialect: Any, conn_rec: Any, cargs: Any, cparams: dict[str, Any]) -> None:
            cparams["prepare_threshold"] = None

    from tilewise.settings import Settings
    from tilewise.worker import Worker

    settings = Settings(
        db_url=args.db,
        max_assistants_per_job=args.assistants,
        study_journal_dir=args.journals,
    )
    device = ReplayDevice(load_spaces(), latency_s=args.latency, remeasure_s=args.remeasure_latency)
    worker = Worker(
        settings=settings,
        target="cpu-twin",
        device=args.index,
        backend=device,
        strategy=args.strategy,
    )
    startup_cpu = cpu_s()
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        worker.close()
        return
    clock.reset()
    cpu0, wall0 = cpu_s(), time.monotonic()
    if args.profile is not None:
        import cProfile

        # The main thread only (the search, the device's waits); the heartbeat's thread is not
        # profiled.
        cProfile.runctx("worker.run()", globals(), {"worker": worker}, str(args.profile))
    else:
        worker.run()
    report = {
        "index": args.index,
        "worker_id": worker.id,
        "jobs_done": worker.jobs_done,
        "jobs_assisted": worker.jobs_assisted,
        "startup_cpu_s": round(startup_cpu, 3),
        "cpu_s": round(cpu_s() - cpu0, 3),
        "wall_s": round(time.monotonic() - wall0, 3),
        **device.counters(),
        **clock.report(),
    }
    args.report.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
