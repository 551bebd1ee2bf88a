"""Shared fixtures and the CI skip policy. Database tests take ``db_url`` and run once on SQLite,
once on PostgreSQL.

Under ``CI=true`` a skipped test fails the run unless its reason starts with one of
:data:`ALLOWED_SKIPS`: a missing tool (cmake, clang, Chromium, PyTorch) must fail CI, not hide
the checks that need it. ``scripts/setup.sh`` installs everything the tests need.

The PostgreSQL runs need a server at ``$TILEWISE_TEST_PG_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``); each test gets a new database there,
dropped afterwards. Deselect them with ``-m "not postgres"``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError

from tilewise.store import Store, open_store

#: The only reasons a test may skip in CI: what no CI machine of this project has. Keep short.
ALLOWED_SKIPS: tuple[str, ...] = ("needs an Ascend NPU",)

_disallowed_skips: list[str] = []


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if not reason.startswith(ALLOWED_SKIPS):
            _disallowed_skips.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _in_ci() and _disallowed_skips and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int) -> None:
    if _in_ci() and _disallowed_skips:
        terminalreporter.section("skips not allowed under CI=true", sep="=", red=True)
        for line in _disallowed_skips:
            terminalreporter.line(line)
        terminalreporter.line(
            f"{len(_disallowed_skips)} skipped test(s) whose reason is not one of "
            f"{ALLOWED_SKIPS} (tests/conftest.py): install what they need (scripts/setup.sh)"
        )


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
