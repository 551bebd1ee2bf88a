"""Assisting: idle workers help with a running job, and the job's budget stays exact."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from tests_support import host_toolchain

from tests.fakes import FakeBackend
from tilewise import store
from tilewise.api.schemas import JobPublic
from tilewise.kernels.backends import Backend, BuildResult, RunResult
from tilewise.kernels.ops import OpSpec, get_op
from tilewise.kernels.targets import twin_target
from tilewise.search import Budget, JobTag, Progress, Tuner
from tilewise.search._evaluate import Outcome
from tilewise.settings import Settings
from tilewise.store import JobStatus, RecordStatus
from tilewise.store._models import utcnow
from tilewise.types import Shape, Tiling, Workload
from tilewise.worker import Worker

OP = "scale_relu_dropout"


class SlowTwin(Backend):
    """The real cpu-twin backend, each checked launch slowed down a little so that two workers
    on one small budget both get to evaluate (the build cache may make them very fast)."""

    name = "cpu-twin"

    def __init__(self, settings: Settings, delay_s: float) -> None:
        from tilewise.kernels.backends._cpu_twin import CpuTwinBackend

        self.inner = CpuTwinBackend(settings)
        self.delay_s = delay_s
        self.checked: set[str] = set()  # tilings launched with the check (evaluations)

    def build(self, spec: OpSpec, defines: dict[str, str]) -> BuildResult:
        return self.inner.build(spec, defines)

    def run(self, build: BuildResult, spec: OpSpec, **kwargs: Any) -> RunResult:
        if kwargs.get("check"):
            self.checked.add(kwargs["tiling"].key())
            time.sleep(self.delay_s)
        return self.inner.run(build, spec, **kwargs)

    def environment(self) -> dict[str, Any]:
        return self.inner.environment()

    def close(self) -> None:
        self.inner.close()


def queue_job(db: store.Store, *, n: int = 3072, budget: int = 3) -> store.JobRow:
    spec = get_op(OP)
    workload = Workload(OP, spec.version, "cpu-twin", "float32", Shape({"N": n}))
    with db.session() as s:
        row = store.commit_workload(s, workload)
        return store.create_job(s, workload_id=row.id, budget_evals=budget, seed=1)


def get_job(db: store.Store, job_id: int) -> store.JobRow:
    with db.session() as s:
        job = store.get_job(s, job_id=job_id)
    assert job is not None
    return job


def held_and_assisted(db: store.Store, *, budget: int) -> store.JobRow:
    """A queued job, claimed by worker "h" and assisted by worker "a"."""
    job = queue_job(db, budget=budget)
    with db.session() as s:
        assert store.claim_job(s, worker_id="h", lease_seconds=30) is not None
        assert store.assist_job(s, worker_id="a", max_assistants=1, lease_seconds=30)
    return job


def spent(db: store.Store, job_id: int) -> int:
    with db.session() as s:
        return store.job_evaluations(s, job_id=job_id)


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


def tilings(count: int) -> list[Tiling]:
    return [
        Tiling({"tileLength": tile, "blockDim": block, "bufferNum": 2})
        for tile in (1024, 2048, 4096)
        for block in (4, 8, 16)
    ][:count] + [
        Tiling({"tileLength": tile, "blockDim": 4, "bufferNum": 1}) for tile in (1024, 2048, 4096)
    ][: max(0, count - 9)]


# ---------------------------------------------------------------------------------------------
# The store


def test_assist_job_registers_at_most_max_assistants_on_the_job_with_most_left(
    db: store.Store,
) -> None:
    small, big = queue_job(db, budget=3), queue_job(db, n=6144, budget=10)
    with db.session() as s:
        assert store.assist_job(s, worker_id="a", max_assistants=1, lease_seconds=30) is None
        assert store.claim_job(s, worker_id="h1", lease_seconds=30) is not None
        assert store.claim_job(s, worker_id="h2", lease_seconds=30) is not None
        # A worker never assists the job it holds.
        mine = store.assist_job(s, worker_id="h2", max_assistants=1, lease_seconds=30)
        assert mine is not None and mine.id == small.id
        store.end_assist(s, job_id=small.id, worker_id="h2")
        first = store.assist_job(s, worker_id="a", max_assistants=1, lease_seconds=30)
        assert first is not None and first.id == big.id  # the most evaluations left
        second = store.assist_job(s, worker_id="b", max_assistants=1, lease_seconds=30)
        assert second is not None and second.id == small.id  # big has its one assistant
        assert store.assist_job(s, worker_id="c", max_assistants=1, lease_seconds=30) is None
        assert store.job_assistants(s, job_id=big.id) == ["a"]
        # A stale assistant (no heartbeat for a lease) is replaced, and learns it.
        later = utcnow() + timedelta(seconds=31)
        for job, holder in ((small, "h1"), (big, "h2")):
            store.renew_lease(s, job_id=job.id, worker_id=holder, lease_seconds=30, now=later)
        third = store.assist_job(s, worker_id="c", max_assistants=1, lease_seconds=30, now=later)
        assert third is not None and third.id == big.id
        assert store.job_assistants(s, job_id=big.id) == ["c"]
        assert not store.renew_assist(s, job_id=big.id, worker_id="a")
        assert store.renew_assist(s, job_id=big.id, worker_id="c")
        store.cancel_job(s, job_id=big.id)
        assert not store.renew_assist(s, job_id=big.id, worker_id="c")


def test_workers_registering_at_once_never_exceed_max_assistants(db: store.Store) -> None:
    """Twelve workers register at once for a job that takes three assistants: three get it,
    each in a slot of its own, and a slot freed by one that ends is taken by the next."""
    job = queue_job(db, budget=50)
    with db.session() as s:
        assert store.claim_job(s, worker_id="holder", lease_seconds=60) is not None
    start = threading.Barrier(12)
    got: dict[str, int | None] = {}
    errors: list[BaseException] = []

    def register(name: str) -> None:
        try:
            start.wait(timeout=30)
            with db.session() as s:
                found = store.assist_job(s, worker_id=name, max_assistants=3, lease_seconds=60)
            got[name] = None if found is None else found.id
        except BaseException as exc:  # reported below, with the thread's name
            errors.append(exc)

    threads = [threading.Thread(target=register, args=(f"w{i}",)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assistants = sorted(n for n, j in got.items() if j == job.id)
    assert len(got) == 12 and len(assistants) == 3, got
    with db.session() as s:
        assert sorted(store.job_assistants(s, job_id=job.id)) == assistants
        store.end_assist(s, job_id=job.id, worker_id=assistants[0])
    with db.session() as s:
        late = store.assist_job(s, worker_id="late", max_assistants=3, lease_seconds=60)
        assert late is not None and late.id == job.id
        assert store.assist_job(s, worker_id="later", max_assistants=3, lease_seconds=60) is None


def tagged(
    db: store.Store, job: store.JobRow, worker_id: str, tiling: Tiling, counts: bool
) -> bool:
    """Add a record of ``tiling`` for ``job`` as ``worker_id`` would (an evaluation, or a
    tiling rejected before its build), tag it, and check what the database kept."""
    with db.session() as s:
        row = store.add_record(
            s,
            workload_id=job.workload_id,
            tiling=tiling,
            status="ok" if counts else "infeasible",
            latency_us=1.0 if counts else None,
            source="search",
            env={},
            toolchain=host_toolchain(),
            job_id=job.id,
        )
        kept = store.tag_record(
            s, record_id=row.id, job_id=job.id, worker_id=worker_id, counts=counts
        )
    with db.session() as s:
        stored = store.records_for(s, workload_id=job.workload_id)[-1]
    assert stored.id == row.id and stored.job_id == (job.id if kept else None)
    return kept


def test_tagging_rule(db: store.Store) -> None:
    job = queue_job(db, budget=2)
    each = iter(tilings(12))

    def tag(worker_id: str, counts: bool = True) -> bool:
        return tagged(db, job, worker_id, next(each), counts)

    assert not tag("h")  # queued
    with db.session() as s:
        assert store.claim_job(s, worker_id="h", lease_seconds=30) is not None
        assert store.assist_job(s, worker_id="a", max_assistants=1, lease_seconds=30)
    assert tag("h")
    assert not tag("x") and not tag("x", counts=False)  # neither holder nor assistant
    assert tag("a", counts=False)  # not an evaluation: counts nothing
    assert spent(db, job.id) == 1
    assert tag("a")
    # The budget is reached: evaluations are not tagged any more, rejected tilings still are.
    assert not tag("h") and not tag("a")
    assert tag("h", counts=False) and tag("a", counts=False)
    with db.session() as s:
        assert store.job_evaluations(s, job_id=job.id) == store.job_spent(s, job_id=job.id) == 2
        # Nobody joins a job whose budget is spent.
        assert store.assist_job(s, worker_id="c", max_assistants=9, lease_seconds=30) is None
        # An assistant that stopped assisting tags nothing.
        store.end_assist(s, job_id=job.id, worker_id="a")
    assert not tag("a", counts=False)
    with db.session() as s:
        store.cancel_job(s, job_id=job.id)
    assert not tag("h", counts=False)  # the job no longer running: nobody tags


def test_tuners_tag_by_the_rule(settings: Settings, db: store.Store) -> None:
    job = held_and_assisted(db, budget=2)
    holder = make_tuner(db, settings, FakeBackend(), JobTag(job.id, "h", budget_evals=2))
    helper = make_tuner(db, settings, FakeBackend(), JobTag(job.id, "a", budget_evals=2))
    a, b, c, d = tilings(4)
    holder.evaluate(a, source="search", progress=Progress(budget=2))
    helper.evaluate(b, source="search", progress=Progress(budget=2))
    assert spent(db, job.id) == 2
    late = helper.evaluate(c, source="search", progress=Progress(budget=2))
    assert late.status == "ok"
    with db.session() as s:
        records = {r.tiling_key: r for r in store.records_for(s, workload_id=job.workload_id)}
    assert records[a.key()].job_id == records[b.key()].job_id == job.id
    assert records[c.key()].job_id is None  # budget reached -> untagged, still in the study
    assert spent(db, job.id) == 2
    with db.session() as s:
        store.cancel_job(s, job_id=job.id)
    holder.evaluate(d, source="search", progress=Progress(budget=2))
    with db.session() as s:
        record = store.find_record(s, workload_id=job.workload_id, tiling_key=d.key())
    assert record is not None and record.job_id is None


def test_holder_stops_when_assistants_spent_the_budget_and_finishes(
    settings: Settings, db: store.Store
) -> None:
    job = held_and_assisted(db, budget=3)
    helper = make_tuner(db, settings, FakeBackend(), JobTag(job.id, "a", budget_evals=3))
    for tiling in tilings(3):
        helper.evaluate(tiling, source="search", progress=Progress(budget=3))
    assert spent(db, job.id) == 3
    backend = FakeBackend()
    holder = make_tuner(db, settings, backend, JobTag(job.id, "h", budget_evals=3))
    result = holder.run(Budget(3), seed=1)
    assert not result.stopped and result.best is not None
    # The holder searched nothing; its one evaluation is the default the assistants never
    # measured, which the winner must be compared with, and it is not charged to the job.
    default = holder.spec.default_tiling(holder.shape, "float32", holder.target)
    assert result.progress.evaluations == 0 and backend.checked == {default.key(): 1}
    assert spent(db, job.id) == 3
    with db.session() as s:
        assert store.get_tiling(s, workload_id=job.workload_id, toolchain=None) is not None


def test_the_job_s_view_counts_its_assistants_evaluations_as_they_are_recorded(
    settings: Settings, db: store.Store
) -> None:
    """The holder writes the job's progress every few seconds (and not at all once it died);
    the service's view counts what the job's row has spent, assistants' evaluations included."""
    job = held_and_assisted(db, budget=3)
    helper = make_tuner(db, settings, FakeBackend(), JobTag(job.id, "a", budget_evals=3))
    for tiling in tilings(2):
        helper.evaluate(tiling, source="search", progress=Progress(budget=3))
    row = get_job(db, job.id)
    with db.session() as s:
        workload = store.get_workload(s, workload_id=row.workload_id)
    assert row.evaluations == 0 and workload is not None  # no progress written by the holder
    view = JobPublic.of(row, workload)
    assert (view.evaluations, view.progress) == (2, pytest.approx(2 / 3))


