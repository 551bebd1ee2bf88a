"""The import contracts of pyproject.toml ([tool.importlinter]) hold: the layers, the runtime's
light imports, one namespace. lint-imports reads the tree through the ``tilewise`` symlink."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    binary = Path(sys.executable).parent / "lint-imports"
    assert binary.exists(), "lint-imports is not installed (the dev extra: import-linter)"
    done = subprocess.run(
        [binary, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
