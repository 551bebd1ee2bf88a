"""linear_add_gelu: Out = GELU_tanh(X·W + b), the Matmul + vector-epilogue pattern.

The cube computes one baseM×baseN block of X·W at a time into UB (float); the vector unit adds
the bias and applies GELU on that block, ``epiRows`` rows per pass, and copies it out, so the
pre-activation never reaches global memory. Tunables are the TCubeTiling fields a developer
sets by hand (base block, L1 steps and depths, L0C double buffering, the core split, the
iteration order) plus the epilogue's UB tile.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kernels.ops._base import (
    NUMPY_DTYPES,
    BlockWork,
    Buffer,
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
from kernels.ops._cube import cube_struct
from kernels.targets import TargetProfile
from tuner.types import Shape, Tiling

BASE_MN = (16, 32, 48, 64, 96, 128, 192, 256)
BASE_K = (8, 16, 32, 64, 128, 256)
CORE_SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24)
#: L0A/L0B double buffering, as the vendor tiling sets it.
DB_L0AB = 2
GELU_FLOPS = 10  # per element: cube, two multiplies, add, exp, add, divide ...


def c0(dtype: str) -> int:
    """Elements of the cube's K granule: 32 B."""
    return 32 // itemsize(dtype)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)
    return np.asarray(0.5 * x * (1.0 + np.tanh(inner)))


