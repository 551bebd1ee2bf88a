"""layernorm_gelu: Out = GELU_tanh(LayerNorm(X)·γ + β) per row, a reduction then an epilogue.

Rows are split across vector cores. When a row fits UB, ``rowsPerTile`` rows go through UB at
once, each ``hTile`` (= H rounded up to 16) elements apart; otherwise each row takes two passes
in chunks of ``hTile``: mean/variance accumulation, then normalize + affine + GELU (γ and β
reloaded per chunk). The search space holds "whole row" as the largest ``hTile`` value, so the
two modes are one tunable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from tilewise.kernels.ops._base import (
    NUMPY_DTYPES,
    BlockWork,
    Bound,
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
from tilewise.kernels.ops.linear_add_gelu.spec import GELU_FLOPS, gelu_tanh
from tilewise.kernels.targets import TargetProfile
from tilewise.types import Shape, Tiling

ALIGN = 16
EPS = 1e-5
ROWS_PER_TILE = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64)
H_CHUNKS = (256, 512, 1024, 2048, 4096, 8192)
#: Vector instructions per row (two ReduceSums, Adds, Mul, Muls, FusedMulAdd γ β) and per tile
#: (the rstd of all rows at once: Muls, Adds, Sqrt, Reciprocal).
ROW_OPS, TILE_OPS = 6, 4
LN_FLOPS = 8


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return np.asarray((x - mean) / np.sqrt(var + eps) * gamma + beta)


class LayerNormGelu(OpSpec):
    name = "layernorm_gelu"
    summary = "Out = GELU_tanh(LayerNorm(X[R,H])·γ + β); rows across cores, long rows in chunks"
    dims = ("R", "H")
    examples = ("R=1,H=1", "R=5,H=33", "R=5,H=5000", "R=2,H=20000")
    benchmark_shapes = ("R=4096,H=1024",)
    entry = "layernorm_gelu"
    tiling_type = "LayerNormGeluTiling"
    kernel_file = "layernorm_gelu.cpp"
    layout: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "x": ("R", "H"),
        "gamma": ("H",),
        "beta": ("H",),
        "out": ("R", "H"),
    }
    compile_tunables = (
        Tunable("bufferNum", (1, 2), "queue depth: 2 = double buffering", True, "BUFFER_NUM"),
    )
    parameters = (
        Parameter("eps", EPS, "eps", "added to the variance (nn.LayerNorm's eps)", low=0.0),
    )

    def runtime_tunables(
        self, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Tunable, ...]:
        cores = target.vector_cores
        # R itself when it is small: one row per core.
        options = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, cores, shape["R"])
        blocks = sorted({b for b in options if b <= cores})
        h_pad = round_up(shape["H"], ALIGN)
        chunks = sorted({c for c in H_CHUNKS if c < h_pad} | {h_pad})
        return (
            Tunable(
                "rowsPerTile",
                ROWS_PER_TILE,
                "rows per UB tile when a row fits",
                carry=Carry("cap", bounds=(Bound(extent=("R",), per="blockDim"),), product="hTile"),
            ),
            Tunable(
                "hTile",
                tuple(chunks),
                "UB row length: the whole row (largest) or a chunk",
                carry=Carry("whole", ("H",), ALIGN),
            ),
            Tunable(
                "blockDim",
                tuple(blocks),
                "blocks (vector cores) launched",
                carry=Carry("count", ("R",)),
            ),
        )

    @staticmethod
    def _block_rows(tiling: Tiling, shape: Shape) -> int:
        return ceil_div(shape["R"], tiling["blockDim"])

    def buffers(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Buffer, ...]:
        rows, h, depth = tiling["rowsPerTile"], tiling["hTile"], tiling["bufferNum"]
        tile = rows * h
        plan = [
            Buffer(f"inQueueX[{i}]", "ub", align32(tile * itemsize(dtype))) for i in range(depth)
        ]
        plan += [
            Buffer(f"outQueueY[{i}]", "ub", align32(tile * itemsize(dtype))) for i in range(depth)
        ]
        plan += [
            Buffer("gammaBuf", "ub", align32(h * 4)),
            Buffer("betaBuf", "ub", align32(h * 4)),
            Buffer("sqBuf", "ub", align32(h * 4)),
            Buffer("reduceBuf", "ub", align32(ceil_div(h, 64) * 4)),
            Buffer("sumBuf", "ub", 32),
            Buffer("statsBuf", "ub", align32(rows * 4)),
        ]
        if dtype != "float32":
            plan.append(Buffer("xfBuf", "ub", align32(tile * 4)))
        return tuple(plan)

    def rules(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> list[str]:
        reasons = []
        h, h_pad = tiling["hTile"], round_up(shape["H"], ALIGN)
        if h % ALIGN or not 0 < h <= h_pad:
            reasons.append(f"hTile {h} must be a multiple of {ALIGN} in 1..{h_pad}")
        elif h < h_pad and tiling["rowsPerTile"] != 1:
            reasons.append(f"a row split in chunks of {h} takes rowsPerTile 1")
        if tiling["bufferNum"] not in (1, 2):
            reasons.append("bufferNum must be 1 or 2")
        blocks, rows = tiling["blockDim"], shape["R"]
        if not 1 <= blocks <= target.vector_cores:
            reasons.append(f"blockDim {blocks} outside 1..{target.vector_cores} vector cores")
        elif self._block_rows(tiling, shape) * (blocks - 1) >= rows:
            reasons.append(f"blockDim {blocks} leaves blocks without rows for R={rows}")
        elif tiling["rowsPerTile"] > self._block_rows(tiling, shape):
            reasons.append(f"rowsPerTile {tiling['rowsPerTile']} exceeds the rows of a block")
        return reasons

    def default_tiling(self, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
        # Every vector core that gets rows, double buffering, the whole row when it fits with
        # as many rows per tile as UB takes, else the largest chunk that fits.
        rows = shape["R"]
        space = {t.name: t.values for t in self.runtime_tunables(shape, dtype, target)}
        blocks = max(b for b in space["blockDim"] if b == 1 or ceil_div(rows, b) * (b - 1) < rows)
        block_rows = ceil_div(rows, blocks)
        h_tiles = space["hTile"]
        base = Tiling({"rowsPerTile": 1, "hTile": h_tiles[0], "blockDim": blocks, "bufferNum": 2})
        for h in sorted(h_tiles, reverse=True):
            whole = h == h_tiles[-1]
            for r in sorted(ROWS_PER_TILE, reverse=True) if whole else (1,):
                candidate = base.replace(hTile=h, rowsPerTile=r)
                if r <= block_rows and self.valid(candidate, shape, dtype, target):
                    return candidate
        return base

    def gm_args(self, shape: Shape, dtype: str) -> tuple[GmArg, ...]:
        r, h = shape["R"], shape["H"]
        return (
            GmArg("x", "in", r * h, dtype),
            GmArg("gamma", "in", h, dtype),
            GmArg("beta", "in", h, dtype),
            GmArg("out", "out", r * h, dtype),
            GmArg("workspace", "workspace", 256, "uint8"),
        )

    def tiling_struct(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[StructField, ...]:
        return (
            StructField("rows", "i", shape["R"]),
            StructField("rowLength", "i", shape["H"]),
            StructField("blockRows", "i", self._block_rows(tiling, shape)),
            StructField("rowsPerTile", "i", tiling["rowsPerTile"]),
            StructField("hTile", "i", tiling["hTile"]),
            StructField("eps", "f", EPS),
            StructField("invH", "f", 1.0 / shape["H"]),
        )

    def block_dim(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> int:
        return tiling["blockDim"]

    def make_inputs(
        self, shape: Shape, dtype: str, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        r, h, t = shape["R"], shape["H"], NUMPY_DTYPES[dtype]
        # A per-row offset: the variance must not come from E[x²] - mean².
        x = rng.uniform(-2.0, 2.0, size=(r, h)) + rng.uniform(-3.0, 3.0, size=(r, 1))
        return {
            "x": x.astype(t),
            "gamma": rng.uniform(0.5, 1.5, size=h).astype(t),
            "beta": rng.uniform(-0.5, 0.5, size=h).astype(t),
        }

    def reference(
        self, inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str, *, eps: float = EPS
    ) -> dict[str, np.ndarray]:
        x, gamma, beta = (inputs[k].astype(np.float64) for k in ("x", "gamma", "beta"))
        eps = float(np.float32(eps))  # as the kernel's float field holds it
        y = gelu_tanh(layer_norm(x.reshape(shape["R"], shape["H"]), gamma, beta, eps))
        return {"out": y.astype(NUMPY_DTYPES[dtype])}

    def tolerance(self, dtype: str, shape: Shape) -> tuple[float, float]:
        # float: sums over H in float (relative error ~1e-6 for H in the thousands); half: one
        # rounding of the float result (2^-11) plus slack.
        return (1e-4, 1e-4) if dtype == "float32" else (4e-3, 4e-3)

    def block_work(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> BlockWork:
        size, h = itemsize(dtype), shape["H"]
        rows = min(self._block_rows(tiling, shape), shape["R"])
        split = tiling["hTile"] < round_up(h, ALIGN)
        half = dtype != "float32"
        if split:  # x read twice, γ and β once per row, chunk by chunk
            chunks = ceil_div(h, tiling["hTile"])
            stages = rows * 2 * chunks
            gm = rows * (4 * h) * size
            calls = rows * (chunks * (ROW_OPS + GELU_FLOPS + 2 * half) + TILE_OPS)
        else:
            tiles = ceil_div(rows, tiling["rowsPerTile"])
            stages = tiles
            gm = (2 * rows * h + 2 * h) * size
            calls = tiles * (TILE_OPS + GELU_FLOPS + 2 * half) + rows * ROW_OPS
        return BlockWork(
            blocks=tiling["blockDim"],
            cores=target.vector_cores,
            gm_bytes=gm,
            cube_macs=0,
            vector_bytes=rows * h * 4 * (ROW_OPS + GELU_FLOPS + (2 if split else 0)),
            vector_calls=calls,
            stages=stages,
            overlapped=tiling["bufferNum"] == 2,
        )

    def traffic(self, shape: Shape, dtype: str) -> Traffic:
        r, h, size = shape["R"], shape["H"], itemsize(dtype)
        fused = (2 * r * h + 2 * h) * size
        # Unfused: LayerNorm reads X, γ, β and writes Y; Gelu reads Y and writes Out.
        unfused = (2 * r * h + 2 * h) * size + 2 * r * h * size
        return Traffic(
            fused_bytes=fused,
            unfused_bytes=unfused,
            flops=r * h * (LN_FLOPS + GELU_FLOPS),
            unfused_kernels=2,
        )


SPEC = LayerNormGelu()
