"""Tilings keyed by (workload, toolchain), the winner history, and migrating a 0005 database
with data to them (on SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import command
from tests_support import host_toolchain

from tilewise.store import (
    Store,
    _engine,
    add_record,
    best_tilings,
    commit_workload,
    count_tilings,
    create_engine,
    get_tiling,
    migrate,
    open_store,
    session_scope,
    tilings_of,
    upsert_tiling,
    winner_history,
)
from tilewise.types import UNKNOWN_TOOLCHAIN, Shape, Tiling, Toolchain, Workload

OLD = Toolchain("cpu-twin", "clang 18.1", "twin 000000000000", "aaaaaaaaaaaa")


def _workload(m: int = 64) -> Workload:
    return Workload("matmul_add", "1", "cpu-twin", "float32", Shape({"M": m, "N": 8, "K": 8}))


def _store(session: sa.orm.Session, wid: int, toolchain: Toolchain, tile: int, us: float) -> None:
    tiling = Tiling({"tileM": tile})
    rid = add_record(
        session,
        workload_id=wid,
        tiling=tiling,
        status="ok",
        latency_us=us,
        source="remeasure",
        env={},
        toolchain=toolchain,
    ).id
    upsert_tiling(
        session,
        workload_id=wid,
        toolchain=toolchain,
        record_id=rid,
        tiling=tiling,
        latency_us=us,
        default_latency_us=2 * us,
        speedup=2.0,
        evaluations=3,
        reason=None if tile != 16 else "beat the stored winner side by side by 25.0%",
    )


def test_tilings_are_kept_per_toolchain(store: Store) -> None:
    now = host_toolchain()
    with session_scope(store) as session:
        wid = commit_workload(session, _workload()).id
        other = commit_workload(session, _workload(128)).id
        _store(session, wid, OLD, 64, 10.0)
        _store(session, other, OLD, 64, 10.0)
        assert get_tiling(session, workload_id=wid, toolchain=now.id) is None
        _store(session, wid, now, 32, 12.0)
    with session_scope(store) as session:
        mine = get_tiling(session, workload_id=wid, toolchain=now.id)
        old = get_tiling(session, workload_id=wid, toolchain=OLD.id)
        assert mine is not None and mine.tiling == Tiling({"tileM": 32}) and mine.toolchain == now
        assert old is not None and old.tiling == Tiling({"tileM": 64}) and old.toolchain == OLD
        assert old.toolchain.id == OLD.id
        assert [t.toolchain.id for t in tilings_of(session, workload_id=wid)] == [now.id, OLD.id]
        assert count_tilings(session) == 2  # workloads, not rows
        # Lookups: the current toolchain's only; any_toolchain lets the other stand in.
        current = {"cpu-twin": now.id}
        rows = best_tilings(session, toolchains=current)
        assert [(w.id, t.toolchain.id) for w, t in rows] == [(wid, now.id)]
        rows = best_tilings(session, toolchains=current, any_toolchain=True)
        # (ordered by shape key: "K=8,M=128,N=8" before "K=8,M=64,N=8")
        assert [(w.id, t.toolchain.id) for w, t in rows] == [(other, OLD.id), (wid, now.id)]
        # A target whose toolchain is not known here: not filtered.
        rows = best_tilings(session, toolchains={"cpu-twin": None})
        assert {w.id for w, _ in rows} == {wid, other}


def test_every_change_of_a_winner_is_in_its_history(store: Store) -> None:
    now = host_toolchain()
    with session_scope(store) as session:
        wid = commit_workload(session, _workload()).id
        _store(session, wid, now, 64, 10.0)
        _store(session, wid, now, 64, 9.5)  # the same winner re-measured: no change
        _store(session, wid, now, 16, 8.0)
        _store(session, wid, OLD, 32, 20.0)
    with session_scope(store) as session:
        history = winner_history(session, workload_id=wid)
    assert [(h.tiling["tileM"], h.toolchain, h.reason) for h in history] == [
        (64, now.id, "first winner"),
        (16, now.id, "beat the stored winner side by side by 25.0%"),
        (32, OLD.id, "first winner"),
    ]
    assert history[1].latency_us == 8.0 and history[1].default_latency_us == 16.0
    assert history[1].speedup == 2.0 and history[1].created_at.tzinfo is UTC


def test_history_is_written_in_the_changes_transaction(store: Store) -> None:
    now = host_toolchain()
    with session_scope(store) as session:
        wid = commit_workload(session, _workload()).id
        _store(session, wid, now, 64, 10.0)
    try:
        with session_scope(store) as session:
            _store(session, wid, now, 16, 8.0)
            raise RuntimeError("the tune fails after the upsert")
    except RuntimeError:
        pass
    with session_scope(store) as session:
        assert get_tiling(session, workload_id=wid, toolchain=now.id).tiling["tileM"] == 64
        assert [h.tiling["tileM"] for h in winner_history(session, workload_id=wid)] == [64]


def _at_0005_with_data(db_url: str) -> tuple[int, int]:
    """A database at revision 0005 holding a workload, two records and a stored tiling."""
    migrate(db_url, revision="0005")
    engine = create_engine(db_url)
    when = datetime(2025, 3, 1, 12, 0)
    try:
        with engine.begin() as c:
            c.execute(
                sa.text(
                    "INSERT INTO tw_workloads (key, op, op_version, target, dtype, shape,"
                    " shape_key, created_at) VALUES ('k' , 'matmul_add', '1', 'cpu-twin',"
                    " 'float32', '{\"M\": 64}', 'M=64', :t)"
                ),
                {"t": when},
            )
            wid = c.execute(sa.text("SELECT id FROM tw_workloads")).scalar_one()
            for tile in (64, 32):
                c.execute(
                    sa.text(
                        "INSERT INTO tw_records (workload_id, tiling, tiling_key, status,"
                        " latency_us, source, env, created_at) VALUES (:w, :tiling, :key, 'ok',"
                        " 5.0, 'search', '{\"compiler\": \"clang 18.1\"}', :t)"
                    ),
                    {"w": wid, "tiling": f'{{"tileM": {tile}}}', "key": str(tile), "t": when},
                )
            rid = c.execute(sa.text("SELECT max(id) FROM tw_records")).scalar_one()
            c.execute(
                sa.text(
                    "INSERT INTO tw_tilings (workload_id, record_id, tiling, latency_us,"
                    " default_latency_us, speedup, evaluations, updated_at) VALUES"
                    " (:w, :r, '{\"tileM\": 32}', 5.0, 7.5, 1.5, 2, :t)"
                ),
                {"w": wid, "r": rid, "t": when},
            )
    finally:
        engine.dispose()
    return wid, rid


def test_upgrade_from_0005_keeps_the_data_as_unknown_toolchain(db_url: str) -> None:
    wid, rid = _at_0005_with_data(db_url)
    migrate(db_url)
    opened = open_store(db_url, create=False)
    try:
        with session_scope(opened) as session:
            [old] = tilings_of(session, workload_id=wid)
            assert old.toolchain.id == UNKNOWN_TOOLCHAIN and not old.toolchain.known
            assert old.tiling == Tiling({"tileM": 32}) and old.record_id == rid
            assert old.speedup == 1.5 and old.evaluations == 2
            reason = old.toolchain.stale_reason(host_toolchain())
            assert reason is not None and "not recorded" in reason
            [history] = winner_history(session, workload_id=wid)
            assert history.reason == "stored before the history was kept"
            assert history.record_id == rid and history.created_at == old.updated_at
            assert session.execute(sa.text("SELECT DISTINCT toolchain FROM tw_records")).all() == [
                (UNKNOWN_TOOLCHAIN,)
            ]
            # Stale, so not served by default; any_toolchain shows it.
            assert best_tilings(session, toolchains={"cpu-twin": host_toolchain().id}) == []
            served = best_tilings(
                session, toolchains={"cpu-twin": host_toolchain().id}, any_toolchain=True
            )
            assert [t.toolchain.id for _, t in served] == [UNKNOWN_TOOLCHAIN]
            # A tune under this host's toolchain stores its own winner beside it.
            _store(session, wid, host_toolchain(), 16, 4.0)
        with session_scope(opened) as session:
            ids = {t.toolchain.id for t in tilings_of(session, workload_id=wid)}
            assert ids == {UNKNOWN_TOOLCHAIN, host_toolchain().id}
    finally:
        opened.close()


def test_downgrade_to_0005_keeps_the_newest_winner(db_url: str) -> None:
    wid, _ = _at_0005_with_data(db_url)
    migrate(db_url)
    opened = open_store(db_url)
    try:
        with session_scope(opened) as session:
            _store(session, wid, host_toolchain(), 16, 4.0)
    finally:
        opened.close()
    engine = create_engine(db_url)
    try:
        config = _engine.alembic_config()
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0005")
        with engine.connect() as connection:
            rows = connection.execute(sa.text("SELECT tiling FROM tw_tilings")).all()
            columns = {c["name"] for c in sa.inspect(connection).get_columns("tw_records")}
    finally:
        engine.dispose()
    assert len(rows) == 1 and "16" in str(rows[0][0])
    assert "toolchain" not in columns
