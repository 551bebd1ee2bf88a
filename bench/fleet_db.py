"""The database side of the fleet benchmark (``bench/fleet.py``): a fresh database per run, the
jobs it queues, what the server does meanwhile (sampled), and the count of evaluations after.

Every run gets its own database on the server, created here and dropped afterwards, so the
benchmark never touches the tables of the database named in ``--db`` (it only connects there
to create and drop its own).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from tilewise import store
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.status import JobStatus, RecordSource, RecordStatus
from tilewise.store._models import JobModel, RecordModel, WorkloadModel
from tilewise.types import Shape, Workload

TARGET = "cpu-twin"
_TICK = os.sysconf("SC_CLK_TCK")


def server_url(url: str) -> URL:
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise SystemExit(f"--db must be a PostgreSQL URL, not {store.safe_url(parsed)}")
    return parsed


class FleetDatabase:
    """``with FleetDatabase(url) as db:`` a new, empty database; dropped at the end."""

    def __init__(self, url: str) -> None:
        self.admin_url = server_url(url)
        self.name = f"tw_fleet_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.url = self.admin_url.set(database=self.name).render_as_string(hide_password=False)
        self.admin = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")

    def url_via(self, server: str) -> str:
        """The run's database on another server (a pooler in front of this one)."""
        return server_url(server).set(database=self.name).render_as_string(hide_password=False)

    def __enter__(self) -> FleetDatabase:
        with self.admin.connect() as c:
            c.execute(sa.text(f'CREATE DATABASE "{self.name}"'))
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            with self.admin.connect() as c:
                c.execute(sa.text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        finally:
            self.admin.dispose()


def seed_jobs(url: str, shapes: list[Shape], *, budget: int) -> None:
    """tilewise's schema, Optuna's tables, one workload per shape and one queued job for each
    (seed = its index), the oldest first."""
    spec, target = get_op("linear_add_gelu"), get_target(TARGET)
    db = store.open_store(url)
    try:
        # Optuna creates its tables on first use; once here, rather than N workers racing to.
        optuna.storages.RDBStorage(url).engine.dispose()
        with db.session() as s:
            for i, shape in enumerate(shapes):
                row = store.commit_workload(
                    s, Workload(spec.name, spec.version, target.name, "float32", shape)
                )
                store.create_job(s, workload_id=row.id, budget_evals=budget, seed=i)
    finally:
        db.close()


def unfinished_jobs(engine: sa.Engine) -> int:
    with engine.connect() as c:
        return int(
            c.scalar(
                sa.select(sa.func.count())
                .select_from(JobModel)
                .where(JobModel.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]))
            )
            or 0
        )


@dataclass
class ServerSampler:
    """Samples ``pg_stat_activity`` for the run's database every ``every_s``: how many of its
    backends run a statement (their sum over time is the server's busy time as the sessions
    see it: running or waiting), what they wait for, and the CPU time of those backends from
    /proc (the server runs on this host)."""

    admin: sa.Engine
    database: str
    every_s: float = 0.1
    samples: int = 0
    active_s: float = 0.0
    waits_s: dict[str, float] = field(default_factory=dict)
    max_active: int = 0
    max_connections: int = 0
    _cpu: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fleet-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        query = sa.text(
            "SELECT pid, state, wait_event_type FROM pg_stat_activity WHERE datname = :db"
        )
        last = time.monotonic()
        with self.admin.connect() as c:
            while not self._stop.wait(self.every_s):
                rows = c.execute(query, {"db": self.database}).all()
                now = time.monotonic()
                dt, last = now - last, now
                active = [r for r in rows if r.state == "active"]
                self.samples += 1
                self.active_s += len(active) * dt
                self.max_active = max(self.max_active, len(active))
                self.max_connections = max(self.max_connections, len(rows))
                for r in active:
                    if r.wait_event_type:
                        kind = r.wait_event_type
                        self.waits_s[kind] = self.waits_s.get(kind, 0.0) + dt
                for r in rows:
                    cpu = _proc_cpu_s(r.pid)
                    if cpu is not None:
                        self._cpu[r.pid] = cpu

    @property
    def backend_cpu_s(self) -> float:
        return sum(self._cpu.values())


