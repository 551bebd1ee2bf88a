"""Op specs: validation, static checks and defaults — no compiler needed."""

from __future__ import annotations

import inspect
import itertools
import struct

import numpy as np
import pytest

from tilewise.errors import InputError
from tilewise.kernels.ops import get_op, list_ops
from tilewise.kernels.ops.linear_add_gelu.spec import gelu_tanh
from tilewise.kernels.ops.scale_relu_dropout.spec import DROP_P, SEED, keep_mask, seed_mix
from tilewise.kernels.targets import BUILTIN, get_target, twin_target
from tilewise.types import Shape, Tiling

#: Each op's example and benchmark shapes (OpSpec): a new op is swept without an edit here.
SHAPES = {spec.name: [*spec.examples, *spec.benchmark_shapes] for spec in list_ops()}


#: The ops _emulate writes out, at a shape the benchmark runs (OpSpec.benchmark_shapes): the
#: reference and tolerance must hold there too.
BENCHMARK = {
    op: get_op(op).benchmark_shapes[-1]
    for op in ("swiglu", "swiglu_mlp", "layernorm_gelu", "conv_bias_leakyrelu")
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
    # 2 queues x 2 buffers x 64 KiB + 3 scratch x 64 KiB + 2 x 2 KiB of bits > 184 KiB usable
    assert check.footprint.ub == 462848
    assert "UB overflow: needs 462848 B, limit 188416 B" in check.reasons
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


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_valid_agrees_with_check(op: str) -> None:
    # valid() is check().valid with an early exit (rules first): the same verdict on random
    # tilings of every shape, each also asked for the other shapes (what the runtime's nearest
    # search does with a neighbour's tiling), on the twin and on an NPU profile.
    spec, rng = get_op(op), np.random.default_rng(7)
    shapes = [spec.validate_shape(Shape.parse(s)) for s in SHAPES[op]]
    verdicts = set()
    for target in (twin_target(), get_target("ascend910b4")):
        for shape, asked in itertools.product(shapes, shapes):
            tunables = spec.tunables(shape, "float32", target)
            for _ in range(40):
                tiling = Tiling({t.name: int(rng.choice(t.values)) for t in tunables})
                expected = spec.check(tiling, asked, "float32", target).valid
                assert spec.valid(tiling, asked, "float32", target) == expected, (shape, asked)
                verdicts.add(expected)
    assert verdicts == {True, False}


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_tunable_names_are_the_same_for_every_workload(op: str) -> None:
    # check() and valid() compare a tiling's fields with the names they saw first.
    spec = get_op(op)
    names = {
        frozenset(
            t.name for t in spec.tunables(spec.validate_shape(Shape.parse(s)), d, get_target(t))
        )
        for s in SHAPES[op]
        for d in spec.dtypes
        for t in ("cpu-twin", *BUILTIN)
    }
    assert len(names) == 1, names


def test_valid_names_missing_fields() -> None:
    spec, shape = get_op("swiglu"), Shape({"T": 4, "I": 64})
    with pytest.raises(InputError, match="missing bufferNum"):
        spec.valid(Tiling({"tileLength": 64, "blockDim": 1}), shape, "float32", twin_target())


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


def _serial_chi2(drop: np.ndarray, p: float, k: int) -> float:
    """Chi-square per degree of freedom of the 2^k patterns of k consecutive drop bits against
    independent Bernoulli(p) bits; about 1 for a sound generator."""
    n = drop.size - k + 1
    code = np.zeros(n, dtype=np.int64)
    for j in range(k):
        code = 2 * code + drop[j : j + n]
    observed = np.bincount(code, minlength=2**k)
    ones = np.array([bin(c).count("1") for c in range(2**k)])
    expected = n * p**ones * (1 - p) ** (k - ones)
    return float(((observed - expected) ** 2 / expected).sum() / (2**k - 1))


@pytest.mark.parametrize("seed", [7, 20260522])
def test_keep_mask_bits_are_serially_independent(seed: int) -> None:
    # Neighbouring elements must not share a fate: a multiply-and-add hash of the index had
    # never dropped two neighbours and failed every window below by orders of magnitude.
    n = 1 << 20
    for p, windows in ((DROP_P, (2, 3)), (0.5, (2, 6, 12))):
        drop = (keep_mask(n, seed=seed, p=p) == 0).astype(np.int64)
        for k in windows:
            assert _serial_chi2(drop, p, k) < 2.0, (p, k)
    drop = keep_mask(n, seed=seed, p=DROP_P) == 0
    for lag in (1, 2, 64, 1024, 65536):
        both = (drop[lag:] & drop[:-lag]).mean()
        assert abs(both / DROP_P**2 - 1) < 0.1, lag


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
def test_each_parameter_fills_fields_of_the_struct_and_is_a_keyword_of_the_reference(
    spec,  # type: ignore[no-untyped-def]
) -> None:
    target = twin_target()
    shape = spec.example_shapes()[0]
    tiling = spec.default_tiling(shape, "float32", target)
    fields = {f.name: f for f in spec.tiling_struct(tiling, shape, "float32", target)}
    reference = inspect.signature(spec.reference).parameters
    for parameter in spec.parameters:
        assert parameter.name not in (*spec.dims, *spec.roles), parameter.name
        filled = parameter.fields(parameter.default)
        assert parameter.field in filled
        for name, value in filled.items():
            # An integer fills integer fields, a real number float ones; the struct the spec
            # builds holds what the default fills.
            assert (fields[name].code in "iI") == parameter.integer, name
            assert fields[name].value == value, name
        assert reference[parameter.name].kind is inspect.Parameter.KEYWORD_ONLY
        assert reference[parameter.name].default == parameter.default


def test_a_parameter_is_packed_into_its_field_and_the_reference_uses_it() -> None:
    spec, target = get_op("conv_bias_leakyrelu"), twin_target()
    shape = spec.example_shapes()[1]
    tiling = spec.default_tiling(shape, "float32", target)
    names = [f.name for f in spec.tiling_struct(tiling, shape, "float32", target)]
    at = 4 * names.index("alpha")

    def alpha(**parameters: object) -> float:
        packed = spec.pack_tiling(tiling, shape, "float32", target, parameters)
        value: float = struct.unpack_from("<f", packed, at)[0]
        return value

    assert alpha() == np.float32(0.1)
    assert alpha(negative_slope=0.0) == 0.0
    assert alpha(negative_slope=np.float16(0.25)) == 0.25
    with_default = spec.pack_tiling(tiling, shape, "float32", target)
    zero = spec.pack_tiling(tiling, shape, "float32", target, {"negative_slope": 0})
    assert with_default[:at] == zero[:at] and with_default[at + 4 :] == zero[at + 4 :]
    inputs = spec.make_inputs(shape, "float32", np.random.default_rng(3))
    leaky = spec.reference(inputs, shape, "float32")["out"]
    relu = spec.reference(inputs, shape, "float32", negative_slope=0.0)["out"]
    assert (leaky < 0).any()
    np.testing.assert_array_equal(relu, np.maximum(leaky, 0))


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"slope": 0.0}, "unknown parameter slope; parameters: negative_slope"),
        ({"negative_slope": True}, "negative_slope must be a real number, got True"),
        ({"negative_slope": "0.1"}, "negative_slope must be a real number, got '0.1'"),
        ({"negative_slope": None}, "negative_slope must be a real number, got None"),
        ({"negative_slope": 1j}, "negative_slope must be a real number, got 1j"),
        ({"negative_slope": float("nan")}, "negative_slope must be finite"),
        ({"negative_slope": float("-inf")}, "negative_slope must be finite"),
        ({"negative_slope": 1e39}, "within float32's range"),
    ],
)
def test_bad_parameters_are_input_errors(given: dict[str, object], message: str) -> None:
    spec = get_op("conv_bias_leakyrelu")
    with pytest.raises(InputError, match=message):
        spec.bind_parameters(given)


