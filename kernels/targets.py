"""Hardware profiles: where a kernel runs and how much on-chip memory each core has.

The built-in table comes from CANN 8.1's ``platform_config/<SoC>.ini`` files (see
shared/ascend/FACTS.md §3). ``cpu-twin`` runs on this host's cores but keeps the on-chip sizes of
an Ascend profile (910B1 unless configured), so a tiling tuned on the twin fits that NPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from tuner.errors import InputError

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


def twin_target(profile: str | None = None) -> TargetProfile:
    """The cpu-twin target with the on-chip sizes of ``profile`` (env TILEWISE_TWIN_PROFILE)."""
    base = BUILTIN[profile or os.environ.get("TILEWISE_TWIN_PROFILE", TWIN_DEFAULT_PROFILE)]
    return replace(base, name="cpu-twin", backend="cpu-twin")


def get_target(name: str) -> TargetProfile:
    """Look a target up by name (case-insensitive)."""
    key = name.strip().lower()
    if key == "cpu-twin":
        return twin_target()
    if key in BUILTIN:
        return BUILTIN[key]
    known = ", ".join(["cpu-twin", *BUILTIN])
    raise InputError(f"unknown target {name!r}; known targets: {known}")


def list_targets() -> list[TargetProfile]:
    return [twin_target(), *BUILTIN.values()]
