"""Engines, sessions and the schema check: where SQLAlchemy and Alembic meet tilewise.

Connection and driver errors are translated into :class:`~tilewise.errors.StoreError` here, once;
the URL in every message has its password masked.
"""

from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool

from tilewise.errors import SchemaError, StoreError
from tilewise.store._models import TABLE_NAMES

#: Our Alembic version table. Optuna's storage keeps its own ``alembic_version`` in the same DB.
VERSION_TABLE = "tilewise_alembic_version"

#: How long a SQLite connection waits for another writer before giving up.
SQLITE_BUSY_TIMEOUT_S = 30.0

# Any constant works: it only has to be the same in every tilewise process.
_PG_MIGRATION_LOCK = 0x7417E515


def safe_url(url: str | URL) -> str:
    """The URL as text with its password masked: the only form that goes into messages."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return _mask_unparsed(str(url))
    text = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite" and not parsed.host:
        # A SQLite path as the user wrote it: rendered, ':' and ' ' in it are percent-encoded
        # (sqlite:///%3Amemory%3A), which is no longer a path one can copy.
        return urllib.parse.unquote(text)
    return text


def _mask_unparsed(text: str) -> str:
    # A mistyped URL ("postgresql//user:secret@host/db") may still hold a password: everything
    # between the scheme and the last '@' (user and password; a password may hold '@') is masked.
    if "@" not in text:
        return text
    head, host = text.rsplit("@", 1)
    scheme = head[: head.index("//") + 2] if "//" in head else ""
    return f"{scheme}***@{host}"


#: What a SQLite file is usually called: a bare path with one of these is taken for a file.
_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3", ".db3")


def _parse(url: str | URL) -> URL:
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:
        # ValueError: a port that is not a number ("host:port"), raised by make_url itself.
        message = _mask_unparsed(str(exc))
        raise StoreError(
            f"not a database URL: {_mask_unparsed(str(url))!r} ({message}){_file_hint(str(url))}"
        ) from exc


def _file_hint(text: str) -> str:
    """``; did you mean sqlite:///PATH?`` for a bare path to a SQLite file."""
    if "://" in text or "@" in text or not text.strip():
        return ""
    path = Path(text).expanduser()
    if path.suffix.lower() in _SQLITE_SUFFIXES or "/" in text or path.is_file():
        return f"; a file path? did you mean sqlite:///{path}?"
    return ""


