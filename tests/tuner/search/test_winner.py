"""The final re-measure's winner selection (``Tuner.finish``) and its test against the default
(``beats_default``), branch by branch, with a backend whose every timing is scripted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeBackend
from tilewise import store
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import TargetProfile, twin_target
from tilewise.search import Progress, Tuner
from tilewise.search._remeasure import beats_default
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling, Toolchain

SPEC = get_op("scale_relu_dropout")
SHAPE = Shape({"N": 1 << 18})
DEFAULT = SPEC.default_tiling(SHAPE, "float32", twin_target())
# Two other valid tilings, A and B: the default with another tile length.
A, B = [
    t
    for t in (
        DEFAULT.replace(tileLength=v)
        for v in (DEFAULT["tileLength"] // 2, DEFAULT["tileLength"] // 4)
    )
    if SPEC.valid(t, SHAPE, "float32", twin_target())
]


def _spread(median: float) -> tuple[float, ...]:
    """Three runs of one round: ±2% around the median."""
    return (0.98 * median, median, 1.02 * median)


class ScriptedBackend(FakeBackend):
    """Search runs (checked) take ``search[tiling]``; re-measure runs (unchecked) take
    ``remeasure[tiling]`` per round. A tiling in ``crash_after`` crashes once it has had that
    many unchecked runs (the re-measure's warm-up counts for the first contender)."""

    def __init__(
        self,
        search: Mapping[Tiling, float | None],
        remeasure: Mapping[Tiling, Sequence[float]],
        crash_after: Mapping[Tiling, int] | None = None,
    ) -> None:
        self.search, limits = dict(search), dict(crash_after or {})

        def remeasured(tiling: Tiling, n: int) -> Sequence[float] | None:
            return None if n > limits.get(tiling, 1_000) else remeasure[tiling]

        super().__init__(
            self.search.__getitem__, spread=_spread(1.0), remeasure=remeasured, stack_bytes=None
        )


def _finish(
    tmp_path: Path,
    backend: ScriptedBackend,
    *,
    top: int = 2,
    searched: Sequence[Tiling] | None = None,
) -> tuple[Any, Any, store.Store, int]:
    """Evaluate the ``searched`` tilings (default: every tiling of ``backend.search``) as the
    search would, then finish with a new tuner on the same database (as a resumed worker
    does); the result, the store, the id."""
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'db' / 'tw.db'}", cache_dir=tmp_path / "c", remeasure_top=top
    )
    db = store.open_store(settings.db_url)

    def tuner() -> Tuner:
        return Tuner(
            spec=SPEC, shape=SHAPE, dtype="float32", target=twin_target(), backend=backend,
            db=db, settings=settings,
        )  # fmt: skip

    searching = tuner()
    for tiling in backend.search if searched is None else searched:
        source = "default" if tiling == DEFAULT else "search"
        searching.evaluate(tiling, source=source, progress=Progress(budget=10))
    finishing = tuner()
    best, default = finishing.finish(DEFAULT)
    return best, default, db, finishing.workload_id


def _stored(db: store.Store, workload_id: int) -> Any:
    with db.session() as s:
        return store.get_tiling(s, workload_id=workload_id, toolchain=None)


def _record(db: store.Store, workload_id: int, record_id: int) -> Any:
    with db.session() as s:
        [record] = [r for r in store.records_for(s, workload_id=workload_id) if r.id == record_id]
        return record


def _remeasured(db: store.Store, workload_id: int) -> dict[Tiling, float | None]:
    with db.session() as s:
        return {
            Tiling(r.tiling): r.latency_us
            for r in store.records_for(s, workload_id=workload_id)
            if r.source == "remeasure"
        }


