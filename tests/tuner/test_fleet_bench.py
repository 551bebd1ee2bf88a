"""The fleet benchmark (``bench/fleet.py``), run small: real worker processes on a simulated
device against a fresh PostgreSQL database, in both modes; every evaluation is counted once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.conftest import PG_ADMIN_URL
from tests.fakes import FakeBackend
from tilewise.errors import InputError
from tilewise.settings import Settings
from tilewise.worker import Worker

ROOT = Path(__file__).resolve().parents[2]

RUN_FIELDS = {
    "mode", "workers", "jobs", "seconds", "evaluations", "evals_per_s", "efficiency",
    "worker_cpu_per_eval_s", "host_cpu_use", "db_busy_s", "db_busy_frac", "db_lock_wait_s",
    "query_s", "queries_per_eval", "slowest_query_s", "slowest_query", "device_launches",
    "expected", "counted", "records", "lost", "missing", "doubled", "untold",
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.postgres
def test_fleet_bench_counts_every_evaluation_once(pg_admin: Engine) -> None:
    command = [
        sys.executable, str(ROOT / "bench" / "fleet.py"), "--workers", "1,2",
        "--mode", "queue,assist", "--latency", "0.05", "--remeasure-latency", "0.01",
        "--jobs-per-worker", "2", "--budget", "4", "--assist-evals", "4",
        "--timeout", "240", "--db", PG_ADMIN_URL, "--json",
    ]  # fmt: skip
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert {"date", "machine", "config", "runs"} <= set(report)
    runs = {(r["mode"], r["workers"]): r for r in report["runs"]}
    assert set(runs) == {("queue", 1), ("queue", 2), ("assist", 1), ("assist", 2)}
    for (mode, n), run in runs.items():
        assert set(run) >= RUN_FIELDS, RUN_FIELDS - set(run)
        assert not run["timed_out"]
        expected = 2 * n * 4 if mode == "queue" else 4 * n
        assert run["expected"] == expected
        assert run["counted"] == run["evaluations"] == expected, run
        assert run["jobs_by_status"] == {"succeeded": run["jobs"]}
        assert run["lost"] == 0 and run["missing"] == 0, run
        assert run["doubled"] == 0 and run["untold"] == 0, run
        assert run["over_budget_jobs"] == 0
        # Every launch of a device is a record, and no record comes without a launch.
        assert run["device_launches"] == run["records"] >= expected
        assert run["evals_per_s"] > 0 and run["slowest_query_s"] > 0 and run["slowest_query"]
        assert run["queries"] > 0 and run["db_samples"] > 0
    assert runs[("queue", 1)]["efficiency"] == 1.0
    assert runs[("assist", 2)]["efficiency"] is not None
    # Each run's database was dropped.
    with pg_admin.connect() as c:
        left = c.scalars(
            sa.text("SELECT datname FROM pg_database WHERE datname LIKE :name"),
            {"name": "tw_fleet_%"},
        ).all()
    assert not [name for name in left if name.startswith(f"tw_fleet_{proc_pid(proc)}_")]


def proc_pid(proc: subprocess.CompletedProcess[str]) -> str:
    """The benchmark's pid, as its databases are named (from the report's config)."""
    return str(json.loads(proc.stdout)["pid"])


def test_worker_refuses_an_unknown_strategy(tmp_path: Path) -> None:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'tw.db'}")
    with pytest.raises(InputError, match="unknown strategy 'tpe2'"):
        Worker(settings=settings, backend=FakeBackend(), strategy="tpe2")
