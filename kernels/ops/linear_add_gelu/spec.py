"""linear_add_gelu: Out = GELU_tanh(X·W + b), the Matmul + vector-epilogue pattern.

The cube computes one baseM×baseN block of X·W at a time into UB (float); the vector unit adds
the bias and applies GELU on that block, ``epiRows`` rows per pass, and copies it out, so the
pre-activation never reaches global memory. Tunables are the TCubeTiling fields a developer
sets by hand (base block, L1 steps and depths, L0C double buffering, the core split, the
iteration order) plus the epilogue's UB tile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from tilewise.kernels.ops import _matmul_common as cube
from tilewise.kernels.ops._base import (
    NUMPY_DTYPES,
    BlockWork,
    Bound,
    Buffer,
    GmArg,
    OpSpec,
    StructField,
    Traffic,
    Tunable,
    align32,
    ceil_div,
    itemsize,
)
from tilewise.kernels.ops._cube import cube_struct
from tilewise.kernels.targets import TargetProfile
from tilewise.types import Shape, Tiling

GELU_FLOPS = 10  # per element: cube, two multiplies, add, exp, add, divide ...


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)
    return np.asarray(0.5 * x * (1.0 + np.tanh(inner)))


class LinearAddGelu(OpSpec):
    name = "linear_add_gelu"
    summary = "Out = GELU_tanh(X[M,K]·W[K,N] + b[N]); bias and GELU on the C block in UB"
    dims = ("M", "N", "K")
    examples = ("M=1,N=17,K=3", "M=33,N=40,K=70", "M=100,N=130,K=50")
    benchmark_shapes = ("M=1024,N=1024,K=1024", "M=512,N=4096,K=1024", "M=128,N=4096,K=4096")
    entry = "linear_add_gelu"
    tiling_type = "LinearAddGeluTiling"
    kernel_file = "linear_add_gelu.cpp"
    layout: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "x": ("M", "K"),
        "w": ("K", "N"),
        "bias": ("N",),
        "out": ("M", "N"),
    }
    mix = True

    def runtime_tunables(
        self, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Tunable, ...]:
        # A tile per vector core: the Matmul API runs from the vector blocks of a MIX
        # launch, two per cube core on a 910B (its tiling's SetDim counts them).
        cores = target.vector_cores
        return (
            *cube.cube_tunables(
                dtype, m=Bound("singleCoreM", align=16), n=Bound("singleCoreN", align=16), k=("K",)
            ),
            cube.split_tunable("singleCoreM", ("M",), shape["M"], cores, "rows per core"),
            cube.split_tunable("singleCoreN", ("N",), shape["N"], cores, "columns per core"),
        )

    def used_cores(self, tiling: Tiling, shape: Shape) -> int:
        return ceil_div(shape["M"], tiling["singleCoreM"]) * ceil_div(
            shape["N"], tiling["singleCoreN"]
        )

    def buffers(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Buffer, ...]:
        size = itemsize(dtype)
        bm, bn = tiling["baseM"], tiling["baseN"]
        plan = [
            Buffer("cQueue", "ub", align32(bm * bn * 4)),  # C block from the cube, float
            Buffer("biasBuf", "ub", align32(bn * 4)),  # bias of the current N block, float
        ]
        if dtype != "float32":
            plan.append(Buffer("biasCastBuf", "ub", align32(bn * size)))
        plan += [
            Buffer(f"outQueue[{i}]", "ub", align32(tiling["epiRows"] * bn * size)) for i in range(2)
        ]
        return (*plan, *cube.matmul_buffers(tiling, dtype))

    def rules(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> list[str]:
        reasons = cube.cube_rules(
            tiling,
            dtype,
            single_m=tiling["singleCoreM"],
            single_n=tiling["singleCoreN"],
            k=shape["K"],
        )
        used = self.used_cores(tiling, shape)
        if used > target.vector_cores:
            reasons.append(
                f"core split needs {used} tiles, target has {target.vector_cores} vector cores"
            )
        return reasons

    def default_tiling(self, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
        # In the spirit of matmul_tiling::MultiCoreMatmulTiling: use as many tiles as the
        # split allows (up to the vector cores) with the least work per tile, start from the
        # vendor's (128, 256, 64) base block and shrink it until L0 fits, one A and one B
        # block pair in L1.
        return cube.default_matmul(self, shape, ("M", "N", "K"), dtype, target)

    def warm_defaults(self, dtype: str, target: TargetProfile) -> None:
        cube.warm_default_fits(self, ("M", "N", "K"), dtype, target)

    def gm_args(self, shape: Shape, dtype: str) -> tuple[GmArg, ...]:
        m, n, k = shape["M"], shape["N"], shape["K"]
        return (
            GmArg("x", "in", m * k, dtype),
            GmArg("w", "in", k * n, dtype),
            GmArg("bias", "in", n, dtype),
            GmArg("out", "out", m * n, dtype),
            GmArg("workspace", "workspace", 1024, "uint8"),
        )

    def tiling_struct(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[StructField, ...]:
        m, n, k = shape["M"], shape["N"], shape["K"]
        values = cube.cube_values(
            tiling,
            m=m,
            n=n,
            k=k,
            single_m=tiling["singleCoreM"],
            single_n=tiling["singleCoreN"],
            used=self.used_cores(tiling, shape),
        )
        return (*cube_struct("cube", values), StructField("epiRows", "i", tiling["epiRows"]))

    def block_dim(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> int:
        return self.used_cores(tiling, shape)

    def make_inputs(
        self, shape: Shape, dtype: str, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        m, n, k = shape["M"], shape["N"], shape["K"]
        t = NUMPY_DTYPES[dtype]
        return {
            "x": rng.uniform(-1.0, 1.0, size=(m, k)).astype(t),
            "w": (rng.uniform(-1.0, 1.0, size=(k, n)) * np.sqrt(3.0 / k)).astype(t),
            "bias": rng.uniform(-0.5, 0.5, size=n).astype(t),
        }

    def reference(
        self, inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str
    ) -> dict[str, np.ndarray]:
        x, w, b = (inputs[k].astype(np.float64) for k in ("x", "w", "bias"))
        m, n, k = shape["M"], shape["N"], shape["K"]
        out = gelu_tanh(x.reshape(m, k) @ w.reshape(k, n) + b)
        return {"out": out.astype(NUMPY_DTYPES[dtype])}

    def tolerance(self, dtype: str, shape: Shape) -> tuple[float, float]:
        return (1e-3, 1e-3) if dtype == "float32" else (2e-2, 2e-2)

    def block_work(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> BlockWork:
        size, k = itemsize(dtype), shape["K"]
        bm, bn, bk = tiling["baseM"], tiling["baseN"], tiling["baseK"]
        sm, sn = min(tiling["singleCoreM"], shape["M"]), min(tiling["singleCoreN"], shape["N"])
        a_reads, b_reads, mb, nb = cube.matmul_gm_reads(tiling, single_m=sm, single_n=sn, k=k)
        kt = ceil_div(k, bk)
        loads = (sm * k * a_reads + k * sn * b_reads) * size  # A and B into L1, by the cube
        gm = loads + (sn * mb + sm * sn) * size
        macs = (mb * bm) * (nb * bn) * (kt * bk)  # padded base blocks cost full cube cycles
        # Epilogue per C block: a bias Add per row, then GELU (~10 float ops) per epiRows chunk.
        chunks = ceil_div(bm, tiling["epiRows"])
        calls = mb * nb * (bm + chunks * (GELU_FLOPS + (dtype != "float32")))
        tiles = self.used_cores(tiling, shape)
        cores, cube_share = cube.mix_cores(tiles, target)
        return BlockWork(
            blocks=tiles,
            cores=cores,
            gm_bytes=gm,
            cube_macs=macs,
            vector_bytes=mb * nb * bm * bn * 4 * (GELU_FLOPS + 2),
            vector_calls=calls,
            stages=mb * nb,
            overlapped=tiling["dbL0C"] == 2,
            cube_share=cube_share,
            cube_gm_bytes=loads,
        )

    def matmul_flops(self, shape: Shape) -> int:
        return 2 * shape["M"] * shape["N"] * shape["K"]

    def traffic(self, shape: Shape, dtype: str) -> Traffic:
        m, n, k, size = shape["M"], shape["N"], shape["K"], itemsize(dtype)
        fused = (m * k + k * n + n + m * n) * size
        # Unfused: MatMul writes C; Add reads C and b and writes C'; Gelu reads C', writes Out.
        unfused = (m * k + k * n + m * n) * size + (2 * m * n + n) * size + 2 * m * n * size
        flops = 2 * m * n * k + m * n * (1 + GELU_FLOPS)
        return Traffic(fused_bytes=fused, unfused_bytes=unfused, flops=flops, unfused_kernels=3)


SPEC = LinearAddGelu()