@pytest.mark.parametrize(
    ("op", "given", "message"),
    [
        ("scale_relu_dropout", {"p": 1.0}, r"p must be in \[0, 1\), got 1.0$"),
        ("scale_relu_dropout", {"p": -0.1}, r"p must be in \[0, 1\), got -0.1$"),
        (
            "scale_relu_dropout",
            {"p": 0.99999999},
            r"p must be .*, got 0.99999999 \(1.0 as a float32\)",
        ),
        ("scale_relu_dropout", {"seed": -1}, r"seed must be in \[0, 4294967295\], got -1"),
        ("scale_relu_dropout", {"seed": 2**32}, "seed must be in .*, got 4294967296"),
        ("scale_relu_dropout", {"seed": 3.0}, "seed must be an integer, got 3.0"),
        ("scale_relu_dropout", {"seed": True}, "seed must be an integer, got True"),
        ("scale_relu_dropout", {"scale": float("inf")}, "scale must be finite"),
        ("layernorm_gelu", {"eps": -1e-9}, "eps must be at least 0, got -1e-09"),
    ],
)
def test_a_parameter_outside_its_domain_is_named(
    op: str, given: dict[str, object], message: str
) -> None:
    with pytest.raises(InputError, match=f"^{op}: {message}"):
        get_op(op).bind_parameters(given)