def host_cpu() -> tuple[float, float]:
    """(busy, total) seconds of every core since boot, from /proc/stat: the whole host's use,
    other users' processes included."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    return (total - idle) / _TICK, total / _TICK


def _proc_cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def count_evaluations(url: str, *, journals: Path | None = None) -> dict[str, Any]:
    """What the database holds after a run: the jobs, their evaluations against their budgets,
    the evaluation records (built and launched: not rejected before, not re-measures), the ones
    measured twice for one workload, and the ones whose Optuna trial is missing or not
    complete (in the database's Optuna tables, or in the journal files in ``journals``)."""
    db = store.open_store(url, create=False)
    try:
        with db.session() as s:
            jobs = s.execute(sa.select(JobModel.id, JobModel.status, JobModel.budget_evals)).all()
            counted = {j.id: store.job_evaluations(s, job_id=j.id) for j in jobs}
            evaluation = sa.and_(
                RecordModel.status != RecordStatus.INFEASIBLE,
                RecordModel.source != RecordSource.REMEASURE,
            )
            records = s.execute(
                sa.select(
                    RecordModel.workload_id,
                    RecordModel.tiling_key,
                    RecordModel.trial_number,
                    RecordModel.job_id,
                    RecordModel.source,
                    RecordModel.created_at,
                    WorkloadModel.op,
                    WorkloadModel.key,
                )
                .join(WorkloadModel, WorkloadModel.id == RecordModel.workload_id)
                .where(evaluation)
            ).all()
    finally:
        db.close()
    per_tiling = Counter((r.workload_id, r.tiling_key) for r in records)
    trials: dict[str, dict[int, optuna.trial.TrialState]] = {}
    storages: list[optuna.storages.BaseStorage] = []
    if journals is not None:
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        for path in sorted(journals.glob("*.journal")):
            storages.append(JournalStorage(JournalFileBackend(str(path))))
    else:
        storages.append(optuna.storages.RDBStorage(url))
    try:
        for storage in storages:
            for study in storage.get_all_studies():
                trials[study.study_name] = {
                    t.number: t.state
                    for t in storage.get_all_trials(study._study_id, deepcopy=False)
                }
    finally:
        for storage in storages:
            if isinstance(storage, optuna.storages.RDBStorage):
                storage.engine.dispose()
    untold = [
        {
            "source": RecordSource(r.source).value,
            "trial_number": r.trial_number,
            "trial_state": state.name if state is not None else None,
        }
        for r in records
        if (state := trials.get(f"tilewise-{r.op}-{r.key}", {}).get(r.trial_number))
        is not optuna.trial.TrialState.COMPLETE
    ]
    return {
        "jobs": len(jobs),
        "jobs_by_status": dict(Counter(JobStatus(j.status).value for j in jobs)),
        "expected": sum(j.budget_evals for j in jobs),
        "counted": sum(counted.values()),
        "over_budget_jobs": sum(1 for j in jobs if counted[j.id] > j.budget_evals),
        "records": len(records),
        "untagged_records": sum(1 for r in records if r.job_id is None),
        "doubled": sum(n - 1 for n in per_tiling.values() if n > 1),
        # Each record of a tiling recorded more than once, to tell which path measured it.
        "doubled_records": [
            {
                "tiling_key": r.tiling_key,
                "source": RecordSource(r.source).value,
                "trial_number": r.trial_number,
                "job_id": r.job_id,
                "created_at": r.created_at.isoformat(),
            }
            for r in records
            if per_tiling[(r.workload_id, r.tiling_key)] > 1
        ],
        "untold": len(untold),
        "untold_records": untold,
        "trials_complete": sum(
            1
            for states in trials.values()
            for st in states.values()
            if st is optuna.trial.TrialState.COMPLETE
        ),
    }
