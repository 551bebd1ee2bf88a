from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tilewise.errors import ConfigError, InputError
from tilewise.kernels.targets import (
    BUILTIN,
    get_target,
    list_targets,
    read_platform_ini,
    twin_target,
)

SAMPLE = Path(__file__).parent / "data" / "Ascend910B2.ini"


def test_reads_a_cann_platform_ini() -> None:
    profile = read_platform_ini(SAMPLE)
    assert (profile.soc, profile.cube_cores, profile.vector_cores, profile.freq_mhz) == (
        "Ascend910B2",
        24,
        48,
        1800,
    )
    assert (profile.ub, profile.l1, profile.l0a, profile.l0b, profile.l0c, profile.bt) == (
        196608,
        524288,
        65536,
        65536,
        131072,
        1024,
    )
    assert profile.l2 == 201326592 and profile.ddr_rate == 32
    assert profile.source == str(SAMPLE)
    # The built-in table agrees with CANN's file on every size.
    builtin = BUILTIN["ascend910b2"]
    for field in (
        "cube_cores",
        "vector_cores",
        "freq_mhz",
        "ub",
        "l1",
        "l0a",
        "l0b",
        "l0c",
        "bt",
        "ddr_rate",
    ):
        assert getattr(profile, field) == getattr(builtin, field), field


def test_a_coupled_soc_s_extra_vector_cores_do_not_cap_its_mix_launch(tmp_path: Path) -> None:
    """A 310P's ini counts 8 AI cores (a cube and a vector unit each) and 7 extra vector cores:
    a MIX launch there has a vector unit per AI core, so neither its tile cap nor its vector
    blocks per AI core drop below the AI cores'."""
    text = SAMPLE.read_text().replace("cube_core_cnt=24", "cube_core_cnt=8")
    text = text.replace("vector_core_cnt=48", "vector_core_cnt=7")
    ini = tmp_path / "Ascend310P3.ini"
    ini.write_text(text)
    profile = read_platform_ini(ini)
    assert (profile.cube_cores, profile.vector_cores, profile.vector_per_cube) == (8, 8, 1)
    assert BUILTIN["ascend910b1"].vector_per_cube == 2


def test_toolkit_ini_wins_over_the_builtin_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform = tmp_path / "toolkit" / "x86_64-linux" / "data" / "platform_config"
    platform.mkdir(parents=True)
    text = SAMPLE.read_text().replace("cube_freq=1800", "cube_freq=1650")
    (platform / "Ascend910B2.ini").write_text(text)
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "toolkit"))
    profile = get_target("ascend910b2")
    assert profile.freq_mhz == 1650 and profile.source.endswith("Ascend910B2.ini")
    assert get_target("ascend910b1").source == "built-in"  # no ini for it: the table


def test_broken_ini_names_the_problem(tmp_path: Path) -> None:
    broken = tmp_path / "Ascend910B1.ini"
    shutil.copy(SAMPLE, broken)
    broken.write_text(SAMPLE.read_text().replace("ub_size=196608\n", ""))
    with pytest.raises(ConfigError, match="ub_size"):
        read_platform_ini(broken)


def test_twin_uses_the_910b1_sizes_by_default() -> None:
    twin = twin_target()
    assert twin.name == "cpu-twin" and twin.backend == "cpu-twin"
    assert (twin.ub, twin.l1, twin.cube_cores) == (
        BUILTIN["ascend910b1"].ub,
        BUILTIN["ascend910b1"].l1,
        24,
    )
    assert twin.ub_usable() == 196608 - 8192 and twin.ub_usable(mix=True) == 196608 - 8192 - 256


def test_targets_listed_and_unknown_named() -> None:
    names = [t.name for t in list_targets()]
    assert names[0] == "cpu-twin" and {"ascend910b1", "ascend910b4", "ascend310p3"} <= set(names)
    with pytest.raises(InputError, match="unknown target 'tpu'"):
        get_target("tpu")
