"""tilewise.torch's modules against the plain PyTorch modules they stand in for.

Each is loaded with the plain module's state dict (and back) and held to its outputs and
gradients within the op's tolerance, at odd sizes with leading batch dims."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch (the torch extra)")

import tilewise.torch  # noqa: E402 - registers torch.ops.tilewise after torch is known present
from tilewise.errors import InputError  # noqa: E402
from tilewise.kernels.ops import get_op  # noqa: E402
from tilewise.launch import Ops  # noqa: E402
from tilewise.runtime import TilingTable  # noqa: E402
from tilewise.settings import Settings  # noqa: E402
from tilewise.torch import LinearGelu, LlamaMLP, ScaleReluDropout  # noqa: E402

nn = torch.nn
HIDDEN, INTERMEDIATE, LEAD = 37, 53, (2, 3)  # odd sizes: no dim a multiple of a block
IN, OUT = 29, 43
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama_block.py"
DTYPES = {"float32": torch.float32, "float16": torch.float16}


class PlainLlamaMLP(nn.Module):
    """Hugging Face's LlamaMLP with hidden_act="silu", in plain PyTorch."""

    def __init__(self, hidden: int, intermediate: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.act_fn = nn.SiLU()

    def forward(self, x: Any) -> Any:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def plain_linear_gelu(bias: bool = True) -> Any:
    return nn.Sequential(nn.Linear(IN, OUT, bias=bias), nn.GELU(approximate="tanh"))


def sequential_keys(state: dict[str, Any], to_plain: bool) -> dict[str, Any]:
    """LinearGelu's documented key mapping to (or from) the Sequential's."""
    if to_plain:
        return {f"0.{k}": v for k, v in state.items()}
    return {k.removeprefix("0."): v for k, v in state.items()}


def upcast(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` in float32: the plain module computes from the same rounded weights."""
    return {k: v.float() for k, v in state.items()}


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ops]:
    """The torch ops over an empty table (default tilings), one build cache for the module."""
    yield tilewise.torch.use_table(
        TilingTable([]), settings=Settings(cache_dir=tmp_path_factory.mktemp("cache"))
    )


def tokens(features: int, dtype: Any = torch.float32, seed: int = 1) -> Any:
    x = torch.rand(*LEAD, features, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    return x.to(dtype)


def close(got: Any, want: Any, op: str, dtype: str) -> None:
    rtol, atol = get_op(op).tolerance(dtype, get_op(op).example_shapes()[0])
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol)


def loaded_mlp(fused: bool, bias: bool = False) -> tuple[Any, Any]:
    torch.manual_seed(0)
    plain = PlainLlamaMLP(HIDDEN, INTERMEDIATE, bias=bias)
    ours = LlamaMLP(HIDDEN, INTERMEDIATE, fused=fused, bias=bias)
    ours.load_state_dict(plain.state_dict())
    return plain, ours


def loaded_linear_gelu(bias: bool = True) -> tuple[Any, Any]:
    torch.manual_seed(0)
    plain = plain_linear_gelu(bias)
    ours = LinearGelu(IN, OUT, bias=bias)
    ours.load_state_dict(sequential_keys(plain.state_dict(), to_plain=False))
    return plain, ours


def test_parameters_are_named_and_shaped_as_the_plain_modules() -> None:
    mlp, plain_mlp = LlamaMLP(HIDDEN, INTERMEDIATE), PlainLlamaMLP(HIDDEN, INTERMEDIATE)
    assert {k: v.shape for k, v in mlp.state_dict().items()} == {
        k: v.shape for k, v in plain_mlp.state_dict().items()
    }
    linear = LinearGelu(IN, OUT)
    assert {k: v.shape for k, v in linear.state_dict().items()} == {
        "weight": (OUT, IN),
        "bias": (OUT,),
    }
    assert LinearGelu(IN, OUT, bias=False).bias is None


def test_state_dicts_load_both_ways_and_keep_the_kernel_layout() -> None:
    plain, ours = loaded_mlp(fused=True)
    for name in ("gate_proj", "up_proj"):
        weight = getattr(ours, name).weight
        assert weight.t().is_contiguous(), name  # the kernel's [H, I] without a copy
        assert torch.equal(weight, getattr(plain, name).weight), name
    back = PlainLlamaMLP(HIDDEN, INTERMEDIATE)
    back.load_state_dict(ours.state_dict())
    for key, value in plain.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key

    plain_gelu, ours_gelu = loaded_linear_gelu()
    assert ours_gelu.weight.t().is_contiguous()
    back_gelu = plain_linear_gelu()
    back_gelu.load_state_dict(sequential_keys(ours_gelu.state_dict(), to_plain=True))
    for key, value in plain_gelu.state_dict().items():
        assert torch.equal(back_gelu.state_dict()[key], value), key


def test_the_kernel_layout_survives_a_dtype_conversion() -> None:
    mlp = LlamaMLP(HIDDEN, INTERMEDIATE).to(torch.float16)
    assert mlp.gate_proj.weight.dtype == torch.float16
    assert mlp.gate_proj.weight.t().is_contiguous()
    assert LinearGelu(IN, OUT).half().weight.t().is_contiguous()


def test_fused_llama_mlp_takes_no_bias() -> None:
    with pytest.raises(InputError, match="fused=False"):
        LlamaMLP(HIDDEN, INTERMEDIATE, bias=True)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("fused", "bias"), [(True, False), (False, False), (False, True)])
def test_llama_mlp_matches_the_plain_module(ops: Ops, fused: bool, bias: bool, dtype: str) -> None:
    plain, ours = loaded_mlp(fused, bias)
    ours.to(DTYPES[dtype])
    x = tokens(HIDDEN, DTYPES[dtype])
    got = ours(x)
    assert got.dtype == DTYPES[dtype] and got.shape == (*LEAD, HIDDEN)
    plain.load_state_dict(upcast(ours.state_dict()))
    close(got, plain(x.float()), "swiglu_mlp" if fused else "swiglu", dtype)
    choice = ops.last_choice
    assert choice is not None and choice.dtype == dtype
    assert choice.op == ("swiglu_mlp" if fused else "swiglu")
    assert choice.shape["T"] == LEAD[0] * LEAD[1] and choice.shape["I"] == INTERMEDIATE


@pytest.mark.slow
@pytest.mark.parametrize("module", ["LlamaMLP", "LinearGelu"])
def test_the_kernel_gets_the_weights_without_a_copy(
    ops: Ops, monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    if module == "LlamaMLP":
        ours, x = loaded_mlp(fused=True)[1], tokens(HIDDEN)
        weights = [ours.gate_proj.weight, ours.up_proj.weight]
    else:
        ours, x = loaded_linear_gelu()[1], tokens(IN)
        weights = [ours.weight, ours.bias]
    seen: list[int] = []
    call = ops.call

    def spy(op: str, *arrays: Any, **named: Any) -> Any:
        seen.extend(a.ctypes.data for a in arrays)
        return call(op, *arrays, **named)

    monkeypatch.setattr(ops, "call", spy)
    ours(x)
    assert seen == [t.data_ptr() for t in (x, *weights)]


@pytest.mark.slow
@pytest.mark.parametrize(("fused", "bias"), [(True, False), (False, True)])
def test_llama_mlp_gradients_match_the_plain_module(ops: Ops, fused: bool, bias: bool) -> None:
    plain, ours = loaded_mlp(fused, bias)
    x = tokens(HIDDEN)
    x_plain, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    dout = torch.randn(*LEAD, HIDDEN, generator=torch.Generator().manual_seed(2))
    plain(x_plain).backward(dout)
    ours(x_ours).backward(dout)
    close(x_ours.grad, x_plain.grad, "swiglu_mlp", "float32")
    grads = {name: p.grad for name, p in plain.named_parameters()}
    for name, p in ours.named_parameters():
        assert p.grad is not None, name
        close(p.grad, grads[name], "swiglu_mlp", "float32")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_gelu_matches_linear_then_gelu(ops: Ops, bias: bool, dtype: str) -> None:
    plain, ours = loaded_linear_gelu(bias)
    ours.to(DTYPES[dtype])
    plain.load_state_dict(sequential_keys(upcast(ours.state_dict()), to_plain=True))
    x = tokens(IN, DTYPES[dtype])
    got = ours(x)
    assert got.dtype == DTYPES[dtype] and got.shape == (*LEAD, OUT)
    close(got, plain(x.float()), "linear_add_gelu", dtype)
    choice = ops.last_choice
    assert choice is not None and choice.op == "linear_add_gelu"
    assert dict(choice.shape) == {"M": LEAD[0] * LEAD[1], "N": OUT, "K": IN}


@pytest.mark.parametrize("module", ["LlamaMLP", "LinearGelu"])
def test_one_row_without_a_batch_dim_and_an_empty_batch_as_the_plain_modules(
    ops: Ops, module: str
) -> None:
    if module == "LlamaMLP":
        plain, ours = loaded_mlp(fused=True)
        width, state = HIDDEN, ours.state_dict()
    else:
        plain, ours = loaded_linear_gelu()
        width, state = IN, sequential_keys(ours.state_dict(), to_plain=True)
    plain.load_state_dict(state)
    op = "swiglu_mlp" if module == "LlamaMLP" else "linear_add_gelu"
    x = tokens(width)[0, 0]
    got, want = ours(x), plain(x)
    assert got.shape == want.shape and got.dim() == 1
    close(got, want, op, "float32")
    for empty in (x[:0].reshape(0, width), x[:0].reshape(2, 0, width)):
        got = ours(empty)
        assert got.shape == plain(empty).shape and got.numel() == 0


@pytest.mark.slow
def test_linear_gelu_gradients_match_linear_then_gelu(ops: Ops) -> None:
    plain, ours = loaded_linear_gelu()
    x = tokens(IN)
    x_plain, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    dout = torch.randn(*LEAD, OUT, generator=torch.Generator().manual_seed(2))
    plain(x_plain).backward(dout)
    ours(x_ours).backward(dout)
    close(x_ours.grad, x_plain.grad, "linear_add_gelu", "float32")
    linear = plain[0]
    assert ours.weight.grad is not None and ours.bias is not None and ours.bias.grad is not None
    close(ours.weight.grad, linear.weight.grad, "linear_add_gelu", "float32")
    close(ours.bias.grad, linear.bias.grad, "linear_add_gelu", "float32")


@pytest.mark.slow
# Inductor itself calls the deprecated torch.jit.script_method (torch 2.13), which the
# project's warnings-as-errors would turn into a compile failure.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_torch_compile_fullgraph_of_llama_mlp_matches_eager(ops: Ops) -> None:
    _, ours = loaded_mlp(fused=True)
    x = tokens(HIDDEN)
    compiled = torch.compile(ours, fullgraph=True)(x)
    torch.testing.assert_close(compiled, ours(x))
    assert ops.last_choice is not None and ops.last_choice.op == "swiglu_mlp"
    compiled.sum().backward()
    assert ours.gate_proj.weight.grad is not None
    assert ours.gate_proj.weight.grad.abs().sum() > 0


@pytest.mark.slow
def test_the_llama_block_example_runs_and_reports_each_tiling(tmp_path: Path) -> None:
    # Its own build cache, and a working directory with no .env to pick settings up from.
    env = {**os.environ, "TILEWISE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for tokens in (1, 16, 128):
        calls = [line for line in lines if line.startswith(f"tokens={tokens}: tilewise call ")]
        assert len(calls) == 1, lines
        assert f"swiglu_mlp float32 H=64,I=172,T={tokens} source=default [" in calls[0]
        errors = [line for line in lines if line.startswith(f"tokens={tokens}: max |")]
        assert len(errors) == 1, lines
        match = re.search(r"= (\S+)$", errors[0])
        assert match is not None and float(match.group(1)) <= 1e-3, errors[0]
    assert lines[-1].startswith("ok: 3 token counts"), lines


def test_scale_relu_dropout_draws_a_new_mask_per_training_call(ops: Ops) -> None:
    spec = get_op("scale_relu_dropout")
    layer = ScaleReluDropout(scale=2.0, p=0.25)
    x = torch.randn(*LEAD, 1001, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(3)
    first, second = layer(x), layer(x)
    torch.manual_seed(3)
    assert torch.equal(layer(x), first)  # torch's generator draws the seeds
    assert not torch.equal(first, second)
    kept = (first != 0)[x > 0].float().mean().item()
    assert abs(kept - 0.75) < 0.03
    seeded = layer(x, seed=9)
    want = spec.reference({"x": x.numpy().ravel()}, spec.validate_shape({"N": x.numel()}),
                          "float32", scale=2.0, p=0.25, seed=9)["y"]  # fmt: skip
    torch.testing.assert_close(seeded.reshape(-1), torch.from_numpy(want))
    # In eval mode nothing is dropped or rescaled, as nn.Dropout.
    torch.testing.assert_close(layer.eval()(x), torch.relu(x * 2.0))
    with pytest.raises(InputError, match="p must be in"):
        ScaleReluDropout(p=1.0)