def test_the_dropout_parameters_fill_their_fields() -> None:
    spec, target = get_op("scale_relu_dropout"), twin_target()
    shape = Shape({"N": 4096})
    tiling = spec.default_tiling(shape, "float32", target)
    names = [f.name for f in spec.tiling_struct(tiling, shape, "float32", target)]
    packed = spec.pack_tiling(
        tiling, shape, "float32", target, {"p": 0.25, "seed": np.uint32(7), "scale": -2}
    )

    def field(name: str, code: str) -> float:
        value: float = struct.unpack_from("<" + code, packed, 4 * names.index(name))[0]
        return value

    assert field("seedMix", "I") == seed_mix(7)
    assert (field("dropP", "f"), field("keepScale", "f")) == (0.25, np.float32(4 / 3))
    assert field("scale", "f") == -2.0
    assert spec.bind_parameters({"seed": 2**32 - 1, "p": 0})["seed"] == 2**32 - 1


def test_the_dropout_reference_follows_its_parameters() -> None:
    spec = get_op("scale_relu_dropout")
    shape = Shape({"N": 1 << 16})
    x = spec.make_inputs(shape, "float32", np.random.default_rng(1))["x"]
    base = spec.reference({"x": x}, shape, "float32")["y"]
    again = spec.reference({"x": x}, shape, "float32", seed=SEED, p=DROP_P, scale=1.7)["y"]
    np.testing.assert_array_equal(base, again)
    other = spec.reference({"x": x}, shape, "float32", seed=SEED + 1)["y"]
    kept = (base != 0) | (other != 0)
    assert ((base != 0) != (other != 0))[kept].mean() > 0.1  # another seed, another mask
    half = spec.reference({"x": x}, shape, "float32", p=0.5, scale=1.0)["y"]
    positive = x > 0
    assert abs((half[positive] == 0).mean() - 0.5) < 0.02
    np.testing.assert_allclose(half[half != 0], 2 * x[half != 0], rtol=1e-6)
    flipped = spec.reference({"x": x}, shape, "float32", scale=-1.0, p=0.0)["y"]
    assert (flipped[x < 0] > 0).mean() > 0.999 and (flipped[x > 0] == 0).all()


