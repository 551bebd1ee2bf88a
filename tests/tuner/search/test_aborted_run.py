"""A tune that ends in an exception mid-evaluation leaves its study as the next run needs it:
no trial left running, the default still queued to be measured first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.fakes import FakeBackend
from tilewise import store
from tilewise.errors import BackendError
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import twin_target
from tilewise.search import Budget, Tuner
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


def test_a_run_that_fails_mid_evaluation_leaves_no_trial_running(tmp_path: Path) -> None:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'tw.db'}", cache_dir=tmp_path / "c")
    db = store.open_store(settings.db_url)
    try:
        failing = _tuner(settings, db, NoDevice())
        with pytest.raises(BackendError):
            failing.run(Budget(3), seed=0)
        storage = optuna.storages.RDBStorage(settings.db_url)
        try:
            study = optuna.load_study(study_name=failing.workload.study_name, storage=storage)
            states = [t.state for t in study.get_trials(deepcopy=False)]
        finally:
            storage.engine.dispose()
        assert optuna.trial.TrialState.RUNNING not in states
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
