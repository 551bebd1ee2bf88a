"""Hardware profiles: where a kernel runs and how much on-chip memory each core has.

The built-in table comes from CANN 8.1's ``platform_config/<SoC>.ini`` files. ``cpu-twin`` runs
on this host's cores but keeps the on-chip sizes of an Ascend profile (910B1 unless
configured), so a tiling tuned on the twin fits that NPU.
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from tilewise.errors import ConfigError, InputError, did_you_mean

KiB = 1024
MiB = 1024 * KiB

#: UB kept back for the temporaries of high-level APIs (Gelu, Sigmoid ... without a tmp buffer).
UB_RESERVED = 8 * KiB
#: MIX kernels (cube + vector) lose another 256 B of UB (GetCoreMemSize subtracts it).
UB_MIX_RESERVED = 256


@dataclass(frozen=True)
class TargetProfile:
    """One target: core counts, per-core memory sizes (bytes), clock and rates."""

    name: str
    backend: str  # which backend runs kernels for it: "cpu-twin" or "ascend"
    soc: str  # the Ascend SoC whose on-chip sizes apply
    cube_cores: int
    vector_cores: int
    freq_mhz: int
    ub: int
    l1: int
    l0a: int
    l0b: int
    l0c: int
    bt: int
    l2: int
    ddr_rate: int  # bytes per cycle per core (CANN ini [AICoreMemoryRates] ddr_rate)
    source: str = "built-in"  # or the ini path it was read from

    @property
    def vector_per_cube(self) -> int:
        """Vector cores per cube core: the vector blocks one AI core of a MIX launch runs (2 on
        a 910B, whose cube and vector cores are separate; 1 where they are coupled)."""
        return max(1, self.vector_cores // self.cube_cores)

    def ub_usable(self, *, mix: bool = False) -> int:
        """UB bytes a kernel's TPipe may allocate."""
        return self.ub - UB_RESERVED - (UB_MIX_RESERVED if mix else 0)

    def limits(self, *, mix: bool = False) -> dict[str, int]:
        """The per-core limits a footprint is checked against, by memory name."""
        return {
            "ub": self.ub_usable(mix=mix),
            "l1": self.l1,
            "l0a": self.l0a,
            "l0b": self.l0b,
            "l0c": self.l0c,
            "bt": self.bt,
        }

    def to_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _ascend(
    name: str, soc: str, cube: int, vec: int, mhz: int, l2: int, **mem: int
) -> TargetProfile:
    sizes = {
        "ub": 192 * KiB,
        "l1": 512 * KiB,
        "l0a": 64 * KiB,
        "l0b": 64 * KiB,
        "l0c": 128 * KiB,
        "bt": 1 * KiB,
        "ddr_rate": 32,
    } | mem
    fields: dict[str, Any] = {
        "name": name,
        "backend": "ascend",
        "soc": soc,
        "cube_cores": cube,
        "vector_cores": vec,
        "freq_mhz": mhz,
        "l2": l2,
        **sizes,
    }
    return TargetProfile(**fields)


BUILTIN: dict[str, TargetProfile] = {
    p.name: p
    for p in (
        _ascend("ascend910b1", "Ascend910B1", 24, 48, 1850, 192 * MiB),
        _ascend("ascend910b2", "Ascend910B2", 24, 48, 1800, 192 * MiB),
        _ascend("ascend910b3", "Ascend910B3", 20, 40, 1800, 192 * MiB),
        _ascend("ascend910b4", "Ascend910B4", 20, 40, 1500, 96 * MiB),
        # 310P3: 8 AI cores, each with a cube and a vector unit. Its 7 extra vector cores are not
        # counted: our vector kernels launch on the AI cores.
        _ascend(
            "ascend310p3",
            "Ascend310P3",
            8,
            8,
            1060,
            16 * MiB,
            ub=256 * KiB,
            l1=1 * MiB,
            l0c=256 * KiB,
            bt=0,
            ddr_rate=17,
        ),
    )
}

TWIN_DEFAULT_PROFILE = "ascend910b1"