def test_the_default_is_stored_when_it_wins_the_remeasure(tmp_path: Path) -> None:
    """The search saw A and B faster; side by side the default is fastest. Storing the
    runner-up (A) instead would report a speedup that is not there."""
    backend = ScriptedBackend(
        search={DEFAULT: 100.0, A: 50.0, B: 60.0},
        remeasure={DEFAULT: _spread(40.0), A: _spread(41.0), B: _spread(55.0)},
    )
    best, default, db, wid = _finish(tmp_path, backend)
    assert best.tiling == DEFAULT and default.tiling == DEFAULT
    assert best.latency_us == default.latency_us == 40.0
    stored = _stored(db, wid)
    assert Tiling(stored.tiling) == DEFAULT
    assert (stored.latency_us, stored.default_latency_us, stored.speedup) == (40.0, 40.0, 1.0)
    assert _remeasured(db, wid) == {DEFAULT: 40.0, A: 41.0, B: 55.0}
    db.close()


def test_a_contender_faster_beyond_noise_replaces_the_default(tmp_path: Path) -> None:
    backend = ScriptedBackend(
        search={DEFAULT: 100.0, A: 50.0, B: 60.0},
        remeasure={DEFAULT: _spread(100.0), A: _spread(50.0), B: _spread(55.0)},
    )
    best, default, db, wid = _finish(tmp_path, backend)
    assert best.tiling == A and (best.latency_us, default.latency_us) == (50.0, 100.0)
    stored = _stored(db, wid)
    assert Tiling(stored.tiling) == A
    assert (stored.latency_us, stored.default_latency_us, stored.speedup) == (50.0, 100.0, 2.0)
    record = _record(db, wid, stored.record_id)
    assert record.source == "remeasure" and Tiling(record.tiling) == A
    db.close()


def test_the_default_is_kept_when_the_fastest_is_within_noise(tmp_path: Path) -> None:
    """A's median is lower, but its runs overlap the default's: the default stays."""
    backend = ScriptedBackend(
        search={DEFAULT: 100.0, A: 90.0},
        remeasure={DEFAULT: (99.0, 100.5, 102.0), A: (98.0, 100.0, 103.0)},
    )
    best, default, db, wid = _finish(tmp_path, backend, top=1)
    assert best.tiling == DEFAULT and best.latency_us == default.latency_us == 100.5
    stored = _stored(db, wid)
    assert Tiling(stored.tiling) == DEFAULT and stored.speedup == 1.0
    record = _record(db, wid, stored.record_id)
    assert record.source == "remeasure" and Tiling(record.tiling) == DEFAULT
    db.close()


def test_a_contender_that_fails_during_the_remeasure_drops_out(tmp_path: Path) -> None:
    """A is the fastest but crashes in the second round (its first unchecked run is the
    warm-up): B, which beats the default, is stored."""
    backend = ScriptedBackend(
        search={DEFAULT: 100.0, A: 40.0, B: 60.0},
        remeasure={DEFAULT: _spread(100.0), A: _spread(30.0), B: _spread(60.0)},
        crash_after={A: 2},
    )
    best, default, db, wid = _finish(tmp_path, backend)
    assert backend.unchecked[A.key()] == 3  # warm-up, round 1, the crash in round 2; then left out
    assert best.tiling == B and default.latency_us == 100.0
    assert Tiling(_stored(db, wid).tiling) == B
    assert A not in _remeasured(db, wid)
    db.close()


def test_nothing_is_stored_when_every_contender_fails_the_remeasure(tmp_path: Path) -> None:
    backend = ScriptedBackend(
        search={DEFAULT: 100.0, A: 40.0},
        remeasure={DEFAULT: _spread(100.0), A: _spread(30.0)},
        crash_after={DEFAULT: 0, A: 0},
    )
    best, default, db, wid = _finish(tmp_path, backend)
    assert (best, default) == (None, None)
    assert _stored(db, wid) is None and _remeasured(db, wid) == {}
    db.close()


