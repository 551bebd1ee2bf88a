"""Database faults: PostgreSQL stopped and started again under a running `tilewise serve` (the
API and a worker), restarted in the middle of a worker's write to its Optuna study, and a SQLite
database locked by another writer.

The PostgreSQL faults hit a private server made for the test (``private_pg``), never the shared
one at 127.0.0.1:5432.

While the database is away every answer that needs it is a 503 with Retry-After, never a 500;
answers that need no database (ops, metrics, a tiling served from memory) still come. When it
is back the API answers again and the same worker process carries on with its job to the end:
nothing counted twice, nothing measured twice.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import optuna
import pytest
from fastapi.testclient import TestClient

from tests.api._support import AUTH, make_settings, seed_tuned
from tests.reliability._procs import PrivatePostgres, cli, free_port, running, service_env, wait_for
from tests.reliability._report import record
from tilewise import store
from tilewise.api import create_app
from tilewise.kernels.ops import get_op
from tilewise.settings import Settings
from tilewise.store import JobStatus, _engine
from tilewise.types import Shape, Workload
from tilewise.worker import Worker

pytestmark = pytest.mark.reliability

OP = "scale_relu_dropout"
TIMEOUT_S = 300.0
DOWN_S = 6.0

#: Answers that never need the database, whatever its state.
NO_DATABASE = {"/v1/ops", "/metrics"}


def _probes(job_id: int) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("GET", "/healthz", None),
        ("GET", "/v1/jobs", None),
        ("GET", f"/v1/jobs/{job_id}", None),
        ("POST", f"/v1/jobs/{job_id + 1000}/cancel", None),
        ("GET", "/v1/workers", None),
        ("GET", f"/v1/tilings/{OP}?shape=N=4096", None),
        ("GET", "/v1/tables", None),
        ("GET", f"/v1/tables/{OP}", None),
        ("GET", "/", None),
        ("GET", "/workloads/" + "0123456789abcdef" * 2, None),
        ("POST", "/v1/jobs", {"op": OP, "shape": {"N": 8192}, "budget": 3}),
        ("GET", "/v1/ops", None),
        ("GET", "/metrics", None),
    ]


def _probe_all(
    client: httpx.Client | TestClient, job_id: int, seen: Counter[tuple[str, int]]
) -> None:
    for method, path, body in _probes(job_id):
        r = client.request(method, path, json=body, headers=AUTH)
        seen[(path.split("?")[0], r.status_code)] += 1
        assert r.status_code != 500, (method, path, r.text)
        if r.status_code == 503:
            assert r.headers.get("retry-after"), (path, r.headers)
            assert "database unavailable" in r.json()["detail"], r.text


def _statuses(seen: Counter[tuple[str, int]]) -> Counter[int]:
    out: Counter[int] = Counter()
    for (_, code), n in seen.items():
        out[code] += n
    return out


# ---------------------------------------------------------------------------------------------
# PostgreSQL restarted under the service


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_restart_under_serve_503_then_reconnect_and_finish(
    private_pg: PrivatePostgres, twin_cache: Path, tmp_path: Path
) -> None:
    url = private_pg.create_database("tilewise")
    port = free_port()
    env = service_env(
        twin_cache,
        lease_s=4.0,
        heartbeat_s=0.5,
        poll_s=0.2,
        warmup=0,
        repeats=1_000_000,
        max_measure_s=1.0,
        remeasure_top=2,
    )
    budget = 6
    command = cli("serve", "--port", str(port), "--workers", "1", "--db", url)
    with (
        running(command, env=env, log=tmp_path / "serve.log") as serve,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as api,
    ):

        def up() -> bool:
            assert serve.popen.poll() is None, serve.log()
            try:
                return api.get("/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 120, "the API")
        created = api.post("/v1/jobs", json={"op": OP, "shape": {"N": 1 << 20}, "budget": budget})
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]

        def job() -> dict[str, Any]:
            answer = api.get(f"/v1/jobs/{job_id}")
            assert answer.status_code == 200, answer.text
            result: dict[str, Any] = answer.json()
            return result

        wait_for(lambda: job()["evaluations"] >= 2, TIMEOUT_S, "two evaluations")
        workers = {w["pid"] for w in api.get("/v1/workers").json()}
        assert len(workers) == 1, workers

        # The fault: the database goes away for DOWN_S, then comes back.
        private_pg.stop()
        seen: Counter[tuple[str, int]] = Counter()
        down_until = time.monotonic() + DOWN_S
        while time.monotonic() < down_until:
            _probe_all(api, job_id, seen)
            time.sleep(0.2)
        private_pg.start()
        # Everything that needs the database said so with a 503; nothing else failed.
        for (path, code), _ in seen.items():
            assert code == 503 or path in NO_DATABASE or path.startswith("/v1/tilings"), seen
        assert seen[("/healthz", 503)] > 0 and seen[("/v1/jobs", 503)] > 0, seen

        after: Counter[tuple[str, int]] = Counter()
        wait_for(up, 60, "the API to reconnect")
        _probe_all(api, job_id, after)
        assert not [k for k in after if k[1] >= 500], after
        wait_for(lambda: job()["status"] in ("succeeded", "failed"), TIMEOUT_S, "the job")
        finished = job()
        assert finished["status"] == "succeeded", (finished, serve.log())
        assert finished["evaluations"] == budget
        # The same worker process reconnected: the supervisor never had to restart one.
        assert {w["pid"] for w in api.get("/v1/workers").json()} == workers, serve.log()
        assert serve.popen.poll() is None
        serve.popen.send_signal(signal.SIGTERM)
        assert serve.wait(TIMEOUT_S) == 0, serve.log()

    db = store.open_store(url, create=False)
    try:
        with db.session() as s:
            row = store.get_job(s, job_id=job_id)
            assert row is not None
            rows = store.records_for(s, workload_id=row.workload_id)
            tiling = store.get_tiling(s, workload_id=row.workload_id, toolchain=None)
            evaluations = store.job_evaluations(s, job_id=job_id)
    finally:
        db.close()
    keys = [r.tiling_key for r in rows if r.source != store.SOURCE_REMEASURE]
    assert len(keys) == len(set(keys)) and evaluations == budget and tiling is not None
    statuses = _statuses(seen)
    record(
        "PostgreSQL stopped and restarted under serve (API + worker)",
        faults_injected=1,
        survived=1,
        down_s=DOWN_S,
        requests_while_down=sum(statuses.values()),
        answers_503=statuses[503],
        answers_500=statuses[500],
        answers_200_without_database=statuses[200],
        job_evaluations=evaluations,
        duplicates=len(keys) - len(set(keys)),
        worker_restarts=0,
    )


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_restart_during_an_optuna_call_hands_the_job_back(
    private_pg: PrivatePostgres, twin_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restart lands inside a write of the job's Optuna study (the worker's other path to
    the database) and is over when the worker handles the error: the job must be handed back
    and resumed, not failed for good."""
    url = private_pg.create_database("tilewise")
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        db_url=url,
        cache_dir=twin_cache,
        lease_s=3.0,
        heartbeat_s=0.3,
        poll_s=0.1,
        warmup=0,
        repeats=3,
        max_measure_s=0.2,
        remeasure_top=1,
    )
    budget = 4
    db = store.open_store(url)
    spec = get_op(OP)
    with db.session() as s:
        workload = store.commit_workload(
            s, Workload(OP, spec.version, "cpu-twin", "float32", Shape({"N": 4096}))
        )
        job = store.create_job(s, workload_id=workload.id, budget_evals=budget, seed=1)

    tell = optuna.storages.RDBStorage.set_trial_state_values
    restarts: list[str] = []

    def restart_meanwhile(
        storage: optuna.storages.RDBStorage, trial_id: int, *args: Any, **kwargs: Any
    ) -> bool:
        if restarts:
            return tell(storage, trial_id, *args, **kwargs)
        private_pg.stop()
        try:
            return tell(storage, trial_id, *args, **kwargs)
        except Exception as exc:
            restarts.append(type(exc).__name__)
            raise
        finally:
            private_pg.start()

    monkeypatch.setattr(optuna.storages.RDBStorage, "set_trial_state_values", restart_meanwhile)
    try:
        Worker(settings=settings, exit_when_idle=True).run()
        with db.session() as s:
            done = store.get_job(s, job_id=job.id)
            rows = store.records_for(s, workload_id=workload.id)
            tiling = store.get_tiling(s, workload_id=workload.id, toolchain=None)
            evaluations = store.job_evaluations(s, job_id=job.id)
    finally:
        db.close()
    assert restarts, "the fault was not injected"
    assert done is not None and done.status is JobStatus.SUCCEEDED, done
    assert done.attempts == 2 and done.evaluations == evaluations == budget
    keys = [r.tiling_key for r in rows if r.source != store.SOURCE_REMEASURE]
    assert len(keys) == len(set(keys)) and tiling is not None
    record(
        "PostgreSQL restarted during an Optuna study write",
        faults_injected=1,
        survived=1,
        error_seen=restarts[0],
        job_attempts=done.attempts,
        job_evaluations=evaluations,
        duplicates=len(keys) - len(set(keys)),
    )


