"""The op specs' analytic UB footprint against Huawei's memory planner, across the UB boundary."""

from __future__ import annotations

import numpy as np
import pytest

from tilewise.errors import BackendError, ConfigError
from tilewise.kernels.backends._ascend.plan_check import (
    check_plan,
    parse_verdict,
    plan_mlir,
    ub_plan,
)
from tilewise.kernels.ops import get_op, list_ops
from tilewise.kernels.ops._base import OpSpec
from tilewise.kernels.targets import get_target
from tilewise.types import Shape, Tiling

pytest.importorskip("ascendnpuir", reason="the ascend-ir extra is not installed")

TARGET = get_target("ascend910b1")
SHAPES = {
    "scale_relu_dropout": Shape({"N": 1 << 22}),
    "linear_add_gelu": Shape({"M": 2048, "N": 2048, "K": 1024}),
    "swiglu": Shape({"T": 2048, "I": 2752}),
    "swiglu_grad": Shape({"T": 2048, "I": 2752}),
    "layernorm_gelu": Shape({"R": 4096, "H": 1024}),
    "swiglu_mlp": Shape({"T": 512, "H": 1024, "I": 2752}),
    "conv_bias_leakyrelu": Shape(
        {"N": 8, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3, "stride": 1, "pad": 1}
    ),
}


def near_boundary(spec: OpSpec, shape: Shape, dtype: str, n: int) -> list[Tiling]:
    """Tilings whose UB footprint lies within ±12% of the usable UB, on both sides."""
    limit = TARGET.limits(mix=spec.mix)["ub"]
    tunables = spec.tunables(shape, dtype, TARGET)
    rng = np.random.default_rng(7)
    found: dict[bool, list[Tiling]] = {True: [], False: []}
    for _ in range(200_000):
        values = {t.name: int(rng.choice(t.values)) for t in tunables}
        if "tileLength" in values:  # elementwise ops: walk tile lengths in 16-element steps
            values["tileLength"] = int(rng.integers(2000, 40000)) // 16 * 16
        tiling = Tiling(values)
        ub = spec.footprint(tiling, shape, dtype, TARGET).ub
        if abs(ub - limit) <= 0.12 * limit:
            side = found[ub <= limit]
            if len(side) < n // 2 and tiling not in side:
                side.append(tiling)
        if all(len(v) >= n // 2 for v in found.values()):
            break
    assert all(found.values()), "no tilings on one side of the boundary"
    return found[True] + found[False]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("spec", list_ops(), ids=lambda s: s.name)
def test_analytic_footprint_agrees_with_the_compiler(spec: OpSpec, dtype: str) -> None:
    shape = SHAPES[spec.name]
    limit = TARGET.limits(mix=spec.mix)["ub"]
    tilings = near_boundary(spec, shape, dtype, 24)
    for tiling in tilings:
        analytic_fits = spec.footprint(tiling, shape, dtype, TARGET).ub <= limit
        verdict = check_plan(spec, tiling, shape, dtype, TARGET)
        assert (verdict.verdict == "fits") == analytic_fits, (dict(tiling), verdict)
        if verdict.verdict == "overflow":
            reserve = TARGET.ub - limit
            assert (
                verdict.required_bytes == spec.footprint(tiling, shape, dtype, TARGET).ub + reserve
            )
            assert verdict.available_bytes == TARGET.ub


def test_exact_boundary_of_the_elementwise_op() -> None:
    spec, shape = get_op("scale_relu_dropout"), SHAPES["scale_relu_dropout"]
    # float32, double-buffered: 28 B per element (x and y twice, hash, scratch, index) plus two
    # bit masks (keep, positive); tiles are multiples of 128. 6656 elements = 186368 B + 2 * 832 B
    # of bits = 188032 B fits in 188416 B; 6784 does not (its masks round up to 864 B each).
    fits = Tiling({"tileLength": 6656, "blockDim": 8, "bufferNum": 2})
    over = fits.replace(tileLength=6784)
    assert check_plan(spec, fits, shape, "float32", TARGET).verdict == "fits"
    verdict = check_plan(spec, over, shape, "float32", TARGET)
    assert verdict.verdict == "overflow" and verdict.required_bytes == 6784 * 28 + 2 * 864 + 8192


def test_plan_lists_every_buffer_once() -> None:
    spec, shape = get_op("linear_add_gelu"), SHAPES["linear_add_gelu"]
    tiling = spec.default_tiling(shape, "float16", TARGET)
    plan = ub_plan(spec, tiling, shape, "float16", TARGET)
    assert [b.name for b in plan] == [
        "cQueue",
        "biasBuf",
        "biasCastBuf",
        "outQueue[0]",
        "outQueue[1]",
        "api_reserved",
    ]
    text = plan_mlir(plan)
    assert text.count("memref.alloc()") == len(plan) and text.count("hivm.hir.load") == len(plan)


def test_verdict_parser() -> None:
    assert (
        parse_verdict(
            "error: ub overflow, requires 1573120 bits while 1572864 bits available!"
        ).required_bytes
        == 196640
    )
    assert (
        parse_verdict(
            "[NOTE] Ub overflow detected; retrying ... compilation then succeeded."
        ).verdict
        == "fallback"
    )
    assert parse_verdict("error: External hivmc run fails, returning module").verdict == "fits"
    with pytest.raises(BackendError, match="no verdict"):
        parse_verdict("segmentation fault")


def test_targets_the_compiler_does_not_know() -> None:
    spec = get_op("scale_relu_dropout")
    shape = Shape({"N": 4096})
    target = get_target("ascend310p3")
    with pytest.raises(ConfigError, match="no target Ascend310P3"):
        check_plan(spec, spec.default_tiling(shape, "float32", target), shape, "float32", target)