def read_platform_ini(path: Path, *, name: str | None = None) -> TargetProfile:
    """A profile from CANN's ``platform_config/<SoC>.ini`` ([SoCInfo], [AICoreSpec],
    [AICoreMemoryRates]); sizes in the ini are bytes, the clock MHz."""
    ini = configparser.ConfigParser()
    try:
        if not ini.read(path):
            raise ConfigError(f"cannot read platform file {path}")
        soc, spec, rates = ini["SoCInfo"], ini["AICoreSpec"], ini["AICoreMemoryRates"]
        cube = int(soc.get("cube_core_cnt") or soc["ai_core_cnt"])
        return TargetProfile(
            name=name or path.stem.lower(),
            backend="ascend",
            soc=path.stem,
            cube_cores=cube,
            # At least the AI cores: a coupled SoC (310P) lists only its extra vector cores,
            # and each AI core has a vector unit of its own.
            vector_cores=max(int(soc.get("vector_core_cnt") or cube), cube),
            freq_mhz=int(spec["cube_freq"]),
            ub=int(spec["ub_size"]),
            l1=int(spec["l1_size"]),
            l0a=int(spec["l0_a_size"]),
            l0b=int(spec["l0_b_size"]),
            l0c=int(spec["l0_c_size"]),
            bt=int(spec.get("bt_size") or 0),
            l2=int(soc.get("l2_size") or 0),
            ddr_rate=int(rates["ddr_rate"]),
            source=str(path),
        )
    except (KeyError, ValueError, configparser.Error) as exc:
        raise ConfigError(f"platform file {path} lacks or garbles {exc}") from exc


def toolkit_platform_dir() -> Path | None:
    """``<toolkit>/<arch>-linux/data/platform_config`` of the CANN toolkit in the environment."""
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        home = os.environ.get(var)
        if home:
            for candidate in sorted(Path(home).glob("*-linux/data/platform_config")):
                return candidate
    return None


def ascend_target(key: str) -> TargetProfile:
    """An Ascend profile: from the installed toolkit's ini when there is one, else built in."""
    builtin = BUILTIN[key]
    platform_dir = toolkit_platform_dir()
    if platform_dir is not None and (platform_dir / f"{builtin.soc}.ini").exists():
        return read_platform_ini(platform_dir / f"{builtin.soc}.ini", name=key)
    return builtin


def twin_target(profile: str | None = None) -> TargetProfile:
    """The cpu-twin target with the on-chip sizes of ``profile`` (env TILEWISE_TWIN_PROFILE)."""
    return _twin_of(profile or os.environ.get("TILEWISE_TWIN_PROFILE", TWIN_DEFAULT_PROFILE))


@cache
def _twin_of(profile: str) -> TargetProfile:
    # Built once per profile (profiles are frozen): a dataclasses.replace took 16 us of every
    # runtime lookup of a shape never asked before.
    return replace(BUILTIN[profile], name="cpu-twin", backend="cpu-twin")


def target_names() -> list[str]:
    """Every target's name: ``cpu-twin``, then the Ascend profiles."""
    return ["cpu-twin", *BUILTIN]


def get_target(name: str) -> TargetProfile:
    """Look a target up by name (case-insensitive)."""
    if not isinstance(name, str):
        raise InputError(f"a target is named by a string, got {type(name).__name__}")
    key = name.strip().lower()
    if key == "cpu-twin":
        return twin_target()
    if key in BUILTIN:
        return ascend_target(key)
    names = target_names()
    hint = did_you_mean(key, names)
    raise InputError(f"unknown target {name!r}{hint}; known targets: {', '.join(names)}")


def list_targets() -> list[TargetProfile]:
    """Every target's profile. One whose toolkit ini cannot be read is listed with its built-in
    profile and the reason as its ``source`` (a listing of every target, the dashboard's,
    should not fail for one); :func:`get_target` of it raises the ConfigError."""
    profiles = [twin_target()]
    for key in BUILTIN:
        try:
            profiles.append(ascend_target(key))
        except ConfigError as exc:
            profiles.append(replace(BUILTIN[key], source=f"built-in, the toolkit's: {exc}"))
    return profiles
