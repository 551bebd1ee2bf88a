"""swiglu_mlp: Out = silu(X·Wg) ⊙ (X·Wu), two Matmul objects and a SwiGLU epilogue in UB.

Both Matmul objects share one TCubeTiling and walk the same C blocks in lockstep, so each
Iterate leaves a gate block and an up block in UB; SwiGLU combines them ``epiRows`` rows at a
time and only the product reaches GM. Each object holds its own L1 and L0 buffers (the twin
allocates them per object, as counted here), so a base block costs twice the L0 of
linear_add_gelu's. Tunables are linear_add_gelu's, one set for both matmuls.
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
from tilewise.kernels.ops.swiglu.spec import SWIGLU_FLOPS, SWIGLU_VECTOR_OPS, silu
from tilewise.kernels.targets import TargetProfile
from tilewise.types import Shape, Tiling

OBJECTS = 2  # Matmul objects: gate and up


class SwigluMlp(OpSpec):
    name = "swiglu_mlp"
    summary = "Out = silu(X[T,H]·Wg[H,I]) * (X·Wu[H,I]); two Matmuls, SwiGLU on the C blocks in UB"
    dims = ("T", "H", "I")
    examples = ("T=3,H=17,I=20", "T=33,H=70,I=130")
    benchmark_shapes = ("T=512,H=1024,I=2752",)
    entry = "swiglu_mlp"
    tiling_type = "SwigluMlpTiling"
    kernel_file = "swiglu_mlp.cpp"
    layout: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "x": ("T", "H"),
        "wg": ("H", "I"),
        "wu": ("H", "I"),
        "out": ("T", "I"),
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
                dtype, m=Bound("singleCoreM", align=16), n=Bound("singleCoreN", align=16), k=("H",)
            ),
            cube.split_tunable("singleCoreM", ("T",), shape["T"], cores, "rows (tokens) per core"),
            cube.split_tunable("singleCoreN", ("I",), shape["I"], cores, "columns per core"),
        )

    def used_cores(self, tiling: Tiling, shape: Shape) -> int:
        return ceil_div(shape["T"], tiling["singleCoreM"]) * ceil_div(
            shape["I"], tiling["singleCoreN"]
        )

    def buffers(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Buffer, ...]:
        bm, bn = tiling["baseM"], tiling["baseN"]
        plan = [
            Buffer("gQueue", "ub", align32(bm * bn * 4)),  # gate C block, float
            Buffer("uQueue", "ub", align32(bm * bn * 4)),  # up C block, float
        ]
        plan += [
            Buffer(f"outQueue[{i}]", "ub", align32(tiling["epiRows"] * bn * itemsize(dtype)))
            for i in range(2)
        ]
        if dtype == "float16":  # SwiGLU's float result before the cast
            plan.append(Buffer("swigluBuf", "ub", align32(tiling["epiRows"] * bn * 4)))
        plan += cube.matmul_buffers(tiling, dtype, "mmG.")
        plan += cube.matmul_buffers(tiling, dtype, "mmU.")
        return tuple(plan)

    def rules(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> list[str]:
        reasons = cube.cube_rules(
            tiling,
            dtype,
            single_m=tiling["singleCoreM"],
            single_n=tiling["singleCoreN"],
            k=shape["H"],
        )
        used = self.used_cores(tiling, shape)
        if used > target.vector_cores:
            reasons.append(
                f"core split needs {used} tiles, target has {target.vector_cores} vector cores"
            )
        return reasons

    def default_tiling(self, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
        # linear_add_gelu's heuristic: the split with the most cores and the least work each,
        # the vendor base block shrunk until both objects fit L0 and both C blocks fit UB, then
        # the largest epiRows.
        return cube.default_matmul(self, shape, ("T", "I", "H"), dtype, target, OBJECTS)

    def warm_defaults(self, dtype: str, target: TargetProfile) -> None:
        cube.warm_default_fits(self, ("T", "I", "H"), dtype, target, OBJECTS)

    def gm_args(self, shape: Shape, dtype: str) -> tuple[GmArg, ...]:
        t, h, i = shape["T"], shape["H"], shape["I"]
        return (
            GmArg("x", "in", t * h, dtype),
            GmArg("wg", "in", h * i, dtype),
            GmArg("wu", "in", h * i, dtype),
            GmArg("out", "out", t * i, dtype),
            GmArg("workspace", "workspace", 1024, "uint8"),
        )

    def tiling_struct(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[StructField, ...]:
        values = cube.cube_values(
            tiling,
            m=shape["T"],
            n=shape["I"],
            k=shape["H"],
            single_m=tiling["singleCoreM"],
            single_n=tiling["singleCoreN"],
            used=self.used_cores(tiling, shape),
        )
        fields = cube_struct("cube", values)
        return (*fields, StructField("epiRows", "i", tiling["epiRows"]))

    def block_dim(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> int:
        return self.used_cores(tiling, shape)

    def make_inputs(
        self, shape: Shape, dtype: str, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        t, h, i = shape["T"], shape["H"], shape["I"]
        tp, scale = NUMPY_DTYPES[dtype], np.sqrt(3.0 / h)  # X·W of unit variance
        return {
            "x": rng.uniform(-1.0, 1.0, size=(t, h)).astype(tp),
            "wg": (rng.uniform(-1.0, 1.0, size=(h, i)) * 2 * scale).astype(tp),
            "wu": (rng.uniform(-1.0, 1.0, size=(h, i)) * scale).astype(tp),
        }

    def reference(
        self, inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str
    ) -> dict[str, np.ndarray]:
        x, wg, wu = (inputs[k].astype(np.float64) for k in ("x", "wg", "wu"))
        t, h, i = shape["T"], shape["H"], shape["I"]
        x = x.reshape(t, h)
        out = silu(x @ wg.reshape(h, i)) * (x @ wu.reshape(h, i))
        return {"out": out.astype(NUMPY_DTYPES[dtype])}

    def tolerance(self, dtype: str, shape: Shape) -> tuple[float, float]:
        return (1e-3, 1e-3) if dtype == "float32" else (2e-2, 2e-2)

    def block_work(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> BlockWork:
        size, k = itemsize(dtype), shape["H"]
        sm, sn = min(tiling["singleCoreM"], shape["T"]), min(tiling["singleCoreN"], shape["I"])
        a_reads, b_reads, mb, nb = cube.matmul_gm_reads(tiling, single_m=sm, single_n=sn, k=k)
        bm, bn, bk = tiling["baseM"], tiling["baseN"], tiling["baseK"]
        # Each object reads X and its own W; the output is written once.
        loads = OBJECTS * (sm * k * a_reads + k * sn * b_reads) * size  # into L1, by the cube
        gm = loads + sm * sn * size
        macs = OBJECTS * (mb * bm) * (nb * bn) * (ceil_div(k, bk) * bk)
        chunks = ceil_div(bm, tiling["epiRows"])
        calls = mb * nb * chunks * (SWIGLU_VECTOR_OPS + (dtype != "float32"))
        tiles = self.used_cores(tiling, shape)
        cores, cube_share = cube.mix_cores(tiles, target)
        return BlockWork(
            blocks=tiles,
            cores=cores,
            gm_bytes=gm,
            cube_macs=macs,
            vector_bytes=mb * nb * bm * bn * 4 * (SWIGLU_VECTOR_OPS + 1),
            vector_calls=calls,
            stages=mb * nb,
            overlapped=tiling["dbL0C"] == 2,
            cube_share=cube_share,
            cube_gm_bytes=loads,
        )

    def matmul_flops(self, shape: Shape) -> int:
        return 4 * shape["T"] * shape["H"] * shape["I"]  # two T×H×I products

    def traffic(self, shape: Shape, dtype: str) -> Traffic:
        t, h, i, size = shape["T"], shape["H"], shape["I"], itemsize(dtype)
        fused = (t * h + 2 * h * i + t * i) * size
        # Unfused: two MatMuls write G and U; SwiGLU reads both and writes Out.
        unfused = 2 * (t * h + h * i + t * i) * size + 3 * t * i * size
        flops = 4 * t * h * i + SWIGLU_FLOPS * t * i
        return Traffic(fused_bytes=fused, unfused_bytes=unfused, flops=flops, unfused_kernels=3)


SPEC = SwigluMlp()
