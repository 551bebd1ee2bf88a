"""Migrations, the schema check, URL handling and sharing the database with Optuna."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

import tilewise.store as store_pkg
from tilewise.errors import SchemaError, StoreError
from tilewise.store import (
    VERSION_TABLE,
    _engine,
    check_schema,
    create_engine,
    head_revision,
    migrate,
    open_store,
    optuna_engine_kwargs,
    safe_url,
    session_scope,
)
from tilewise.store._models import TABLE_NAMES, Base
from tilewise.types import Shape, Workload

OUR_TABLES = {
    "tw_workloads",
    "tw_records",
    "tw_tilings",
    "tw_jobs",
    "tw_job_assists",
    "tw_workers",
    "tw_batches",
    "tw_batch_items",
    "tw_misses",
    "tw_measured_grids",
    "tw_tiling_claims",
    "tw_toolchains",
    "tw_winner_history",
}


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return set(sa.inspect(connection).get_table_names())
    finally:
        engine.dispose()


def _set_revision(url: str, revision: str | None) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(f"DELETE FROM {VERSION_TABLE}"))
            if revision is not None:
                connection.execute(
                    sa.text(f"INSERT INTO {VERSION_TABLE} (version_num) VALUES (:r)"),
                    {"r": revision},
                )
    finally:
        engine.dispose()


def test_public_surface_is_pinned() -> None:
    assert store_pkg.__all__ == sorted(store_pkg.__all__, key=lambda n: (not n.isupper(), n))
    for name in store_pkg.__all__:
        assert hasattr(store_pkg, name)
    # Records are append-only: nothing public edits or deletes one.
    assert not [n for n in store_pkg.__all__ if "record" in n and n.startswith(("upd", "del"))]


def test_table_names_never_collide_with_optuna() -> None:
    assert TABLE_NAMES == OUR_TABLES
    from optuna.storages._rdb import models

    optuna_tables = set(models.BaseModel.metadata.tables)
    assert not optuna_tables & (OUR_TABLES | {VERSION_TABLE})


def test_migrate_new_database_to_head(db_url: str) -> None:
    migrate(db_url)
    assert _tables(db_url) == OUR_TABLES | {VERSION_TABLE}
    engine = create_engine(db_url)
    try:
        assert check_schema(engine) == head_revision()
    finally:
        engine.dispose()
    migrate(db_url)  # idempotent


def test_models_match_migrations(db_url: str) -> None:
    """The models and the revisions describe the same schema (what autogenerate would diff)."""
    migrate(db_url)
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={
                    "version_table": VERSION_TABLE,
                    "include_name": lambda name, type_, _p: type_ != "table" or name in TABLE_NAMES,
                    "compare_type": True,
                },
            )
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_downgrade_to_base_and_up_again(db_url: str) -> None:
    migrate(db_url)
    engine = create_engine(db_url)
    try:
        config = _engine.alembic_config()
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "base")
        with engine.connect() as connection:
            assert not set(sa.inspect(connection).get_table_names()) & OUR_TABLES
        assert check_schema(engine) is None  # empty again: a new database
    finally:
        engine.dispose()
    migrate(db_url)
    assert _tables(db_url) >= OUR_TABLES


def test_open_store_migrates_new_database_on_first_use(db_url: str) -> None:
    store = open_store(db_url)
    try:
        assert check_schema(store.engine) == head_revision()
    finally:
        store.close()
    open_store(db_url, create=False).close()  # now it exists: fine without create


def test_open_store_refuses_new_database_without_create(db_url: str) -> None:
    if db_url.startswith("sqlite"):
        migrate(db_url)  # the file must exist for this case; empty its schema again
        _set_revision(db_url, None)
        engine = create_engine(db_url)
        with engine.begin() as connection:
            for table in Base.metadata.sorted_tables[::-1]:
                connection.execute(sa.text(f"DROP TABLE {table.name}"))
        engine.dispose()
    with pytest.raises(SchemaError, match="tilewise db upgrade --db"):
        open_store(db_url, create=False)


def test_missing_sqlite_file_without_create_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "tilewise.db"
    with pytest.raises(StoreError, match="does not exist"):
        open_store(f"sqlite:///{path}", create=False)
    assert not path.parent.exists()


def test_sqlite_file_is_created_with_wal_foreign_keys_and_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "tilewise.db"
    store = open_store(f"sqlite:///{path}")
    try:
        assert path.exists()
        with store.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    finally:
        store.close()


def test_memory_sqlite_works(tmp_path: Path) -> None:
    store = open_store("sqlite://")
    try:
        assert check_schema(store.engine) == head_revision()
    finally:
        store.close()


def test_old_revision_is_refused_with_the_upgrade_command(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrate(db_url)
    # The code moves on to a revision 9001 that this database has not seen.
    current = head_revision()
    monkeypatch.setattr(_engine, "head_revision", lambda: "9001")
    monkeypatch.setattr(_engine, "known_revisions", lambda: frozenset({current, "9001"}))
    with pytest.raises(SchemaError) as caught:
        open_store(db_url)
    message = str(caught.value)
    assert f"database at revision {current}, code needs 9001" in message
    assert f"run `tilewise db upgrade --db {safe_url(db_url)}`" in message


def test_newer_revision_is_refused(db_url: str) -> None:
    migrate(db_url)
    _set_revision(db_url, "9999")
    with pytest.raises(SchemaError, match=r"revision 9999, code needs .*newer tilewise"):
        open_store(db_url)


def test_our_tables_without_revision_are_refused(db_url: str) -> None:
    migrate(db_url)
    _set_revision(db_url, None)
    with pytest.raises(SchemaError, match="no revision in tilewise_alembic_version"):
        open_store(db_url)


def test_optuna_shares_the_database(db_url: str) -> None:
    store = open_store(db_url)
    storage = optuna.storages.RDBStorage(db_url, engine_kwargs=optuna_engine_kwargs(db_url))
    try:
        study = optuna.create_study(study_name="s", storage=storage)
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
        tables = _tables(db_url)
        assert {"studies", "trials", "version_info", "alembic_version"} <= tables
        assert OUR_TABLES | {VERSION_TABLE} <= tables
        assert check_schema(store.engine) == head_revision()
        with session_scope(store) as session:
            assert session.execute(sa.text("SELECT count(*) FROM trials")).scalar() == 2
    finally:
        storage.engine.dispose()
        store.close()
    open_store(db_url).close()  # still opens


def test_optuna_first_then_tilewise(db_url: str) -> None:
    if db_url.startswith("sqlite:///"):
        Path(db_url.removeprefix("sqlite:///")).parent.mkdir(parents=True)  # Optuna will not
    storage = optuna.storages.RDBStorage(db_url, engine_kwargs=optuna_engine_kwargs(db_url))
    storage.engine.dispose()
    store = open_store(db_url)  # Optuna's tables do not make the database "ours but old"
    try:
        assert check_schema(store.engine) == head_revision()
    finally:
        store.close()
    storage = optuna.storages.RDBStorage(db_url)  # and Optuna still accepts it
    storage.engine.dispose()


def _first_use_at_once(url: str, users: int = 3) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(users)

    def first_use() -> None:
        try:
            barrier.wait()
            open_store(url).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_use) for _ in range(users)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_concurrent_first_use_migrates_once(db_url: str) -> None:
    assert _first_use_at_once(db_url) == []


def test_concurrent_first_use_of_new_sqlite_files(tmp_path: Path) -> None:
    # Switching a brand-new file to WAL failed with "database is locked", without waiting, in
    # about one first use in fifteen: thirty new files catch that nearly always.
    for i in range(30):
        assert _first_use_at_once(f"sqlite:///{tmp_path / str(i) / 'tilewise.db'}") == []


def test_unreachable_postgres_names_url_without_password() -> None:
    url = "postgresql+psycopg://tw:s3cret@127.0.0.1:1/nowhere?connect_timeout=2"
    with pytest.raises(StoreError) as caught:
        open_store(url)
    message = str(caught.value)
    assert message.startswith("cannot reach database postgresql+psycopg://tw:***@127.0.0.1:1/")
    assert "s3cret" not in message
    assert isinstance(caught.value.__cause__, sa.exc.OperationalError)


def test_unusable_sqlite_path_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="sqlite"):
        open_store(f"sqlite:///{blocker / 'tilewise.db'}")


def test_bad_urls_are_store_errors() -> None:
    with pytest.raises(StoreError, match="not a database URL"):
        open_store("not a url")
    with pytest.raises(StoreError, match="cannot use database"):
        open_store("nosuchdb://x/y")


def test_missing_postgres_database_is_a_store_error(pg_admin: sa.Engine) -> None:
    url = sa.make_url(str(pg_admin.url)).set(database="tw_does_not_exist")
    with pytest.raises(StoreError, match="tw_does_not_exist"):
        open_store(url.render_as_string(hide_password=False))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("sqlite:///:memory:", "sqlite:///:memory:"),
        ("sqlite:////tmp/my dir/tw.db", "sqlite:////tmp/my dir/tw.db"),
        ("sqlite:///tw.db?timeout=3", "sqlite:///tw.db?timeout=3"),
        (
            "postgresql+psycopg://tw:secret@db.example/tilewise",
            "postgresql+psycopg://tw:***@db.example/tilewise",
        ),
    ],
)
def test_safe_url_shows_a_sqlite_path_as_written(url: str, shown: str) -> None:
    """Rendered by SQLAlchemy a path's ':' and ' ' are percent-encoded: not a path to copy."""
    assert safe_url(url) == shown