def _sqlite_file(url: URL) -> Path | None:
    """The file of a file-based SQLite URL; None for memory databases and other backends."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:") or url.query.get("uri"):
        return None
    return Path(database).expanduser()


def _in_memory(url: URL) -> bool:
    """Whether ``url`` names an in-memory SQLite database (new and empty in each connection)."""
    if url.get_backend_name() != "sqlite":
        return False
    return url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"


def create_engine(url: str | URL, *, create_dirs: bool = True, echo: bool = False) -> Engine:
    """An engine for ``url`` with tilewise's connection settings.

    SQLite: WAL journal (readers do not block the writer; Optuna's connections share it since
    the mode is stored in the file), foreign keys on, a 30 s busy timeout, and every transaction
    begun with ``BEGIN IMMEDIATE``: a read-then-write transaction in deferred mode fails at once
    with "database is locked" when another process wrote meanwhile (the busy timeout cannot help
    an upgrade of a stale snapshot), so writers queue at BEGIN instead. The parent directory of
    the file is created when ``create_dirs`` is true.

    Other backends: pre-ping pooled connections, so a restarted PostgreSQL costs no failed call.
    """
    parsed = _parse(url)
    kwargs: dict[str, Any] = {"echo": echo}
    is_sqlite = parsed.get_backend_name() == "sqlite"
    if is_sqlite:
        path = _sqlite_file(parsed)
        if path is None:
            # One shared connection, or each checkout would see its own empty memory database.
            kwargs["poolclass"] = StaticPool
        elif create_dirs:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"cannot create the directory of database {safe_url(parsed)}: {exc}"
                ) from exc
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False}
    else:
        kwargs["pool_pre_ping"] = True
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise StoreError(f"cannot use database {safe_url(parsed)}: {exc}") from exc
    if is_sqlite:
        _install_sqlite_hooks(engine)
    return engine


def _install_sqlite_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # Take transaction control away from the sqlite3 module (which never BEGINs before
        # SELECT or DDL): SQLAlchemy emits BEGIN itself in _on_begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # busy_timeout first: switching a brand-new file to WAL takes a lock, and a second
            # process opening it at the same moment must wait for it, not fail.
            cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            _switch_to_wal(cursor)
            cursor.execute("PRAGMA foreign_keys=ON")
            # Safe with WAL (a power cut may lose the last commits, never corrupt the file).
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _switch_to_wal(cursor: Any) -> None:
    """``PRAGMA journal_mode=WAL``, retried while another connection holds the new file.

    Three threads opening a brand-new file at once: in about one try in fifteen one of them got
    "database is locked" from this pragma at once, without SQLite's busy handler waiting (seen
    with SQLite 3.40 through Python's sqlite3; the test is
    test_concurrent_first_use_migrates_once). So this waits itself, up to the busy timeout.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    pause = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def optuna_engine_kwargs(url: str | URL) -> dict[str, Any]:
    """``engine_kwargs`` for ``optuna.storages.RDBStorage`` on the same database.

    Optuna builds its own engine; on SQLite it would otherwise wait only the sqlite3 default of
    5 s for our writers.
    """
    if _parse(url).get_backend_name() == "sqlite":
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    return {"pool_pre_ping": True}


#: The tables of Optuna's database storage (its schema, and its own Alembic's), which may share
#: a file with tilewise's.
_OPTUNA_TABLES = frozenset(
    {
        "alembic_version", "studies", "study_directions", "study_system_attributes",
        "study_user_attributes", "trial_heartbeats", "trial_intermediate_values", "trial_params",
        "trial_system_attributes", "trial_user_attributes", "trial_values", "trials",
        "version_info",
    }
)  # fmt: skip


def _refuse_foreign_sqlite(engine: Engine, path: Path | None) -> None:
    """Refuse to add tilewise's schema to a SQLite file that holds another program's tables
    (a ``--db`` pointing at the wrong file): ``tilewise db upgrade`` adds it on purpose. A
    server database is shared by design and left alone."""
    if path is None:
        return
    with engine.connect() as connection:
        tables = set(sa.inspect(connection).get_table_names())
    # tilewise's own: another process may be creating them now (a first use of the file).
    ours = TABLE_NAMES | {VERSION_TABLE}
    foreign = sorted(t for t in tables - _OPTUNA_TABLES - ours if not t.startswith("sqlite_"))
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise SchemaError(
            f"database {safe_url(engine.url)} holds tables of other software ({shown}) and no "
            f"tilewise schema: name another file, or add the schema on purpose with "
            f"{_upgrade_command(engine.url)}"
        )


def _unopenable(path: Path) -> str:
    """Why SQLite could not open the file ``path``, as far as the file system tells."""
    if path.is_dir():
        return f"{path} is a directory"
    folder = path.parent
    if not folder.is_dir():
        return f"no directory {folder}"
    if not os.access(folder, os.W_OK):
        # WAL mode writes its -wal and -shm files beside the database, even to read it.
        return (
            f"the directory {folder} is not writable by this user (or is on a read-only "
            "file system)"
        )
    return f"check the file {path} and its permissions"


