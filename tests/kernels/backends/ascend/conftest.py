"""Fixtures for the ascend backend tests: fake CANN toolkit trees in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kernels.backends.ascend.ascend_fakes import make_toolkit


@pytest.fixture
def toolkit_home(tmp_path: Path) -> Path:
    return make_toolkit(tmp_path / "Ascend")


@pytest.fixture
def no_cann_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        monkeypatch.delenv(var, raising=False)
