"""The tune loop's protocol, with a fake backend so every call can be counted."""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.fakes import FakeBackend
from tilewise import store
from tilewise.kernels.backends import Backend
from tilewise.kernels.ops import OpSpec, get_op
from tilewise.kernels.targets import TargetProfile, twin_target
from tilewise.search import Budget, Tuner
from tilewise.search._evaluate import Progress
from tilewise.search._space import distributions
from tilewise.search._storage import close_storage, open_storage
from tilewise.settings import Settings
from tilewise.status import RecordSource
from tilewise.types import Shape, Tiling


def counting_backend(*, crash_tile: int | None = None, spills: int = 0) -> FakeBackend:
    """Latency is a fixed function of the tiling; failures for chosen tile lengths."""

    def latency(tiling: Tiling) -> float | None:
        if tiling["tileLength"] == crash_tile:
            return None
        return (
            1000.0 / tiling["blockDim"]
            + abs(tiling["tileLength"] - 2048) / 100
            + tiling["bufferNum"]
        )

    return FakeBackend(latency, spills=spills, stack_bytes=128)


def make_tuner(db: store.Store, backend: Backend, settings: Settings, n: int = 1 << 16) -> Tuner:
    return Tuner(
        spec=get_op("scale_relu_dropout"),
        shape=Shape({"N": n}),
        dtype="float32",
        target=twin_target(),
        backend=backend,
        db=db,
        settings=settings,
    )


@pytest.fixture
def settings(tmp_path: Path, db_url: str) -> Settings:
    return Settings(db_url=db_url, cache_dir=tmp_path / "cache", remeasure_top=2)


def _running_copy(study: optuna.Study, tuner: Tuner, tiling: Tiling) -> None:
    """Another worker's trial of ``tiling``, running, added to ``study``."""
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.RUNNING,
            params=dict(tiling),
            distributions=distributions(tuner.tunables),
        )
    )


class _RecordedOnceLeft(threading.Thread):
    """A thread (to start) in which ``other`` records ``tiling`` as the study's ``trial`` once
    ``tuner`` has left ``tiling`` to it (a claim of it refused): the record comes after the
    tuner gave way, however slow the host, never before."""

    def __init__(self, tuner: Tuner, other: Tuner, tiling: Tiling, *, trial: int) -> None:
        super().__init__(daemon=True)
        self.tuner, self.other, self.tiling, self.trial = tuner, other, tiling, trial
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 60.0
            while self.tiling.key() not in self.tuner.elsewhere:
                if self.done.is_set() or time.monotonic() > deadline:
                    return
                time.sleep(0.01)
            time.sleep(0.2)  # most likely the tuner waits for the record by then: the path meant
            self.other.evaluate(
                self.tiling,
                source=RecordSource.DEFAULT,
                progress=Progress(budget=1),
                trial=self.trial,
            )
        except BaseException as error:  # the test's thread raises it
            self.error = error

    def cancel(self) -> None:
        self.done.set()

    def finish(self) -> None:
        self.join()
        if self.error is not None:
            raise self.error


def test_default_first_no_tiling_twice_infeasible_never_built(settings: Settings) -> None:
    db = store.open_store(settings.db_url)
    backend = counting_backend()
    tuner = make_tuner(db, backend, settings)
    result = tuner.run(Budget(12), seed=1)
    p = result.progress
    assert p.evaluations == 12
    with db.session() as s:
        records = store.records_for(s, workload_id=tuner.workload_id)
    searched = [r for r in records if r.source != "remeasure"]
    assert searched[0].source == "default"
    assert Tiling(searched[0].tiling) == tuner.spec.default_tiling(
        tuner.shape, "float32", tuner.target
    )
    # Every measured tiling was checked once and measured once during the search.
    measured = [r for r in searched if r.status == "ok"]
    assert len(measured) == 12 == len({r.tiling_key for r in measured})
    assert all(backend.checked[r.tiling_key] == 1 for r in measured)
    # Infeasible tilings never reached the backend.
    infeasible = [r for r in searched if r.status == "infeasible"]
    assert len(infeasible) == p.rejected_static
    assert all(backend.runs[r.tiling_key] == 0 for r in infeasible)
    assert all(
        (r.error and "overflow" in r.error) or "blockDim" in (r.error or "") for r in infeasible
    )
    # Builds are per compile-time key only: bufferNum 1 or 2.
    assert set(backend.builds.values()) == {1} and len(backend.builds) <= 2
    # The winner is the fastest re-measured tiling, and the table holds it.
    assert result.best is not None and result.default is not None
    with db.session() as s:
        best = store.get_tiling(s, workload_id=tuner.workload_id, toolchain=None)
    assert best is not None and Tiling(best.tiling) == result.best.tiling
    assert best.speedup == pytest.approx(result.default.latency_us / result.best.latency_us)
    assert result.best.latency_us <= result.default.latency_us
    db.close()


