"""Fixtures of the reliability tests: a build cache shared by the session, and a private
PostgreSQL server that a test may stop and start (see ``_procs.PrivatePostgres``)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability._procs import PrivatePostgres, free_port


@pytest.fixture(scope="session")
def twin_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cpu-twin build cache for the session: the runner and each variant compile once."""
    return tmp_path_factory.getbasetemp() / "reliability-twin-cache"


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A running private PostgreSQL server, removed after the test (also when it fails)."""
    root = Path(tempfile.mkdtemp(prefix="tw-reltest-pg-"))
    try:
        postgres = pwd.getpwnam("postgres")
    except KeyError:
        shutil.rmtree(root)
        pytest.fail('no "postgres" user for a private server; deselect with -m "not postgres"')
    os.chown(root, postgres.pw_uid, postgres.pw_gid)
    server = PrivatePostgres(root, free_port())
    try:
        server.init()
        server.start()
        yield server
    finally:
        with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
            server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