def test_an_op_without_parameters_takes_none() -> None:
    lag = get_op("linear_add_gelu")
    assert lag.parameters == () and lag.bind_parameters({}) == {}
    with pytest.raises(InputError, match="unknown parameter negative_slope; parameters: none"):
        lag.bind_parameters({"negative_slope": 0.0})
    assert get_op("conv_bias_leakyrelu").bind_parameters({}) == {"negative_slope": 0.1}


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_layout_reads_back_each_shape(op: str) -> None:
    """The arrays a caller passes hold each GM argument's elements, and the shape read from
    the inputs' numpy shapes (and the attributes) is the shape they were made for."""
    spec = get_op(op)
    assert [n for n, role in spec.roles.items() if role != "workspace"] == list(spec.layout)
    for text in SHAPES[op]:
        shape = spec.validate_shape(Shape.parse(text))
        arrays = spec.array_shapes(shape)
        for arg in spec.gm_args(shape, "float32"):
            if arg.role != "workspace":
                assert int(np.prod(arrays[arg.name])) == arg.elements, (text, arg.name)
        inputs = {n: arrays[n] for n, role in spec.roles.items() if role == "in"}
        assert spec.shape_of(inputs, {a: shape[a] for a in spec.attributes}) == shape


def test_shape_of_names_the_argument_and_the_rule() -> None:
    lag, conv = get_op("linear_add_gelu"), get_op("conv_bias_leakyrelu")
    good = {"x": (4, 8), "w": (8, 16), "bias": (16,)}
    with pytest.raises(InputError, match=r"x must have 2 dimensions \(M, K\), got shape \(32,\)"):
        lag.shape_of({**good, "x": (32,)}, {})
    with pytest.raises(InputError, match=r"w has K=9 \(axis 0\), but x has K=8"):
        lag.shape_of({**good, "w": (9, 16)}, {})
    with pytest.raises(
        InputError, match=r"dim M must be positive, got 0 \(read from the shape of x\)"
    ):
        lag.shape_of({**good, "x": (0, 8)}, {})
    # The dim's own sources: each input holding it, or the keyword that gave it.
    with pytest.raises(
        InputError, match=r"dim K must be positive, got 0 \(read from the shapes of x, w\)"
    ):
        lag.shape_of({**good, "x": (4, 0), "w": (0, 16)}, {})
    with pytest.raises(
        InputError, match=r"dim stride must be positive, got 0 \(given as the keyword stride\)"
    ):
        conv.shape_of({"x": (1, 3, 7, 7), "w": (5, 3, 3, 3), "bias": (5,)}, {"stride": 0, "pad": 0})
    with pytest.raises(InputError, match=r"x must have 1 dimension \(N\), got shape \(2, 2\)"):
        get_op("scale_relu_dropout").shape_of({"x": (2, 2)}, {})
    with pytest.raises(InputError, match="unknown keyword stride; attributes: none"):
        lag.shape_of(good, {"stride": 1})
    images = {"x": (1, 3, 7, 7), "w": (5, 3, 3, 3), "bias": (5,)}
    with pytest.raises(InputError, match="missing keyword pad"):
        conv.shape_of(images, {"stride": 1})
    with pytest.raises(
        InputError, match="unknown keyword dilation; attributes: stride, pad; parameters: negative"
    ):
        conv.shape_of(images, {"stride": 1, "pad": 0, "dilation": 1})
    shape = conv.shape_of(images, {"stride": 2, "pad": 1})
    assert conv.array_shapes(shape)["out"] == (1, 5, 4, 4)


@pytest.mark.parametrize("spec", list_ops(), ids=lambda s: s.name)
def test_fusion_saves_traffic(spec) -> None:  # type: ignore[no-untyped-def]
    for dims in itertools.islice(itertools.product((64, 1000), repeat=len(spec.dims)), 4):
        traffic = spec.traffic(Shape(dict(zip(spec.dims, dims, strict=True))), "float32")
        assert traffic.fused_bytes < traffic.unfused_bytes
        assert traffic.flops > 0