def test_resume_does_not_measure_again(settings: Settings) -> None:
    db = store.open_store(settings.db_url)
    first = counting_backend()
    make_tuner(db, first, settings).run(Budget(6), seed=3)
    second = counting_backend()
    make_tuner(db, second, settings).run(Budget(6), seed=4)
    searched_again = {k for k, n in second.checked.items() if n}
    searched_first = {k for k, n in first.checked.items() if n}
    assert not searched_again & searched_first
    db.close()


def test_failures_are_records_and_the_study_goes_on(settings: Settings) -> None:
    db = store.open_store(settings.db_url)
    backend = counting_backend(crash_tile=2048)
    tuner = make_tuner(db, backend, settings)
    result = tuner.run(Budget(15), seed=2)
    with db.session() as s:
        crashed = store.records_for(s, workload_id=tuner.workload_id, status="crashed")
    assert crashed and all("SIGSEGV" in (r.error or "") for r in crashed)
    assert result.progress.evaluations == 15 and result.best is not None
    assert result.best.tiling["tileLength"] != 2048
    db.close()


def test_spilling_variants_are_rejected_after_the_build(settings: Settings) -> None:
    db = store.open_store(settings.db_url)
    backend = counting_backend(spills=settings.max_loop_spills + 1)
    tuner = make_tuner(db, backend, settings)
    result = tuner.run(Budget(3), seed=0)
    assert result.best is None and result.progress.evaluations == 0
    assert result.progress.rejected_build > 0 and not backend.runs
    with db.session() as s:
        rejected = store.records_for(s, workload_id=tuner.workload_id, status="infeasible")
    assert any("spills in loops" in (r.error or "") for r in rejected)
    db.close()


def test_compiler_ub_check_on_ascend_targets(settings: Settings, tmp_path: Path) -> None:
    pytest.importorskip("ascendnpuir")
    from tests.kernels.backends.ascend.ascend_fakes import make_toolkit
    from tilewise.kernels.backends._ascend.backend import AscendBackend
    from tilewise.kernels.targets import get_target

    strict = settings.model_copy(update={"ub_check": "compiler"})
    db = store.open_store(strict.db_url)
    # The compiler's verdict is the Ascend backend's refinement of the static check: nothing
    # here is built, so a fake CANN tree is enough.
    ascend = AscendBackend(strict, target="ascend910b1", toolkit=make_toolkit(tmp_path / "Ascend"))
    tuner = Tuner(spec=get_op("scale_relu_dropout"), shape=Shape({"N": 1 << 20}), dtype="float32",
                  target=get_target("ascend910b1"), backend=ascend, db=db, settings=strict)  # fmt: skip
    fits = Tiling({"tileLength": 6144, "blockDim": 8, "bufferNum": 2})
    over = fits.replace(tileLength=12288)
    assert tuner.static_check(fits).valid
    verdict = tuner.static_check(over)
    assert not verdict.valid
    assert any("by bishengir-compile" in r for r in verdict.reasons)
    assert not any(
        r.startswith("UB overflow: needs") for r in verdict.reasons
    )  # the compiler's word
    db.close()


