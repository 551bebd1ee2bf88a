"""The end of a tune: a stop asked for in its last evaluation or its re-measure stores no winner,
and a winner stored by another run meanwhile is compared with, not overwritten unchecked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeBackend
from tilewise import store
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import twin_target
from tilewise.search import Budget, Progress, Tuner
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling

SPEC = get_op("scale_relu_dropout")
SHAPE = Shape({"N": 1 << 16})


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[Settings, store.Store]]:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'tw.db'}", cache_dir=tmp_path / "c")
    db = store.open_store(settings.db_url)
    try:
        yield settings, db
    finally:
        db.close()


def _tuner(settings: Settings, db: store.Store, backend: FakeBackend) -> Tuner:
    return Tuner(
        spec=SPEC, shape=SHAPE, dtype="float32", target=twin_target(), backend=backend,
        db=db, settings=settings,
    )  # fmt: skip


def _winners(db: store.Store, tuner: Tuner) -> list[store.TilingRow]:
    with db.session() as s:
        return store.tilings_of(s, workload_id=tuner.workload_id)


def test_a_stop_during_the_last_evaluation_stores_no_winner(
    env: tuple[Settings, store.Store],
) -> None:
    settings, db = env
    asked = []

    def on_progress(progress: Progress) -> None:
        if progress.evaluations == 3:  # the last one: the loop does not look again
            asked.append(True)

    tuner = _tuner(settings, db, FakeBackend())
    result = tuner.run(Budget(3), seed=0, on_progress=on_progress, should_stop=lambda: bool(asked))
    assert asked and result.stopped and result.best is None
    assert _winners(db, tuner) == []
    with db.session() as s:
        records = store.records_for(s, workload_id=tuner.workload_id)
    assert len(records) == 3 and all(r.source != "remeasure" for r in records)


def test_a_stop_during_the_re_measure_stores_no_winner(env: tuple[Settings, store.Store]) -> None:
    settings, db = env
    backend = FakeBackend()
    stop = []

    def remeasure(tiling: Tiling, n: int) -> list[float]:
        stop.append(True)  # asked for while the first contender is re-measured
        return [100.0, 101.0, 99.0]

    backend.remeasure = remeasure
    tuner = _tuner(settings, db, backend)
    result = tuner.run(Budget(3), seed=0, should_stop=lambda: bool(stop))
    assert result.stopped and result.best is None
    assert _winners(db, tuner) == []
    assert sum(backend.unchecked.values()) <= 2  # the warm-up and the run in flight


def test_a_winner_stored_meanwhile_is_compared_with_not_overwritten(
    env: tuple[Settings, store.Store],
) -> None:
    settings, db = env
    # Another run's winner, stored while this run re-measures: it is the fastest here.
    theirs = Tiling({"tileLength": 2048, "blockDim": 48, "bufferNum": 2})
    first = _tuner(settings, db, FakeBackend())
    workload_id = first.workload_id
    stored_by_them = []

    def remeasure(tiling: Tiling, n: int) -> list[float]:
        if not stored_by_them:
            stored_by_them.append(True)
            with db.session() as s:
                record = store.add_record(
                    s, workload_id=workload_id, tiling=theirs, status="ok", latency_us=10.0,
                    source="remeasure", env=first.env, toolchain=first.toolchain,
                )  # fmt: skip
                store.upsert_tiling(
                    s, workload_id=workload_id, toolchain=first.toolchain,
                    record_id=record.id, tiling=theirs, latency_us=10.0,
                    default_latency_us=None, speedup=None, evaluations=1, reason="theirs",
                )  # fmt: skip
        return [10.0, 10.1, 9.9] if tiling == theirs else [200.0, 201.0, 199.0]

    backend = FakeBackend(remeasure=remeasure)
    tuner = _tuner(settings, db, backend)
    result = tuner.run(Budget(3), seed=0)
    assert stored_by_them
    assert result.best is not None and result.best.tiling == theirs  # measured, and kept
    (winner,) = _winners(db, tuner)
    assert Tiling(winner.tiling) == theirs
    assert backend.unchecked[theirs.key()] == 3  # re-measured with the others, every round