def test_version_changes_with_the_kernel_source(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tilewise.kernels.ops.scale_relu_dropout.spec import ScaleReluDropout

    original = ScaleReluDropout().version
    copy = tmp_path / "scale_relu_dropout.cpp"
    copy.write_text(get_op("scale_relu_dropout").kernel_path.read_text() + "\n// changed\n")
    monkeypatch.setattr(ScaleReluDropout, "kernel_path", property(lambda self: copy))
    assert ScaleReluDropout().version != original


# -- the ops of issue 6 ----------------------------------------------------------------------


def _emulate(op: str, inputs: dict[str, np.ndarray], shape: Shape, dtype: str) -> np.ndarray:
    """The kernel's arithmetic in numpy: float32 compute from dtype inputs, one final rounding."""
    from tilewise.kernels.ops.conv_bias_leakyrelu.spec import ALPHA, conv2d
    from tilewise.kernels.ops.layernorm_gelu.spec import EPS

    f = {k: v.astype(np.float32) for k, v in inputs.items()}
    one = np.float32(1)
    if op == "swiglu":
        out = f["u"] * (f["g"] / (one + np.exp(-f["g"])))
    elif op == "layernorm_gelu":
        x, h = f["x"], shape["H"]
        mean = np.cumsum(x, axis=-1, dtype=np.float32)[:, -1:] / np.float32(h)  # sequential sums
        d = x - mean
        m2 = np.cumsum(d * d, axis=-1, dtype=np.float32)[:, -1:]
        y = d * (one / np.sqrt(m2 / np.float32(h) + np.float32(EPS))) * f["gamma"] + f["beta"]
        out = y / (one + np.exp(np.float32(-1.5957691) * (y + np.float32(0.044715) * y**3)))
    elif op == "swiglu_mlp":
        g, u = f["x"] @ f["wg"], f["x"] @ f["wu"]
        out = u * (g / (one + np.exp(-g)))
    else:
        n, c, k = shape["N"], shape["C"], shape["K"]
        x = f["x"].reshape(n, c, shape["H"], shape["W"])
        w = f["w"].reshape(k, c, shape["R"], shape["S"])
        y = conv2d(x, w, shape["stride"], shape["pad"]) + f["bias"][None, :, None, None]
        out = np.where(y >= 0, y, np.float32(ALPHA) * y)
    return np.asarray(out).astype(inputs[next(iter(inputs))].dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op", sorted(BENCHMARK))
def test_reference_and_tolerance_hold_at_benchmark_shapes(op: str, dtype: str) -> None:
    # The twin is too slow for these shapes in a test; a float32 emulation of the kernel's
    # arithmetic must meet the tolerance against the float64 reference, and the default
    # tiling must be valid on the Ascend targets.
    spec = get_op(op)
    shape = spec.validate_shape(Shape.parse(BENCHMARK[op]))
    inputs = spec.make_inputs(shape, dtype, np.random.default_rng(1))
    ((name, want),) = spec.reference(inputs, shape, dtype).items()
    got = _emulate(op, inputs, shape, dtype).astype(np.float32).reshape(-1)
    want = want.astype(np.float32).reshape(-1)
    rtol, atol = spec.tolerance(dtype, shape)
    assert np.isfinite(want).all() and 0.1 < float(np.abs(want).mean()) < 10
    bad = np.abs(got - want) > atol + rtol * np.abs(want)
    assert not bad.any(), f"{name}: {int(bad.sum())} elements outside ({rtol}, {atol})"
    for target in BUILTIN:
        profile = get_target(target)
        assert spec.check(spec.default_tiling(shape, dtype, profile), shape, dtype, profile).valid


def test_layernorm_splits_only_rows_that_do_not_fit() -> None:
    spec, target = get_op("layernorm_gelu"), twin_target()
    whole = spec.default_tiling(Shape({"R": 4096, "H": 1024}), "float32", target)
    assert whole["hTile"] == 1024 and whole["rowsPerTile"] > 1
    long = Shape({"R": 2, "H": 20000})
    split = spec.default_tiling(long, "float32", target)
    assert split["hTile"] < 20000 and split["rowsPerTile"] == 1
    reasons = spec.check(split.replace(rowsPerTile=2), long, "float32", target).reasons
    assert f"a row split in chunks of {split['hTile']} takes rowsPerTile 1" in reasons
    hTiles = next(t for t in spec.tunables(long, "float32", target) if t.name == "hTile")
    assert hTiles.values[-1] == 20000  # "whole row" is the largest value


def test_swiglu_mlp_counts_both_matmul_objects() -> None:
    mlp, lag, target = get_op("swiglu_mlp"), get_op("linear_add_gelu"), twin_target()
    shape = Shape({"T": 512, "H": 1024, "I": 2752})
    tiling = mlp.default_tiling(shape, "float16", target)
    twin_shape = Shape({"M": 512, "N": 2752, "K": 1024})
    lag_tiling = Tiling({k: v for k, v in tiling.items()})
    one = lag.footprint(lag_tiling, twin_shape, "float16", target)
    two = mlp.footprint(tiling, shape, "float16", target)
    assert (two.l1, two.l0a, two.l0b, two.l0c) == (
        2 * one.l1,
        2 * one.l0a,
        2 * one.l0b,
        2 * one.l0c,
    )
    assert 2 * 2 * tiling["baseM"] * tiling["baseK"] * 2 <= target.l0a


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ({"pad": -1}, "pad must be non-negative"),
        ({"stride": 0}, "stride must be positive"),
        ({"R": 9, "pad": 0}, r"output size -1x5.*the filter must fit"),
    ],
)
def test_conv_shape_checks(shape: dict[str, int], message: str) -> None:
    base = {"N": 1, "C": 3, "H": 7, "W": 7, "K": 5, "R": 3, "S": 3, "stride": 1, "pad": 1}
    with pytest.raises(InputError, match=message):
        get_op("conv_bias_leakyrelu").validate_shape({**base, **shape})


