"""The job queue (claims, leases, cancellation) and worker heartbeats."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from tilewise.errors import InputError
from tilewise.store import (
    JobStatus,
    Store,
    WorkerStatus,
    cancel_job,
    claim_job,
    commit_workload,
    count_jobs_by_status,
    create_job,
    finish_job,
    get_job,
    heartbeat_worker,
    list_jobs,
    list_workers,
    renew_lease,
    session_scope,
    update_job_progress,
)
from tilewise.types import Shape, Workload

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _workload_id(store: Store, op: str = "matmul_add", m: int = 64) -> int:
    workload = Workload(
        op=op, op_version="v1", target="910B3", dtype="float16", shape=Shape({"M": m})
    )
    with session_scope(store) as session:
        return commit_workload(session, workload).id


def _jobs(store: Store, n: int, workload_id: int | None = None) -> list[int]:
    wid = workload_id or _workload_id(store)
    with session_scope(store) as session:
        return [create_job(session, workload_id=wid, budget_evals=10).id for _ in range(n)]


def test_create_get_and_list(store: Store) -> None:
    mm = _workload_id(store)
    sm = _workload_id(store, op="softmax")
    with session_scope(store) as session:
        job = create_job(
            session, workload_id=mm, budget_evals=50, budget_seconds=60.0, force=True, seed=7
        )
        other = create_job(session, workload_id=sm, budget_evals=5)
    assert job.status is JobStatus.QUEUED and job.evaluations == 0 and job.attempts == 0
    assert (job.budget_evals, job.budget_seconds, job.force, job.seed) == (50, 60.0, True, 7)
    assert job.created_at.tzinfo is UTC and job.started_at is None and job.worker_id is None
    with session_scope(store) as session:
        assert get_job(session, job_id=job.id) == job
        assert get_job(session, job_id=999_999) is None
        assert [j.id for j in list_jobs(session)] == [other.id, job.id]  # newest first
        assert [j.id for j in list_jobs(session, op="softmax")] == [other.id]
        assert [j.id for j in list_jobs(session, workload_id=mm)] == [job.id]
        assert [j.id for j in list_jobs(session, status="queued", limit=1)] == [other.id]
        assert list_jobs(session, status=[JobStatus.RUNNING, JobStatus.FAILED]) == []
        with pytest.raises(InputError):
            list_jobs(session, status="paused")
        with pytest.raises(InputError):
            create_job(session, workload_id=mm, budget_evals=0)
        with pytest.raises(InputError):
            create_job(session, workload_id=mm, budget_evals=1, budget_seconds=0.0)


def test_two_claims_take_different_jobs_oldest_first(store: Store) -> None:
    first, second = _jobs(store, 2)
    with session_scope(store) as session:
        a = claim_job(session, worker_id="w-a", lease_seconds=30, now=T0)
    with session_scope(store) as session:
        b = claim_job(session, worker_id="w-b", lease_seconds=30, now=T0)
    with session_scope(store) as session:
        assert claim_job(session, worker_id="w-c", lease_seconds=30, now=T0) is None
    assert a is not None and b is not None
    assert (a.id, b.id) == (first, second)
    assert a.status is JobStatus.RUNNING and a.worker_id == "w-a" and a.attempts == 1
    assert a.lease_until == T0 + timedelta(seconds=30) and a.started_at == T0


def test_expired_lease_is_reclaimed_and_the_old_holder_loses_it(store: Store) -> None:
    (job_id,) = _jobs(store, 1)
    with session_scope(store) as session:
        assert claim_job(session, worker_id="w-a", lease_seconds=10, now=T0) is not None
    with session_scope(store) as session:
        # Lease still valid: nothing to claim. Renewing extends it.
        assert (
            claim_job(session, worker_id="w-b", lease_seconds=10, now=T0 + timedelta(seconds=9))
            is None
        )
        assert renew_lease(
            session, job_id=job_id, worker_id="w-a", lease_seconds=10, now=T0 + timedelta(seconds=9)
        )
        assert (
            claim_job(session, worker_id="w-b", lease_seconds=10, now=T0 + timedelta(seconds=18))
            is None
        )
    with session_scope(store) as session:
        # w-a died: after its lease ran out, w-b takes the job over.
        later = T0 + timedelta(seconds=20)
        taken = claim_job(session, worker_id="w-b", lease_seconds=10, now=later)
    assert taken is not None and taken.id == job_id
    assert taken.worker_id == "w-b" and taken.attempts == 2
    with session_scope(store) as session:
        assert not renew_lease(session, job_id=job_id, worker_id="w-a", lease_seconds=10)
        assert not update_job_progress(
            session, job_id=job_id, worker_id="w-a", evaluations=3, best_latency_us=1.0, speedup=2.0
        )
        assert finish_job(session, job_id=job_id, worker_id="w-a", status="succeeded") is None
        assert get_job(session, job_id=job_id) == taken


def test_cancelled_and_finished_jobs_are_not_claimed(store: Store) -> None:
    cancelled, done, failed, running_cancelled = _jobs(store, 4)
    with session_scope(store) as session:
        row = cancel_job(session, job_id=cancelled)
        assert row is not None and row.status is JobStatus.CANCELLED and row.finished_at
        # Claim the three others in order, finish two, cancel the third while it runs.
        for job_id in (done, failed, running_cancelled):
            claimed = claim_job(session, worker_id="w", lease_seconds=5, now=T0)
            assert claimed is not None and claimed.id == job_id
        ok = finish_job(
            session,
            job_id=done,
            worker_id="w",
            status=JobStatus.SUCCEEDED,
            evaluations=10,
            best_latency_us=3.5,
            speedup=1.7,
        )
        assert ok is not None and ok.status is JobStatus.SUCCEEDED and ok.lease_until is None
        assert (ok.evaluations, ok.best_latency_us, ok.speedup) == (10, 3.5, 1.7)
        bad = finish_job(
            session, job_id=failed, worker_id="w", status="failed", error="no compiler"
        )
        assert bad is not None and bad.error == "no compiler"
        assert cancel_job(session, job_id=running_cancelled) is not None
        # A finished job stays as it was; an unknown one is None.
        assert cancel_job(session, job_id=done) == ok
        assert cancel_job(session, job_id=999_999) is None
        with pytest.raises(InputError):
            finish_job(session, job_id=done, worker_id="w", status="cancelled")
    with session_scope(store) as session:
        far_future = T0 + timedelta(days=365)
        assert claim_job(session, worker_id="w2", lease_seconds=5, now=far_future) is None
        # The worker of the cancelled job finds out at its next renewal.
        assert not renew_lease(session, job_id=running_cancelled, worker_id="w", lease_seconds=5)
        statuses = {j.id: j.status for j in list_jobs(session)}
    assert statuses == {
        cancelled: JobStatus.CANCELLED,
        done: JobStatus.SUCCEEDED,
        failed: JobStatus.FAILED,
        running_cancelled: JobStatus.CANCELLED,
    }


def test_jobs_are_counted_by_status(store: Store) -> None:
    _, cancelled, _ = _jobs(store, 3)
    with session_scope(store) as session:
        assert count_jobs_by_status(session) == {JobStatus.QUEUED: 3}
        cancel_job(session, job_id=cancelled)
        claim_job(session, worker_id="w", lease_seconds=60)
    with session_scope(store) as session:
        counts = count_jobs_by_status(session)
    assert counts == {JobStatus.QUEUED: 1, JobStatus.RUNNING: 1, JobStatus.CANCELLED: 1}
    assert all(type(status) is JobStatus for status in counts)


def test_progress_updates_by_the_holder(store: Store) -> None:
    (job_id,) = _jobs(store, 1)
    with session_scope(store) as session:
        claim_job(session, worker_id="w", lease_seconds=60)
        assert update_job_progress(
            session, job_id=job_id, worker_id="w", evaluations=4, best_latency_us=9.0, speedup=1.1
        )
    with session_scope(store) as session:
        job = get_job(session, job_id=job_id)
    assert job is not None and (job.evaluations, job.best_latency_us, job.speedup) == (4, 9.0, 1.1)


def test_concurrent_claimers_never_share_a_job(store: Store) -> None:
    job_ids = _jobs(store, 12)
    claimed: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def worker(name: str) -> None:
        try:
            barrier.wait()
            while True:
                with session_scope(store) as session:
                    job = claim_job(session, worker_id=name, lease_seconds=60)
                if job is None:
                    return
                with lock:
                    claimed.append(job.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(claimed) == job_ids


@pytest.mark.postgres
def test_postgres_claims_skip_locked_rows(pg_url: str) -> None:
    """A claim in progress (row locked, not committed) does not block or share with another."""
    from tilewise.store import open_store

    store = open_store(pg_url)
    try:
        first, second = _jobs(store, 2)
        with session_scope(store) as a:
            job_a = claim_job(a, worker_id="w-a", lease_seconds=30)
            with session_scope(store) as b:
                b.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
                job_b = claim_job(b, worker_id="w-b", lease_seconds=30)
        assert job_a is not None and job_b is not None
        assert (job_a.id, job_b.id) == (first, second)
    finally:
        store.close()


def test_worker_heartbeats_upsert(store: Store) -> None:
    with session_scope(store) as session:
        first = heartbeat_worker(
            session, worker_id="h:1:910B3:0", host="h", pid=1, target="910B3", device=0, now=T0
        )
        heartbeat_worker(session, worker_id="h:2:cpu:-", host="h", pid=2, target="cpu", now=T0)
    with session_scope(store) as session:
        again = heartbeat_worker(
            session,
            worker_id="h:1:910B3:0",
            host="h",
            pid=1,
            target="910B3",
            device=0,
            status=WorkerStatus.BUSY,
            now=T0 + timedelta(seconds=30),
        )
    assert again.started_at == first.started_at == T0
    assert again.last_heartbeat == T0 + timedelta(seconds=30)
    assert again.status is WorkerStatus.BUSY
    with session_scope(store) as session:
        assert [w.id for w in list_workers(session)] == ["h:1:910B3:0", "h:2:cpu:-"]
        alive = list_workers(session, alive_within=10, now=T0 + timedelta(seconds=35))
        assert [w.id for w in alive] == ["h:1:910B3:0"]
        heartbeat_worker(
            session,
            worker_id="h:1:910B3:0",
            host="h",
            pid=1,
            target="910B3",
            status="stopped",
            now=T0 + timedelta(seconds=35),
        )
        assert list_workers(session, alive_within=10, now=T0 + timedelta(seconds=36)) == []
        with pytest.raises(InputError):
            heartbeat_worker(session, worker_id="x", host="h", pid=1, target="t", status="asleep")