def test_when_the_default_itself_failed_the_best_is_stored_without_a_speedup(
    tmp_path: Path,
) -> None:
    backend = ScriptedBackend(
        search={DEFAULT: None, A: 40.0, B: 60.0},
        remeasure={A: _spread(45.0), B: _spread(50.0)},
    )
    best, default, db, wid = _finish(tmp_path, backend)
    assert best.tiling == A and default is None
    assert DEFAULT.key() not in backend.unchecked  # a failed default is not re-measured
    stored = _stored(db, wid)
    assert Tiling(stored.tiling) == A
    assert (stored.latency_us, stored.default_latency_us, stored.speedup) == (45.0, None, None)
    db.close()


def test_a_default_the_search_never_reached_is_evaluated_and_remeasured(tmp_path: Path) -> None:
    """Warm-start tilings filled the budget: the default is checked and measured at the end
    (one evaluation beyond the budget), so the stored winner has a speedup."""
    backend = ScriptedBackend(
        search={DEFAULT: 100.0, A: 50.0, B: 60.0},
        remeasure={DEFAULT: _spread(100.0), A: _spread(50.0), B: _spread(60.0)},
    )
    best, default, db, wid = _finish(tmp_path, backend, searched=[A, B])
    assert backend.checked[DEFAULT.key()] == 1  # verified against the reference, as any tiling
    assert best.tiling == A and default.latency_us == 100.0
    stored = _stored(db, wid)
    assert (stored.latency_us, stored.default_latency_us, stored.speedup) == (50.0, 100.0, 2.0)
    db.close()


def _rerun(tmp_path: Path, first: ScriptedBackend, second: ScriptedBackend) -> tuple[Any, Any]:
    """Two runs on one database: the second's winner, and what is stored after it."""
    _, _, db, _ = _finish(tmp_path, first)
    db.close()
    best, _, db, wid = _finish(tmp_path, second)
    stored = _stored(db, wid)
    db.close()
    return best, stored


def test_a_later_run_keeps_the_stored_winner_unless_it_beats_it(tmp_path: Path) -> None:
    """A was stored; the next run's re-measure puts B a hair ahead of A, within the noise:
    A stays (re-measured), instead of a winner that flips with every run."""
    first = ScriptedBackend(
        search={DEFAULT: 100.0, A: 50.0}, remeasure={DEFAULT: _spread(100.0), A: _spread(50.0)}
    )
    second = ScriptedBackend(
        search={DEFAULT: 100.0, A: 50.0, B: 49.0},
        remeasure={DEFAULT: _spread(100.0), A: _spread(50.0), B: _spread(49.8)},
    )
    best, stored = _rerun(tmp_path, first, second)
    assert best.tiling == A and Tiling(stored.tiling) == A
    assert second.unchecked[A.key()] >= 3  # A was re-measured beside B, not taken on trust
    # The winner did not change: its history holds only its first storing.
    assert [(Tiling(h.tiling), h.reason) for h in _history(tmp_path)] == [(A, "first winner")]


def test_a_later_run_replaces_the_stored_winner_when_it_beats_it(tmp_path: Path) -> None:
    first = ScriptedBackend(
        search={DEFAULT: 100.0, A: 50.0}, remeasure={DEFAULT: _spread(100.0), A: _spread(50.0)}
    )
    second = ScriptedBackend(
        search={DEFAULT: 100.0, A: 50.0, B: 30.0},
        remeasure={DEFAULT: _spread(100.0), A: _spread(50.0), B: _spread(30.0)},
    )
    best, stored = _rerun(tmp_path, first, second)
    assert best.tiling == B and Tiling(stored.tiling) == B
    assert (stored.latency_us, stored.default_latency_us) == (30.0, 100.0)
    history = _history(tmp_path)
    assert [(Tiling(h.tiling), h.reason) for h in history] == [
        (A, "first winner"),
        (B, "beat the stored winner side by side by 66.7%"),  # 50 us / 30 us
    ]
    assert (history[1].latency_us, history[1].speedup) == (30.0, pytest.approx(100 / 30))
    assert history[1].record_id == stored.record_id