def test_a_tuner_waits_for_evaluations_in_flight_that_would_spend_the_budget(
    settings: Settings, db: store.Store
) -> None:
    """Two tilings an assistant claimed and is measuring would spend the job's budget: the
    holder waits for their records rather than start an evaluation that would not count. One
    of them ends rejected before its build (no evaluation): the holder takes that one."""
    job = held_and_assisted(db, budget=3)
    helper = make_tuner(db, settings, FakeBackend(), JobTag(job.id, "a", budget_evals=3))
    first, flying, rejected = tilings(3)
    helper.evaluate(first, source="search", progress=Progress(budget=3))
    assert helper.claim(flying) and helper.claim(rejected)

    def land() -> None:
        helper.evaluate(flying, source="search", progress=Progress(budget=3))
        helper.record(rejected, Outcome(RecordStatus.INFEASIBLE, None), source="search")

    backend = FakeBackend()
    holder = make_tuner(db, settings, backend, JobTag(job.id, "h", budget_evals=3))
    landing = threading.Timer(0.5, land)
    landing.start()
    try:
        result = holder.run(Budget(3), seed=1)
    finally:
        landing.join()
    assert result.progress.evaluations == 1 and spent(db, job.id) == 3
    with db.session() as s:
        records = store.records_for(s, workload_id=job.workload_id)
    last_helper = max(r.id for r in records if r.tiling_key == rejected.key())
    (holders,) = [
        r
        for r in records
        if r.job_id == job.id
        and r.tiling_key in backend.checked
        and r.source != store.SOURCE_REMEASURE
    ]
    assert holders.id > last_helper  # started after the assistant's records came


