"""An analytic model of a kernel's time on an Ascend target. Every figure it gives is PREDICTED.

From an op's :class:`~tilewise.kernels.ops.BlockWork` and a target profile:

* MTE (GM <-> UB/L1): ``gm_bytes / ddr_rate`` cycles (the ini's bytes per cycle per core),
  the cube side's loads into L1 counted once per block sharing that cube core;
* cube: ``cube_macs / 16³`` cycles (a 16×16×16 MAC per cycle), four times that for fp32, times
  the blocks that share one cube core (a MIX launch's vector blocks of one AI core);
* vector: ``vector_bytes / 256`` cycles (one 256-byte repeat per cycle) plus a fixed issue
  cost per vector instruction;
* overlap: double buffering lets the pipes run on different stages, so a block costs its
  slowest pipe plus one stage of the others (pipeline fill); without it the pipes add up;
* waves: blocks are quantized over the cores, ``ceil(blocks / cores)`` waves;
* a fixed launch overhead.

It ranks tilings without an NPU and seeds the search on NPU targets; it has not been
calibrated against an NPU (none was available), so its absolute figures are estimates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilewise.kernels.ops import OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.types import Shape, Tiling

CUBE_MACS_PER_CYCLE = 16 * 16 * 16
FP32_CUBE_SLOWDOWN = 4
VECTOR_BYTES_PER_CYCLE = 256
VECTOR_ISSUE_CYCLES = 12
LAUNCH_OVERHEAD_US = 5.0


@dataclass(frozen=True)
class Prediction:
    """Predicted time of one launch, in microseconds, and where it goes."""

    total_us: float
    mte_us: float
    cube_us: float
    vector_us: float
    waves: int
    bound: str  # "memory", "cube" or "vector": the slowest pipe

    def to_dict(self) -> dict[str, object]:
        return {
            "predicted_us": round(self.total_us, 3),
            "mte_us": round(self.mte_us, 3),
            "cube_us": round(self.cube_us, 3),
            "vector_us": round(self.vector_us, 3),
            "waves": self.waves,
            "bound": self.bound,
            "label": "predicted",
        }


def predict(
    spec: OpSpec, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
) -> Prediction:
    work = spec.block_work(tiling, shape, dtype, target)
    cycles_per_us = target.freq_mhz
    mte = (work.gm_bytes + (work.cube_share - 1) * work.cube_gm_bytes) / target.ddr_rate
    cube = work.cube_macs / CUBE_MACS_PER_CYCLE * (FP32_CUBE_SLOWDOWN if dtype == "float32" else 1)
    cube *= work.cube_share
    vector = work.vector_bytes / VECTOR_BYTES_PER_CYCLE + work.vector_calls * VECTOR_ISSUE_CYCLES
    pipes = {"memory": mte, "cube": cube, "vector": vector}
    slowest = max(pipes, key=lambda k: pipes[k])
    if work.overlapped and work.stages > 1:
        block = pipes[slowest] + (sum(pipes.values()) - pipes[slowest]) / work.stages
    else:
        block = sum(pipes.values())
    waves = math.ceil(work.blocks / max(work.cores, 1))
    return Prediction(
        total_us=waves * block / cycles_per_us + LAUNCH_OVERHEAD_US,
        mte_us=mte / cycles_per_us,
        cube_us=cube / cycles_per_us,
        vector_us=vector / cycles_per_us,
        waves=waves,
        bound=slowest,
    )


def rank(
    spec: OpSpec,
    shape: Shape,
    dtype: str,
    target: TargetProfile,
    *,
    samples: int = 4000,
    seed: int | None = None,
) -> list[tuple[Tiling, Prediction]]:
    """Valid tilings (the default and up to ``samples`` random draws), fastest predicted first."""
    import random

    rng = random.Random(seed)
    tunables = spec.tunables(shape, dtype, target)
    candidates = {spec.default_tiling(shape, dtype, target)}
    for _ in range(samples):
        tiling = Tiling({t.name: rng.choice(t.values) for t in tunables})
        if tiling not in candidates and spec.check(tiling, shape, dtype, target).valid:
            candidates.add(tiling)
    ranked = [(t, predict(spec, t, shape, dtype, target)) for t in candidates]
    ranked.sort(key=lambda pair: (pair[1].total_us, pair[0].key()))
    return ranked
