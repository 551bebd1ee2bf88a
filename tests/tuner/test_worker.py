"""Workers: claiming, leases, re-claims with the exact budget left, signals, `serve`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.fakes import FakeBackend
from tilewise import store
from tilewise.errors import StoreError
from tilewise.kernels.backends import Backend
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target, twin_target
from tilewise.search import Budget, JobTag, Progress, Tuner
from tilewise.settings import Settings
from tilewise.store import JobStatus, WorkerStatus
from tilewise.types import Shape, Tiling, Workload
from tilewise.worker import MAX_ATTEMPTS, Worker

OP = "scale_relu_dropout"
ROOT = Path(__file__).resolve().parents[2]


def queue_job(
    db: store.Store,
    *,
    n: int = 3072,
    budget: int = 3,
    seed: int | None = 1,
    op_version: str | None = None,
    target: str = "cpu-twin",
    seconds: float | None = None,
) -> store.JobRow:
    spec = get_op(OP)
    workload = Workload(
        OP, op_version or spec.version, get_target(target).name, "float32", Shape({"N": n})
    )
    with db.session() as s:
        row = store.commit_workload(s, workload)
        return store.create_job(
            s, workload_id=row.id, budget_evals=budget, budget_seconds=seconds, seed=seed
        )


def get_job(db: store.Store, job_id: int) -> store.JobRow:
    with db.session() as s:
        job = store.get_job(s, job_id=job_id)
    assert job is not None
    return job


def job_records(db: store.Store, job: store.JobRow) -> list[store.RecordRow]:
    with db.session() as s:
        return store.records_for(s, workload_id=job.workload_id)


def measured_keys(records: list[store.RecordRow]) -> list[str]:
    return [r.tiling_key for r in records if r.source != store.SOURCE_REMEASURE]


def make_tuner(
    db: store.Store, settings: Settings, backend: Backend, job: JobTag | None, n: int = 3072
) -> Tuner:
    return Tuner(
        spec=get_op(OP),
        shape=Shape({"N": n}),
        dtype="float32",
        target=twin_target(),
        backend=backend,
        db=db,
        settings=settings,
        job=job,
    )


# ---------------------------------------------------------------------------------------------
# In process


def test_worker_claims_tunes_and_finishes_a_job(settings: Settings, db: store.Store) -> None:
    from tilewise.kernels.backends._cpu_twin import CpuTwinBackend

    job = queue_job(db, budget=3)
    with CpuTwinBackend(settings) as backend:
        worker = Worker(settings=settings, db=db, backend=backend, exit_when_idle=True)
        assert worker.run() == 1
    done = get_job(db, job.id)
    assert done.status is JobStatus.SUCCEEDED, done.error
    assert done.evaluations == 3 and done.attempts == 1 and done.lease_until is None
    assert done.best_latency_us is not None and done.best_latency_us > 0
    records = job_records(db, job)
    assert all(r.job_id == job.id for r in records)
    with db.session() as s:
        assert store.job_evaluations(s, job_id=job.id) == 3
        tiling = store.get_tiling(s, workload_id=job.workload_id, toolchain=None)
        (row,) = store.list_workers(s)
    assert tiling is not None and tiling.latency_us == pytest.approx(done.best_latency_us)
    assert row.id == worker.id and row.status is WorkerStatus.STOPPED
    assert row.id.split(":") == [socket.gethostname(), str(os.getpid()), "cpu-twin", "-"]


def test_expired_lease_is_reclaimed_with_the_budget_left(
    settings: Settings, db: store.Store
) -> None:
    job = queue_job(db, budget=5)
    # A first worker claims the job, spends 2 evaluations and dies without a word.
    with db.session() as s:
        claimed = store.claim_job(s, worker_id="dead", lease_seconds=0.3)
    assert claimed is not None and claimed.id == job.id
    first = FakeBackend()
    spent: list[int] = []

    def track(progress: Progress) -> None:
        spent.append(progress.evaluations)

    result = make_tuner(db, settings, first, JobTag(job.id, "dead")).run(
        Budget(5), seed=1, on_progress=track, should_stop=lambda: bool(spent) and spent[-1] >= 2
    )
    assert result.stopped and result.best is None
    assert sum(first.checked.values()) == 2
    time.sleep(0.4)

    second = FakeBackend()
    assert Worker(settings=settings, db=db, backend=second, exit_when_idle=True).run() == 1
    done = get_job(db, job.id)
    assert done.status is JobStatus.SUCCEEDED and done.attempts == 2
    assert done.evaluations == 5
    assert sum(second.checked.values()) == 3  # exactly the budget that was left
    assert not set(first.checked) & set(second.checked)  # nothing measured twice
    keys = measured_keys(job_records(db, job))
    assert len(keys) == len(set(keys)) == 5
    with db.session() as s:
        assert store.job_evaluations(s, job_id=job.id) == 5


def test_records_of_a_worker_that_lost_its_job_do_not_count(
    settings: Settings, db: store.Store
) -> None:
    job = queue_job(db, budget=5)
    with db.session() as s:
        assert store.claim_job(s, worker_id="slow", lease_seconds=0.2) is not None
    slow = make_tuner(db, settings, FakeBackend(), JobTag(job.id, "slow"))
    time.sleep(0.3)
    with db.session() as s:
        assert store.claim_job(s, worker_id="new", lease_seconds=30) is not None
    # The slow worker's trial in flight completes after the job moved on: kept, not counted.
    tiling = Tiling({"tileLength": 2048, "blockDim": 16, "bufferNum": 2})
    outcome = slow.evaluate(tiling, source="search", progress=Progress(budget=5))
    assert outcome.status == "ok"
    (record,) = job_records(db, job)
    assert record.job_id is None
    with db.session() as s:
        assert store.job_evaluations(s, job_id=job.id) == 0
    # ... and the new holder reuses that measurement instead of repeating it.
    backend = FakeBackend()
    new = make_tuner(db, settings, backend, JobTag(job.id, "new"))
    assert new.evaluate(tiling, source="search", progress=Progress(budget=5)) == outcome
    assert not backend.checked


def test_a_tiling_recorded_by_another_worker_meanwhile_is_not_measured_again(
    settings: Settings, db: store.Store
) -> None:
    mine, theirs = FakeBackend(), FakeBackend()
    me = make_tuner(db, settings, mine, None)
    other = make_tuner(db, settings, theirs, None)  # started at the same time: same records
    tiling = Tiling({"tileLength": 1024, "blockDim": 8, "bufferNum": 1})
    measured = other.evaluate(tiling, source="search", progress=Progress(budget=1))
    progress = Progress(budget=1)
    assert me.evaluate(tiling, source="search", progress=progress) == measured
    assert not mine.checked and progress.evaluations == 0 and progress.duplicates == 1
    assert progress.best_us == measured.latency_us


def test_cancelled_job_stops_its_worker(settings: Settings, db: store.Store) -> None:
    job = queue_job(db, budget=150)
    worker = Worker(
        settings=settings, db=db, backend=FakeBackend(delay_s=0.02), exit_when_idle=True
    )
    ran = threading.Thread(target=worker.run)
    ran.start()
    deadline = time.monotonic() + 30
    while get_job(db, job.id).status is JobStatus.QUEUED and time.monotonic() < deadline:
        time.sleep(0.05)
    with db.session() as s:
        store.cancel_job(s, job_id=job.id)
    ran.join(timeout=30)
    assert not ran.is_alive()
    done = get_job(db, job.id)
    assert done.status is JobStatus.CANCELLED
    records = job_records(db, job)
    with db.session() as s:
        spent = store.job_evaluations(s, job_id=job.id)
    assert spent < 150
    # The counts the job shows are its records' as it was cancelled, not the worker's last
    # progress write of a few seconds before.
    assert done.evaluations == spent
    searched = [
        r.latency_us
        for r in records
        if r.job_id == job.id and r.status == "ok" and r.source != store.SOURCE_REMEASURE
    ]
    assert done.best_latency_us == (min(searched) if searched else None)


def test_a_job_cancelled_before_its_winner_is_stored_stores_none(
    settings: Settings, db: store.Store
) -> None:
    """The cancel wins: a job that says it was cancelled has not tuned its workload."""
    job = queue_job(db, budget=3)
    with db.session() as s:
        claimed = store.claim_job(s, worker_id="w", lease_seconds=60)
    assert claimed is not None and claimed.id == job.id
    tuner = make_tuner(db, settings, FakeBackend(), JobTag(job.id, "w"))
    with db.session() as s:
        store.cancel_job(s, job_id=job.id)
    result = tuner.run(Budget(3), seed=1)
    assert result.best is None
    with db.session() as s:
        assert store.get_tiling(s, workload_id=job.workload_id, toolchain=None) is None


def test_stop_hands_the_job_back(settings: Settings, db: store.Store) -> None:
    job = queue_job(db, budget=150)
    worker = Worker(settings=settings, db=db, backend=FakeBackend(delay_s=0.02))
    ran = threading.Thread(target=worker.run)
    ran.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with db.session() as s:
            if store.job_evaluations(s, job_id=job.id) >= 3:
                break
        time.sleep(0.05)
    worker.stop()
    ran.join(timeout=30)
    assert not ran.is_alive()
    back = get_job(db, job.id)
    assert back.status is JobStatus.QUEUED
    assert back.worker_id is None and back.lease_until is None
    assert back.attempts == 0  # a stop is no failed attempt: restarts do not use them up
    with db.session() as s:
        assert back.evaluations == store.job_evaluations(s, job_id=job.id) >= 3


def test_a_job_that_could_not_be_handed_back_is_handed_back_when_the_database_answers(
    settings: Settings, db: store.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database gone when the worker hands a job back: the job stays running under the
    worker's lease. The worker hands it back at its next turn of the loop, once the database
    answers again, rather than leave it to the lease (60 s by default)."""
    job = queue_job(db, budget=5)
    worker = Worker(settings=settings, db=db, backend=FakeBackend())
    claimed = worker._claim()
    assert claimed is not None and claimed.id == job.id
    held = worker._held
    assert held is not None
    release = store.release_job
    down = [True]

    def unreachable(*args: Any, **kwargs: Any) -> bool:
        if down[0]:
            raise StoreError("cannot reach database")
        return release(*args, **kwargs)

    monkeypatch.setattr(store, "release_job", unreachable)
    worker._release(held)
    assert get_job(db, job.id).status is JobStatus.RUNNING
    worker._release_pending()  # still down: kept for the next turn
    assert get_job(db, job.id).status is JobStatus.RUNNING
    down[0] = False
    worker._release_pending()
    back = get_job(db, job.id)
    assert back.status is JobStatus.QUEUED and back.worker_id is None
    worker._release_pending()  # nothing left to hand back
    worker.close()