def test_an_assistant_never_finishes(settings: Settings, db: store.Store) -> None:
    job = held_and_assisted(db, budget=3)
    helper = make_tuner(db, settings, FakeBackend(), JobTag(job.id, "a", budget_evals=3))
    result = helper.run(Budget(3), seed=2, finish=False)
    assert result.best is None and not result.stopped
    assert spent(db, job.id) == 3
    with db.session() as s:
        assert store.get_tiling(s, workload_id=job.workload_id, toolchain=None) is None
        records = store.records_for(s, workload_id=job.workload_id)
    assert not [r for r in records if r.source == store.SOURCE_REMEASURE]
    assert get_job(db, job.id).status is JobStatus.RUNNING


def test_no_assistants_when_disabled(settings: Settings, db: store.Store) -> None:
    job = queue_job(db, budget=3)
    with db.session() as s:
        assert store.claim_job(s, worker_id="h", lease_seconds=30) is not None
    off = settings.model_copy(update={"max_assistants_per_job": 0})
    worker = Worker(settings=off, db=db, backend=FakeBackend(), exit_when_idle=True)
    assert worker.run() == 0 and worker.jobs_assisted == 0
    assert spent(db, job.id) == 0


# ---------------------------------------------------------------------------------------------
# Two workers, one job, the real cpu-twin


