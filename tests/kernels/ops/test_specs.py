"""Op specs: validation, static checks and defaults — no compiler needed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kernels.ops import get_op, list_ops
from kernels.ops.linear_add_gelu.spec import gelu_tanh
from kernels.ops.scale_relu_dropout.spec import DROP_P, keep_mask
from kernels.targets import BUILTIN, get_target, twin_target
from tuner.errors import InputError
from tuner.types import Shape, Tiling

SHAPES = {
    "linear_add_gelu": [
        "M=1,N=17,K=3",
        "M=33,N=40,K=70",
        "M=1024,N=1024,K=1024",
        "M=128,N=4096,K=4096",
    ],
    "scale_relu_dropout": ["N=1", "N=1000", "N=1000003", "N=16777216"],
}


@pytest.mark.parametrize("target", ["cpu-twin", *BUILTIN])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(
    ("op", "shape"), [(op, s) for op, shapes in SHAPES.items() for s in shapes]
)
def test_default_tiling_is_valid_and_in_the_space(
    op: str, shape: str, dtype: str, target: str
) -> None:
    spec, profile = get_op(op), get_target(target)
    parsed = spec.validate_shape(Shape.parse(shape))
    default = spec.default_tiling(parsed, dtype, profile)
    check = spec.check(default, parsed, dtype, profile)
    assert check.valid, check.reasons
    for tunable in spec.tunables(parsed, dtype, profile):
        assert default[tunable.name] in tunable.values, tunable.name


def test_unknown_op_names_the_known_ones() -> None:
    with pytest.raises(InputError, match=r"unknown op 'matmul'.*linear_add_gelu"):
        get_op("matmul")


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ({"M": 4, "N": 4}, "missing dim K"),
        ({"M": 4, "N": 4, "K": 4, "Q": 1}, "unknown dim Q"),
        ({"M": 0, "N": 4, "K": 4}, "M must be positive"),
        ({"M": -3, "N": 4, "K": 4}, "M must be positive"),
        ({"M": 1 << 40, "N": 4, "K": 4}, "exceeds the limit"),
    ],
)
def test_bad_shapes_are_named(shape: dict[str, int], message: str) -> None:
    with pytest.raises(InputError, match=message):
        get_op("linear_add_gelu").validate_shape(shape)


def test_absurd_tensor_is_refused() -> None:
    with pytest.raises(InputError, match="elements, above the limit"):
        get_op("linear_add_gelu").validate_shape(
            {"M": 1 << 20, "N": 1 << 20, "K": 8}, max_elements=1 << 28
        )


def test_unknown_dtype() -> None:
    with pytest.raises(InputError, match="unknown dtype 'int4'"):
        get_op("scale_relu_dropout").validate_dtype("int4")


def test_ub_overflow_is_reported_with_sizes() -> None:
    spec, target = get_op("scale_relu_dropout"), twin_target()
    shape = Shape({"N": 1 << 20})
    tiling = Tiling({"tileLength": 16384, "blockDim": 8, "bufferNum": 2})
    check = spec.check(tiling, shape, "float32", target)
    assert not check.valid
    # 2 queues x 2 buffers x 64 KiB + 2 scratch x 64 KiB = 384 KiB > 184 KiB usable
    assert check.footprint.ub == 393216
    assert "UB overflow: needs 393216 B, limit 188416 B" in check.reasons
    assert check.constraints["ub"] > 0


def test_cube_limits_follow_the_vendor_table() -> None:
    spec, target = get_op("linear_add_gelu"), twin_target()
    shape = Shape({"M": 1024, "N": 1024, "K": 1024})
    base = spec.default_tiling(shape, "float32", target)
    # fp32 L0B: 2 x 256 x 64 x 4 B = 128 KiB > 64 KiB
    wide = base.replace(baseN=256, baseK=64)
    reasons = spec.check(wide, shape, "float32", target).reasons
    assert any(r.startswith("L0B overflow: needs 131072 B, limit 65536 B") for r in reasons)
    # L0C: dbL0C 2 x 256 x 256 x 4 B = 512 KiB > 128 KiB
    big = base.replace(baseM=256, baseN=256, dbL0C=2, baseK=16)
    assert any(
        r.startswith("L0C overflow") for r in spec.check(big, shape, "float32", target).reasons
    )
    odd = base.replace(depthA1=2, stepM=4)
    assert (
        "depthA1 2 is not a multiple of stepM" in spec.check(odd, shape, "float32", target).reasons
    )
    too_many = base.replace(
        singleCoreM=min(
            v
            for t in spec.tunables(shape, "float32", target)
            if t.name == "singleCoreM"
            for v in t.values
        ),
        singleCoreN=min(
            v
            for t in spec.tunables(shape, "float32", target)
            if t.name == "singleCoreN"
            for v in t.values
        ),
    )
    assert any("cores" in r for r in spec.check(too_many, shape, "float32", target).reasons)


def test_tiling_fields_must_match_the_tunables() -> None:
    spec, target = get_op("scale_relu_dropout"), twin_target()
    with pytest.raises(InputError, match="missing bufferNum; unknown tile"):
        spec.check(
            Tiling({"tileLength": 256, "blockDim": 1, "tile": 3}),
            Shape({"N": 10}),
            "float32",
            target,
        )


def test_a_good_share_of_the_matmul_space_is_infeasible() -> None:
    # The static checks are what keeps the search cheap: count how much they prune.
    spec, target = get_op("linear_add_gelu"), twin_target()
    shape = Shape({"M": 512, "N": 512, "K": 512})
    tunables = spec.tunables(shape, "float32", target)
    rng = np.random.default_rng(0)
    valid = 0
    for _ in range(2000):
        tiling = Tiling({t.name: int(rng.choice(t.values)) for t in tunables})
        valid += spec.check(tiling, shape, "float32", target).valid
    assert 0 < valid < 2000 * 0.5


def test_keep_mask_is_binary_with_the_right_rate() -> None:
    mask = keep_mask(1 << 20, seed=7, p=DROP_P)
    assert set(np.unique(mask)) == {0.0, 1.0}
    assert abs(1.0 - mask.mean() - DROP_P) < 0.003
    assert not np.array_equal(mask, keep_mask(1 << 20, seed=8, p=DROP_P))


def test_gelu_tanh_matches_the_sigmoid_form() -> None:
    x = np.linspace(-6, 6, 1001)
    sigmoid_form = x / (1 + np.exp(-1.5957691 * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(gelu_tanh(x), sigmoid_form, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("spec", list_ops(), ids=lambda s: s.name)
def test_struct_packs_four_bytes_per_field(spec) -> None:  # type: ignore[no-untyped-def]
    target = twin_target()
    shape = Shape({d: 64 for d in spec.dims})
    tiling = spec.default_tiling(shape, "float32", target)
    fields = spec.tiling_struct(tiling, shape, "float32", target)
    assert len(spec.pack_tiling(tiling, shape, "float32", target)) == 4 * len(fields)
    assert len({f.name for f in fields}) == len(fields)


@pytest.mark.parametrize("spec", list_ops(), ids=lambda s: s.name)
def test_fusion_saves_traffic(spec) -> None:  # type: ignore[no-untyped-def]
    for dims in itertools.islice(itertools.product((64, 1000), repeat=len(spec.dims)), 4):
        traffic = spec.traffic(Shape(dict(zip(spec.dims, dims, strict=True))), "float32")
        assert traffic.fused_bytes < traffic.unfused_bytes
        assert traffic.flops > 0


def test_version_changes_with_the_kernel_source(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from kernels.ops.scale_relu_dropout.spec import ScaleReluDropout

    original = ScaleReluDropout().version
    copy = tmp_path / "scale_relu_dropout.cpp"
    copy.write_text(get_op("scale_relu_dropout").kernel_path.read_text() + "\n// changed\n")
    monkeypatch.setattr(ScaleReluDropout, "kernel_path", property(lambda self: copy))
    assert ScaleReluDropout().version != original