def test_stale_op_version_fails_the_job(settings: Settings, db: store.Store) -> None:
    job = queue_job(db, op_version="0123456789ab")
    backend = FakeBackend()
    Worker(settings=settings, db=db, backend=backend, exit_when_idle=True).run()
    done = get_job(db, job.id)
    assert done.status is JobStatus.FAILED
    assert done.error is not None and "version 0123456789ab" in done.error
    assert get_op(OP).version in done.error and not backend.checked


def test_a_job_whose_time_limit_ran_out_before_any_evaluation_says_so(
    settings: Settings, db: store.Store
) -> None:
    """Not "no tiling ran successfully in 0 evaluations: see the records": there are none."""
    job = queue_job(db, n=4096, seconds=1e-6)
    backend = FakeBackend()
    Worker(settings=settings, db=db, backend=backend, exit_when_idle=True).run()
    done = get_job(db, job.id)
    assert done.status is JobStatus.FAILED and not backend.checked
    assert done.error == "the time limit of 1e-06 s ran out before the first evaluation"


def test_worker_claims_only_jobs_of_its_target(settings: Settings, db: store.Store) -> None:
    job = queue_job(db, target="ascend910b1")
    assert Worker(settings=settings, db=db, backend=FakeBackend(), exit_when_idle=True).run() == 0
    assert get_job(db, job.id).status is JobStatus.QUEUED