@pytest.mark.parametrize(
    "url", ["sqlite:///:memory:", "sqlite://", "sqlite:///file:m?mode=memory&uri=true"]
)
def test_an_in_memory_database_is_refused_as_such_not_sent_to_an_upgrade(url: str) -> None:
    """Each connection to it starts empty: `tilewise db upgrade` on it would help nothing."""
    with pytest.raises(SchemaError, match=r"is an in-memory SQLite database.*name a file"):
        open_store(url, create=False)


def test_a_read_only_or_locked_sqlite_file_is_named_so_not_unreachable(tmp_path: Path) -> None:
    """The file was reached: 'cannot reach database' sent users to look at the wrong thing."""
    path = tmp_path / "tw.db"
    migrate(f"sqlite:///{path}")
    read_only = open_store(f"sqlite:///file:{path}?mode=ro&uri=true")
    try:
        refused = pytest.raises(StoreError, match=r"cannot write database .*readonly.*writable")
        with refused, read_only.session() as s:
            store_pkg.commit_workload(
                s, Workload("swiglu", "v", "cpu-twin", "float32", Shape({"T": 1, "I": 8}))
            )
        locked = sa.exc.OperationalError(
            "INSERT", {}, sqlite3.OperationalError("database is locked")
        )
        message = str(_engine._translate(locked, read_only.engine))
        assert "stayed locked by another process for 30 s" in message
    finally:
        read_only.close()
