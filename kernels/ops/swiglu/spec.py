"""swiglu: out = silu(g)·u on the already projected gate and up inputs, one pass over GM.

The elementwise half of a SwiGLU MLP (the projections ran before): two inputs streamed through
UB tile by tile, one output. Tunables are scale_relu_dropout's: tile length, blocks, and the
queue depth (a build-time choice).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from tilewise.kernels.ops._base import (
    NUMPY_DTYPES,
    BlockWork,
    Buffer,
    Carry,
    GmArg,
    OpSpec,
    StructField,
    Traffic,
    Tunable,
    align32,
    ceil_div,
    itemsize,
    round_up,
)
from tilewise.kernels.targets import TargetProfile
from tilewise.types import Shape, Tiling

#: Tiles and blocks are multiples of 16 elements: 32 B for half, so every copy but the last is
#: a whole number of 32 B blocks.
ALIGN = 16
TILES = (256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
#: SwiGLU on the vector unit: exp, add, divide, two multiplies (the API's own sequence).
SWIGLU_VECTOR_OPS = 5
SWIGLU_FLOPS = 5


def silu(x: np.ndarray) -> np.ndarray:
    return np.asarray(x / (1.0 + np.exp(-x)))


class Swiglu(OpSpec):
    name = "swiglu"
    summary = "out = silu(g) * u, g and u [T, I]; the SwiGLU API per UB tile"
    dims = ("T", "I")
    examples = ("T=1,I=1", "T=3,I=17", "T=37,I=1001")
    benchmark_shapes = ("T=2048,I=2752",)
    entry = "swiglu"
    tiling_type = "SwigluTiling"
    kernel_file = "swiglu.cpp"
    layout: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "g": ("T", "I"),
        "u": ("T", "I"),
        "out": ("T", "I"),
    }
    compile_tunables = (
        Tunable("bufferNum", (1, 2), "queue depth: 2 = double buffering", True, "BUFFER_NUM"),
    )

    def runtime_tunables(
        self, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Tunable, ...]:
        cores = target.vector_cores
        blocks = sorted({b for b in (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, cores) if b <= cores})
        return (
            Tunable("tileLength", TILES, "elements per UB tile"),
            Tunable(
                "blockDim",
                tuple(blocks),
                "blocks (vector cores) launched",
                carry=Carry("count", ("T", "I"), ALIGN),
            ),
        )

    @staticmethod
    def _total(shape: Shape) -> int:
        return shape["T"] * shape["I"]

    def _block_length(self, tiling: Tiling, shape: Shape) -> int:
        return round_up(ceil_div(self._total(shape), tiling["blockDim"]), ALIGN)

    def buffers(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Buffer, ...]:
        nbytes, depth = align32(tiling["tileLength"] * itemsize(dtype)), tiling["bufferNum"]
        return tuple(
            Buffer(f"{queue}[{i}]", "ub", nbytes)
            for queue in ("inQueueG", "inQueueU", "outQueue")
            for i in range(depth)
        )

    def rules(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> list[str]:
        reasons = []
        if tiling["tileLength"] % ALIGN:
            reasons.append(f"tileLength {tiling['tileLength']} is not a multiple of {ALIGN}")
        if tiling["bufferNum"] not in (1, 2):
            reasons.append("bufferNum must be 1 or 2")
        blocks, total = tiling["blockDim"], self._total(shape)
        if not 1 <= blocks <= target.vector_cores:
            reasons.append(f"blockDim {blocks} outside 1..{target.vector_cores} vector cores")
        elif self._block_length(tiling, shape) * (blocks - 1) >= total:
            reasons.append(f"blockDim {blocks} leaves blocks without work for T*I={total}")
        return reasons

    def default_tiling(self, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
        # Double buffering, as many vector cores as have work, the largest tile that fits UB.
        total = self._total(shape)
        domain = next(
            t for t in self.runtime_tunables(shape, dtype, target) if t.name == "blockDim"
        )
        blocks = max(
            b
            for b in domain.values
            if b == 1 or round_up(ceil_div(total, b), ALIGN) * (b - 1) < total
        )
        tiling = Tiling({"tileLength": TILES[0], "blockDim": blocks, "bufferNum": 2})
        for tile in sorted(TILES, reverse=True):
            candidate = tiling.replace(tileLength=tile)
            if self.footprint(candidate, shape, dtype, target).ub <= target.ub_usable():
                return candidate
        return tiling

    def gm_args(self, shape: Shape, dtype: str) -> tuple[GmArg, ...]:
        n = self._total(shape)
        return (
            GmArg("g", "in", n, dtype),
            GmArg("u", "in", n, dtype),
            GmArg("out", "out", n, dtype),
            GmArg("workspace", "workspace", 256, "uint8"),
        )

    def tiling_struct(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[StructField, ...]:
        return (
            StructField("totalLength", "i", self._total(shape)),
            StructField("blockLength", "i", self._block_length(tiling, shape)),
            StructField("tileLength", "i", tiling["tileLength"]),
        )

    def block_dim(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> int:
        return tiling["blockDim"]

    def make_inputs(
        self, shape: Shape, dtype: str, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        t, size = NUMPY_DTYPES[dtype], (shape["T"], shape["I"])
        return {
            "g": rng.uniform(-4.0, 4.0, size=size).astype(t),
            "u": rng.uniform(-2.0, 2.0, size=size).astype(t),
        }

    def reference(
        self, inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str
    ) -> dict[str, np.ndarray]:
        g, u = (inputs[k].astype(np.float64) for k in ("g", "u"))
        return {"out": (silu(g) * u).astype(NUMPY_DTYPES[dtype])}

    def tolerance(self, dtype: str, shape: Shape) -> tuple[float, float]:
        # float: exp to a few ulp; half: one rounding of a float result (2^-11) plus slack.
        return (1e-5, 1e-5) if dtype == "float32" else (2e-3, 2e-3)

    def block_work(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> BlockWork:
        size = itemsize(dtype)
        elements = min(self._block_length(tiling, shape), self._total(shape))
        tiles = ceil_div(elements, tiling["tileLength"])
        return BlockWork(
            blocks=tiling["blockDim"],
            cores=target.vector_cores,
            gm_bytes=3 * elements * size,
            cube_macs=0,
            vector_bytes=elements * SWIGLU_VECTOR_OPS * 4,
            vector_calls=tiles * SWIGLU_VECTOR_OPS,
            stages=tiles,
            overlapped=tiling["bufferNum"] == 2,
        )

    def traffic(self, shape: Shape, dtype: str) -> Traffic:
        n, size = self._total(shape), itemsize(dtype)
        # Unfused: Silu reads g and writes s; Mul reads s and u and writes out.
        return Traffic(
            fused_bytes=3 * n * size,
            unfused_bytes=5 * n * size,
            flops=SWIGLU_FLOPS * n,
            unfused_kernels=2,
        )


SPEC = Swiglu()
