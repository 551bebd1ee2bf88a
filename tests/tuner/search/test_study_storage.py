"""Where the Optuna studies live: the database by default, or one journal file per study in
``Settings.study_journal_dir``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import optuna
import optuna_dashboard
import pytest
import sqlalchemy as sa
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState
from pydantic import ValidationError
from tests_support import wsgi_get

from tests.fakes import FakeBackend
from tilewise import store
from tilewise.errors import StoreError
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import twin_target
from tilewise.search import Budget, Tuner
from tilewise.search._storage import journal_path
from tilewise.settings import Settings
from tilewise.store import RecordStatus
from tilewise.types import Shape, Tiling


def _latency(tiling: Tiling) -> float:
    return 1000.0 / tiling["blockDim"] + tiling["tileLength"] / 1000


def _tuner(settings: Settings, n: int = 1 << 16, latency: Any = _latency) -> Tuner:
    return Tuner(
        spec=get_op("scale_relu_dropout"),
        shape=Shape({"N": n}),
        dtype="float32",
        target=twin_target(),
        backend=FakeBackend(latency, stack_bytes=128),
        db=store.open_store(settings.db_url),
        settings=settings,
    )


def _run(tuner: Tuner, budget: int) -> None:
    try:
        tuner.run(Budget(budget), seed=0)
    finally:
        tuner.db.close()


def _trials(path: Path, name: str) -> tuple[dict[str, object], list[optuna.trial.FrozenTrial]]:
    study = optuna.load_study(
        study_name=name, storage=JournalStorage(JournalFileBackend(str(path)))
    )
    return study.user_attrs, study.get_trials(deepcopy=False)


def _evaluated(tuner: Tuner) -> list[store.RecordRow]:
    db = store.open_store(tuner.settings.db_url)
    try:
        with db.session() as s:
            rows = store.records_for(s, workload_id=tuner.workload_id)
    finally:
        db.close()
    return [r for r in rows if r.source != store.SOURCE_REMEASURE]


def test_a_tune_keeps_its_study_in_a_journal_file_of_its_own(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tw.db'}"
    journals = tmp_path / "studies" / "not-yet"  # created on first use
    settings = Settings(
        db_url=url, cache_dir=tmp_path / "cache", remeasure_top=2, study_journal_dir=journals
    )
    tuner = _tuner(settings)
    _run(tuner, 6)

    path = journal_path(journals, tuner.workload.study_name)
    assert sorted(p.name for p in journals.iterdir()) == [path.name]
    attrs, trials = _trials(path, tuner.workload.study_name)
    assert attrs["op"] == "scale_relu_dropout" and attrs["shape"] == {"N": 1 << 16}
    assert attrs["best_latency_us"] > 0  # the finished tune's figures
    # Every evaluation's record names a trial of the journal's study that was told its time.
    records = _evaluated(tuner)
    assert len(records) >= 6
    by_number = {t.number: t for t in trials}
    for record in records:
        trial = by_number[record.trial_number]
        assert trial.state is TrialState.COMPLETE
        assert Tiling(trial.params).key() == record.tiling_key
        if record.status is RecordStatus.OK:
            assert trial.value == record.latency_us
    # The database holds the records, not the study.
    engine = sa.create_engine(url)
    try:
        tables = sa.inspect(engine).get_table_names()
        if "studies" in tables:
            with engine.connect() as c:
                assert c.scalar(sa.text("SELECT count(*) FROM studies")) == 0
    finally:
        engine.dispose()

    # optuna-dashboard reads the study from its file.
    app = optuna_dashboard.wsgi(JournalStorage(JournalFileBackend(str(path))))
    (summary,) = wsgi_get(app, "/api/studies")["study_summaries"]
    assert summary["study_name"] == tuner.workload.study_name

    # A second tune of the workload continues the same study: it proposes none of the first
    # one's tilings again, and adds its trials to the same file.
    again = _tuner(settings)
    _run(again, 4)
    _, more = _trials(path, tuner.workload.study_name)
    assert len(more) > len(trials)
    keys = [r.tiling_key for r in _evaluated(again)]
    assert len(keys) == len(set(keys)) >= 10


def test_another_workload_gets_another_file(tmp_path: Path) -> None:
    journals = tmp_path / "studies"
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'tw.db'}",
        cache_dir=tmp_path / "cache",
        remeasure_top=0,
        study_journal_dir=journals,
    )
    first, second = _tuner(settings), _tuner(settings, n=1 << 12)
    _run(first, 3)
    _run(second, 3)
    assert {p.name for p in journals.iterdir()} == {
        journal_path(journals, t.workload.study_name).name for t in (first, second)
    }


def test_a_journal_dir_that_cannot_be_made_is_a_store_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'tw.db'}", cache_dir=tmp_path / "cache")
    # Refused when the settings are read; a file that appears there later is met by the tune.
    with pytest.raises(ValidationError, match="a-file is not a directory"):
        Settings(study_journal_dir=blocker / "studies")
    settings = settings.model_copy(update={"study_journal_dir": blocker / "studies"})
    tuner = _tuner(settings)
    with pytest.raises(StoreError, match=r"cannot reach the Optuna study journal .*a-file/studies"):
        _run(tuner, 3)
    assert _evaluated(tuner) == []  # nothing measured without a study to tell


def test_a_journal_lost_mid_tune_is_a_store_error_and_keeps_the_records(tmp_path: Path) -> None:
    """A journal that goes away (an NFS mount, say) ends the tune with a StoreError naming the
    file, which a worker answers by handing its job back; what was measured stays recorded."""
    journals = tmp_path / "studies"
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'tw.db'}",
        cache_dir=tmp_path / "cache",
        study_journal_dir=journals,
    )
    launches: list[str] = []

    def latency(tiling: Tiling) -> float:
        launches.append(tiling.key())
        if len(launches) == 3:
            shutil.rmtree(journals)
        return _latency(tiling)

    tuner = _tuner(settings, latency=latency)
    with pytest.raises(StoreError, match=r"cannot reach the Optuna study journal .*studies/"):
        _run(tuner, 6)
    recorded = {r.tiling_key for r in _evaluated(tuner)}
    assert len(launches) >= 3 and set(launches) <= recorded


def test_a_journal_failing_after_the_search_only_loses_the_study_figures(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the winner is stored, a journal that cannot be written costs only the study's
    description (the tune's figures): the tune itself succeeds."""
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'tw.db'}",
        cache_dir=tmp_path / "cache",
        remeasure_top=2,
        study_journal_dir=tmp_path / "studies",
    )
    tuner = _tuner(settings)
    finish = tuner.finish

    def no_space_left(self: Any, logs: Any) -> None:
        raise OSError(28, "No space left on device")

    def finish_then_fill_the_disk(default: Tiling, should_stop: Any = None) -> Any:
        measured = finish(default, should_stop)
        monkeypatch.setattr(JournalFileBackend, "append_logs", no_space_left)
        return measured

    tuner.finish = finish_then_fill_the_disk  # type: ignore[method-assign]
    try:
        result = tuner.run(Budget(4), seed=0)
    finally:
        tuner.db.close()
    assert result.best is not None
    assert "could not add the tune's figures" in caplog.text
    assert "No space left on device" in caplog.text


def test_the_setting_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILEWISE_STUDY_JOURNAL_DIR", "~/tw-studies")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert Settings().study_journal_dir == tmp_path / "tw-studies"
    monkeypatch.delenv("TILEWISE_STUDY_JOURNAL_DIR")
    assert Settings().study_journal_dir is None
