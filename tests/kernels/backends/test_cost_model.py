"""The Ascend cost model: its terms behave as the hardware facts say (all figures predicted)."""

from __future__ import annotations

import pytest

from tilewise.kernels.backends._ascend.cost_model import LAUNCH_OVERHEAD_US, predict
from tilewise.kernels.ops import get_op, list_ops
from tilewise.kernels.targets import get_target
from tilewise.types import Shape, Tiling

TARGET = get_target("ascend910b1")


def test_fp32_cube_is_four_times_slower() -> None:
    spec, shape = get_op("linear_add_gelu"), Shape({"M": 1024, "N": 1024, "K": 1024})
    tiling = spec.default_tiling(shape, "float16", TARGET)
    half, single = (
        predict(spec, tiling, shape, "float16", TARGET),
        predict(spec, tiling, shape, "float32", TARGET),
    )
    assert single.cube_us == pytest.approx(4 * half.cube_us)
    assert single.mte_us == pytest.approx(2 * half.mte_us)


def test_double_buffering_overlaps_the_pipes() -> None:
    spec, shape = get_op("scale_relu_dropout"), Shape({"N": 1 << 22})
    single = Tiling({"tileLength": 4096, "blockDim": 48, "bufferNum": 1})
    double = single.replace(bufferNum=2)
    a, b = (
        predict(spec, single, shape, "float32", TARGET),
        predict(spec, double, shape, "float32", TARGET),
    )
    assert b.total_us < a.total_us
    assert a.total_us == pytest.approx(a.mte_us + a.vector_us + LAUNCH_OVERHEAD_US)


def test_waves_quantize_blocks_over_cores() -> None:
    spec, shape = get_op("scale_relu_dropout"), Shape({"N": 1 << 22})
    full = predict(
        spec, Tiling({"tileLength": 4096, "blockDim": 48, "bufferNum": 2}), shape, "float32", TARGET
    )
    assert full.waves == 1
    small = get_target("ascend910b4")  # 40 vector cores: 48 blocks take two waves
    assert (
        predict(
            spec,
            Tiling({"tileLength": 4096, "blockDim": 48, "bufferNum": 2}),
            shape,
            "float32",
            small,
        ).waves
        == 2
    )


def test_tiny_tiles_pay_issue_cost() -> None:
    spec, shape = get_op("scale_relu_dropout"), Shape({"N": 1 << 22})
    tiny = predict(
        spec, Tiling({"tileLength": 256, "blockDim": 48, "bufferNum": 2}), shape, "float32", TARGET
    )
    big = predict(
        spec, Tiling({"tileLength": 4096, "blockDim": 48, "bufferNum": 2}), shape, "float32", TARGET
    )
    assert tiny.vector_us > big.vector_us and tiny.mte_us == pytest.approx(big.mte_us)


def test_l1_reuse_cuts_matmul_traffic() -> None:
    spec, shape = get_op("linear_add_gelu"), Shape({"M": 2048, "N": 2048, "K": 256})
    # Four M blocks per core: each B tile held in L1 serves the next M blocks.
    base = spec.default_tiling(shape, "float16", TARGET).replace(
        singleCoreM=512, singleCoreN=512, depthA1=1, depthB1=1, stepM=1, stepN=1
    )
    reused = base.replace(depthB1=8, stepN=1)
    assert (
        predict(spec, reused, shape, "float16", TARGET).mte_us
        < predict(spec, base, shape, "float16", TARGET).mte_us
    )


def test_prediction_is_labelled() -> None:
    spec, shape = get_op("scale_relu_dropout"), Shape({"N": 4096})
    out = predict(
        spec, spec.default_tiling(shape, "float32", TARGET), shape, "float32", TARGET
    ).to_dict()
    assert out["label"] == "predicted" and out["predicted_us"] > 0


#: Every op at its largest benchmark shape (OpSpec.benchmark_shapes).
BENCHMARK = {spec.name: spec.benchmark_shapes[-1] for spec in list_ops()}


@pytest.mark.parametrize("op", sorted(BENCHMARK))
def test_every_op_has_a_cost_model(op: str) -> None:
    spec = get_op(op)
    shape = spec.validate_shape(Shape.parse(BENCHMARK[op]))
    tiling = spec.default_tiling(shape, "float16", TARGET)
    out = predict(spec, tiling, shape, "float16", TARGET)
    assert out.total_us > LAUNCH_OVERHEAD_US and out.waves == 1
    assert (out.cube_us > 0) == spec.mix and out.mte_us > 0 and out.vector_us > 0
    if op == "swiglu":  # 3 bytes moved per ~5 vector ops: memory-bound
        assert out.bound == "memory", out


def test_split_rows_cost_more_traffic() -> None:
    spec, shape = get_op("layernorm_gelu"), Shape({"R": 4096, "H": 1024})
    whole = Tiling({"rowsPerTile": 8, "hTile": 1024, "blockDim": 48, "bufferNum": 2})
    split = whole.replace(rowsPerTile=1, hTile=512)
    assert (
        predict(spec, split, shape, "float32", TARGET).mte_us
        > predict(spec, whole, shape, "float32", TARGET).mte_us
    )


def test_a_mix_launch_shares_each_ai_core_s_cube_and_its_loads_between_two_tiles() -> None:
    """48 tiles on a 910B1: one wave over the 48 vector cores, each AI core's cube (and its
    loads of A and B into L1) serving two tiles in turn."""
    spec, shape = get_op("linear_add_gelu"), Shape({"M": 1024, "N": 1024, "K": 1024})
    tiling = spec.default_tiling(shape, "float16", TARGET)
    work = spec.block_work(tiling, shape, "float16", TARGET)
    assert (work.blocks, work.cores, work.cube_share) == (48, 48, 2)
    assert 0 < work.cube_gm_bytes < work.gm_bytes
    out = predict(spec, tiling, shape, "float16", TARGET)
    assert out.waves == 1
    cycles = (work.gm_bytes + work.cube_gm_bytes) / TARGET.ddr_rate
    assert out.mte_us == pytest.approx(cycles / TARGET.freq_mhz)
