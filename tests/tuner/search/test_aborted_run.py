"""A tune that ends in an exception mid-evaluation leaves its study as the next run needs it:
no trial left running, the default still queued to be measured first."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.fakes import FakeBackend, scale_relu_dropout_latency
from tilewise import store
from tilewise.errors import BackendError
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import twin_target
from tilewise.search import Budget, Tuner
from tilewise.search._space import distributions
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling

SPEC = get_op("scale_relu_dropout")
SHAPE = Shape({"N": 1 << 16})


class NoDevice(FakeBackend):
    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise BackendError("run mode npu needs an Ascend NPU on this host")


def _tuner(settings: Settings, db: store.Store, backend: FakeBackend) -> Tuner:
    return Tuner(
        spec=SPEC, shape=SHAPE, dtype="float32", target=twin_target(), backend=backend,
        db=db, settings=settings,
    )  # fmt: skip


def _states(settings: Settings, tuner: Tuner) -> list[optuna.trial.TrialState]:
    """The states of the trials of ``tuner``'s study, in order."""
    storage = optuna.storages.RDBStorage(settings.db_url)
    try:
        study = optuna.load_study(study_name=tuner.workload.study_name, storage=storage)
        return [t.state for t in study.get_trials(deepcopy=False)]
    finally:
        storage.engine.dispose()


def test_a_run_that_fails_mid_evaluation_leaves_no_trial_running(tmp_path: Path) -> None:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'tw.db'}", cache_dir=tmp_path / "c")
    db = store.open_store(settings.db_url)
    try:
        failing = _tuner(settings, db, NoDevice())
        with pytest.raises(BackendError):
            failing.run(Budget(3), seed=0)
        assert optuna.trial.TrialState.RUNNING not in _states(settings, failing)
        default = SPEC.default_tiling(SHAPE, "float32", twin_target())

        backend = FakeBackend()
        result = _tuner(settings, db, backend).run(Budget(3), seed=0)
        assert result.progress.evaluations == 3
        with db.session() as s:
            records = store.records_for(s, workload_id=failing.workload_id)
        searched = [r for r in records if r.source != "remeasure"]
        assert len(searched) == 3
        assert (searched[0].source, Tiling(searched[0].tiling)) == ("default", default)
    finally:
        db.close()


def test_a_tune_killed_mid_evaluation_leaves_no_trial_running_for_the_next(
    tmp_path: Path,
) -> None:
    """SIGKILL mid-evaluation: its claim (naming its dead process) and its running trial stay.
    The next tune of this host ends that trial and measures the queued default first, within
    its budget."""
    import socket
    import subprocess
    import sys

    settings = Settings(db_url=f"sqlite:///{tmp_path / 'tw.db'}", cache_dir=tmp_path / "c")
    db = store.open_store(settings.db_url)
    try:
        first = _tuner(settings, db, FakeBackend())
        default = SPEC.default_tiling(SHAPE, "float32", twin_target())
        storage = optuna.storages.RDBStorage(settings.db_url)
        try:  # what the killed tune left: the default queued, asked, never told
            study = optuna.create_study(study_name=first.workload.study_name, storage=storage)
            study.enqueue_trial(dict(default))
            study.ask(distributions(first.tunables))
        finally:
            storage.engine.dispose()
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        with db.session() as s:
            now = datetime.now(UTC)
            store.claim_tiling(
                s, workload_id=first.workload_id, tiling_key=default.key(),
                claimant=f"tune@{socket.gethostname()}:{dead}/0", worker_id=None,
                since=now, alive_since=now,
            )  # fmt: skip

        result = _tuner(settings, db, FakeBackend()).run(Budget(3), seed=0)
        assert result.progress.evaluations == 3
        with db.session() as s:
            records = store.records_for(s, workload_id=first.workload_id)
        searched = [r for r in records if r.source != "remeasure"]
        assert len(searched) == 3  # none beyond the budget
        assert (searched[0].source, Tiling(searched[0].tiling)) == ("default", default)
        states = _states(settings, first)
        assert optuna.trial.TrialState.RUNNING not in states
        assert states[0] == optuna.trial.TrialState.FAIL
    finally:
        db.close()


def test_a_default_whose_earlier_record_failed_is_measured_again(tmp_path: Path) -> None:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'tw.db'}", cache_dir=tmp_path / "c")
    db = store.open_store(settings.db_url)
    default = SPEC.default_tiling(SHAPE, "float32", twin_target())

    def crashes_once(tiling: Tiling) -> float | None:
        return None if tiling == default else scale_relu_dropout_latency(tiling)

    try:
        first = _tuner(settings, db, FakeBackend(crashes_once)).run(Budget(3), seed=0)
        assert first.default is None  # its record: crashed
        second = _tuner(settings, db, FakeBackend())
        again = second.run(Budget(2), seed=0)
        assert again.default is not None and again.best is not None
        with db.session() as s:
            (winner,) = store.tilings_of(s, workload_id=second.workload_id)
        assert winner.speedup is not None
    finally:
        db.close()