def test_the_backends_prior_tilings_are_measured_first(settings: Settings) -> None:
    spec, shape, target = get_op("scale_relu_dropout"), Shape({"N": 1 << 16}), twin_target()
    default = spec.default_tiling(shape, "float32", target)
    tunables = spec.tunables(shape, "float32", target)
    valid = [
        tiling
        for values in itertools.product(*(t.values for t in tunables))
        for tiling in [Tiling(dict(zip((t.name for t in tunables), values, strict=True)))]
        if tiling != default and spec.valid(tiling, shape, "float32", target)
    ]
    priors = valid[-4:]  # the slowest blocks: not where a sampler would start

    class WithPriors(FakeBackend):
        def prior_tilings(
            self, spec: OpSpec, shape: Shape, dtype: str, target: TargetProfile, *, limit: int
        ) -> list[Tiling]:
            return priors[:limit]

    db = store.open_store(settings.db_url)
    backend = WithPriors(lambda tiling: float(tiling["tileLength"]))
    make_tuner(db, backend, settings).run(Budget(6), seed=0)
    first = list(backend.checked)[:4]
    # The default first (a small budget must still measure it), then at most 3 priors.
    assert first == [default.key()] + [t.key() for t in priors[:3]]
    db.close()


def test_of_two_workers_asked_one_tiling_at_once_the_first_to_claim_it_measures_it(
    settings: Settings,
) -> None:
    """Two workers that pop one tiling each at the same moment (the default, queued by both)
    each have a trial of it running: the one that claims it first measures it and is told."""
    db = store.open_store(settings.db_url)
    backend = counting_backend()
    tuner = make_tuner(db, backend, settings)
    default = tuner.spec.default_tiling(tuner.shape, "float32", tuner.target)
    storage = open_storage(db.url, tuner.workload.study_name, None)
    try:
        study = optuna.create_study(
            study_name=tuner.workload.study_name, storage=storage, load_if_exists=True
        )
        study.enqueue_trial(dict(default))  # trial 0: this tuner pops it
        # Trial 1: the other worker's copy of the default, popped and running.
        _running_copy(study, tuner, default)
        tuner.run(Budget(2), seed=1)
        states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
        with db.session() as s:
            records = store.records_for(s, workload_id=tuner.workload_id)
    finally:
        close_storage(storage)
        db.close()
    assert backend.checked[default.key()] == 1
    (measured,) = [r for r in records if r.tiling_key == default.key() and r.source == "default"]
    assert measured.trial_number == 0 and states[0] is TrialState.COMPLETE
    assert states[1] is TrialState.RUNNING  # the other worker's, still in flight
    # The other worker, asking for it now, finds its record before building anything.
    late = counting_backend()
    other = make_tuner(store.open_store(settings.db_url), late, settings)
    try:
        assert other.claim(default)
        found = other.evaluate(default, source=RecordSource.DEFAULT, progress=Progress(budget=1))
    finally:
        other.db.close()
    assert found.record_id is not None and late.checked[default.key()] == 0


def test_a_tiling_left_to_another_worker_is_awaited_at_the_finish_not_measured(
    settings: Settings,
) -> None:
    """The search gives way to another worker that claimed the default; the budget is spent
    before that worker's record comes: the finish waits for the record instead of measuring
    the default a second time."""
    settings = settings.model_copy(update={"poll_s": 0.05})
    db = store.open_store(settings.db_url)
    backend = counting_backend()
    tuner = make_tuner(db, backend, settings)
    other = make_tuner(db, counting_backend(), settings)
    default = tuner.spec.default_tiling(tuner.shape, "float32", tuner.target)
    storage = open_storage(db.url, tuner.workload.study_name, None)
    writer = _RecordedOnceLeft(tuner, other, default, trial=0)
    try:
        study = optuna.create_study(
            study_name=tuner.workload.study_name, storage=storage, load_if_exists=True
        )
        # Trial 0: the other worker's copy of the default, claimed, running; trial 1: this
        # tuner's.
        assert other.claim(default)
        _running_copy(study, tuner, default)
        study.enqueue_trial(dict(default))
        writer.start()
        result = tuner.run(Budget(2), seed=1)
        writer.finish()
        states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
        with db.session() as s:
            records = store.records_for(s, workload_id=tuner.workload_id)
    finally:
        writer.cancel()
        close_storage(storage)
        db.close()
    assert states[1] is TrialState.FAIL  # gave way
    assert backend.checked[default.key()] == 0
    (measured,) = [r for r in records if r.tiling_key == default.key() and r.source == "default"]
    assert measured.trial_number == 0
    assert result.default is not None and result.best is not None


