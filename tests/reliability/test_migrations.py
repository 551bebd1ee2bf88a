"""Migrations: a database made at every earlier revision, with data in every table, refuses
the service (`tilewise serve`, `tilewise worker`, the API app) with the command that fixes it,
then `tilewise db upgrade` takes it to head with every row and value kept, and the service
starts on it. On SQLite and on PostgreSQL.

The earlier revisions are read from the migrations package, so a new revision puts its
predecessor under test without a change here.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient

from tests.api._support import make_settings
from tests.reliability._procs import cli, free_port, service_env
from tests.reliability._report import record
from tilewise import store
from tilewise.api import create_app
from tilewise.errors import SchemaError
from tilewise.store._engine import alembic_config

pytestmark = pytest.mark.reliability

HEAD = store.head_revision()
# Base first; every revision but the head.
EARLIER = [
    r.revision
    for r in reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions()))
][:-1]

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
WORKER = "host:1:cpu-twin:-"

#: One row or more per table, every column any revision has; a revision gets the columns and
#: tables it knows.
DATA: dict[str, list[dict[str, Any]]] = {
    "tw_toolchains": [
        dict(id="0123456789ab", backend="cpu-twin", compiler="clang 19.1",
             headers="twin 0123456789ab", profile="0123456789ab", created_at=T0),
    ],
    "tw_workloads": [
        dict(id=1, key="a" * 32, op="scale_relu_dropout", op_version="0123456789ab",
             target="cpu-twin", dtype="float32", shape={"N": 4096}, shape_key="N=4096",
             created_at=T0),
        dict(id=2, key="b" * 32, op="linear_add_gelu", op_version="ba9876543210",
             target="ascend910b1", dtype="float16", shape={"M": 64, "N": 64, "K": 64},
             shape_key="K=64,M=64,N=64", created_at=T0),
    ],
    "tw_jobs": [
        dict(id=1, workload_id=1, status="running", budget_evals=8, budget_seconds=None,
             force=False, seed=7, evaluations=2, best_latency_us=12.5, speedup=None, attempts=1,
             worker_id=WORKER, lease_until=T0 + timedelta(minutes=1), error=None, created_at=T0,
             started_at=T0, finished_at=None),
        dict(id=2, workload_id=2, status="failed", budget_evals=3, budget_seconds=60.0,
             force=True, seed=None, evaluations=3, best_latency_us=None, speedup=None,
             attempts=5, worker_id=None, lease_until=None, error="no tiling ran",
             created_at=T0, started_at=T0, finished_at=T0 + timedelta(hours=1)),
    ],
    "tw_records": [
        dict(id=1, workload_id=1, tiling={"tileLength": 2048, "blockDim": 8, "bufferNum": 2},
             tiling_key='{"blockDim":8,"bufferNum":2,"tileLength":2048}', status="ok",
             latency_us=12.5, spread=0.01, samples_us=[12.5, 12.4, 12.7], error=None,
             constraints=None, source="default", trial_number=0, env={"host": "h"},
             created_at=T0, job_id=1, toolchain="0123456789ab"),
        dict(id=2, workload_id=1, tiling={"tileLength": 4096, "blockDim": 8, "bufferNum": 1},
             tiling_key='{"blockDim":8,"bufferNum":1,"tileLength":4096}', status="crashed",
             latency_us=None, spread=None, samples_us=None, error="runner died (signal SIGSEGV)",
             constraints={"crashed": 1.0}, source="search", trial_number=1, env={"host": "h"},
             created_at=T0, job_id=1, toolchain="0123456789ab"),
        dict(id=3, workload_id=2, tiling={"baseM": 16}, tiling_key='{"baseM":16}',
             status="infeasible", latency_us=None, spread=None, samples_us=None,
             error="UB overflow", constraints={"ub": 0.5}, source="search", trial_number=None,
             env={}, created_at=T0, job_id=None, toolchain="0123456789ab"),
    ],
    "tw_tilings": [
        dict(workload_id=1, record_id=1, tiling={"tileLength": 2048, "blockDim": 8,
             "bufferNum": 2}, latency_us=12.5, default_latency_us=15.0, speedup=1.2,
             evaluations=2, updated_at=T0, toolchain="0123456789ab"),
    ],
    "tw_winner_history": [
        dict(id=1, workload_id=1, toolchain="0123456789ab", record_id=1,
             tiling={"tileLength": 2048, "blockDim": 8, "bufferNum": 2}, latency_us=12.5,
             default_latency_us=15.0, speedup=1.2, reason="first winner", created_at=T0),
    ],
    "tw_workers": [
        dict(id=WORKER, host="host", pid=1, target="cpu-twin", device=None, status="busy",
             started_at=T0, last_heartbeat=T0),
    ],
    "tw_job_assists": [
        # The slots 0008 gives them (in their workers' order), for a database made at 0008.
        dict(job_id=1, worker_id="host:3:cpu-twin:-", heartbeat_at=T0, slot=1),
        dict(job_id=1, worker_id="host:2:cpu-twin:-", heartbeat_at=T0, slot=0),
    ],
    "tw_batches": [
        dict(id=1, name="build 7", force=False, created_at=T0,
             manifest={"budget": 8, "workloads": [{"op": "scale_relu_dropout",
                                                   "shapes": [{"N": 4096, "weight": 2}]}]}),
    ],
    "tw_batch_items": [
        dict(batch_id=1, position=0, workload_id=1, weight=2.0, budget=8, job_id=1),
        dict(batch_id=1, position=1, workload_id=2, weight=1.0, budget=None, job_id=None),
    ],
    "tw_misses": [
        dict(op="linear_add_gelu", target="cpu-twin", dtype="float32", shape_key="K=64,M=7,N=64",
             shape={"M": 7, "N": 64, "K": 64}, count=12, source="nearest", first_at=T0,
             last_at=T0 + timedelta(hours=2)),
    ],
}  # fmt: skip


def _tables(connection: sa.Connection) -> dict[str, sa.Table]:
    metadata = sa.MetaData()
    present = set(sa.inspect(connection).get_table_names())
    return {
        name: sa.Table(name, metadata, autoload_with=connection) for name in DATA if name in present
    }


def seed(url: str) -> None:
    """Insert DATA as far as the database's revision has the tables and columns."""
    engine = store.create_engine(url)
    try:
        with engine.begin() as connection:
            for name, table in _tables(connection).items():
                rows = [{k: v for k, v in row.items() if k in table.c} for row in DATA[name]]
                connection.execute(table.insert(), rows)
    finally:
        engine.dispose()