@pytest.mark.slow
def test_a_holder_and_an_assistant_spend_the_budget_exactly(
    settings: Settings, db: store.Store
) -> None:
    job = queue_job(db, n=6144, budget=8)
    holder_backend = SlowTwin(settings, delay_s=0.3)
    helper_backend = SlowTwin(settings, delay_s=0.3)
    holder = Worker(
        settings=settings, backend=holder_backend, worker_id="holder", exit_when_idle=True
    )
    helper = Worker(
        settings=settings, backend=helper_backend, worker_id="helper", exit_when_idle=True
    )
    threads = [threading.Thread(target=holder.run), threading.Thread(target=helper.run)]
    try:
        threads[0].start()
        # The helper starts once the holder has measured a tiling: then the job is running, and
        # the twin's runner binary is built (two backends of one process must not build it at
        # once: its temporary file is named after the process).
        deadline = time.monotonic() + 120
        while spent(db, job.id) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        running = get_job(db, job.id)
        assert running.status is JobStatus.RUNNING and running.worker_id == "holder"
        threads[1].start()
        for thread in threads:
            thread.join(timeout=240)
        assert not any(t.is_alive() for t in threads)
    finally:
        holder.stop()
        helper.stop()
        for thread in threads:
            if thread.is_alive():
                thread.join(timeout=60)
        holder_backend.close()
        helper_backend.close()
    assert holder.jobs_done == 1 and helper.jobs_done == 0 and helper.jobs_assisted >= 1
    done = get_job(db, job.id)
    assert done.status is JobStatus.SUCCEEDED, done.error
    assert done.worker_id == "holder"
    with db.session() as s:
        assert store.job_evaluations(s, job_id=job.id) == store.job_spent(s, job_id=job.id) == 8
        records = store.records_for(s, workload_id=job.workload_id)
        tables = store.best_tilings(s, op=OP)
    assert done.evaluations == 8
    counted = [
        r
        for r in records
        if r.job_id == job.id
        and r.status is not store.RecordStatus.INFEASIBLE
        and r.source != store.SOURCE_REMEASURE
    ]
    assert len(counted) == 8
    # Tagged evaluations come from both workers, and no tiling was evaluated by both.
    keys = {r.tiling_key for r in counted}
    assert keys & holder_backend.checked and keys & helper_backend.checked
    assert not holder_backend.checked & helper_backend.checked
    measured = [r.tiling_key for r in records if r.source != store.SOURCE_REMEASURE]
    assert len(measured) == len(set(measured)), Counter(measured).most_common(3)
    assert [w.id for w, _ in tables] == [job.workload_id]