def _searched_by_another(tuner: Tuner, other: Tuner) -> Tiling:
    """A tiling other than the default, recorded by ``other`` (so the finish has a contender)."""
    default = tuner.spec.default_tiling(tuner.shape, "float32", tuner.target)
    tiling = default.replace(bufferNum=3 - default["bufferNum"])
    other.evaluate(tiling, source=RecordSource.SEARCH, progress=Progress(budget=1))
    return tiling


def test_a_default_the_search_never_reached_is_measured_as_a_trial_of_the_study(
    settings: Settings,
) -> None:
    """The search ends before it measures the default (its seconds spent at once, as when
    assistants spent a job's budget): the finish measures it as a trial of the study, so the
    study knows its time and its record its trial."""
    db = store.open_store(settings.db_url)
    backend = counting_backend()
    tuner = make_tuner(db, backend, settings)
    _searched_by_another(tuner, make_tuner(db, counting_backend(), settings))
    default = tuner.spec.default_tiling(tuner.shape, "float32", tuner.target)
    storage = open_storage(db.url, tuner.workload.study_name, None)
    try:
        result = tuner.run(Budget(4, seconds=0.0), seed=1)
        trials = optuna.load_study(
            study_name=tuner.workload.study_name, storage=storage
        ).get_trials(deepcopy=False)
        with db.session() as s:
            records = store.records_for(s, workload_id=tuner.workload_id)
    finally:
        close_storage(storage)
        db.close()
    assert backend.checked[default.key()] == 1
    (measured,) = [r for r in records if r.tiling_key == default.key() and r.source == "default"]
    assert measured.trial_number is not None
    (trial,) = [t for t in trials if t.number == measured.trial_number]
    assert trial.state is TrialState.COMPLETE and trial.params == dict(default)
    assert trial.value == pytest.approx(measured.latency_us)
    assert result.default is not None


def test_a_default_another_worker_measures_at_the_finish_is_awaited(settings: Settings) -> None:
    """At the finish another worker has claimed the default (an assistant's evaluation in
    flight): the finish leaves it to that worker and awaits its record."""
    settings = settings.model_copy(update={"poll_s": 0.05})
    db = store.open_store(settings.db_url)
    backend = counting_backend()
    tuner = make_tuner(db, backend, settings)
    other = make_tuner(db, counting_backend(), settings)
    _searched_by_another(tuner, other)
    default = tuner.spec.default_tiling(tuner.shape, "float32", tuner.target)
    storage = open_storage(db.url, tuner.workload.study_name, None)
    writer = _RecordedOnceLeft(tuner, other, default, trial=0)
    try:
        study = optuna.create_study(
            study_name=tuner.workload.study_name, storage=storage, load_if_exists=True
        )
        assert other.claim(default)
        _running_copy(study, tuner, default)
        writer.start()
        result = tuner.run(Budget(4, seconds=0.0), seed=1)
        writer.finish()
        trials = [t for t in study.get_trials(deepcopy=False) if t.params == dict(default)]
        with db.session() as s:
            records = store.records_for(s, workload_id=tuner.workload_id)
    finally:
        writer.cancel()
        close_storage(storage)
        db.close()
    assert backend.checked[default.key()] == 0
    (measured,) = [r for r in records if r.tiling_key == default.key() and r.source == "default"]
    assert measured.trial_number == 0
    assert [t.number for t in trials] == [0]  # the finish made no trial of its own
    assert result.default is not None


