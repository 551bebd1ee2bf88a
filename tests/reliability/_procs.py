"""Helpers of the reliability tests: `tilewise` processes, waiting, a private PostgreSQL.

Every process is started in its own session, so the test can end it and everything it started
(the twin runner, a compiler) by its process group, whatever state it was left in.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import sqlalchemy as sa

from tilewise import store

ROOT = Path(__file__).resolve().parents[2]


def service_env(twin_cache: Path, **settings: object) -> dict[str, str]:
    """The environment of a `tilewise` process: no inherited TILEWISE_* variable, the shared
    build cache, and ``settings`` as TILEWISE_<NAME>."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEWISE_")}
    env["TILEWISE_CACHE_DIR"] = str(twin_cache)
    env.update({f"TILEWISE_{name.upper()}": str(value) for name, value in settings.items()})
    return env


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tilewise.cli", *args]


class Proc:
    """A `tilewise` process whose output goes to a log file."""

    def __init__(self, cmd: list[str], *, env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self._log: IO[bytes] = log.open("wb")
        self.popen = subprocess.Popen(
            cmd,
            env=env,
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"pid {self.pid} still running after {timeout} s:\n{self.log()}"
            ) from None

    def kill_group(self) -> None:
        """SIGKILL the process and whatever it left behind (its process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.popen.wait()
        self._log.close()


@contextlib.contextmanager
def running(cmd: list[str], *, env: dict[str, str], log: Path) -> Iterator[Proc]:
    proc = Proc(cmd, env=env, log=log)
    try:
        yield proc
    finally:
        proc.kill_group()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


def spent(db: store.Store, job_id: int) -> int:
    with db.session() as s:
        return store.job_evaluations(s, job_id=job_id)


def get_job(db: store.Store, job_id: int) -> store.JobRow:
    with db.session() as s:
        job = store.get_job(s, job_id=job_id)
    assert job is not None
    return job


def records(db: store.Store, workload_id: int) -> list[store.RecordRow]:
    with db.session() as s:
        return store.records_for(s, workload_id=workload_id)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# ---------------------------------------------------------------------------------------------
# A private PostgreSQL server


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    if not found or shutil.which("runuser") is None or os.geteuid() != 0:
        raise RuntimeError(
            "a private PostgreSQL server needs /usr/lib/postgresql/<version>/bin (Debian's"
            ' postgresql package), runuser and root; deselect these tests with -m "not postgres"'
        )
    return found[-1].parent


class PrivatePostgres:
    """A throw-away PostgreSQL cluster: ``initdb`` in ``root`` (owned by the postgres user),
    run with ``pg_ctl`` on a loopback ``port``. Its ``stop()`` and ``start()`` are the faults;
    the shared server at 127.0.0.1:5432, which other tests and processes use, is never
    touched. Nothing is registered in /etc/postgresql: removing ``root`` removes the cluster.
    """

    def __init__(self, root: Path, port: int) -> None:
        self.bin, self.root, self.port = _pg_bin(), root, port
        self.data = root / "data"

    def _as_postgres(self, tool: str, *args: str) -> None:
        cmd = ["runuser", "-u", "postgres", "--", str(self.bin / tool), *args]
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=180, check=False, cwd=self.root
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stdout}{done.stderr}")

    def init(self) -> None:
        self._as_postgres(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "server.log")
        self._as_postgres(
            "pg_ctl", "-D", str(self.data), "-l", log, "-o", options, "-w", "-t", "120", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        self._as_postgres("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "120", "stop")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        admin = sa.create_engine(
            self.url("postgres"), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool
        )
        try:
            with admin.connect() as connection:
                connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)
