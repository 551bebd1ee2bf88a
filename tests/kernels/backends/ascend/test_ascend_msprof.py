"""msprof op: command lines and OpBasicInfo.csv parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tilewise.kernels.backends._ascend.msprof import (
    MsprofParseError,
    collect,
    op_command,
    parse_op_basic_info,
    simulator_command,
)

HEADER = "Op Name,Op Type,Task Duration(us),Block Dim,Mix Block Dim,Device Id,Pid,Current Freq,Rated Freq\n"


def test_op_command() -> None:
    argv = op_command(
        "/cann/bin/msprof",
        kernel_name="scale_relu_dropout",
        launch_count=7,
        output=Path("/tmp/out"),
        app=["./host_runner", "--device", "3"],
    )
    assert argv == [
        "/cann/bin/msprof",
        "op",
        "--kernel-name=scale_relu_dropout",
        "--launch-count=7",
        "--output=/tmp/out",
        "./host_runner",
        "--device",
        "3",
    ]


@pytest.mark.parametrize(("asked", "sent"), [(0, 1), (100, 100), (500, 100)])
def test_launch_count_is_clamped(asked: int, sent: int) -> None:
    argv = op_command("msprof", kernel_name="k", launch_count=asked, output=Path("o"), app=["a"])
    assert argv[3] == f"--launch-count={sent}"


def test_simulator_command() -> None:
    argv = simulator_command(
        "msprof", soc="Ascend910B1", kernel_name="k", output=Path("o"), app=["./host_runner"]
    )
    assert argv == [
        "msprof",
        "op",
        "simulator",
        "--soc-version=Ascend910B1",
        "--kernel-name=k",
        "--output=o",
        "./host_runner",
    ]


def test_parse_rows() -> None:
    rows = parse_op_basic_info(
        "\ufeff" + HEADER + "linear_add_gelu_mix_aic,linear_add_gelu,25.32,20,40,3,4242,1800,1800\n"
    )
    assert len(rows) == 1
    row = rows[0]
    assert (row.op_name, row.op_type, row.duration_us) == (
        "linear_add_gelu_mix_aic",
        "linear_add_gelu",
        25.32,
    )
    assert (row.block_dim, row.mix_block_dim, row.device_id) == (20, 40, 3)
    assert (row.current_freq, row.rated_freq, row.throttled) == (1800.0, 1800.0, False)


def test_missing_values_and_columns() -> None:
    rows = parse_op_basic_info(HEADER + "k,k,3.0,8,N/A,0,1,,\nk,k,,8,0,0,1,1800,1800\n")
    assert [r.duration_us for r in rows] == [3.0]  # a row without a duration is skipped
    assert rows[0].mix_block_dim is None and rows[0].current_freq is None
    assert not rows[0].throttled
    with pytest.raises(MsprofParseError, match="Task Duration"):
        parse_op_basic_info("Op Name,Block Dim\nk,8\n")


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_collect_median_and_throttling(tmp_path: Path) -> None:
    write(tmp_path / "OPPROF_1_A" / "OpBasicInfo.csv", HEADER + "k,k,10,8,0,0,1,1800,1800\n")
    write(
        tmp_path / "OPPROF_2_B" / "k" / "1" / "OpBasicInfo.csv",
        HEADER
        + "k,k,30,8,0,0,1,1800,1800\nk,k,12,8,0,0,1,1300,1800\nother,other,99,1,0,0,1,1800,1800\n",
    )
    report = collect(tmp_path, "k")
    assert report.samples_us == (10.0, 30.0, 12.0)
    assert report.median_us == 12.0
    assert report.throttled
    assert report.throttle_note() == (
        "throttled: 1 of 3 launches below the rated clock (lowest 1300 MHz, rated 1800 MHz)"
    )


def test_collect_not_throttled(tmp_path: Path) -> None:
    write(tmp_path / "OPPROF_1_A" / "OpBasicInfo.csv", HEADER + "k,k,10,8,0,0,1,1850,1800\n")
    report = collect(tmp_path, "k")
    assert not report.throttled and report.throttle_note() is None


def test_collect_without_output(tmp_path: Path) -> None:
    with pytest.raises(MsprofParseError, match="no OPPROF"):
        collect(tmp_path, "k")
