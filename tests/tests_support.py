"""Helpers shared by test modules (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tilewise.kernels.backends import current_toolchain
from tilewise.types import Toolchain


def tilewise(*args: str, tmp_path: Path, db: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        TILEWISE_CACHE_DIR=str(tmp_path / "cache"),
        HOME=str(tmp_path),
        XDG_DATA_HOME=str(tmp_path / "data"),
        COLUMNS="200",
    )
    cmd = [sys.executable, "-m", "tilewise.cli", *args]
    if db is not None:
        cmd += ["--db", db]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)


def host_toolchain() -> Toolchain:
    """The toolchain this host tunes the cpu-twin with: what lookups here serve. Ascend targets
    have no current toolchain on a host without CANN, so it serves for them too."""
    found = current_toolchain("cpu-twin")
    assert found is not None, "no C++ compiler for the cpu-twin"
    return found