def test_store_release_holds_and_targets(db: store.Store) -> None:
    twin = queue_job(db)
    npu = queue_job(db, target="ascend910b1")
    with db.session() as s:
        assert store.claim_job(s, worker_id="w", lease_seconds=30, targets=["nope"]) is None
        claimed = store.claim_job(s, worker_id="w", lease_seconds=30, targets=["cpu-twin"])
    assert claimed is not None and claimed.id == twin.id
    with db.session() as s:
        assert store.holds_job(s, job_id=twin.id, worker_id="w")
        assert not store.holds_job(s, job_id=twin.id, worker_id="other")
        assert not store.release_job(s, job_id=twin.id, worker_id="other")
        assert store.release_job(s, job_id=twin.id, worker_id="w", evaluations=0)
        assert not store.holds_job(s, job_id=twin.id, worker_id="w")
    back = get_job(db, twin.id)
    assert (back.status, back.worker_id, back.lease_until) == (JobStatus.QUEUED, None, None)
    # A graceful hand-back is no attempt: workers restarted any number of times do not use up
    # the job's attempts (MAX_ATTEMPTS); one that lost the database counts.
    for _ in range(MAX_ATTEMPTS + 2):
        with db.session() as s:
            handed = store.claim_job(s, worker_id="w", lease_seconds=30, targets=["cpu-twin"])
            assert handed is not None and handed.attempts == 2
            assert store.release_job(s, job_id=twin.id, worker_id="w", attempted=False)
    with db.session() as s:
        again = store.claim_job(s, worker_id="w2", lease_seconds=30, targets=["cpu-twin"])
        assert again is not None and again.id == twin.id and again.attempts == 2
        store.cancel_job(s, job_id=twin.id)
        assert not store.holds_job(s, job_id=twin.id, worker_id="w2")
        assert store.claim_job(s, worker_id="w", lease_seconds=30) is not None  # no filter
    assert get_job(db, npu.id).status is JobStatus.RUNNING


