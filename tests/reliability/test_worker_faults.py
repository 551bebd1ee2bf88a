"""Worker faults with real `tilewise worker` processes on the cpu-twin.

SIGKILL in the middle of a trial: the job is claimed again once its lease expires, by another
worker, and finishes; every evaluation the dead worker recorded still counts, nothing is
measured twice, and the tiling table gets one winner. SIGTERM in the middle of a trial: the
trial completes and is recorded, the job goes back to the queue, the worker exits 0, and the
next worker finishes the job with exactly the budget left.

A trial is "in the middle" when the study has a running trial with no record yet that started
less than ``YOUNG_S`` ago: with ``MAX_MEASURE_S`` of measuring in every trial, the signal lands
well before the trial can end.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from tests.reliability._procs import (
    Proc,
    cli,
    get_job,
    records,
    running,
    service_env,
    spent,
    wait_for,
)
from tests.reliability._report import record
from tilewise import store
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import twin_target
from tilewise.store import JobStatus, WorkerStatus
from tilewise.types import Shape, Tiling, Workload

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

OP = "scale_relu_dropout"
SHAPE = Shape({"N": 1 << 20})
LEASE_S = 4.0
MAX_MEASURE_S = 2.0
YOUNG_S = 0.8
TIMEOUT_S = 300.0  # generous: the machine is shared


@pytest.fixture
def db(db_url: str) -> Iterator[store.Store]:
    opened = store.open_store(db_url)
    yield opened
    opened.close()


def worker_env(twin_cache: Path, **extra: object) -> dict[str, str]:
    return service_env(
        twin_cache,
        lease_s=LEASE_S,
        heartbeat_s=0.5,
        poll_s=0.2,
        warmup=0,
        repeats=1_000_000,  # so every measurement runs for MAX_MEASURE_S
        max_measure_s=MAX_MEASURE_S,
        remeasure_top=2,
        **extra,
    )


def queue_job(db: store.Store, budget: int) -> tuple[store.JobRow, Workload]:
    spec = get_op(OP)
    workload = Workload(OP, spec.version, "cpu-twin", "float32", SHAPE)
    with db.session() as s:
        row = store.commit_workload(s, workload)
        job = store.create_job(s, workload_id=row.id, budget_evals=budget, seed=1)
    return job, workload


def measured(rows: list[store.RecordRow]) -> list[store.RecordRow]:
    return [r for r in rows if r.source != store.SOURCE_REMEASURE]


def counted(rows: list[store.RecordRow], job_id: int) -> list[store.RecordRow]:
    return [r for r in measured(rows) if r.job_id == job_id and r.status != "infeasible"]


def young_trial_in_flight(
    db: store.Store, storage: optuna.storages.RDBStorage, workload: Workload, workload_id: int
) -> str | None:
    """The tiling key of a trial that started less than YOUNG_S ago, has no record yet and
    will be measured."""
    try:
        study_id = storage.get_study_id_from_name(workload.study_name)
    except KeyError:
        return None
    done = {r.tiling_key for r in records(db, workload_id)}
    spec, target = get_op(OP), twin_target()
    names = {t.name for t in spec.tunables(SHAPE, "float32", target)}
    now = datetime.now()  # Optuna stores naive local times
    for trial in storage.get_all_trials(
        study_id, deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)
    ):
        if set(trial.params) != names:
            continue  # asked, not yet (fully) sampled: its tiling is not known yet
        tiling = Tiling({k: int(v) for k, v in trial.params.items()})
        started = trial.datetime_start
        young = started is not None and (now - started).total_seconds() < YOUNG_S
        # Only a tiling that passes the static check is built, launched and measured (for
        # MAX_MEASURE_S): a rejected one is recorded at once.
        if (
            young
            and tiling.key() not in done
            and spec.check(tiling, SHAPE, "float32", target).valid
        ):
            return tiling.key()
    return None


def catch_mid_trial(
    db: store.Store, proc: Proc, job: store.JobRow, workload: Workload, evaluations: int
) -> str:
    """Wait until the worker has spent ``evaluations`` and has just begun another trial."""
    storage = optuna.storages.RDBStorage(db.url, engine_kwargs=store.optuna_engine_kwargs(db.url))
    found: list[str] = []

    def ready() -> bool:
        assert proc.popen.poll() is None, proc.log()
        if spent(db, job.id) < evaluations:
            return False
        key = young_trial_in_flight(db, storage, workload, job.workload_id)
        found.extend([key] if key else [])
        return bool(key)

    try:
        wait_for(ready, TIMEOUT_S, f"{evaluations} evaluations and a trial in flight")
    finally:
        storage.engine.dispose()
    return found[-1]


def assert_one_winner(db: store.Store, job: store.JobRow) -> store.TilingRow:
    with db.session() as s:
        (rows,) = s.execute(
            sa.text("SELECT count(*) FROM tw_tilings WHERE workload_id = :w"),
            {"w": job.workload_id},
        ).one()
        winner = store.get_tiling(s, workload_id=job.workload_id, toolchain=None)
    assert rows == 1 and winner is not None
    by_id = {r.id: r for r in records(db, job.workload_id)}
    chosen = by_id[winner.record_id]
    assert chosen.status == "ok" and chosen.tiling == winner.tiling
    assert winner.tiling in [r.tiling for r in measured(list(by_id.values())) if r.status == "ok"]
    assert get_job(db, job.id).best_latency_us == pytest.approx(winner.latency_us)
    return winner


def test_sigkill_mid_trial_the_job_is_reclaimed_after_its_lease_and_finishes(
    db: store.Store, db_url: str, twin_cache: Path, tmp_path: Path
) -> None:
    budget = 6
    job, workload = queue_job(db, budget)
    command = cli("worker", "--db", db_url, "--max-jobs", "1")
    with running(command, env=worker_env(twin_cache), log=tmp_path / "a.log") as first:
        in_flight = catch_mid_trial(db, first, job, workload, evaluations=2)
        first.popen.send_signal(signal.SIGKILL)
        assert first.wait(60) == -signal.SIGKILL
        killed_at = time.monotonic()

    # The trial in flight died with the worker: no record of it, the job still held.
    before = records(db, job.workload_id)
    assert in_flight not in {r.tiling_key for r in before}
    held = get_job(db, job.id)
    assert held.status is JobStatus.RUNNING and held.attempts == 1 and held.lease_until
    first_counted = counted(before, job.id)
    assert len(first_counted) == spent(db, job.id) >= 2

    # Assistants off: the second worker waits for the lease to expire and claims the job.
    env = worker_env(twin_cache, max_assistants_per_job=0)
    with running(command, env=env, log=tmp_path / "b.log") as second:
        assert second.wait(TIMEOUT_S) == 0, second.log()
    finished_after = time.monotonic() - killed_at

    done = get_job(db, job.id)
    assert done.status is JobStatus.SUCCEEDED, (done, second.log())
    assert done.attempts == 2 and done.worker_id != held.worker_id
    assert done.started_at is not None and held.lease_until <= done.started_at
    after = records(db, job.workload_id)
    # No evaluation lost: the dead worker's records are all there and still count ...
    assert {r.id: r.job_id for r in before}.items() <= {r.id: r.job_id for r in after}.items()
    assert done.evaluations == spent(db, job.id) == len(counted(after, job.id)) == budget
    # ... and none measured twice, by either worker.
    keys = [r.tiling_key for r in measured(after)]
    assert len(keys) == len(set(keys)), keys
    assert_one_winner(db, job)
    record(
        f"worker SIGKILL mid-trial ({db.engine.dialect.name})",
        faults_injected=1,
        survived=1,
        budget=budget,
        evaluations=done.evaluations,
        evaluations_before_kill=len(first_counted),
        records=len(after),
        duplicates=len(keys) - len(set(keys)),
        lost=budget - done.evaluations,
        winners=1,
        finished_s_after_kill=round(finished_after, 1),
    )


def test_sigterm_mid_trial_completes_it_hands_the_job_back_and_exits_0(
    db: store.Store, db_url: str, twin_cache: Path, tmp_path: Path
) -> None:
    budget = 8  # left over when the signal comes, however late the test sees the trial
    job, workload = queue_job(db, budget)
    command = cli("worker", "--db", db_url, "--max-jobs", "1")
    with running(command, env=worker_env(twin_cache), log=tmp_path / "a.log") as first:
        in_flight = catch_mid_trial(db, first, job, workload, evaluations=2)
        first.popen.send_signal(signal.SIGTERM)
        assert first.wait(TIMEOUT_S) == 0, first.log()
        with db.session() as s:
            (row,) = [w for w in store.list_workers(s) if w.pid == first.pid]
        assert row.status is WorkerStatus.STOPPED

    # The trial in flight was completed and counted; the job went back to the queue.
    finished = {r.tiling_key: r for r in records(db, job.workload_id)}
    assert in_flight in finished and finished[in_flight].job_id == job.id
    back = get_job(db, job.id)
    assert back.status is JobStatus.QUEUED, back
    assert back.worker_id is None and back.lease_until is None
    assert back.attempts == 0  # a stop's hand-back is no attempt (restarts do not fail a job)
    handed_back = spent(db, job.id)
    assert back.evaluations == handed_back >= 3

    with running(command, env=worker_env(twin_cache), log=tmp_path / "b.log") as second:
        assert second.wait(TIMEOUT_S) == 0, second.log()
    done = get_job(db, job.id)
    assert done.status is JobStatus.SUCCEEDED and done.attempts == 1, (done, second.log())
    after = records(db, job.workload_id)
    assert done.evaluations == spent(db, job.id) == len(counted(after, job.id)) == budget
    keys = [r.tiling_key for r in measured(after)]
    assert len(keys) == len(set(keys)), keys
    assert_one_winner(db, job)
    record(
        f"worker SIGTERM mid-trial ({db.engine.dialect.name})",
        faults_injected=1,
        survived=1,
        budget=budget,
        evaluations=done.evaluations,
        evaluations_handed_back=handed_back,
        records=len(after),
        duplicates=len(keys) - len(set(keys)),
        lost=budget - done.evaluations,
        winners=1,
    )
