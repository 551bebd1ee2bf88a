"""Shared fixtures. Database tests take ``db_url`` and run once on SQLite, once on PostgreSQL.

The PostgreSQL runs need a server at ``$TILEWISE_TEST_PG_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``); each test gets a new database there,
dropped afterwards. Deselect them with ``-m "not postgres"``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError

from tuner.store import Store, open_store

PG_ADMIN_URL = os.environ.get(
    "TILEWISE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[Engine]:
    """An AUTOCOMMIT engine on the PostgreSQL server, for CREATE/DROP DATABASE."""
    engine = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            connection.execute(sa.text("SELECT 1"))
    except OperationalError as exc:
        engine.dispose()
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_ADMIN_URL} ({exc.orig}); start it with"
            " `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`"
            ' or deselect these tests with -m "not postgres"'
        )
    yield engine
    engine.dispose()


@pytest.fixture
def pg_url(pg_admin: Engine) -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database, dropped after the test."""
    name = f"tw_test_{uuid.uuid4().hex[:12]}"
    with pg_admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = make_url(PG_ADMIN_URL).set(database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with pg_admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a new, empty database: a SQLite file (in a directory not created yet), or a
    fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db' / 'tilewise.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """An opened (migrated) store on ``db_url``, disposed after the test."""
    opened = open_store(db_url)
    yield opened
    opened.close()