def test_job_id_migration_keeps_old_records(db_url: str) -> None:
    """A database at 0001 with records upgrades to 0002; old records have no job."""
    store.migrate(db_url, revision="0001")
    engine = store.create_engine(db_url)
    try:
        with engine.begin() as c:
            c.execute(
                sa.text(
                    "INSERT INTO tw_workloads (key, op, op_version, target, dtype, shape,"
                    " shape_key, created_at) VALUES ('k', 'op', 'v', 't', 'float32', '{}', '',"
                    " CURRENT_TIMESTAMP)"
                )
            )
            c.execute(
                sa.text(
                    "INSERT INTO tw_records (workload_id, tiling, tiling_key, status, source,"
                    " env, created_at) SELECT id, '{}', '{}', 'infeasible', 'search', '{}',"
                    " CURRENT_TIMESTAMP FROM tw_workloads"
                )
            )
    finally:
        engine.dispose()
    store.migrate(db_url)
    opened = store.open_store(db_url, create=False)
    try:
        with opened.session() as s:
            (workload,) = [store.find_workload(s, key="k")]
            assert workload is not None
            (record,) = store.records_for(s, workload_id=workload.id)
        assert record.job_id is None
    finally:
        opened.close()


def test_heartbeat_must_be_shorter_than_the_lease(settings: Settings, db: store.Store) -> None:
    bad = settings.model_copy(update={"heartbeat_s": 30.0, "lease_s": 10.0})
    with pytest.raises(ValueError, match="heartbeat_s"):
        Worker(settings=bad, db=db, backend=FakeBackend())


# ---------------------------------------------------------------------------------------------
# Processes