def _translate(exc: DBAPIError, engine: Engine) -> StoreError:
    reason = str(exc.orig).strip() or type(exc.orig).__name__
    where = safe_url(engine.url)
    if engine.dialect.name == "sqlite" and isinstance(exc, sa.exc.OperationalError):
        # The file was reached: say what stood in the way, not "cannot reach".
        if "readonly" in reason:
            return StoreError(
                f"cannot write database {where}: {reason} (the file, or its directory, is "
                "not writable by this user)"
            )
        if "locked" in reason:
            return StoreError(
                f"database {where} stayed locked by another process for "
                f"{SQLITE_BUSY_TIMEOUT_S:g} s: {reason}"
            )
        path = _sqlite_file(engine.url)
        if "unable to open" in reason and path is not None:
            return StoreError(f"cannot open database {where}: {reason} ({_unopenable(path)})")
    if exc.connection_invalidated or isinstance(exc, sa.exc.OperationalError):
        return StoreError(f"cannot reach database {where}: {reason}")
    return StoreError(f"database {safe_url(engine.url)} refused an operation: {reason}")


# ---------------------------------------------------------------------------------------------
# Alembic


def alembic_config() -> Config:
    """A programmatic Alembic config for the installed ``migrations`` package."""
    from tilewise import migrations

    config = Config()
    script_location = str(Path(migrations.__file__).parent)
    # ConfigParser interpolation: a '%' in the install path must be doubled.
    config.set_main_option("script_location", script_location.replace("%", "%%"))
    config.set_main_option("path_separator", "os")
    return config


def head_revision() -> str:
    """The revision this code needs."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships revisions
        raise SchemaError("the tilewise migrations package has no revisions")
    return head


def known_revisions() -> frozenset[str]:
    script = ScriptDirectory.from_config(alembic_config())
    return frozenset(rev.revision for rev in script.walk_revisions())


def current_revision(connection: Connection) -> str | None:
    """The revision recorded in our version table, None if the table is absent or empty."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def _upgrade_command(url: URL) -> str:
    return f"`tilewise db upgrade --db {safe_url(url)}`"


def check_schema(engine: Engine) -> str | None:
    """Check that the database holds tilewise's schema at the head revision.

    Returns the revision (the head) when the schema is current, or None for a database without
    any tilewise table or revision (new: ``migrate`` will create the schema). Tables of other
    software (Optuna's) are ignored.

    Raises:
        SchemaError: the database is at another revision, or has our tables but no revision;
            the message names the command that fixes it.
        StoreError: the database cannot be reached.
    """
    head = head_revision()
    try:
        with engine.connect() as connection:
            present = set(sa.inspect(connection).get_table_names()) & TABLE_NAMES
            revision = current_revision(connection)
    except DBAPIError as exc:
        raise _translate(exc, engine) from exc
    if revision is None:
        if not present:
            return None
        raise SchemaError(
            f"database {safe_url(engine.url)} has tilewise tables ({', '.join(sorted(present))})"
            f" but no revision in {VERSION_TABLE}: it was not created by tilewise's"
            " migrations; move it aside and let tilewise create a new one"
        )
    if revision == head:
        return revision
    if revision in known_revisions():
        raise SchemaError(
            f"database at revision {revision}, code needs {head}:"
            f" run {_upgrade_command(engine.url)}"
        )
    raise SchemaError(
        f"database at revision {revision}, code needs {head}: the database was migrated by a"
        " newer tilewise; upgrade tilewise (or point it at another database); then run"
        f" {_upgrade_command(engine.url)} if the newer code asks for it"
    )


def migrate_engine(engine: Engine, *, revision: str = "head") -> tuple[str | None, str | None]:
    """Upgrade the database behind ``engine`` to ``revision``; safe to run concurrently.
    Returns its revisions before and after (None: no schema)."""
    config = alembic_config()
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                # Two processes opening a new database at once: the second waits here, then
                # finds the first one's revision and has nothing to do. (On SQLite, BEGIN
                # IMMEDIATE already serializes them.)
                connection.execute(
                    sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
                )
            config.attributes["connection"] = connection
            before = current_revision(connection)
            command.upgrade(config, revision)
            after = current_revision(connection)
    except DBAPIError as exc:
        raise _translate(exc, engine) from exc
    return before, after


