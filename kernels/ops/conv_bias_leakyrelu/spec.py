"""conv_bias_leakyrelu: Out = LeakyReLU_a(Conv2D(X, W, stride, pad) + b), NCHW, im2col + Matmul.

The slope a is the parameter ``negative_slope`` (0.1 unless given; 0 makes the epilogue a
ReLU): the tiling struct's ``alpha``, filled at launch, so one tiling serves every slope.

Per image, ``out[n]`` (K × OH·OW) is ``W`` (K × C·R·S, the weight as stored) times ``col[n]``
(C·R·S × OH·OW), which is already NCHW. Each block owns a range of ``singleCoreN`` output pixels
of every image and all K output channels: per image it writes its own columns of ``col`` to a
private region of the GM workspace (im2col phase), then runs the Matmul over them with the bias
add and LeakyReLU on each C block in UB before copy-out.

Why im2col through a GM workspace, and why private regions: the Matmul API reads B from GM (the
only B position the twin supports, and the layout the cube's own tiling expects), and a region
written and read by the same block needs no cross-core synchronisation — SyncAll between an
im2col phase and a matmul phase would serialise every core and the twin (one thread per core)
could not honour it. The cost is the col round trip through GM (C·R·S·OH·OW elements per image
written and read once), which ``traffic`` counts. The im2col itself gathers in UB: per
``colTile`` pixels the byte offsets of every (r, s) tap are computed once, then per channel the
touched input rows are loaded and R·S rows of col gathered (``Gather``) and written with one
strided copy. Padding taps read a zero slot after the window.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from tilewise.errors import InputError
from tilewise.kernels.ops import _matmul_common as cube
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
from tilewise.kernels.ops._cube import cube_struct
from tilewise.kernels.ops._matmul_common import CORE_SPLITS
from tilewise.kernels.targets import TargetProfile
from tilewise.types import Shape, Tiling

#: The default of ``negative_slope``.
ALPHA = 0.1
COL_TILES = (16, 32, 64, 128, 256, 512)
ZERO_SLOT = 16
SYS_WORKSPACE = 1024
MAX_BLOCK_COUNT = 4095  # DataCopyPad blockCount: one row of col per (r, s) tap


def out_size(shape: Mapping[str, int]) -> tuple[int, int]:
    oh = (shape["H"] + 2 * shape["pad"] - shape["R"]) // shape["stride"] + 1
    ow = (shape["W"] + 2 * shape["pad"] - shape["S"]) // shape["stride"] + 1
    return oh, ow


def conv2d(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """NCHW conv in the dtype of x: [N, C, H, W] * [K, C, R, S] -> [N, K, OH, OW]."""
    r, s = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (r, s), axis=(2, 3))[
        :, :, ::stride, ::stride
    ]
    return np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)


class ConvBiasLeakyRelu(OpSpec):
    name = "conv_bias_leakyrelu"
    summary = "Out = LeakyReLU(Conv2D(X[N,C,H,W], W[K,C,R,S]) + b[K]); im2col + Matmul + epilogue"
    dims = ("N", "C", "H", "W", "K", "R", "S", "stride", "pad")
    examples = (
        "N=1,C=3,H=7,W=7,K=5,R=3,S=3,stride=2,pad=1",
        "N=2,C=5,H=13,W=11,K=20,R=3,S=2,stride=1,pad=0",
    )
    benchmark_shapes = ("N=8,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1",)
    dim_floors: ClassVar[Mapping[str, int]] = {"pad": 0}
    entry = "conv_bias_leakyrelu"
    tiling_type = "ConvBiasLeakyReluTiling"
    kernel_file = "conv_bias_leakyrelu.cpp"
    #: The weight as torch holds it, [K, C, R, S] (the kernel reads it as [K, C·R·S]).
    layout: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "x": ("N", "C", "H", "W"),
        "w": ("K", "C", "R", "S"),
        "bias": ("K",),
        "out": ("N", "K", "OH", "OW"),
    }
    attributes = ("stride", "pad")
    parameters = (
        Parameter("negative_slope", ALPHA, "alpha", "LeakyReLU's slope below 0; 0 is a ReLU"),
    )
    c_extents: ClassVar[Mapping[str, str]] = {
        "OH": "(H + 2 * pad - R) / stride + 1",
        "OW": "(W + 2 * pad - S) / stride + 1",
    }
    mix = True

    def validate_shape(self, shape: Mapping[str, int], *, max_elements: int | None = None) -> Shape:
        result = super().validate_shape(shape)
        oh, ow = out_size(result)
        if oh < 1 or ow < 1:
            raise InputError(
                f"{self.name}: output size {oh}x{ow} for H={result['H']}, W={result['W']}, "
                f"R={result['R']}, S={result['S']}, pad={result['pad']}: the filter must fit"
            )
        if max_elements is not None:
            # Only now: the tensor sizes divide by the output pixels, zero for a filter that does
            # not fit.
            super().validate_shape(result, max_elements=max_elements)
        return result

    # -- geometry ------------------------------------------------------------------------------
    def extents(self, shape: Shape) -> Mapping[str, int]:
        oh, ow = out_size(shape)
        return {**shape, "OH": oh, "OW": ow}

    @staticmethod
    def _pixels(shape: Shape) -> int:
        oh, ow = out_size(shape)
        return oh * ow

    @staticmethod
    def _crs(shape: Shape) -> int:
        return shape["C"] * shape["R"] * shape["S"]

    @staticmethod
    def _win_rows(shape: Shape, col_tile: int) -> int:
        """Input rows a run of col_tile consecutive output pixels can touch."""
        oh, ow = out_size(shape)
        span = min(oh, (col_tile + ow - 2) // ow + 1)
        return min(shape["H"], (span - 1) * shape["stride"] + shape["R"])

    def _max_cols(self, shape: Shape) -> int:
        """The most col columns any core split writes: sizes the workspace."""
        p = self._pixels(shape)
        return max(ceil_div(p, sn) * sn for sn in cube.single_core(p, max(CORE_SPLITS)))

    def used_cores(self, tiling: Tiling, shape: Shape) -> int:
        return ceil_div(self._pixels(shape), tiling["singleCoreN"])

    # -- the search space ----------------------------------------------------------------------
    def runtime_tunables(
        self, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Tunable, ...]:
        # A core's C block is all K output channels by its pixels; an im2col pass stays within
        # the core's pixels (``rules``).
        pixels = ("OH", "OW")
        return (
            *cube.cube_tunables(
                dtype,
                m=Bound(extent=("K",), align=16),
                n=Bound("singleCoreN", align=16),
                k=("C", "R", "S"),
            ),
            cube.split_tunable(
                "singleCoreN",
                pixels,
                self._pixels(shape),
                target.vector_cores,  # a tile per vector core (see linear_add_gelu)
                "output pixels per core",
            ),
            Tunable(
                "colTile",
                COL_TILES,
                "output pixels per im2col pass",
                carry=Carry(
                    "cap", bounds=(Bound("singleCoreN", align=16), Bound(extent=pixels, align=16))
                ),
            ),
        )

    def buffers(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Buffer, ...]:
        size, taps, k = itemsize(dtype), shape["R"] * shape["S"], shape["K"]
        col_tile, bm, bn = tiling["colTile"], tiling["baseM"], tiling["baseN"]
        window = round_up(self._win_rows(shape, col_tile) * shape["W"], ZERO_SLOT) + ZERO_SLOT
        plan = [Buffer(f"winQueue[{i}]", "ub", align32(window * size)) for i in range(2)]
        plan += [Buffer(f"colQueue[{i}]", "ub", align32(taps * col_tile * size)) for i in range(2)]
        plan += [
            Buffer("offBuf", "ub", align32(taps * col_tile * 4)),
            Buffer("cQueue", "ub", align32(bm * bn * 4)),
            Buffer("biasBuf", "ub", align32(k * 4)),
        ]
        if dtype != "float32":
            plan.append(Buffer("biasCastBuf", "ub", align32(k * size)))
        plan += [
            Buffer(f"outQueue[{i}]", "ub", align32(tiling["epiRows"] * bn * size)) for i in range(2)
        ]
        plan += cube.matmul_buffers(tiling, dtype)
        return tuple(plan)

    def rules(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> list[str]:
        sn, p = tiling["singleCoreN"], self._pixels(shape)
        reasons = cube.cube_rules(
            tiling, dtype, single_m=shape["K"], single_n=sn, k=self._crs(shape)
        )
        used = self.used_cores(tiling, shape)
        if used > target.vector_cores:
            reasons.append(
                f"core split needs {used} tiles, target has {target.vector_cores} vector cores"
            )
        if used * sn > self._max_cols(shape):
            reasons.append(f"singleCoreN {sn} needs more col workspace than gm_args reserves")
        if sn % 16:
            reasons.append(f"singleCoreN {sn} is not a multiple of 16")
        col_tile = tiling["colTile"]
        if col_tile % 16:
            reasons.append(f"colTile {col_tile} is not a multiple of 16")
        elif col_tile > round_up(min(sn, p), 16):
            reasons.append(f"colTile {col_tile} exceeds the pixels of a core")
        if shape["R"] * shape["S"] > MAX_BLOCK_COUNT:
            reasons.append(f"R*S above {MAX_BLOCK_COUNT} rows per col copy")
        return reasons

    def default_tiling(self, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
        # The most cores the pixel split allows, the vendor base block shrunk to fit L0, then the
        # largest im2col pass and epilogue chunk that fit UB.
        p = self._pixels(shape)
        domain = cube.single_core(p, target.vector_cores)
        sn = min(v for v in domain if ceil_div(p, v) <= target.vector_cores)
        base = cube.default_base(shape["K"], sn, self._crs(shape), dtype, target)
        tiling = Tiling.of_ints({**base, "singleCoreN": sn, "colTile": COL_TILES[0]})
        col_tiles = tuple({"colTile": c} for c in sorted(COL_TILES, reverse=True))
        return cube.fit_epilogue(tiling, lambda t: self.valid(t, shape, dtype, target), col_tiles)

    # -- running -------------------------------------------------------------------------------
    def gm_args(self, shape: Shape, dtype: str) -> tuple[GmArg, ...]:
        n, c, k = shape["N"], shape["C"], shape["K"]
        col_bytes = self._crs(shape) * self._max_cols(shape) * itemsize(dtype)
        return (
            GmArg("x", "in", n * c * shape["H"] * shape["W"], dtype),
            GmArg("w", "in", k * self._crs(shape), dtype),
            GmArg("bias", "in", k, dtype),
            GmArg("out", "out", n * k * self._pixels(shape), dtype),
            GmArg("workspace", "workspace", SYS_WORKSPACE + col_bytes, "uint8"),
        )

    def tiling_struct(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[StructField, ...]:
        sn, k = tiling["singleCoreN"], shape["K"]
        values = cube.cube_values(
            tiling,
            m=k,
            n=sn,
            k=self._crs(shape),
            single_m=k,
            single_n=sn,
            used=self.used_cores(tiling, shape),
        )
        fields = cube_struct("cube", values)
        oh, ow = out_size(shape)
        ints = {
            "batch": shape["N"],
            "channels": shape["C"],
            "height": shape["H"],
            "width": shape["W"],
            "kernelH": shape["R"],
            "kernelW": shape["S"],
            "stride": shape["stride"],
            "pad": shape["pad"],
            "outH": oh,
            "outW": ow,
            "colTile": tiling["colTile"],
            "winRows": self._win_rows(shape, tiling["colTile"]),
            "epiRows": tiling["epiRows"],
        }
        return (
            *fields,
            *(StructField(name, "i", value) for name, value in ints.items()),
            StructField("alpha", "f", ALPHA),
        )

    def block_dim(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> int:
        return self.used_cores(tiling, shape)

    def make_inputs(
        self, shape: Shape, dtype: str, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        n, c, k, t = shape["N"], shape["C"], shape["K"], NUMPY_DTYPES[dtype]
        crs = self._crs(shape)
        return {
            "x": rng.uniform(-1.0, 1.0, size=(n, c, shape["H"], shape["W"])).astype(t),
            "w": (rng.uniform(-1.0, 1.0, size=(k, crs)) * np.sqrt(3.0 / crs)).astype(t),
            "bias": rng.uniform(-0.5, 0.5, size=k).astype(t),
        }

    def reference(
        self,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        *,
        negative_slope: float = ALPHA,
    ) -> dict[str, np.ndarray]:
        n, c, k = shape["N"], shape["C"], shape["K"]
        x = inputs["x"].astype(np.float64).reshape(n, c, shape["H"], shape["W"])
        w = inputs["w"].astype(np.float64).reshape(k, c, shape["R"], shape["S"])
        y = conv2d(x, w, shape["stride"], shape["pad"])
        y = y + inputs["bias"].astype(np.float64)[None, :, None, None]
        slope = float(np.float32(negative_slope))  # as the kernel's float field holds it
        return {"out": np.where(y >= 0, y, slope * y).astype(NUMPY_DTYPES[dtype])}

    def tolerance(self, dtype: str, shape: Shape) -> tuple[float, float]:
        return (1e-3, 1e-3) if dtype == "float32" else (2e-2, 2e-2)

    # -- analysis ------------------------------------------------------------------------------
    def block_work(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> BlockWork:
        size, crs, k, n = itemsize(dtype), self._crs(shape), shape["K"], shape["N"]
        sn = min(tiling["singleCoreN"], self._pixels(shape))
        taps, col_tile = shape["R"] * shape["S"], tiling["colTile"]
        chunks = ceil_div(sn, col_tile)
        a_reads, b_reads, mb, nb = cube.matmul_gm_reads(tiling, single_m=k, single_n=sn, k=crs)
        bm, bn, bk = tiling["baseM"], tiling["baseN"], tiling["baseK"]
        window = self._win_rows(shape, col_tile) * shape["W"]
        im2col = chunks * shape["C"] * window * size + 2 * crs * sn * size  # x rows, col out+in
        matmul = k * crs * a_reads + crs * sn * (b_reads - 1) + k * sn
        # What the cube loads into L1: W, and col at each of its reads (the first is im2col's "in").
        loads = n * (k * crs * a_reads + crs * sn * b_reads) * size
        epi_chunks = ceil_div(bm, tiling["epiRows"])
        calls = chunks * shape["C"] * (taps + 1) + mb * nb * (bm + epi_chunks * 2)
        tiles = self.used_cores(tiling, shape)
        cores, cube_share = cube.mix_cores(tiles, target)
        return BlockWork(
            blocks=tiles,
            cores=cores,
            gm_bytes=n * (im2col + matmul * size),
            cube_macs=n * (mb * bm) * (nb * bn) * (ceil_div(crs, bk) * bk),
            vector_bytes=n * (crs * sn * size + mb * nb * bm * bn * 4 * 3),
            vector_calls=n * calls,
            stages=n * mb * nb,
            overlapped=tiling["dbL0C"] == 2,
            cube_share=cube_share,
            cube_gm_bytes=loads,
        )

    def matmul_flops(self, shape: Shape) -> int:
        oh, ow = out_size(shape)
        crs = shape["C"] * shape["R"] * shape["S"]
        return 2 * shape["N"] * shape["K"] * oh * ow * crs

    def traffic(self, shape: Shape, dtype: str) -> Traffic:
        size, n, k, crs = itemsize(dtype), shape["N"], shape["K"], self._crs(shape)
        p = self._pixels(shape)
        x = n * shape["C"] * shape["H"] * shape["W"]
        col, out = n * crs * p, n * k * p
        fused = (x + k * crs + k + out + 2 * col) * size  # col goes through GM once
        # Unfused: Im2col (x -> col), MatMul (w, col -> C), Add (C, b -> C'), LeakyRelu (C' -> out).
        unfused = (x + col + k * crs + col + out + out + k + out + out + out) * size
        flops = 2 * n * k * p * crs + 2 * out
        return Traffic(fused_bytes=fused, unfused_bytes=unfused, flops=flops, unfused_kernels=4)


SPEC = ConvBiasLeakyRelu()