class UpgradedBackend(ScriptedBackend):
    """The same timings, measured with another compiler (an upgrade of the host)."""

    def toolchain(self, target: TargetProfile) -> Toolchain:
        t = super().toolchain(target)
        return Toolchain(t.backend, "clang 99.0", t.headers, t.profile)


def test_a_run_with_another_toolchain_stores_its_own_winner(tmp_path: Path) -> None:
    """After an upgrade the first run's winner is not the incumbent: the new toolchain's run
    stores its own (the old one re-measured among the contenders), and the old one stays."""
    first = ScriptedBackend(
        search={DEFAULT: 100.0, A: 50.0}, remeasure={DEFAULT: _spread(100.0), A: _spread(50.0)}
    )
    second = UpgradedBackend(
        search={DEFAULT: 100.0, A: 50.0, B: 49.0},
        remeasure={DEFAULT: _spread(100.0), A: _spread(60.0), B: _spread(49.8)},
    )
    _, _, db, _ = _finish(tmp_path, first)
    db.close()
    best, _, db, wid = _finish(tmp_path, second, top=1)
    try:
        with db.session() as s:
            by_toolchain = {
                t.toolchain.compiler: Tiling(t.tiling) for t in store.tilings_of(s, workload_id=wid)
            }
            new = second.toolchain(twin_target())
            assert store.get_tiling(s, workload_id=wid, toolchain=new.id).latency_us == 49.8
    finally:
        db.close()
    # B wins side by side, without having to beat A (not the incumbent of this toolchain) ...
    assert best.tiling == B and by_toolchain.pop("clang 99.0") == B
    # ... A, the old winner, was re-measured with the new toolchain, and is kept under the old.
    assert second.unchecked[A.key()] >= 3 and list(by_toolchain.values()) == [A]
    history = _history(tmp_path)
    assert [Tiling(h.tiling) for h in history] == [A, B]
    old = first.toolchain(twin_target())
    assert history[1].reason == (
        f"first winner of this toolchain (earlier winner: {old.compiler}, {old.headers})"
    )
    assert history[1].toolchain == new.id != history[0].toolchain


def _history(tmp_path: Path) -> list[store.WinnerRow]:
    db = store.open_store(f"sqlite:///{tmp_path / 'db' / 'tw.db'}")
    try:
        with db.session() as s:
            [workload] = [w for w, _ in store.best_tilings(s)]
            return store.winner_history(s, workload_id=workload.id)
    finally:
        db.close()


def test_nothing_is_stored_when_no_tiling_ran(tmp_path: Path) -> None:
    backend = ScriptedBackend(search={DEFAULT: None, A: None}, remeasure={})
    best, default, db, wid = _finish(tmp_path, backend)
    assert (best, default) == (None, None) and _stored(db, wid) is None
    assert sum(backend.unchecked.values()) == 0
    db.close()


# -- beats_default ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidate", "default", "beats"),
    [
        ([], [100.0, 101.0], False),  # nothing to compare
        ([50.0, 51.0], [], False),
        ([90.0, 91.0, 92.0, 93.0], [100.0, 101.0, 102.0, 103.0], True),  # p = 1/70
        ([90.0, 91.0, 92.0], [100.0, 101.0, 102.0], False),  # p = 1/20: not below 0.05
        ([100.0] * 9, [100.0] * 9, False),
        ([110.0, 111.0, 112.0, 113.0], [100.0, 101.0, 102.0, 103.0], False),  # slower
        (  # a lower median, but overlapping runs
            [96.0, 98.0, 99.0, 100.0, 101.0, 102.0, 103.0, 104.0, 105.0],
            [97.0, 99.0, 100.0, 101.0, 102.0, 103.0, 104.0, 105.0, 106.0],
            False,
        ),
        (  # nine each, every candidate run below every default run
            [90.0 + i for i in range(9)],
            [99.5 + i for i in range(9)],
            True,
        ),
    ],
)
def test_beats_default(candidate: list[float], default: list[float], beats: bool) -> None:
    assert beats_default(candidate, default) is beats
