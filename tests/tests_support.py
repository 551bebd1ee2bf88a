"""Helpers shared by test modules (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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
