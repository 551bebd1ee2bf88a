"""Servers for the reliability tests: a PostgreSQL database of any fixture scope, and a real
``tilewise serve`` in a subprocess (its own interpreter, so a client in the test process does
not share its GIL), with its output kept for the tests that read the logs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@contextmanager
def pg_database(admin: Engine, *, password: str | None = None) -> Iterator[str]:
    """A new, empty PostgreSQL database, dropped afterwards; yields its URL. ``password`` goes
    into the URL only (the test server trusts loopback, so any password connects): a secret
    that must never show in output."""
    name = f"tw_rel_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = admin.url.set(database=name)
    if password is not None:
        url = url.set(password=password)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@dataclass
class Served:
    """A running ``tilewise serve``: its base URL and the file its stdout and stderr go to."""

    url: str
    log: Path
    proc: subprocess.Popen[bytes]

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@contextmanager
def tilewise_serve(
    tmp_path: Path,
    *,
    db_url: str,
    token: str | None,
    workers: int = 0,
    extra_env: dict[str, str] | None = None,
    startup_s: float = 60.0,
) -> Iterator[Served]:
    """Run ``tilewise serve --host 127.0.0.1 --port <free> --workers N`` as a user would, the
    database URL and token in the environment (argv is visible to every user); wait until
    ``/healthz`` answers, yield, then stop it with SIGTERM (killed after 30 s)."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("TILEWISE_") or key == "TILEWISE_RELIABILITY_REPORT"
    }
    env.update(
        TILEWISE_DB_URL=db_url,
        TILEWISE_CACHE_DIR=str(tmp_path / "cache"),
        HOME=str(tmp_path),
        XDG_DATA_HOME=str(tmp_path / "data"),
        PYTHONPATH=str(ROOT),
        COLUMNS="200",
    )
    if token is not None:
        env["TILEWISE_API_TOKEN"] = token
    env.update(extra_env or {})
    cmd = [sys.executable, "-m", "tilewise.cli", "serve", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--workers", str(workers)]
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT)
    served = Served(f"http://127.0.0.1:{port}", log, proc)
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"tilewise serve exited with {proc.returncode}:\n{served.output()}"
                )
            try:
                if httpx.get(f"{served.url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"tilewise serve did not start:\n{served.output()}")
            time.sleep(0.1)
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
