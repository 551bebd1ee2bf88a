"""tilewise.torch.fuse_conv_bn_act against ``nn.Sequential(conv, bn, act).eval()``.

Odd shapes (13x13 and 11x9 images, 5 and 7 output channels, 3x3, 2x3 and 1x1 filters), stride 1
and 2, padding 0 and 1, ReLU and LeakyReLU(0.2), float32 and float16, each held to the
conv_bias_leakyrelu op's tolerance for the dtype; gradients; every module it refuses."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch (the torch extra)")

import tilewise.torch  # noqa: E402 - registers torch.ops.tilewise after torch is known present
from tilewise.errors import InputError  # noqa: E402
from tilewise.kernels.ops import get_op  # noqa: E402
from tilewise.launch import Ops  # noqa: E402
from tilewise.runtime import TilingTable  # noqa: E402
from tilewise.settings import Settings  # noqa: E402
from tilewise.torch import ConvBnAct, fuse_conv_bn_act  # noqa: E402

nn = torch.nn
CONV = get_op("conv_bias_leakyrelu")
DTYPES = {"float32": torch.float32, "float16": torch.float16}
#: (N, C, H, W, K, kernel): odd sizes, square and non-square filters and images.
GEOMETRIES = [
    (2, 3, 13, 13, 5, (3, 3)),
    (2, 3, 11, 9, 7, (2, 3)),
    (2, 5, 13, 13, 7, (1, 1)),
]
ACTS = {"relu": (nn.ReLU, 0.0), "leaky0.2": (lambda: nn.LeakyReLU(0.2), 0.2)}


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ops]:
    """The torch ops over an empty table (default tilings), one build cache for the module."""
    yield tilewise.torch.use_table(
        TilingTable([]), settings=Settings(cache_dir=tmp_path_factory.mktemp("cache"))
    )


def modules(
    c: int, k: int, kernel: tuple[int, int], stride: int, padding: int, act: str, **conv: Any
) -> tuple[Any, Any, Any]:
    """A conv, an eval-mode BatchNorm with statistics far from (0, 1) and an affine transform
    far from the identity, and the activation: folding is visible in every channel."""
    generator = torch.Generator().manual_seed(c * 100 + k * 10 + stride + padding)
    made = nn.Conv2d(c, k, kernel, stride=stride, padding=padding, **conv)
    with torch.no_grad():
        for p in made.parameters():
            p.copy_(torch.rand(p.shape, generator=generator) - 0.5)
    bn = nn.BatchNorm2d(k)
    with torch.no_grad():
        bn.running_mean.copy_(torch.rand(k, generator=generator) - 0.5)
        bn.running_var.copy_(torch.rand(k, generator=generator) * 1.5 + 0.25)
        bn.weight.copy_(torch.rand(k, generator=generator) + 0.5)
        bn.bias.copy_(torch.rand(k, generator=generator) - 0.5)
    return made, bn.eval(), ACTS[act][0]()


def image(n: int, c: int, h: int, w: int, dtype: Any = torch.float32) -> Any:
    generator = torch.Generator().manual_seed(n + c + h + w)
    return (torch.rand(n, c, h, w, generator=generator) * 2 - 1).to(dtype)


def shape_of(x: Any, fused: Any) -> Any:
    """The conv_bias_leakyrelu shape of ``fused`` on ``x``."""
    (n, c, h, w), (k, _, r, s) = x.shape, fused.weight.shape
    sizes = {"N": n, "C": c, "H": h, "W": w, "K": k, "R": r, "S": s}
    return CONV.validate_shape({**sizes, "stride": fused.stride, "pad": fused.padding})


def assert_matches(got: Any, want: Any, dtype: str, shape: Any) -> None:
    rtol, atol = CONV.tolerance(dtype, shape)
    assert got.dtype == DTYPES[dtype] and got.shape == want.shape
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol)


CASES = [
    pytest.param(
        g, stride, padding, act, id=f"{g[2]}x{g[3]}-k{g[5][0]}x{g[5][1]}-s{stride}-p{padding}-{act}"
    )
    for g, stride, padding, act in itertools.product(GEOMETRIES, (1, 2), (0, 1), ACTS)
]


@pytest.mark.slow
@pytest.mark.parametrize(("geometry", "stride", "padding", "act"), CASES)
def test_float32_matches_the_sequential(
    ops: Ops, geometry: tuple[Any, ...], stride: int, padding: int, act: str
) -> None:
    n, c, h, w, k, kernel = geometry
    conv, bn, activation = modules(c, k, kernel, stride, padding, act)
    plain = nn.Sequential(conv, bn, activation).eval()
    fused = fuse_conv_bn_act(conv, bn, activation)
    assert fused.negative_slope == ACTS[act][1]
    x = image(n, c, h, w)
    with torch.no_grad():
        want, got = plain(x), fused(x)
    assert_matches(got, want, "float32", shape_of(x, fused))
    choice = ops.last_choice
    assert choice is not None and choice.op == "conv_bias_leakyrelu"
    assert choice.shape == shape_of(x, fused)
    if act == "relu":
        assert (got >= 0).all() and (got == 0).any()
    else:
        assert (got < 0).any()


@pytest.mark.slow
@pytest.mark.parametrize(("geometry", "stride", "padding", "act"), CASES[::5])
def test_float16_matches_the_sequential_on_the_same_rounded_modules(
    ops: Ops, geometry: tuple[Any, ...], stride: int, padding: int, act: str
) -> None:
    # The float16 modules fold in float64 and round once; the reference runs them in float32.
    n, c, h, w, k, kernel = geometry
    conv, bn, activation = modules(c, k, kernel, stride, padding, act)
    conv, bn = conv.half(), bn.half()
    fused = fuse_conv_bn_act(conv, bn, activation)
    assert fused.weight.dtype == fused.bias.dtype == torch.float16
    plain = nn.Sequential(conv, bn, activation).float().eval()
    x = image(n, c, h, w, torch.float16)
    with torch.no_grad():
        want, got = plain(x.float()), fused(x)
    assert_matches(got, want, "float16", shape_of(x, fused))


@pytest.mark.parametrize(
    ("conv_kw", "affine"),
    [
        ({"bias": False}, True),
        ({}, False),
        ({"padding": "same"}, True),
        ({"padding": "valid"}, True),
    ],
    ids=["conv-without-bias", "bn-without-affine", "padding-same", "padding-valid"],
)
def test_optional_parts_fold_too(ops: Ops, conv_kw: dict[str, Any], affine: bool) -> None:
    generator = torch.Generator().manual_seed(7)
    conv = nn.Conv2d(3, 5, 3, **conv_kw)
    bn = nn.BatchNorm2d(5, affine=affine)
    with torch.no_grad():
        bn.running_mean.copy_(torch.rand(5, generator=generator) - 0.5)
        bn.running_var.copy_(torch.rand(5, generator=generator) + 0.5)
    bn.eval()
    x = image(2, 3, 11, 9)
    fused = fuse_conv_bn_act(conv, bn, nn.LeakyReLU(0.2))
    assert fused.padding == (1 if conv_kw.get("padding") == "same" else 0)
    with torch.no_grad():
        assert_matches(
            fused(x), nn.Sequential(conv, bn, nn.LeakyReLU(0.2))(x), "float32", shape_of(x, fused)
        )


def test_folding_changes_neither_module_and_the_state_dict_is_a_conv_with_bias() -> None:
    conv, bn, act = modules(3, 5, (2, 3), 2, 1, "relu")
    before = {
        **copy.deepcopy(conv.state_dict()),
        **{f"bn.{k}": v.clone() for k, v in bn.state_dict().items()},
    }
    fused = fuse_conv_bn_act(conv, bn, act)
    after = {**conv.state_dict(), **{f"bn.{k}": v for k, v in bn.state_dict().items()}}
    assert all(torch.equal(before[key], after[key]) for key in before)
    assert not bn.training
    assert {k: tuple(v.shape) for k, v in fused.state_dict().items()} == {
        "weight": (5, 3, 2, 3),
        "bias": (5,),
    }
    # The fold is conv then bn: the plain conv with the fused weights equals conv, bn.
    plain = nn.Conv2d(3, 5, (2, 3), stride=2, padding=1)
    plain.load_state_dict(fused.state_dict())
    x = image(2, 3, 11, 9)
    with torch.no_grad():
        torch.testing.assert_close(plain(x), bn(conv(x)), rtol=1e-5, atol=1e-5)
    again = ConvBnAct(3, 5, (2, 3), stride=2, padding=1)
    again.load_state_dict(fused.state_dict())
    assert again.negative_slope == 0.0 and again.weight.is_contiguous()


@pytest.mark.slow
def test_one_image_without_a_batch_dim_and_an_empty_batch_as_nn_conv2d(
    ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv, bn, act = modules(3, 5, (3, 3), 2, 1, "relu")
    fused = fuse_conv_bn_act(conv, bn, act)
    plain = nn.Sequential(conv, bn, act).eval()
    x = image(1, 3, 13, 11)
    rtol, atol = CONV.tolerance("float32", shape_of(x, fused))
    torch.testing.assert_close(fused(x[0]), plain(x)[0], rtol=rtol, atol=atol)
    monkeypatch.setattr(ops, "call", lambda *a, **k: pytest.fail("launched an empty batch"))
    empty = x[:0]
    assert fused(empty).shape == conv(empty).shape == (0, 5, 7, 6)


def test_gradients_match_torch_at_slope_0(ops: Ops) -> None:
    conv, bn, act = modules(3, 5, (3, 3), 2, 1, "relu")
    fused = fuse_conv_bn_act(conv, bn, act)
    plain = nn.Conv2d(3, 5, 3, stride=2, padding=1)
    plain.load_state_dict(fused.state_dict())
    x = image(2, 3, 13, 13)
    x_ours, x_plain = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = fused(x_ours)
    want = torch.relu(plain(x_plain))
    assert (want == 0).any() and (want > 0).any()  # both sides of the ReLU get gradients
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    out.backward(dout)
    want.backward(dout)
    rtol, atol = CONV.tolerance("float32", shape_of(x, fused))
    pairs = [(x_ours, x_plain), (fused.weight, plain.weight), (fused.bias, plain.bias)]
    for ours, theirs in pairs:
        assert ours.grad is not None and theirs.grad is not None
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=rtol, atol=atol)


def _conv(**kw: Any) -> Any:
    return nn.Conv2d(kw.pop("c", 4), kw.pop("k", 6), kw.pop("kernel", 3), **kw)


def _bn(k: int = 6, **kw: Any) -> Any:
    return nn.BatchNorm2d(k, **kw).eval()


@pytest.mark.parametrize(
    ("conv", "bn", "act", "message"),
    [
        (_conv(), nn.BatchNorm2d(6), nn.ReLU(), "bn is in training mode.*call .eval"),
        (_conv(), _bn(track_running_stats=False), nn.ReLU(), "bn has no running statistics"),
        (_conv(groups=2), _bn(), nn.ReLU(), "conv has groups=2; the kernel takes 1"),
        (_conv(dilation=2), _bn(), nn.ReLU(), r"conv has dilation=\(2, 2\)"),
        (_conv(padding=1, padding_mode="reflect"), _bn(), nn.ReLU(), "padding_mode='reflect'"),
        (_conv(padding=(1, 0)), _bn(), nn.ReLU(), r"padding \(1, 0\) differs between H and W"),
        (_conv(stride=(1, 2)), _bn(), nn.ReLU(), r"stride \(1, 2\) differs between H and W"),
        (_conv(kernel=(2, 3), padding="same"), _bn(), nn.ReLU(), "padding='same' with kernel"),
        (_conv(kernel=2, padding="same"), _bn(), nn.ReLU(), "padding='same' with kernel"),
        (_conv(), _bn(5), nn.ReLU(), "bn has num_features=5, but conv has out_channels=6"),
        (_conv(), _bn(), nn.GELU(), "act must be an nn.ReLU or an nn.LeakyReLU.*got GELU"),
        (_conv(), _bn(), nn.LeakyReLU(float("nan")), "negative_slope must be finite"),
        (nn.Conv1d(4, 6, 3), _bn(), nn.ReLU(), "conv must be an nn.Conv2d, got Conv1d"),
        (_conv(), nn.BatchNorm1d(6).eval(), nn.ReLU(), "bn must be an nn.BatchNorm2d"),
        (_conv(dtype=torch.float64), _bn(), nn.ReLU(), "conv has dtype torch.float64"),
    ],
    ids=[
        "bn-training",
        "bn-no-stats",
        "groups",
        "dilation",
        "padding-mode",
        "padding-hw",
        "stride-hw",
        "same-non-square",
        "same-even",
        "channels",
        "gelu",
        "nan-slope",
        "conv1d",
        "batchnorm1d",
        "float64",
    ],
)
def test_what_the_kernel_cannot_run_is_refused(conv: Any, bn: Any, act: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        fuse_conv_bn_act(conv, bn, act)


def test_the_module_refuses_what_the_kernel_cannot_run() -> None:
    with pytest.raises(InputError, match=r"stride \(1, 2\) differs between H and W"):
        ConvBnAct(3, 5, 3, stride=(1, 2))
    with pytest.raises(InputError, match="kernel_size must be an int or a pair of ints"):
        ConvBnAct(3, 5, (3, 3, 3))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="negative_slope must be a real number"):
        ConvBnAct(3, 5, 3, negative_slope="0.1")  # type: ignore[arg-type]


def test_an_image_that_does_not_fit_the_weight_is_an_input_error(ops: Ops) -> None:
    conv, bn, act = modules(3, 5, (3, 3), 1, 0, "relu")
    fused = fuse_conv_bn_act(conv, bn, act)
    with pytest.raises(InputError, match=r"w has C=3 .*, but x has C=4"):
        fused(image(2, 4, 9, 9))
    with pytest.raises(InputError, match="x must have 4 dimensions"):
        fused(image(1, 3, 9, 9)[0, 0])  # one image takes 3 (C, H, W), a batch 4


@pytest.mark.slow
def test_torch_export_traces_the_fused_module_with_its_slope(ops: Ops) -> None:
    conv, bn, act = modules(3, 7, (2, 3), 2, 1, "leaky0.2")
    fused = fuse_conv_bn_act(conv, bn, act)
    x = image(2, 3, 11, 9)
    program = torch.export.export(fused, (x,))
    (call,) = [n for n in program.graph.nodes if n.op == "call_function"]
    assert str(call.target) == "tilewise.conv_bias_leakyrelu.default"
    assert call.kwargs == {"stride": 2, "pad": 1, "negative_slope": 0.2}
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x), fused(x))