# ---------------------------------------------------------------------------------------------
# SQLite locked by another writer


@pytest.fixture
def locked_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    # A short busy timeout so that the test need not wait 30 s for each "database is locked".
    monkeypatch.setattr(_engine, "SQLITE_BUSY_TIMEOUT_S", 0.5)
    return f"sqlite:///{tmp_path / 'locked.db'}"


def test_sqlite_database_is_locked_is_503_never_500(locked_sqlite: str, tmp_path: Path) -> None:
    url = locked_sqlite
    with TestClient(create_app(make_settings(url))) as client:
        db: store.Store = client.app.state.store  # type: ignore[attr-defined]
        seed_tuned(db, shape={"N": 4096})
        created = client.post("/v1/jobs", json={"op": OP, "shape": {"N": 2048}}, headers=AUTH)
        assert created.status_code == 202
        job_id = created.json()["id"]

        # Another process holds the write lock (as a long migration or a stuck writer would).
        holder = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            seen: Counter[tuple[str, int]] = Counter()
            _probe_all(client, job_id, seen)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        for (path, code), _ in seen.items():
            assert code == 503 or path in NO_DATABASE or path.startswith("/v1/tilings"), seen

        after: Counter[tuple[str, int]] = Counter()
        _probe_all(client, job_id, after)
        assert not [k for k in after if k[1] >= 500], after
        again = client.post("/v1/jobs", json={"op": OP, "shape": {"N": 8192}}, headers=AUTH)
        assert again.status_code in (200, 202), again.text
    statuses = _statuses(seen)
    record(
        "SQLite database locked by another writer",
        faults_injected=1,
        survived=1,
        requests_while_locked=sum(statuses.values()),
        answers_503=statuses[503],
        answers_500=statuses[500],
        answers_200_without_database=statuses[200],
    )