def migrate(url: str | URL, *, revision: str = "head") -> tuple[str | None, str | None]:
    """``alembic upgrade <revision>`` on the database at ``url`` (creating a SQLite file).
    Returns its revisions before and after (None: no schema)."""
    engine = create_engine(url)
    try:
        return migrate_engine(engine, revision=revision)
    finally:
        engine.dispose()


# ---------------------------------------------------------------------------------------------
# Store and sessions


@dataclass(frozen=True)
class Store:
    """An opened, schema-checked database: an engine and its session factory."""

    engine: Engine
    sessions: sessionmaker[Session]

    @property
    def url(self) -> str:
        """The full URL, password included: for connecting (e.g. Optuna's RDBStorage on the
        same database), never for messages (use ``safe_url``)."""
        return self.engine.url.render_as_string(hide_password=False)

    @property
    def safe_url(self) -> str:
        """The URL with its password masked."""
        return safe_url(self.engine.url)

    def session(self) -> AbstractContextManager[Session]:
        """``with store.session() as s:`` commits at the end of the block, or rolls back if it
        raises; the same as ``session_scope(store)``."""
        return session_scope(self)

    def close(self) -> None:
        """Close every pooled connection (call before the process or test ends)."""
        self.engine.dispose()


def check_persistent(url: str | URL) -> None:
    """Refuse an in-memory SQLite database for a command whose results must outlive it.

    Raises:
        StoreError: ``url`` names one (or is not a database URL).
    """
    parsed = _parse(url)
    if _in_memory(parsed):
        raise StoreError(
            f"database {safe_url(parsed)} is an in-memory SQLite database, gone when this "
            "command ends: name a file (sqlite:///path/to/tilewise.db) or a server"
        )


def is_missing_file(url: str | URL) -> bool:
    """Whether ``url`` names a SQLite file that does not exist yet (what :func:`open_store`
    would create).

    Raises:
        StoreError: ``url`` is not a database URL.
    """
    path = _sqlite_file(_parse(url))
    return path is not None and not path.exists()


def open_store(url: str | URL, *, create: bool = True, echo: bool = False) -> Store:
    """Open the database at ``url`` for tilewise.

    A new database (no tilewise table, no revision) is migrated to head when ``create`` is true
    (the first use of a laptop's SQLite file); a database at another revision is refused.

    Raises:
        SchemaError: wrong revision, or a new database while ``create`` is false.
        StoreError: the database cannot be reached (or the SQLite file does not exist and
            ``create`` is false).
    """
    parsed = _parse(url)
    path = _sqlite_file(parsed)
    if path is not None and not create and not path.exists():
        raise StoreError(f"database {safe_url(parsed)} does not exist (no file {path})")
    engine = create_engine(parsed, create_dirs=create, echo=echo)
    try:
        if check_schema(engine) is None:
            if not create:
                if _in_memory(parsed):
                    raise SchemaError(
                        f"database {safe_url(parsed)} is an in-memory SQLite database, empty "
                        "in every connection: name a file (sqlite:///path/to/tilewise.db) or "
                        "a server"
                    )
                raise SchemaError(
                    f"database {safe_url(parsed)} has no tilewise schema:"
                    f" run {_upgrade_command(parsed)}"
                )
            _refuse_foreign_sqlite(engine, path)
            migrate_engine(engine)
            # Another process may have migrated concurrently: make sure we agree on the result.
            check_schema(engine)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine=engine, sessions=sessionmaker(engine, expire_on_commit=False))


@contextmanager
def session_scope(source: Store | Engine | sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits when the block ends, or rolls back if it raises.

    Driver errors inside the block come out as :class:`~tilewise.errors.StoreError`.
    """
    if isinstance(source, Store):
        factory = source.sessions
    elif isinstance(source, Engine):
        factory = sessionmaker(source, expire_on_commit=False)
    else:
        factory = source
    session = factory()
    try:
        yield session
        session.commit()
    except DBAPIError as exc:
        session.rollback()
        bind = session.get_bind()
        engine = bind if isinstance(bind, Engine) else bind.engine
        raise _translate(exc, engine) from exc
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
