"""Workloads, append-only records and the tiling table, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC

import pytest
import sqlalchemy as sa
from tests_support import host_toolchain

from tilewise.errors import InputError, StoreError
from tilewise.store import (
    SOURCE_PREDICTED,
    RecordSource,
    RecordStatus,
    Store,
    add_record,
    best_tilings,
    commit_workload,
    count_tilings,
    count_workloads,
    find_record,
    find_workload,
    get_tiling,
    get_workload,
    lock_workload,
    records_for,
    save_measured_grid,
    session_scope,
    tiling_table_fingerprint,
    top_k,
    upsert_tiling,
)
from tilewise.store import _records as _repo
from tilewise.store._models import RecordModel
from tilewise.types import Shape, Tiling, Workload

ENV = {"compiler": "clang++ 17", "flags": "-O2", "host": "test", "backend": "cpu-twin"}


def _workload(m: int = 64, *, op: str = "matmul_add", target: str = "910B3") -> Workload:
    return Workload(
        op=op, op_version="v1", target=target, dtype="float16", shape=Shape({"M": m, "N": 32})
    )


def _ok(session: sa.orm.Session, workload_id: int, tile: int, latency: float, **kw: object) -> int:
    row = add_record(
        session,
        toolchain=host_toolchain(),
        workload_id=workload_id,
        tiling=Tiling({"tileM": tile, "bufferNum": 2}),
        status="ok",
        latency_us=latency,
        spread=0.01,
        samples_us=[latency, latency * 1.01],
        source=str(kw.get("source", "search")),
        env=ENV,
    )
    return row.id


def test_commit_workload_is_get_or_insert(store: Store) -> None:
    workload = _workload()
    with session_scope(store) as session:
        first = commit_workload(session, workload)
        again = commit_workload(session, workload)
    with session_scope(store) as session:
        later = commit_workload(session, workload)
        other = commit_workload(session, _workload(128))
    assert first == again == later
    assert other.id != first.id
    assert first.key == workload.key and first.workload == workload
    assert first.created_at.tzinfo is UTC
    with session_scope(store) as session:
        assert find_workload(session, key=workload.key) == first
        assert get_workload(session, workload_id=first.id) == first
        assert find_workload(session, key="0" * 32) is None


def test_commit_workload_survives_losing_the_insert_race(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = _workload()
    with session_scope(store) as session:
        winner = commit_workload(session, workload)
    # As if another process inserted it between our SELECT and our INSERT.
    real_find = _repo.find_workload
    calls = iter([None])
    monkeypatch.setattr(
        _repo, "find_workload", lambda s, *, key: next(calls, None) or real_find(s, key=key)
    )
    with session_scope(store) as session:
        assert commit_workload(session, workload) == winner
        session.execute(sa.text("SELECT 1"))  # the session is still usable after the savepoint


def test_records_are_appended_and_kept(store: Store) -> None:
    with session_scope(store) as session:
        wid = commit_workload(session, _workload()).id
        tiling = Tiling({"tileM": 16, "bufferNum": 2})
        first = add_record(
            session,
            toolchain=host_toolchain(),
            workload_id=wid,
            tiling=tiling,
            status=RecordStatus.INFEASIBLE,
            error="UB overflow: 300000 > 196608 bytes",
            constraints={"ub": 103392.0},
            source="search",
            trial_number=0,
            env=ENV,
        )
        second = add_record(
            session,
            toolchain=host_toolchain(),
            workload_id=wid,
            tiling=tiling,
            status="ok",
            latency_us=10.0,
            spread=0.02,
            samples_us=[9.9, 10.0, 10.1],
            constraints={"ub": -1.0},
            source="remeasure",
            env=ENV,
        )
    with session_scope(store) as session:
        rows = records_for(session, workload_id=wid)
        assert [r.id for r in rows] == [first.id, second.id]
        assert rows[0] == first and rows[1] == second
        assert rows[0].latency_us is None and rows[0].samples_us is None
        assert rows[0].constraints == {"ub": 103392.0}
        assert rows[1].samples_us == (9.9, 10.0, 10.1)
        assert rows[1].tiling == tiling and rows[1].tiling_key == tiling.key()
        assert rows[1].env == ENV
        assert [r.id for r in records_for(session, workload_id=wid, status="ok")] == [second.id]
        # Absent JSON values are SQL NULL, not the JSON text 'null'.
        nulls = session.scalar(sa.select(sa.func.count()).where(RecordModel.samples_us.is_(None)))
        assert nulls == 1
        assert find_record(session, workload_id=wid, tiling_key=tiling.key()) == second
        assert find_record(session, workload_id=wid, tiling_key="{}") is None


def test_record_sources_are_a_closed_vocabulary(store: Store) -> None:
    with session_scope(store) as session:
        wid = commit_workload(session, _workload()).id
        row = add_record(
            session,
            toolchain=host_toolchain(),
            workload_id=wid,
            tiling=Tiling({"t": 1}),
            status=RecordStatus.CRASHED,
            source=RecordSource.DEFAULT,
            env=ENV,
        )
        with pytest.raises(InputError, match="unknown RecordSource 'guess'"):
            add_record(
                session,
                toolchain=host_toolchain(),
                workload_id=wid,
                tiling=Tiling({"t": 2}),
                status=RecordStatus.CRASHED,
                source="guess",
                env=ENV,
            )
    with session_scope(store) as session:
        (stored,) = records_for(session, workload_id=wid)
    assert stored == row and stored.source is RecordSource.DEFAULT and stored.source == "default"
    # The column holds the value itself: the enum needs no migration.
    with session_scope(store) as session:
        assert session.scalar(sa.select(RecordModel.source)) == "default"


def test_record_latency_only_for_ok(store: Store) -> None:
    with session_scope(store) as session:
        wid = commit_workload(session, _workload()).id
        common = {"workload_id": wid, "tiling": Tiling({"t": 1}), "source": "search", "env": ENV}
        common["toolchain"] = host_toolchain()
        with pytest.raises(InputError, match="needs latency_us"):
            add_record(session, status="ok", **common)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="no latency_us"):
            add_record(session, status="crashed", latency_us=1.0, **common)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="unknown RecordStatus 'fast'"):
            add_record(session, status="fast", **common)  # type: ignore[arg-type]


def test_database_refuses_a_latency_on_a_failed_record(store: Store) -> None:
    with pytest.raises(StoreError, match="refused"), session_scope(store) as session:
        wid = commit_workload(session, _workload()).id
        session.add(
            RecordModel(
                workload_id=wid,
                tiling={},
                tiling_key="{}",
                status=RecordStatus.TIMEOUT,
                latency_us=3.0,
                source="search",
                env={},
            )
        )
    with session_scope(store) as session:  # rolled back, workload included
        assert find_workload(session, key=_workload().key) is None


def test_top_k_returns_only_valid_records_fastest_first(store: Store) -> None:
    with session_scope(store) as session:
        wid = commit_workload(session, _workload()).id
        other = commit_workload(session, _workload(128)).id
        slow = _ok(session, wid, 64, 30.0)
        fast = _ok(session, wid, 32, 10.0)
        tie = _ok(session, wid, 16, 10.0)
        predicted = _ok(session, wid, 8, 1.0, source=SOURCE_PREDICTED)
        _ok(session, other, 8, 0.5)
        for status in ("infeasible", "build_failed", "wrong", "crashed", "timeout"):
            add_record(
                session,
                toolchain=host_toolchain(),
                workload_id=wid,
                tiling=Tiling({"tileM": 1}),
                status=status,
                error=status,
                source="search",
                env=ENV,
            )
    with session_scope(store) as session:
        assert [r.id for r in top_k(session, workload_id=wid, k=10)] == [fast, tie, slow]
        assert [r.id for r in top_k(session, workload_id=wid, k=1)] == [fast]
        assert top_k(session, workload_id=wid, k=0) == []
        with_predicted = top_k(session, workload_id=wid, k=2, include_predicted=True)
        assert [r.id for r in with_predicted] == [predicted, fast]
        assert top_k(session, workload_id=999_999, k=3) == []
        with pytest.raises(InputError):
            top_k(session, workload_id=wid, k=-1)


def test_upsert_tiling_replaces(store: Store) -> None:
    with session_scope(store) as session:
        wid = commit_workload(session, _workload()).id
        r1 = _ok(session, wid, 64, 20.0)
        r2 = _ok(session, wid, 32, 10.0)
        assert get_tiling(session, workload_id=wid, toolchain=host_toolchain().id) is None
        first = upsert_tiling(
            session,
            toolchain=host_toolchain(),
            workload_id=wid,
            record_id=r1,
            tiling=Tiling({"tileM": 64, "bufferNum": 2}),
            latency_us=20.0,
            default_latency_us=40.0,
            speedup=2.0,
            evaluations=10,
        )
    with session_scope(store) as session:
        second = upsert_tiling(
            session,
            toolchain=host_toolchain(),
            workload_id=wid,
            record_id=r2,
            tiling=Tiling({"tileM": 32, "bufferNum": 2}),
            latency_us=10.0,
            default_latency_us=None,
            speedup=None,
            evaluations=25,
        )
    with session_scope(store) as session:
        stored = get_tiling(session, workload_id=wid, toolchain=host_toolchain().id)
    assert stored == second
    assert stored.record_id == r2 and stored.tiling == Tiling({"tileM": 32, "bufferNum": 2})
    assert stored.default_latency_us is None and stored.evaluations == 25
    assert stored.updated_at >= first.updated_at and stored.updated_at.tzinfo is UTC


def test_counts_and_the_tiling_table_fingerprint(store: Store) -> None:
    with session_scope(store) as session:
        assert (count_workloads(session), count_tilings(session)) == (0, 0)
        assert tiling_table_fingerprint(session) == (0, 0, None, None)
        wid = commit_workload(session, _workload()).id
        commit_workload(session, _workload(128))
        r1 = _ok(session, wid, 64, 20.0)
        r2 = _ok(session, wid, 32, 10.0)
        lock_workload(session, workload_id=wid)
        upsert_tiling(
            session,
            toolchain=host_toolchain(),
            workload_id=wid,
            record_id=r1,
            tiling=Tiling({"tileM": 64, "bufferNum": 2}),
            latency_us=20.0,
            default_latency_us=None,
            speedup=None,
            evaluations=1,
        )
    with session_scope(store) as session:
        assert (count_workloads(session), count_tilings(session)) == (2, 1)
        first = tiling_table_fingerprint(session)
        assert first[:2] == (1, r1) and first[2] is not None
        upsert_tiling(
            session,
            toolchain=host_toolchain(),
            workload_id=wid,
            record_id=r2,
            tiling=Tiling({"tileM": 32, "bufferNum": 2}),
            latency_us=10.0,
            default_latency_us=None,
            speedup=None,
            evaluations=2,
        )
    with session_scope(store) as session:
        second = tiling_table_fingerprint(session)
        assert second[:2] == (1, r2) and second[3] is None
        # A measured grid kept changes what a table is built from.
        save_measured_grid(
            session, op="op", op_version="v", target="cpu-twin", dtype="float32", basis="b", grid={}
        )
    with session_scope(store) as session:
        third = tiling_table_fingerprint(session)
        assert third[:3] == second[:3] and third[3] is not None


def test_upsert_tiling_with_unknown_record_is_refused(store: Store) -> None:
    with pytest.raises(StoreError), session_scope(store) as session:
        wid = commit_workload(session, _workload()).id
        upsert_tiling(
            session,
            toolchain=host_toolchain(),
            workload_id=wid,
            record_id=424242,
            tiling=Tiling({"t": 1}),
            latency_us=1.0,
            default_latency_us=None,
            speedup=None,
            evaluations=1,
        )


def test_best_tilings_filters_and_orders(store: Store) -> None:
    with session_scope(store) as session:
        for workload in (
            _workload(256),
            _workload(64),
            _workload(64, target="310P3"),
            _workload(64, op="softmax"),
        ):
            wid = commit_workload(session, workload).id
            rid = _ok(session, wid, 8, 5.0)
            upsert_tiling(
                session,
                toolchain=host_toolchain(),
                workload_id=wid,
                record_id=rid,
                tiling=Tiling({"tileM": 8}),
                latency_us=5.0,
                default_latency_us=10.0,
                speedup=2.0,
                evaluations=3,
            )
        commit_workload(session, _workload(512))  # not tuned: not in the table
    with session_scope(store) as session:
        everything = best_tilings(session)
        matmul_b3 = best_tilings(session, op="matmul_add", target="910B3", dtype="float16")
        assert best_tilings(session, dtype="float32") == []
    assert [(w.op, w.target) for w, _ in everything] == [
        ("matmul_add", "310P3"),
        ("matmul_add", "910B3"),
        ("matmul_add", "910B3"),
        ("softmax", "910B3"),
    ]
    assert [w.shape for w, _ in matmul_b3] == [
        Shape({"M": 256, "N": 32}),
        Shape({"M": 64, "N": 32}),
    ]
    assert all(t.workload_id == w.id for w, t in everything)


def test_session_scope_rolls_back_on_error(store: Store) -> None:
    with pytest.raises(RuntimeError), session_scope(store) as session:
        commit_workload(session, _workload())
        raise RuntimeError("boom")
    with session_scope(store.engine) as session:
        assert find_workload(session, key=_workload().key) is None


def test_store_session_commits_or_rolls_back(store: Store) -> None:
    with store.session() as session:
        row = commit_workload(session, _workload())
    with pytest.raises(RuntimeError), store.session() as session:
        commit_workload(session, _workload(128))
        raise RuntimeError("boom")
    with store.session() as session:
        assert find_workload(session, key=_workload().key) == row
        assert find_workload(session, key=_workload(128).key) is None


def test_store_url_keeps_the_password_and_safe_url_masks_it() -> None:
    from sqlalchemy.orm import sessionmaker

    from tilewise.store import create_engine

    engine = create_engine("postgresql+psycopg://tw:s3cret@db.example:5432/tilewise")
    try:
        opened = Store(engine=engine, sessions=sessionmaker(engine))
        assert opened.url == "postgresql+psycopg://tw:s3cret@db.example:5432/tilewise"
        assert opened.safe_url == "postgresql+psycopg://tw:***@db.example:5432/tilewise"
    finally:
        engine.dispose()