def test_conv_accepts_no_padding_and_reserves_col_for_every_split() -> None:
    spec, target = get_op("conv_bias_leakyrelu"), twin_target()
    shape = spec.validate_shape(
        {"N": 2, "C": 5, "H": 13, "W": 11, "K": 20, "R": 3, "S": 2, "stride": 1, "pad": 0}
    )
    assert shape["pad"] == 0
    default = spec.default_tiling(shape, "float16", target)
    domain = next(t for t in spec.tunables(shape, "float16", target) if t.name == "singleCoreN")
    for sn in domain.values:
        reasons = spec.check(default.replace(singleCoreN=sn), shape, "float16", target).reasons
        assert not any("workspace" in r for r in reasons)


def test_conv_reference_matches_a_direct_loop() -> None:
    from tilewise.kernels.ops.conv_bias_leakyrelu.spec import conv2d

    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 2))
    stride, pad = 2, 1
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (7 + 2 - 3) // 2 + 1, (6 + 2 - 2) // 2 + 1
    want = np.zeros((2, 4, oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        patch = xp[:, :, i * stride : i * stride + 3, j * stride : j * stride + 2]
        want[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    np.testing.assert_allclose(conv2d(x, w, stride, pad), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", ["linear_add_gelu", "swiglu_mlp", "conv_bias_leakyrelu"])
@pytest.mark.parametrize(
    ("change", "reason"),
    [({"dbL0C": 3}, "dbL0C 3 must be 1 or 2"), ({"iterateOrder": 2}, "iterateOrder 2 must be")],
)
def test_what_matmul_init_refuses_the_checks_refuse(
    op: str, change: dict[str, int], reason: str
) -> None:
    """Outside the tunables' domains but within the other rules: the twin's Matmul::Init (as
    the device's) refuses these at launch, which in-process ends the caller."""
    spec, target = get_op(op), twin_target()
    shape = Shape.parse(spec.examples[0])
    tiling = spec.default_tiling(shape, "float32", target).replace(**change)
    assert not spec.valid(tiling, shape, "float32", target)
    assert reason in " ".join(spec.check(tiling, shape, "float32", target).reasons)
