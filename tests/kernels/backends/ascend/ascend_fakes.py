"""Fake CANN toolkit trees for the ascend backend tests."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tilewise.kernels.backends._cpu_twin import TWIN_DIR
from tilewise.kernels.ops._base import MEMORIES
from tilewise.kernels.targets import BUILTIN
from tilewise.settings import Settings

HERE = Path(__file__).resolve().parent
#: Ascend910B2's platform ini, for target profiles read from a (fake) toolkit.
ASCEND910B2_INI = HERE.parents[1] / "data" / "Ascend910B2.ini"
STUB = HERE / "stub"
FAKE_CANN = HERE / "fake_cann"
CMAKE_SUBDIR = "compiler/tikcpp/ascendc_kernel_cmake"


def make_toolkit(
    root: Path,
    *,
    version: str = "8.1.RC1",
    functional: bool = False,
    kernels: Literal["stand-in", "twin"] = "stand-in",
) -> Path:
    """A CANN 8.x install tree: ascend-toolkit/{set_env.sh, <version>, latest -> <version>}.

    ``functional`` puts the fake ascendc.cmake, ACL and msprof in it, so that builds and runs
    work end to end on this host; otherwise the files are empty markers. The kernels of a
    functional toolkit are host stand-ins (fake_<op>.cpp: scale_relu_dropout only), or with
    ``kernels="twin"`` every op's own kernel file compiled against the CPU twin, its blocks
    run one by one with the UB and L0/L1 sizes of Ascend910B1 (see fake_cann/ascendc.cmake).
    """
    base = root / "ascend-toolkit"
    home = base / version
    cmake_dir = home / CMAKE_SUBDIR
    cmake_dir.mkdir(parents=True)
    (home / "x86_64-linux" / "data" / "platform_config").mkdir(parents=True)
    (home / "x86_64-linux" / "data" / "platform_config" / "Ascend910B1.ini").write_text(
        "[SoCInfo]\nai_core_cnt=24\n"
    )
    (home / "x86_64-linux" / "ascend_toolkit_install.info").write_text(
        f"package_name=Ascend-cann-toolkit\nversion={version}\n"
    )
    (home / "bin").mkdir()
    if functional:
        for item in FAKE_CANN.iterdir():
            shutil.copy2(item, cmake_dir / item.name)
        shutil.copytree(STUB, cmake_dir / "stub")
        shutil.copy2(FAKE_CANN / "msprof", home / "bin" / "msprof")
        if kernels == "twin":
            (cmake_dir / "fake_twin.cmake").write_text(_twin_config())
    else:
        (cmake_dir / "ascendc.cmake").write_text("# fake\n")
    (home.parent / "latest").symlink_to(version)
    (base / "set_env.sh").write_text(
        "export ASCEND_HOME_PATH=" + str(base / "latest") + "\n"
        'export PATH="$ASCEND_HOME_PATH/bin:$PATH"\n'
        "export TILEWISE_FAKE_CANN=1\n"
    )
    return base / "latest"


def _twin_config() -> str:
    """fake_twin.cmake: where the twin's headers are and the core limits of its launches."""
    target = BUILTIN["ascend910b1"]  # not the toolkit's ini: this one is a stub
    aiv, mix = target.limits(mix=False), target.limits(mix=True)
    return (
        f'set(FAKE_CANN_TWIN_DIR "{TWIN_DIR}")\n'
        f'set(FAKE_CANN_LIMITS_AIV "{", ".join(str(aiv[m]) for m in MEMORIES)}")\n'
        f'set(FAKE_CANN_LIMITS_MIX "{", ".join(str(mix[m]) for m in MEMORIES)}")\n'
    )


@dataclass(frozen=True)
class FakeNpuHost:
    """A host with the fake CANN in twin mode and one NPU device node (see install_npu_host)."""

    home: Path  # for ASCEND_HOME_PATH
    dev: Path  # for AscendBackend.dev_root
    settings: Settings  # a build cache of its own


def install_npu_host(root: Path) -> FakeNpuHost:
    """The fake CANN (twin mode, with Ascend910B2's ini) and ``dev/davinci0`` under ``root``;
    the caller sets ASCEND_HOME_PATH to ``home`` and AscendBackend.dev_root to ``dev``."""
    home = make_toolkit(root / "Ascend", functional=True, kernels="twin")
    shutil.copy(ASCEND910B2_INI, home / "x86_64-linux" / "data" / "platform_config")
    dev = root / "dev"
    dev.mkdir()
    (dev / "davinci0").write_text("")
    return FakeNpuHost(home, dev, Settings(cache_dir=root / "cache", build_timeout_s=600.0))
