"""The twin's Ascend C API semantics, checked by the C++ case programs in twin_cases/."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tilewise.kernels.backends._compiler import find_compiler

CASES = Path(__file__).parent / "twin_cases"


@pytest.mark.slow
def test_twin_cases_pass() -> None:
    compiler = find_compiler("auto")
    done = subprocess.run(
        ["bash", str(CASES / "run_all.sh")],
        env=dict(os.environ, CXX=compiler.path),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    passed = [line for line in done.stdout.splitlines() if line.startswith("PASS ")]
    # UB overflow, 32-byte rule, queue limits, vector ops, Matmul vs naive, parallel blocks,
    # both kernels through the runner.
    assert len(passed) >= 30, done.stdout