class LinearAddGelu(OpSpec):
    name = "linear_add_gelu"
    summary = "Out = GELU_tanh(X[M,K]·W[K,N] + b[N]); bias and GELU on the C block in UB"
    dims = ("M", "N", "K")
    entry = "linear_add_gelu"
    tiling_type = "LinearAddGeluTiling"
    kernel_file = "linear_add_gelu.cpp"
    mix = True

    def _single_core(self, extent: int, cores: int) -> tuple[int, ...]:
        return tuple(sorted({round_up(ceil_div(extent, s), 16) for s in CORE_SPLITS if s <= cores}))

    def runtime_tunables(
        self, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Tunable, ...]:
        cores = target.cube_cores
        return (
            Tunable("baseM", BASE_MN, "rows of the cube's base block (L0A/L0C)"),
            Tunable("baseN", BASE_MN, "columns of the cube's base block (L0B/L0C)"),
            Tunable("baseK", BASE_K, "depth of one cube step"),
            Tunable("stepM", (1, 2, 4), "A base blocks along M held in L1"),
            Tunable("stepN", (1, 2, 4), "B base blocks along N held in L1"),
            Tunable("depthA1", (1, 2, 4, 8), "A base blocks in L1 (stepM × stepKa)"),
            Tunable("depthB1", (1, 2, 4, 8), "B base blocks in L1 (stepN × stepKb)"),
            Tunable("dbL0C", (1, 2), "L0C double buffering"),
            Tunable("singleCoreM", self._single_core(shape["M"], cores), "rows per core"),
            Tunable("singleCoreN", self._single_core(shape["N"], cores), "columns per core"),
            Tunable("iterateOrder", (0, 1), "0: walk M first, 1: walk N first"),
            Tunable("epiRows", (1, 2, 4, 8, 16, 32, 64, 128, 256), "C rows per epilogue pass"),
        )

    def used_cores(self, tiling: Tiling, shape: Shape) -> int:
        return ceil_div(shape["M"], tiling["singleCoreM"]) * ceil_div(
            shape["N"], tiling["singleCoreN"]
        )

    def buffers(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Buffer, ...]:
        size = itemsize(dtype)
        bm, bn, bk = tiling["baseM"], tiling["baseN"], tiling["baseK"]
        plan = [
            Buffer("cQueue", "ub", align32(bm * bn * 4)),  # C block from the cube, float
            Buffer("biasBuf", "ub", align32(bn * 4)),  # bias of the current N block, float
        ]
        if dtype != "float32":
            plan.append(Buffer("biasCastBuf", "ub", align32(bn * size)))
        plan += [
            Buffer(f"outQueue[{i}]", "ub", align32(tiling["epiRows"] * bn * size)) for i in range(2)
        ]
        # The Matmul object: A and B tiles in L1, ping-pong L0A/L0B, L0C accumulators.
        plan += [
            Buffer("A1", "l1", tiling["depthA1"] * bm * bk * size),
            Buffer("B1", "l1", tiling["depthB1"] * bn * bk * size),
        ]
        plan += [Buffer(f"A2[{i}]", "l0a", bm * bk * size) for i in range(DB_L0AB)]
        plan += [Buffer(f"B2[{i}]", "l0b", bn * bk * size) for i in range(DB_L0AB)]
        plan += [Buffer(f"CO1[{i}]", "l0c", bm * bn * 4) for i in range(tiling["dbL0C"])]
        return tuple(plan)

    def rules(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> list[str]:
        reasons = []
        bm, bn, bk = tiling["baseM"], tiling["baseN"], tiling["baseK"]
        if bm % 16 or bn % 16:
            reasons.append(f"baseM {bm} and baseN {bn} must be multiples of 16")
        if bk % c0(dtype):
            reasons.append(f"baseK {bk} must be a multiple of {c0(dtype)} for {dtype}")
        if tiling["depthA1"] % tiling["stepM"]:
            reasons.append(f"depthA1 {tiling['depthA1']} is not a multiple of stepM")
        if tiling["depthB1"] % tiling["stepN"]:
            reasons.append(f"depthB1 {tiling['depthB1']} is not a multiple of stepN")
        used = self.used_cores(tiling, shape)
        if used > target.cube_cores:
            reasons.append(f"core split needs {used} cores, target has {target.cube_cores}")
        if bm > round_up(tiling["singleCoreM"], 16) or bn > round_up(tiling["singleCoreN"], 16):
            reasons.append("base block larger than the single-core block")
        if bk > round_up(shape["K"], c0(dtype)):
            reasons.append(f"baseK {bk} larger than K={shape['K']}")
        if tiling["epiRows"] > bm:
            reasons.append(f"epiRows {tiling['epiRows']} exceeds baseM {bm}")
        return reasons

    def default_tiling(self, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
        # In the spirit of matmul_tiling::MultiCoreMatmulTiling: use as many cube cores as the
        # split allows with the least work per core, start from the vendor's (128, 256, 64)
        # base block and shrink it until L0 fits, one A and one B block pair in L1.
        cores = target.cube_cores
        best: tuple[tuple[int, int], int, int] | None = None
        for sm in self._single_core(shape["M"], cores):
            for sn in self._single_core(shape["N"], cores):
                used = ceil_div(shape["M"], sm) * ceil_div(shape["N"], sn)
                if used > cores:
                    continue
                score = (-used, sm * sn + abs(sm - sn))
                if best is None or score < best[0]:
                    best = (score, sm, sn)
        assert best is not None  # a split of 1 × 1 always fits
        _, sm, sn = best
        size = itemsize(dtype)

        def largest(domain: tuple[int, ...], cap: int) -> int:
            return max([v for v in domain if v <= cap] or [domain[0]])

        bm = largest(BASE_MN, min(128, round_up(sm, 16)))
        bn = largest(BASE_MN, min(256, round_up(sn, 16)))
        bk = largest(BASE_K, min(64, round_up(shape["K"], c0(dtype))))
        while DB_L0AB * bn * bk * size > target.l0b or DB_L0AB * bm * bk * size > target.l0a:
            if bk > max(c0(dtype), 32):
                bk //= 2
            elif DB_L0AB * bn * bk * size > target.l0b:
                bn = largest(BASE_MN, bn - 16)
            else:
                bm = largest(BASE_MN, bm - 16)
        tiling = Tiling(
            {
                "baseM": bm,
                "baseN": bn,
                "baseK": bk,
                "stepM": 1,
                "stepN": 1,
                "depthA1": 2,
                "depthB1": 2,
                "dbL0C": 1,
                "singleCoreM": sm,
                "singleCoreN": sn,
                "iterateOrder": 0,
                "epiRows": 1,
            }
        )
        rows = 256
        while rows > 1:
            candidate = tiling.replace(epiRows=rows)
            if rows <= bm and self.check(candidate, shape, dtype, target).valid:
                return candidate
            rows //= 2
        return tiling

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
        cube = {
            "usedCoreNum": self.used_cores(tiling, shape),
            "M": m,
            "N": n,
            "Ka": k,
            "Kb": k,
            "singleCoreM": tiling["singleCoreM"],
            "singleCoreN": tiling["singleCoreN"],
            "singleCoreK": k,
            "baseM": tiling["baseM"],
            "baseN": tiling["baseN"],
            "baseK": tiling["baseK"],
            "depthA1": tiling["depthA1"],
            "depthB1": tiling["depthB1"],
            "stepM": tiling["stepM"],
            "stepN": tiling["stepN"],
            "isBias": 0,
            "transLength": 0,
            "iterateOrder": tiling["iterateOrder"],
            "shareMode": 0,
            "shareL1Size": 0,
            "shareL0CSize": 0,
            "shareUbSize": 0,
            "batchM": 1,
            "batchN": 1,
            "singleBatchM": 1,
            "singleBatchN": 1,
            "stepKa": max(1, tiling["depthA1"] // tiling["stepM"]),
            "stepKb": max(1, tiling["depthB1"] // tiling["stepN"]),
            "depthAL1CacheUB": 0,
            "depthBL1CacheUB": 0,
            "dbL0A": DB_L0AB,
            "dbL0B": DB_L0AB,
            "dbL0C": tiling["dbL0C"],
        }
        return (*cube_struct("cube", cube), StructField("epiRows", "i", tiling["epiRows"]))

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
        mb, nb, kt = ceil_div(sm, bm), ceil_div(sn, bn), ceil_div(k, bk)
        # L1 reuse: a matrix is read from GM once per core when all of its tiles that the walk
        # revisits fit in its L1 depth, else once per block of the other dimension.
        if tiling["iterateOrder"] == 0:  # M varies fastest: A's tiles are revisited per N block
            a_reads = 1 if tiling["depthA1"] >= mb * kt else nb
            b_reads = 1 if tiling["depthB1"] >= kt else mb
        else:
            a_reads = 1 if tiling["depthA1"] >= kt else nb
            b_reads = 1 if tiling["depthB1"] >= nb * kt else mb
        gm = (sm * k * a_reads + k * sn * b_reads + sn * mb + sm * sn) * size
        macs = (mb * bm) * (nb * bn) * (kt * bk)  # padded base blocks cost full cube cycles
        # Epilogue per C block: a bias Add per row, then GELU (~10 float ops) per epiRows chunk.
        chunks = ceil_div(bm, tiling["epiRows"])
        calls = mb * nb * (bm + chunks * (GELU_FLOPS + (dtype != "float32")))
        return BlockWork(
            blocks=self.used_cores(tiling, shape),
            cores=target.cube_cores,
            gm_bytes=gm,
            cube_macs=macs,
            vector_bytes=mb * nb * bm * bn * 4 * (GELU_FLOPS + 2),
            vector_calls=calls,
            stages=mb * nb,
            overlapped=tiling["dbL0C"] == 2,
        )

    def traffic(self, shape: Shape, dtype: str) -> Traffic:
        m, n, k, size = shape["M"], shape["N"], shape["K"], itemsize(dtype)
        fused = (m * k + k * n + n + m * n) * size
        # Unfused: MatMul writes C; Add reads C and b and writes C'; Gelu reads C', writes Out.
        unfused = (m * k + k * n + m * n) * size + (2 * m * n + n) * size + 2 * m * n * size
        flops = 2 * m * n * k + m * n * (1 + GELU_FLOPS)
        return Traffic(fused_bytes=fused, unfused_bytes=unfused, flops=flops, unfused_kernels=3)


SPEC = LinearAddGelu()
