"""An Optuna study of tilewise reads well in optuna-dashboard: named objective, the workload's
attributes, the finished tune's figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import optuna_dashboard
from tests_support import wsgi_get

from tests.fakes import FakeBackend
from tilewise import store
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import twin_target
from tilewise.search import Budget, Tuner
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling


def _tune(settings: Settings) -> Tuner:
    def latency(tiling: Tiling) -> float:
        return 1000.0 / tiling["blockDim"] + tiling["tileLength"] / 1000

    tuner = Tuner(
        spec=get_op("scale_relu_dropout"),
        shape=Shape({"N": 1 << 16}),
        dtype="float32",
        target=twin_target(),
        backend=FakeBackend(latency, stack_bytes=128),
        db=store.open_store(settings.db_url),
        settings=settings,
    )
    try:
        tuner.run(Budget(6), seed=0)
    finally:
        tuner.db.close()
    return tuner


def _described(tuner: Tuner, url: str) -> tuple[list[str] | None, dict[str, Any]]:
    """(metric names, user attributes) of the tuner's study, the engine closed after."""
    storage = optuna.storages.RDBStorage(url)
    try:
        study = optuna.load_study(study_name=tuner.workload.study_name, storage=storage)
        return study.metric_names, study.user_attrs
    finally:
        storage.engine.dispose()


def test_study_names_its_objective_and_workload(tmp_path: Path, db_url: str) -> None:
    settings = Settings(db_url=db_url, cache_dir=tmp_path / "cache", remeasure_top=2)
    tuner = _tune(settings)
    metric_names, attrs = _described(tuner, db_url)
    assert metric_names == ["latency_us"]
    assert attrs["op"] == "scale_relu_dropout"
    assert attrs["op_version"] == tuner.workload.op_version
    assert attrs["shape"] == {"N": 1 << 16}
    assert (attrs["dtype"], attrs["target"], attrs["strategy"]) == (
        "float32",
        "cpu-twin",
        "default",
    )
    db = store.open_store(db_url)
    try:
        with db.session() as s:
            best = store.best_tilings(
                s, op="scale_relu_dropout", target="cpu-twin", dtype="float32"
            )
    finally:
        db.close()
    ((_, stored),) = best
    assert attrs["best_latency_us"] == stored.latency_us
    assert attrs["default_latency_us"] >= attrs["best_latency_us"]
    assert attrs["speedup"] == attrs["default_latency_us"] / attrs["best_latency_us"]

    # A second run of the study keeps one set of attributes (nothing duplicated or lost).
    _tune(settings)
    metric_names, again = _described(tuner, db_url)
    assert again["shape"] == {"N": 1 << 16} and metric_names == ["latency_us"]


def test_optuna_dashboard_reads_the_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tw.db'}"
    tuner = _tune(Settings(db_url=url, cache_dir=tmp_path / "cache", remeasure_top=2))
    app = optuna_dashboard.wsgi(url)
    studies = wsgi_get(app, "/api/studies")["study_summaries"]
    (summary,) = [s for s in studies if s["study_name"] == tuner.workload.study_name]
    shown = {a["key"]: a["value"] for a in summary["user_attrs"]}
    assert {"op", "shape", "dtype", "target", "default_latency_us"} <= set(shown)
    detail = wsgi_get(app, f"/api/studies/{summary['study_id']}")
    assert detail["objective_names"] == ["latency_us"]
    assert len([t for t in detail["trials"] if t["state"] == "Complete"]) >= 6
