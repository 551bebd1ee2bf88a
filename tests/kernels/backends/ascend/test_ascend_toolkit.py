"""CANN discovery on fake install trees, and the error without one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.kernels.backends.ascend.ascend_fakes import CMAKE_SUBDIR, make_toolkit
from tilewise.errors import BackendError
from tilewise.kernels.backends import create_backend
from tilewise.kernels.backends._ascend.toolkit import (
    SOURCE_ENV_SCRIPT,
    find_toolkit,
    parse_env0,
    source_env_command,
)

NOWHERE: tuple[Path, ...] = ()


def test_found_through_ascend_home_path(toolkit_home: Path) -> None:
    found = find_toolkit(environ={"ASCEND_HOME_PATH": str(toolkit_home)}, roots=NOWHERE)
    assert found.home == toolkit_home
    assert found.cmake_dir == toolkit_home / CMAKE_SUBDIR
    assert found.set_env == toolkit_home.parent / "set_env.sh"
    assert found.version == "8.1.RC1"


def test_lookup_order(tmp_path: Path) -> None:
    explicit = make_toolkit(tmp_path / "a", version="8.0.RC3")
    home = make_toolkit(tmp_path / "b", version="8.1.RC1")
    toolkit_home = make_toolkit(tmp_path / "c", version="8.2.RC1")
    default = make_toolkit(tmp_path / "d", version="8.3.RC1")
    environ = {"ASCEND_HOME_PATH": str(home), "ASCEND_TOOLKIT_HOME": str(toolkit_home)}
    assert find_toolkit(explicit, environ=environ, roots=(default,)).version == "8.0.RC3"
    assert find_toolkit(environ=environ, roots=(default,)).version == "8.1.RC1"
    assert (
        find_toolkit(environ={"ASCEND_TOOLKIT_HOME": str(toolkit_home)}, roots=(default,)).version
        == "8.2.RC1"
    )
    assert find_toolkit(environ={}, roots=(tmp_path / "missing", default)).version == "8.3.RC1"


def test_version_falls_back_to_the_directory_behind_latest(toolkit_home: Path) -> None:
    (toolkit_home / "x86_64-linux" / "ascend_toolkit_install.info").unlink()
    assert find_toolkit(toolkit_home, environ={}, roots=NOWHERE).version == "8.1.RC1"


def test_older_cmake_location(tmp_path: Path) -> None:
    home = tmp_path / "latest"
    (home / "tools/tikcpp/ascendc_kernel_cmake").mkdir(parents=True)
    (home / "tools/tikcpp/ascendc_kernel_cmake/ascendc.cmake").write_text("")
    found = find_toolkit(home, environ={}, roots=NOWHERE)
    assert found.cmake_dir == home / "tools/tikcpp/ascendc_kernel_cmake"
    assert found.set_env is None
    assert found.version == "unknown"


def test_not_found_says_what_is_missing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BackendError) as info:
        find_toolkit(environ={"ASCEND_HOME_PATH": str(empty)}, roots=(tmp_path / "nope",))
    message = str(info.value)
    assert message.startswith(
        "CANN toolkit not found: set ASCEND_HOME_PATH or source <toolkit>/set_env.sh (looked in: "
    )
    assert f"{empty} ($ASCEND_HOME_PATH)" in message
    assert f"{tmp_path / 'nope'} (default)" in message
    assert "ascendc.cmake" in message


def test_cann_9_layout_is_refused_by_name(tmp_path: Path) -> None:
    home = tmp_path / "cann-9.0.0"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "bisheng").write_text("")
    with pytest.raises(BackendError, match=r"CANN 9\.x layout not supported yet"):
        find_toolkit(home, environ={}, roots=NOWHERE)


def test_create_backend_without_cann(
    no_cann_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        "tilewise.kernels.backends._ascend.toolkit.DEFAULT_ROOTS", (tmp_path / "no-toolkit",)
    )
    with pytest.raises(BackendError, match="CANN toolkit not found: set ASCEND_HOME_PATH"):
        create_backend("ascend")


def test_run_modes(toolkit_home: Path, tmp_path: Path) -> None:
    toolkit = find_toolkit(toolkit_home, environ={}, roots=NOWHERE)
    dev = tmp_path / "dev"
    dev.mkdir()
    assert toolkit.run_modes("Ascend910B1", dev_root=dev) == ()
    (dev / "davinci0").write_text("")
    (toolkit_home / "tools" / "simulator" / "Ascend910B1" / "lib").mkdir(parents=True)
    (toolkit_home / "tools" / "tikicpulib").mkdir(parents=True)
    assert toolkit.run_modes("Ascend910B1", dev_root=dev) == ("npu", "sim", "cpu")
    assert toolkit.run_modes("Ascend910B4", dev_root=dev) == ("npu", "cpu")


def test_source_env_command_passes_the_path_as_an_argument() -> None:
    argv = source_env_command(Path("/opt/with space/$(rm -rf x)/set_env.sh"))
    assert argv == [
        "bash",
        "-c",
        SOURCE_ENV_SCRIPT,
        "bash",
        "/opt/with space/$(rm -rf x)/set_env.sh",
    ]


def test_environment_is_set_env_applied(toolkit_home: Path) -> None:
    toolkit = find_toolkit(toolkit_home, environ={}, roots=NOWHERE)
    env = toolkit.environment()
    assert env["ASCEND_HOME_PATH"] == str(toolkit_home)
    assert env["TILEWISE_FAKE_CANN"] == "1"
    assert env["PATH"].split(os.pathsep)[0] == str(toolkit_home / "bin")


def test_broken_set_env_is_a_backend_error(tmp_path: Path) -> None:
    home = make_toolkit(tmp_path / "Ascend", version="8.0.0")
    (home.parent / "set_env.sh").write_text("return 3\n")
    with pytest.raises(BackendError, match=r"sourcing .*set_env\.sh failed"):
        find_toolkit(home, environ={}, roots=NOWHERE).environment()


def test_parse_env0() -> None:
    data = subprocess.run(
        ["env", "-0"],
        env={"A": "1", "B": "two\nlines", "C": "x=y"},
        capture_output=True,
        check=True,
    ).stdout
    assert parse_env0(data) == {"A": "1", "B": "two\nlines", "C": "x=y"}