def test_a_claim_of_a_worker_without_a_heartbeat_is_not_in_flight(db: store.Store) -> None:
    """A worker killed mid-evaluation leaves its claim: once its heartbeat is a lease old the
    claim is not in flight (a job's last evaluations are not waited for) and another worker
    takes the tiling over, long before one evaluation's bound."""
    job = queue_job(db, budget=3)
    now = utcnow()
    live = {"since": now - timedelta(hours=1), "alive_since": now - timedelta(seconds=60)}
    key = tilings(1)[0].key()
    with db.session() as s:
        for worker, beat in (("alive", now), ("dead", now - timedelta(seconds=61))):
            store.heartbeat_worker(
                s, worker_id=worker, host="h", pid=1, target="cpu-twin", now=beat
            )
        for worker, tiling in (("alive", tilings(2)[1]), ("dead", tilings(1)[0])):
            assert store.claim_tiling(
                s,
                workload_id=job.workload_id,
                tiling_key=tiling.key(),
                claimant=f"{worker}/1",
                worker_id=worker,
                **live,
            )
    with db.session() as s:
        assert store.claims_in_flight(s, workload_id=job.workload_id, **live) == 1
        claim = {"workload_id": job.workload_id, "tiling_key": key, "worker_id": "alive"}
        assert store.claim_tiling(s, claimant="alive/2", **claim, **live)
        assert not store.claim_tiling(s, claimant="alive/3", **claim, **live)
        assert store.claims_in_flight(s, workload_id=job.workload_id, **live) == 2


def test_a_worker_starting_on_a_workload_again_ends_its_abandoned_claims(
    db: store.Store, settings: Settings
) -> None:
    """A worker whose database went away mid-evaluation keeps heartbeating once it is back, so
    its abandoned claim stays live by the claim rule: its next attempt at the job ends it
    (else the tiling and the job's budget wait an evaluation's bound), and leaves another
    worker's claim alone."""
    job = queue_job(db, budget=3)
    now = utcnow()
    live = {"since": now - timedelta(hours=1), "alive_since": now - timedelta(seconds=60)}
    mine, theirs = tilings(2)
    with db.session() as s:
        for worker in ("w", "other"):
            store.heartbeat_worker(s, worker_id=worker, host="h", pid=1, target="cpu-twin")
        for worker, tiling in (("w", mine), ("other", theirs)):
            assert store.claim_tiling(
                s,
                workload_id=job.workload_id,
                tiling_key=tiling.key(),
                claimant=f"{worker}/abandoned",
                worker_id=worker,
                **live,
            )
    tuner = make_tuner(db, settings, FakeBackend(), JobTag(job.id, "w", budget_evals=3))
    assert tuner.claim(mine) and mine.key() not in tuner.elsewhere
    assert not tuner.claim(theirs) and theirs.key() in tuner.elsewhere
    with db.session() as s:
        assert store.claims_in_flight(s, workload_id=job.workload_id, **live) == 2