def test_claims_of_one_tiling_at_once_take_it_once(settings: Settings) -> None:
    """Workers that claim one tiling at the same moment: exactly one of them takes it."""
    db = store.open_store(settings.db_url)
    tuners = [make_tuner(db, counting_backend(), settings) for _ in range(8)]
    default = tuners[0].spec.default_tiling(tuners[0].shape, "float32", tuners[0].target)
    start = threading.Barrier(len(tuners))
    taken: list[bool] = []

    def claim(tuner: Tuner) -> None:
        start.wait()
        taken.append(tuner.claim(default))

    threads = [threading.Thread(target=claim, args=(t,)) for t in tuners]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        db.close()
    assert sorted(taken) == [False] * 7 + [True]
    assert sum(default.key() in t.elsewhere for t in tuners) == 7


def test_a_claim_is_taken_over_once_stale_and_ends_with_its_record(settings: Settings) -> None:
    """A claim is the claimant's while one evaluation can take; older (its worker died
    mid-evaluation) another worker takes it over. A record or a release ends a claim: the
    tiling may be claimed again, and the record is found before anything is built."""
    settings = settings.model_copy(
        update={"build_timeout_s": 0.6, "run_timeout_s": 0.3, "max_measure_s": 0.3}
    )
    db = store.open_store(settings.db_url)
    backend = counting_backend()
    mine, other = make_tuner(db, backend, settings), make_tuner(db, counting_backend(), settings)
    default = mine.spec.default_tiling(mine.shape, "float32", mine.target)
    measured = default.replace(bufferNum=3 - default["bufferNum"])
    try:
        assert other.claim(default) and other.claim(measured)
        assert not mine.claim(default) and not mine.claim(measured)
        assert other.claim(default)  # its own claim stays its own
        other.evaluate(measured, source=RecordSource.SEARCH, progress=Progress(budget=1))
        with db.session() as s:
            assert store.claims_in_flight(s, workload_id=mine.workload_id, **mine.live_since()) == 1
        assert mine.claim(measured)
        known = mine.evaluate(measured, source=RecordSource.SEARCH, progress=Progress(budget=1))
        assert known.status == "ok" and backend.checked[measured.key()] == 0
        time.sleep(other.evaluation_bound_s + 0.1)
        assert mine.claim(default) and not other.claim(default)
        mine.release(default)
        assert other.claim(default)
        with db.session() as s:
            assert store.claims_in_flight(s, workload_id=mine.workload_id, **mine.live_since()) == 1
    finally:
        db.close()


def test_a_claim_of_a_dead_tune_of_this_host_holds_nothing(settings: Settings) -> None:
    """A tune killed mid-evaluation (SIGKILL, a crash) leaves its claim. A tune of the same
    host tells that its process is gone: the next tune of the workload ends the claim as it
    starts, and one waiting for the tiling's record stops waiting; so does one whose
    claimant gave the tiling up without a record. A live tune's claim holds."""
    settings = settings.model_copy(update={"build_timeout_s": 600.0, "poll_s": 0.05})
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    db = store.open_store(settings.db_url)
    try:
        alive, dead = (make_tuner(db, counting_backend(), settings) for _ in range(2))
        dead.claimant = f"tune@{host}:{gone.pid}/killed"
        default = alive.spec.default_tiling(alive.shape, "float32", alive.target)
        other, given_up, later = (
            default.replace(tileLength=default["tileLength"] + n) for n in (1, 2, 3)
        )
        assert dead.claim(default) and alive.claim(other)
        fresh = make_tuner(db, counting_backend(), settings)
        assert fresh.claim(default)  # ended as the fresh tune started
        assert not fresh.claim(other)  # the live tune's
        assert dead.claim(later) and alive.claim(given_up)
        assert not fresh.claim(later) and not fresh.claim(given_up)
        alive.release(given_up)
        started = time.monotonic()
        assert fresh.awaited(later) is None and fresh.awaited(given_up) is None
        assert time.monotonic() - started < 60  # not the evaluation's bound of 10 minutes
    finally:
        db.close()
