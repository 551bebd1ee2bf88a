"""scale_relu_dropout: y = relu(x * scale) * keep / (1 - p), one pass over global memory.

``keep`` comes from a counter-based hash of (seed, element index), computed in the kernel with
vector integer ops, so the mask costs no global traffic and the reference is reproducible. The
scale, p and the seed are parameters of each call (a training step passes a new seed, as a
dropout draws a new mask per step); the tuned tiling serves them all.
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
    Parameter,
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

#: Blocks are multiples of 16 elements: 32 B for half, and the float/int32 scratch buffers stay
#: 32 B aligned too. Tiles are multiples of 128: the keep mask is a float compare and the ReLU
#: mask a compare of the data over whole 256 B repeats (128 half), and a tile's buffers must hold
#: its padded tail.
ALIGN = 16
TILE_ALIGN = 128
SCALE = 1.7
DROP_P = 0.1
SEED = 20260522
_U32 = 0xFFFFFFFF
#: Full-tile vector calls per tile: 7 int32 for the hash, a cast and a compare for the keep bits;
#: 4 on the data (the ReLU compare, the NaN compare x != x, scale, select). Two more, the OR and
#: the AND of the bit masks, touch 1/32 of the bytes each.
MASK_OPS, DATA_OPS = 9, 4
VECTOR_OPS_PER_TILE = MASK_OPS + DATA_OPS + 2


def seed_mix(seed: int) -> int:
    return (seed * 0x9E3779B9) & _U32


def keep_hash(n: int, seed: int) -> np.ndarray:
    """The kernel's hash of (seed, index) for indices 0..n-1, uint32 with wrap-around: a multiply
    (the kernel adds first * HASH_MUL to a tile of i * HASH_MUL, the same product), then twice
    fold the high half down and square."""
    h = np.arange(n, dtype=np.uint32)
    h += np.uint32(seed_mix(seed))
    h *= np.uint32(0x85EBCA6B)
    for _ in range(2):
        h += h >> np.uint32(16)
        h *= h
    return h


def keep_mask(n: int, seed: int, p: float) -> np.ndarray:
    """The kernel's keep test, step for step: the hash read as int32, rounded to float32, above
    the float32 threshold p * 2^32 - 2^31; a 0/1 mask."""
    u = keep_hash(n, seed).view(np.int32).astype(np.float32)
    threshold = np.float32(p) * np.float32(2.0**32) - np.float32(2.0**31)
    return (u > threshold).astype(np.float32)


def keep_scale(p: float) -> float:
    """1 / (1 - p) of the float32 p the kernel reads, as its keepScale field holds it."""
    return 1.0 / (1.0 - float(np.float32(p)))


def scale_keep(dtype: str, scale: float = SCALE, p: float = DROP_P) -> np.generic:
    """scale / (1 - p) as the kernel multiplies by it: a float32 product, cast to the dtype."""
    product = np.float32(scale) * np.float32(keep_scale(p))
    return NUMPY_DTYPES[dtype](product)


class ScaleReluDropout(OpSpec):
    name = "scale_relu_dropout"
    summary = "y = relu(x*scale) * mask / (1-p); mask from a hash of (seed, index)"
    dims = ("N",)
    examples = ("N=1", "N=1003", "N=2048", "N=4096", "N=8192", "N=70001", "N=1000003")
    benchmark_shapes = ("N=16777216",)
    entry = "scale_relu_dropout"
    tiling_type = "ScaleReluDropoutTiling"
    kernel_file = "scale_relu_dropout.cpp"
    layout: ClassVar[Mapping[str, tuple[str, ...]]] = {"x": ("N",), "y": ("N",)}
    compile_tunables = (
        Tunable("bufferNum", (1, 2), "queue depth: 2 = double buffering", True, "BUFFER_NUM"),
    )
    parameters = (
        Parameter("scale", SCALE, "scale", "the factor before the ReLU"),
        Parameter(
            "p",
            DROP_P,
            "dropP",
            "the probability an element is dropped",
            low=0.0,
            high=1.0,
            high_open=True,
            pack=lambda p: {"dropP": p, "keepScale": keep_scale(p)},
        ),
        Parameter(
            "seed",
            SEED,
            "seedMix",
            "the mask's seed: the same seed, the same mask",
            integer=True,
            low=0,
            high=_U32,
            pack=lambda seed: {"seedMix": seed_mix(int(seed))},
        ),
    )

    def runtime_tunables(
        self, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Tunable, ...]:
        cores = target.vector_cores
        blocks = sorted({b for b in (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, cores) if b <= cores})
        return (
            Tunable(
                "tileLength",
                (256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384),
                "elements per UB tile",
            ),
            Tunable(
                "blockDim",
                tuple(blocks),
                "blocks (vector cores) launched",
                carry=Carry("count", ("N",), ALIGN),
            ),
        )

    def _block_length(self, tiling: Tiling, shape: Shape) -> int:
        return round_up(ceil_div(shape["N"], tiling["blockDim"]), ALIGN)

    def buffers(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Buffer, ...]:
        tile, size, depth = tiling["tileLength"], itemsize(dtype), tiling["bufferNum"]
        plan = [Buffer(f"inQueueX[{i}]", "ub", align32(tile * size)) for i in range(depth)]
        plan += [Buffer(f"outQueueY[{i}]", "ub", align32(tile * size)) for i in range(depth)]
        plan += [
            Buffer("hashBuf", "ub", align32(tile * 4)),
            Buffer("scratchBuf", "ub", align32(tile * 4)),
            Buffer("indexBuf", "ub", align32(tile * 4)),
            Buffer("keepBuf", "ub", align32(tile // 8)),
            Buffer("positiveBuf", "ub", align32(tile // 8)),
        ]
        return tuple(plan)

    def rules(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> list[str]:
        reasons = []
        if tiling["tileLength"] % TILE_ALIGN:
            reasons.append(f"tileLength {tiling['tileLength']} is not a multiple of {TILE_ALIGN}")
        if tiling["bufferNum"] not in (1, 2):
            reasons.append("bufferNum must be 1 or 2")
        blocks = tiling["blockDim"]
        if not 1 <= blocks <= target.vector_cores:
            reasons.append(f"blockDim {blocks} outside 1..{target.vector_cores} vector cores")
        elif self._block_length(tiling, shape) * (blocks - 1) >= shape["N"]:
            reasons.append(f"blockDim {blocks} leaves blocks without work for N={shape['N']}")
        return reasons

    def default_tiling(self, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
        # The textbook choice: double buffering, as many vector cores as have work (from the
        # searched domain, so the default is a point of the space), the largest power-of-two
        # tile that fits UB.
        domain = next(
            t for t in self.runtime_tunables(shape, dtype, target) if t.name == "blockDim"
        )
        blocks = max(
            b
            for b in domain.values
            if b == 1 or round_up(ceil_div(shape["N"], b), ALIGN) * (b - 1) < shape["N"]
        )
        tiling = Tiling({"tileLength": TILE_ALIGN, "blockDim": blocks, "bufferNum": 2})
        tile = 1 << 15
        while tile > TILE_ALIGN:
            candidate = tiling.replace(tileLength=tile)
            if self.footprint(candidate, shape, dtype, target).ub <= target.ub_usable():
                return candidate
            tile //= 2
        return tiling

    def gm_args(self, shape: Shape, dtype: str) -> tuple[GmArg, ...]:
        n = shape["N"]
        return (
            GmArg("x", "in", n, dtype),
            GmArg("y", "out", n, dtype),
            GmArg("workspace", "workspace", 256, "uint8"),
        )

    def tiling_struct(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[StructField, ...]:
        return (
            StructField("totalLength", "i", shape["N"]),
            StructField("blockLength", "i", self._block_length(tiling, shape)),
            StructField("tileLength", "i", tiling["tileLength"]),
            StructField("seedMix", "I", seed_mix(SEED)),
            StructField("scale", "f", SCALE),
            StructField("dropP", "f", DROP_P),
            StructField("keepScale", "f", keep_scale(DROP_P)),
        )

    def block_dim(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> int:
        return tiling["blockDim"]

    def make_inputs(
        self, shape: Shape, dtype: str, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        x = rng.uniform(-2.0, 2.0, size=shape["N"]).astype(NUMPY_DTYPES[dtype])
        return {"x": x}

    def reference(
        self,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        *,
        scale: float = SCALE,
        p: float = DROP_P,
        seed: int = SEED,
    ) -> dict[str, np.ndarray]:
        t = NUMPY_DTYPES[dtype]
        x = inputs["x"]
        keep = keep_mask(shape["N"], seed, p) > 0
        y = np.maximum(x * scale_keep(dtype, scale, p), t(0))
        return {"y": np.where(keep, y, t(0)).astype(t)}

    def tolerance(self, dtype: str, shape: Shape) -> tuple[float, float]:
        return (1e-6, 1e-6) if dtype == "float32" else (2e-3, 2e-3)

    def block_work(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> BlockWork:
        size, n = itemsize(dtype), shape["N"]
        elements = min(self._block_length(tiling, shape), n)
        tiles = ceil_div(elements, tiling["tileLength"])
        return BlockWork(
            blocks=tiling["blockDim"],
            cores=target.vector_cores,
            gm_bytes=2 * elements * size,
            cube_macs=0,
            vector_bytes=elements * (MASK_OPS * 4 + DATA_OPS * size),
            vector_calls=tiles * VECTOR_OPS_PER_TILE,
            stages=tiles,
            overlapped=tiling["bufferNum"] == 2,
        )

    def traffic(self, shape: Shape, dtype: str) -> Traffic:
        n, size = shape["N"], itemsize(dtype)
        # Unfused: Muls, Relu, DropOutGenMask (writes a byte mask), DropOutDoMask (reads x and
        # the mask, writes y): x and y cross GM three times, plus the mask twice.
        unfused = 3 * 2 * n * size + 2 * n
        return Traffic(
            fused_bytes=2 * n * size, unfused_bytes=unfused, flops=4 * n, unfused_kernels=4
        )


SPEC = ScaleReluDropout()