def snapshot(url: str) -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
    """Every row of our tables by primary key."""
    engine = store.create_engine(url)
    try:
        with engine.connect() as connection:
            out = {}
            for name, table in _tables(connection).items():
                # The toolchain joined tw_tilings' key in 0006 ('unknown' for older rows).
                key = [c.name for c in table.primary_key.columns if c.name != "toolchain"]
                rows = connection.execute(sa.select(table)).mappings().all()
                out[name] = {tuple(row[k] for k in key): dict(row) for row in rows}
            return out
    finally:
        engine.dispose()


def revision_of(url: str) -> str | None:
    engine = store.create_engine(url)
    try:
        with engine.connect() as connection:
            return store.current_revision(connection)
    finally:
        engine.dispose()


def run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = service_env(tmp_path / "cache")
    return subprocess.run(
        cli(*args), env=env, capture_output=True, text=True, timeout=180, check=False
    )


def test_revisions_under_test() -> None:
    assert EARLIER[:2] == ["0001", "0002"] and HEAD not in EARLIER


@pytest.mark.slow
@pytest.mark.parametrize("revision", EARLIER)
def test_old_database_is_refused_then_upgrades_with_its_data(
    revision: str, db_url: str, tmp_path: Path
) -> None:
    store.migrate(db_url, revision=revision)
    seed(db_url)
    before = snapshot(db_url)
    assert before["tw_records"] and before["tw_jobs"]
    command = f"`tilewise db upgrade --db {store.safe_url(db_url)}`"
    expected = f"database at revision {revision}, code needs {HEAD}: run {command}"

    # Every way of starting the service refuses, says why and what to run, and writes nothing.
    refusals = 0
    port = str(free_port())
    for args in (("worker", "--db", db_url), ("serve", "--port", port, "--db", db_url)):
        done = run(*args, tmp_path=tmp_path)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert f"error: {expected}" in done.stderr, done.stderr
        refusals += 1
    with pytest.raises(SchemaError) as refused, TestClient(create_app(make_settings(db_url))):
        pass
    assert str(refused.value) == expected
    refusals += 1
    assert revision_of(db_url) == revision and snapshot(db_url) == before

    # The command it prints does the upgrade, and every row and value is kept.
    done = run("db", "upgrade", "--db", db_url, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert revision_of(db_url) == HEAD
    after = snapshot(db_url)
    kept = 0
    for name, rows in before.items():
        assert rows.keys() == after[name].keys(), name
        for key, row in rows.items():
            assert {k: after[name][key][k] for k in row} == row, (name, key)
            kept += 1
    if "job_id" not in next(iter(before["tw_records"].values())):
        # Records older than tw_records.job_id belong to no job.
        assert all(r["job_id"] is None for r in after["tw_records"].values())
    if "spent_evals" not in before["tw_jobs"][(1,)]:
        # A job's spent evaluations, counted on its row from 0007 on: its evaluation records
        # (the ok one and the crashed one) where records name their job.
        tagged = "job_id" in next(iter(before["tw_records"].values()))
        assert after["tw_jobs"][(1,)]["spent_evals"] == (2 if tagged else 0)
    if before.get("tw_job_assists") and "slot" not in next(iter(before["tw_job_assists"].values())):
        # A job's assistants hold its slots 0, 1, ... from 0008 on, in their workers' order.
        slots = {key[1]: row["slot"] for key, row in after["tw_job_assists"].items()}
        assert slots == {"host:2:cpu-twin:-": 0, "host:3:cpu-twin:-": 1}
    if "toolchain" not in next(iter(before["tw_records"].values())):
        # Older than toolchains: measured with one not recorded, stale; the winner's history
        # starts with it.
        assert {r["toolchain"] for r in after["tw_records"].values()} == {"unknown"}
        assert {r["toolchain"] for r in after["tw_tilings"].values()} == {"unknown"}
        assert [h["reason"] for h in after["tw_winner_history"].values()] == [
            "stored before the history was kept"
        ]

    # The service starts on it and serves the old data.
    with TestClient(create_app(make_settings(db_url))) as client:
        job = client.get("/v1/jobs/2")
        assert job.status_code == 200 and job.json()["error"] == "no tiling ran", job.text
        assert client.get("/workloads/" + "a" * 32).status_code == 200
    db = store.open_store(db_url, create=False)
    try:
        with db.session() as s:
            workload = store.find_workload(s, key="a" * 32)
            assert workload is not None and workload.shape == {"N": 4096}
            tiling = store.get_tiling(s, workload_id=workload.id, toolchain=None)
            assert tiling is not None and tiling.speedup == pytest.approx(1.2)
            statuses = [r.status for r in store.records_for(s, workload_id=workload.id)]
            assert statuses == ["ok", "crashed"]
    finally:
        db.close()
    record(
        f"migration {revision} -> {HEAD} ({db_url.split(':')[0].split('+')[0]})",
        faults_injected=1,
        survived=1,
        refusals=refusals,
        rows_before=sum(len(r) for r in before.values()),
        rows_kept=kept,
        rows_lost=sum(len(r) for r in before.values()) - kept,
    )