def _env(twin_cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEWISE_")}
    env.update(
        TILEWISE_CACHE_DIR=str(twin_cache),
        TILEWISE_REPEATS="3",
        TILEWISE_HEARTBEAT_S="0.5",
        TILEWISE_POLL_S="0.2",
        **extra,
    )
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tilewise.cli", *args]


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _spent(db: store.Store, job_id: int) -> int:
    with db.session() as s:
        return store.job_evaluations(s, job_id=job_id)


@pytest.mark.slow
def test_sigterm_hands_the_job_back_and_exits_0(
    db: store.Store, settings: Settings, twin_cache: Path
) -> None:
    job = queue_job(db, n=6144, budget=150)
    proc = subprocess.Popen(
        _cli("worker", "--target", "cpu-twin", "--db", settings.db_url),
        env=_env(twin_cache),
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: _spent(db, job.id) >= 2, 120, "two evaluations")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    back = get_job(db, job.id)
    assert back.status in (JobStatus.QUEUED, JobStatus.SUCCEEDED), back
    assert back.worker_id is None or back.status is JobStatus.SUCCEEDED
    assert back.lease_until is None
    assert back.evaluations == _spent(db, job.id)
    with db.session() as s:
        (row,) = store.list_workers(s)
    assert row.status is WorkerStatus.STOPPED and row.pid == proc.pid


@pytest.mark.slow
def test_ctrl_c_in_a_terminal_does_not_kill_the_trial_in_flight(
    tmp_path: Path, twin_cache: Path
) -> None:
    """SIGINT to the whole process group (a terminal's Ctrl-C) reaches the runner and the
    compiler too: they must not die and leave false "crashed" records."""
    url = f"sqlite:///{tmp_path / 'ctrl-c.db'}"
    db = store.open_store(url)
    try:
        job = queue_job(db, n=6144, budget=150)
        proc = subprocess.Popen(
            _cli("worker", "--db", url),
            env=_env(twin_cache),
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, as a shell's foreground job
        )
        try:
            _wait_for(lambda: _spent(db, job.id) >= 2, 120, "two evaluations")
            os.killpg(proc.pid, signal.SIGINT)
            _, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert proc.returncode == 0, stderr
        assert get_job(db, job.id).status in (JobStatus.QUEUED, JobStatus.SUCCEEDED)
        statuses = Counter(r.status.value for r in job_records(db, job))
        assert set(statuses) <= {"ok", "infeasible"}, statuses
    finally:
        db.close()


@pytest.mark.parametrize(
    ("host", "named"), [("0.0.0.0", "'0.0.0.0'"), ("", "every interface (host '')")]
)
def test_serve_refuses_a_public_address_without_a_token(
    tmp_path: Path, host: str, named: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEWISE_")}
    done = subprocess.run(
        _cli("serve", "--host", host, "--db", f"sqlite:///{tmp_path / 'x.db'}"),
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "TILEWISE_API_TOKEN" in done.stderr
    assert f"refusing to serve on {named} without an API token" in done.stderr
    assert not (tmp_path / "x.db").exists()  # refused before anything was written


STUB_APP = """
import json

def create_app(settings):
    body = json.dumps({"dev_mode": settings.dev_mode, "db": settings.db_url}).encode()

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    return app
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.slow
def test_serve_on_a_port_in_use_is_one_error_line(tmp_path: Path, twin_cache: Path) -> None:
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            _cli("serve", "--port", str(port), "--workers", "0", "--db", url),
            env=_env(twin_cache),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: the API could not start on 127.0.0.1:{port} (see the log above)"
    )


def test_serve_runs_the_api_and_supervised_workers(tmp_path: Path, twin_cache: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "stub_api.py").write_text(STUB_APP)
    url = f"sqlite:///{tmp_path / 'data' / 'serve.db'}"
    port = _free_port()
    env = _env(twin_cache, PYTHONPATH=str(tmp_path / "app"))
    # Started as a user starts it, from the directory a clone named tilewise sits in: the
    # workers' `python -m` must not take that folder for the package.
    (tmp_path / "work" / "tilewise").mkdir(parents=True)
    proc = subprocess.Popen(
        # The stub stands in for tilewise.api.app: the API is not what is tested here.
        [
            str(Path(sys.executable).parent / "tilewise"),
            "serve",
            "--port",
            str(port),
            "--workers",
            "2",
            "--db",
            url,
            "--app",
            "stub_api:create_app",
        ],
        env=env,
        cwd=tmp_path / "work",
        stderr=subprocess.PIPE,
        text=True,
    )
    db: store.Store | None = None
    try:
        _wait_for(lambda: (tmp_path / "data" / "serve.db").exists(), 60, "the database")
        db = store.open_store(url, create=False)
        opened = db

        def alive() -> list[store.WorkerRow]:
            with opened.session() as s:
                return store.list_workers(s, alive_within=30)

        _wait_for(lambda: len(alive()) == 2, 60, "two workers")
        assert {w.device for w in alive()} == {0, 1}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
            served = json.loads(answer.read())
        assert served == {"dev_mode": True, "db": url}

        # A worker that dies is started again.
        victim = next(w for w in alive() if w.device == 0)
        os.kill(victim.pid, signal.SIGKILL)
        _wait_for(
            lambda: any(w.device == 0 and w.pid != victim.pid for w in alive()),
            60,
            "a restarted worker",
        )
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        with opened.session() as s:
            workers = store.list_workers(s)
        live = [w for w in workers if w.pid != victim.pid]
        assert len(live) == 2 and all(w.status is WorkerStatus.STOPPED for w in live)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if db is not None:
            db.close()
