"""tilewise.torch: the tuned kernels as ``torch.ops.tilewise`` ops on CPU tensors.

Every output is compared with the op's numpy reference within its tolerance; leading batch
dims, fake tensors, opcheck, and bad inputs."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch (the torch extra)")

import tilewise.torch  # noqa: E402 - registers torch.ops.tilewise after torch is known present
from tilewise.errors import InputError  # noqa: E402
from tilewise.kernels.ops import OPS, OpSpec, get_op, list_ops  # noqa: E402
from tilewise.launch import Ops  # noqa: E402
from tilewise.launch._host import Host  # noqa: E402
from tilewise.runtime import TilingTable  # noqa: E402
from tilewise.settings import Settings  # noqa: E402
from tilewise.torch import ROW_DIMS  # noqa: E402
from tilewise.types import Shape  # noqa: E402

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16}


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ops]:
    """The torch ops over an empty table (default tilings), one build cache for the module."""
    yield tilewise.torch.use_table(
        TilingTable([]), settings=Settings(cache_dir=tmp_path_factory.mktemp("cache"))
    )


def batched(spec: OpSpec, shape: Shape) -> tuple[Shape, tuple[int, ...]]:
    """``shape`` with its row dim doubled, and the leading dims that fold into it (2, rows);
    an op that folds none keeps its shape and has no leading dims."""
    row = ROW_DIMS[spec.name]
    if row is None:
        return shape, ()
    return spec.validate_shape({**shape, row: 2 * shape[row]}), (2, shape[row])


def tensors_for(
    spec: OpSpec, shape: Shape, dtype: str, lead: tuple[int, ...] = (), seed: int = 0
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The spec's inputs at ``shape`` as numpy arrays in its layout, and as tensors (sharing
    their memory) with the row dim of each folding input split into ``lead``."""
    made = spec.make_inputs(shape, dtype, np.random.default_rng(seed))
    layout = spec.array_shapes(shape)
    arrays = {n: np.ascontiguousarray(a.reshape(layout[n])) for n, a in made.items()}
    tensors = {
        n: torch.from_numpy(a).reshape(split(spec, n, a.shape, lead)) for n, a in arrays.items()
    }
    return arrays, tensors


def split(
    spec: OpSpec, name: str, shape: tuple[int, ...], lead: tuple[int, ...]
) -> tuple[int, ...]:
    if lead and spec.layout[name][0] == ROW_DIMS[spec.name]:
        return (*lead, *shape[1:])
    return shape


def attributes(spec: OpSpec, shape: Shape) -> dict[str, int]:
    return {a: shape[a] for a in spec.attributes}


def assert_close(
    spec: OpSpec, shape: Shape, dtype: str, wanted: Any, got: Any, lead: tuple[int, ...]
) -> None:
    """``got`` (an output tensor or a tuple of them) against the reference outputs ``wanted``."""
    outputs = got if isinstance(got, tuple) else (got,)
    assert len(outputs) == len(wanted)
    rtol, atol = spec.tolerance(dtype, shape)
    for (name, want), out in zip(wanted.items(), outputs, strict=True):
        assert out.dtype == TORCH_DTYPES[dtype], name
        assert tuple(out.shape) == split(spec, name, want.shape, lead), name
        got32 = out.numpy().astype(np.float32).ravel()
        want32 = want.astype(np.float32).ravel()
        bad = ~(np.abs(got32 - want32) <= atol + rtol * np.abs(want32))  # NaN is bad
        assert not bad.any(), f"{spec.name} {dtype} {dict(shape)} {name}: {int(bad.sum())} wrong"


def run(spec: OpSpec, tensors: dict[str, Any], shape: Shape) -> Any:
    op = getattr(torch.ops.tilewise, spec.name)
    return op(*tensors.values(), **attributes(spec, shape))


def cases(dtypes: tuple[str, ...] = ("float32",)) -> list[Any]:
    return [
        pytest.param(spec, Shape.parse(text), dtype, id=f"{spec.name}-{dtype}-{text}")
        for spec in list_ops()
        for text in spec.examples
        for dtype in dtypes
    ]


def test_every_op_is_registered_and_declares_its_batch_dims() -> None:
    assert set(ROW_DIMS) == set(OPS)
    for spec in list_ops():
        assert hasattr(torch.ops.tilewise, spec.name)
        row = ROW_DIMS[spec.name]
        assert row is None or row in spec.dims


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "example", "dtype"), cases())
def test_forward_matches_the_reference_with_batch_dims(
    ops: Ops, spec: OpSpec, example: Shape, dtype: str
) -> None:
    shape, lead = batched(spec, example)
    arrays, tensors = tensors_for(spec, shape, dtype, lead)
    got = run(spec, tensors, shape)
    assert_close(spec, shape, dtype, spec.reference(arrays, shape, dtype), got, lead)
    assert ops.last_choice is not None and ops.last_choice.shape == shape


@pytest.mark.slow
@pytest.mark.parametrize("spec", list_ops(), ids=lambda s: s.name)
def test_float16_forward(ops: Ops, spec: OpSpec) -> None:
    shape = spec.example_shapes()[-1]
    arrays, tensors = tensors_for(spec, shape, "float16")
    got = run(spec, tensors, shape)
    assert_close(spec, shape, "float16", spec.reference(arrays, shape, "float16"), got, ())


@pytest.mark.parametrize("spec", list_ops(), ids=lambda s: s.name)
def test_meta_tensors_give_the_outputs_shapes_without_a_launch(
    ops: Ops, spec: OpSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A model built on the meta device (shapes only, as large models are before loading).
    monkeypatch.setattr(ops, "call", lambda *a, **k: pytest.fail("launched"))
    shape, lead = batched(spec, spec.example_shapes()[-1])
    _, tensors = tensors_for(spec, shape, "float32", lead)
    got = run(spec, {k: t.to("meta") for k, t in tensors.items()}, shape)
    outputs = got if isinstance(got, tuple) else (got,)
    wanted = spec.array_shapes(shape)
    for name, out in zip([a.name for a in spec.gm_args(shape, "float32") if a.role == "out"],
                         outputs, strict=True):  # fmt: skip
        assert out.device.type == "meta" and out.dtype == torch.float32
        assert out.numel() == math.prod(wanted[name]), name


def test_scale_relu_dropout_takes_any_shape_as_a_flat_vector(ops: Ops) -> None:
    spec = get_op("scale_relu_dropout")
    x = torch.randn(3, 5, 7)
    y = torch.ops.tilewise.scale_relu_dropout(x)
    want = spec.reference({"x": x.numpy().ravel()}, Shape({"N": 105}), "float32")["y"]
    assert y.shape == x.shape
    np.testing.assert_array_equal(y.numpy().ravel(), want)


def test_an_input_that_is_not_contiguous_is_copied_to_one(ops: Ops) -> None:
    g, u = torch.randn(17, 6).t(), torch.randn(6, 17)
    assert not g.is_contiguous()
    want = torch.nn.functional.silu(g) * u
    torch.testing.assert_close(torch.ops.tilewise.swiglu(g, u), want, rtol=1e-5, atol=1e-5)


def test_an_empty_batch_gives_empty_outputs_without_a_launch(
    ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ops, "call", lambda *a, **k: pytest.fail("launched an empty batch"))
    w, b = torch.randn(80, 96), torch.randn(96)
    assert torch.ops.tilewise.linear_add_gelu(torch.randn(2, 0, 80), w, b).shape == (2, 0, 96)
    g = torch.randn(0, 16, requires_grad=True)
    torch.ops.tilewise.swiglu(g, torch.randn(0, 16)).sum().backward()
    assert g.grad is not None and g.grad.shape == (0, 16)
    assert torch.ops.tilewise.scale_relu_dropout(torch.randn(3, 0)).shape == (3, 0)
    with pytest.raises(InputError, match="w has K=80"):  # the other dims still checked
        torch.ops.tilewise.linear_add_gelu(torch.randn(0, 79), w, b)


def test_an_input_at_an_odd_byte_offset_is_copied_to_an_aligned_one(ops: Ops) -> None:
    raw = np.arange(9, dtype=np.float32).tobytes()
    x = torch.frombuffer(bytearray(b"\0" + raw[:32]), dtype=torch.float32, offset=1, count=8)
    assert x.is_contiguous() and not x.numpy().flags.aligned
    spec = get_op("scale_relu_dropout")
    want = spec.reference({"x": x.numpy().copy()}, Shape({"N": 8}), "float32")["y"]
    np.testing.assert_array_equal(torch.ops.tilewise.scale_relu_dropout(x).numpy(), want)


def test_outputs_are_new_tensors_and_inputs_are_not_copied(
    ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    g, u = torch.randn(2, 3, 16), torch.randn(2, 3, 16)
    seen: list[int] = []
    call = ops.call

    def spy(op: str, *arrays: np.ndarray, **kw: Any) -> Any:
        seen.extend(a.ctypes.data for a in arrays)
        return call(op, *arrays, **kw)

    monkeypatch.setattr(ops, "call", spy)
    out = torch.ops.tilewise.swiglu(g, u)
    assert seen == [g.data_ptr(), u.data_ptr()]
    assert out.data_ptr() not in seen


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (torch.randn(3, 16, dtype=torch.float64), torch.randn(3, 16)),
            "g has dtype torch.float64",
        ),
        (
            (torch.randn(3, 16), torch.randn(3, 16, dtype=torch.bfloat16)),
            "u has dtype torch.bfloat16",
        ),
        ((torch.randn(3, 16), torch.randn(3, 16).half()), "u has dtype torch.float16, but g"),
        ((torch.randn(3, 16), torch.randn(3, 16, device="meta")), "u is on meta"),
        ((torch.randn(2, 3, 16), torch.randn(6, 16)), "u has leading dims (6,), but g has (2, 3)"),
        ((torch.randn(3, 16), torch.randn(3, 17)), "u has I=17"),
    ],
    ids=["float64", "bfloat16", "mixed", "meta", "batch", "shape"],
)
def test_bad_input_is_an_input_error_naming_it_before_any_launch(
    ops: Ops, monkeypatch: pytest.MonkeyPatch, args: tuple[Any, ...], message: str
) -> None:
    launched: list[str] = []
    monkeypatch.setattr(Host, "launch", lambda *a, **k: launched.append("x"))
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        torch.ops.tilewise.swiglu(*args)
    assert launched == []


def test_bad_weight_and_missing_attribute_are_input_errors(ops: Ops) -> None:
    x, w, b = torch.randn(2, 4, 8), torch.randn(9, 16), torch.randn(16)
    with pytest.raises(InputError, match="w has K=9"):
        torch.ops.tilewise.linear_add_gelu(x, w, b)
    img = torch.randn(1, 3, 7, 7)
    with pytest.raises(InputError, match="output size"):
        torch.ops.tilewise.conv_bias_leakyrelu(
            img, torch.randn(5, 3, 9, 9), torch.randn(5), stride=1, pad=0
        )


@pytest.mark.parametrize("spec", list_ops(), ids=lambda s: s.name)
def test_fake_tensors_get_the_output_shapes_without_a_launch(spec: OpSpec) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    shape, lead = batched(spec, spec.example_shapes()[-1])
    arrays, tensors = tensors_for(spec, shape, "float16", lead)
    wanted = spec.reference(arrays, shape, "float16")
    with FakeTensorMode() as mode:
        fakes = {n: mode.from_tensor(t) for n, t in tensors.items()}
        got = run(spec, fakes, shape)
    outputs = got if isinstance(got, tuple) else (got,)
    assert [tuple(o.shape) for o in outputs] == [
        split(spec, n, w.shape, lead) for n, w in wanted.items()
    ]
    assert all(o.dtype == torch.float16 for o in outputs)


@pytest.mark.slow
@pytest.mark.parametrize("spec", list_ops(), ids=lambda s: s.name)
def test_opcheck(ops: Ops, spec: OpSpec) -> None:
    # Every default test_util applies: scale_relu_dropout's mask is a hash of a fixed seed and
    # the element index, so it is as deterministic as the other ops.
    shape, lead = batched(spec, spec.example_shapes()[0])
    _, tensors = tensors_for(spec, shape, "float32", lead)
    op = getattr(torch.ops.tilewise, spec.name).default
    result = torch.library.opcheck(op, tuple(tensors.values()), attributes(spec, shape))
    assert set(result.values()) == {"SUCCESS"}, result


def test_the_conv_slope_is_a_float_keyword_with_its_default() -> None:
    schema = str(torch.ops.tilewise.conv_bias_leakyrelu.default._schema)
    assert "*, int stride, int pad, float negative_slope=0.1" in schema
    assert "negative_slope" not in str(torch.ops.tilewise.linear_add_gelu.default._schema)


PARAMETERS = [
    ("conv_bias_leakyrelu", "N=2,C=3,H=11,W=9,K=5,R=3,S=3,stride=2,pad=1", {"negative_slope": 0.0}),
    (
        "conv_bias_leakyrelu",
        "N=2,C=3,H=11,W=9,K=5,R=3,S=3,stride=2,pad=1",
        {"negative_slope": 0.25},
    ),
    (
        "conv_bias_leakyrelu",
        "N=2,C=3,H=11,W=9,K=5,R=3,S=3,stride=2,pad=1",
        {"negative_slope": -0.5},
    ),
    ("scale_relu_dropout", "N=4099", {"seed": 11}),
    ("scale_relu_dropout", "N=4099", {"p": 0.5, "scale": -2.0, "seed": 2**32 - 1}),
    ("layernorm_gelu", "R=5,H=33", {"eps": 0.5}),
]


@pytest.mark.parametrize(("op", "at", "given"), PARAMETERS)
def test_forward_opcheck_and_backward_at_parameters(
    ops: Ops, op: str, at: str, given: dict[str, Any]
) -> None:
    spec = get_op(op)
    shape = spec.validate_shape(Shape.parse(at))
    arrays, tensors = tensors_for(spec, shape, "float32", seed=5)
    keywords = {**attributes(spec, shape), **given}
    got = getattr(torch.ops.tilewise, op)(*tensors.values(), **keywords)
    wanted = spec.reference(arrays, shape, "float32", **given)
    assert_close(spec, shape, "float32", wanted, got, ())
    if op != "conv_bias_leakyrelu":  # the parameters are the defaults' no more
        default = getattr(torch.ops.tilewise, op)(*tensors.values(), **attributes(spec, shape))
        assert not torch.equal(got, default)
    result = torch.library.opcheck(
        getattr(torch.ops.tilewise, op).default, tuple(tensors.values()), keywords
    )
    assert set(result.values()) == {"SUCCESS"}, result

    ours = [t.clone().requires_grad_() for t in tensors.values()]
    theirs = [t.clone().requires_grad_() for t in tensors.values()]
    out = getattr(torch.ops.tilewise, op)(*ours, **keywords)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    out.backward(dout)
    _torch_references()[op](*theirs, **keywords).backward(dout)
    rtol, atol = spec.tolerance("float32", shape)
    for arg, a, b in zip(tensors, ours, theirs, strict=True):
        torch.testing.assert_close(
            a.grad, b.grad, rtol=rtol, atol=atol, msg=lambda m, arg=arg: f"{arg}: {m}"
        )


def test_the_dropout_parameters_are_keywords_the_seed_an_int() -> None:
    schema = torch.ops.tilewise.scale_relu_dropout.default._schema
    keywords = [(a.name, str(a.type), a.default_value) for a in schema.arguments if a.kwarg_only]
    assert keywords == [("scale", "float", 1.7), ("p", "float", 0.1), ("seed", "int", 20260522)]


def test_a_bad_conv_slope_is_an_input_error(ops: Ops) -> None:
    img, w, b = torch.randn(1, 3, 7, 7), torch.randn(5, 3, 3, 3), torch.randn(5)
    with pytest.raises(InputError, match="negative_slope must be finite"):
        torch.ops.tilewise.conv_bias_leakyrelu(
            img, w, b, stride=1, pad=0, negative_slope=float("inf")
        )


def test_import_tilewise_does_not_import_torch() -> None:
    code = "import sys, tilewise; tilewise.load_ops; print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False", done.stdout + done.stderr


def test_before_any_tune_the_ops_run_their_default_tilings_and_say_so(tmp_path: Path) -> None:
    # A fresh machine: the settings name a SQLite file nothing has created yet.
    code = (
        "import logging, torch, tilewise.torch\n"
        "logging.basicConfig()\n"
        "g, u = torch.randn(3, 16), torch.randn(3, 16)\n"
        "y = torch.ops.tilewise.swiglu(g, u)\n"
        "assert torch.allclose(y, torch.nn.functional.silu(g) * u, atol=1e-5)\n"
        "print(tilewise.torch.current_ops().last_choice.source)\n"
    )
    env = {
        **os.environ,
        "TILEWISE_DB_URL": f"sqlite:///{tmp_path / 'none' / 'tilewise.db'}",
        "TILEWISE_CACHE_DIR": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "default"
    assert "no tilings database yet" in done.stderr
    assert not (tmp_path / "none").exists()  # nothing created by running the model


def _torch_references() -> dict[str, Any]:
    """Each differentiable op's formula in torch, on the inputs in GM order (and attributes)."""
    from torch.nn import functional as F

    from tilewise.kernels.ops.conv_bias_leakyrelu.spec import ALPHA
    from tilewise.kernels.ops.layernorm_gelu.spec import EPS
    from tilewise.kernels.ops.scale_relu_dropout.spec import (
        DROP_P,
        SCALE,
        SEED,
        keep_mask,
        scale_keep,
    )

    def dropout(x: Any, scale: float = SCALE, p: float = DROP_P, seed: int = SEED) -> Any:
        keep = torch.from_numpy(keep_mask(x.numel(), seed, p)).reshape(x.shape)
        return torch.relu(x * float(scale_keep("float32", scale, p))) * keep

    return {
        "conv_bias_leakyrelu": lambda x, w, b, stride, pad, negative_slope=ALPHA: F.leaky_relu(
            F.conv2d(x, w, b, stride, pad), negative_slope
        ),
        "layernorm_gelu": lambda x, g, b, eps=EPS: F.gelu(
            F.layer_norm(x, (x.shape[-1],), g, b, eps), approximate="tanh"
        ),
        "linear_add_gelu": lambda x, w, b: F.gelu(x @ w + b, approximate="tanh"),
        "scale_relu_dropout": dropout,
        "swiglu": lambda g, u: F.silu(g) * u,
        "swiglu_mlp": lambda x, wg, wu: F.silu(x @ wg) * (x @ wu),
    }


DIFFERENTIABLE = sorted(tilewise.torch._grads.BACKWARDS)


def test_every_op_but_swiglu_grad_has_a_backward() -> None:
    assert set(DIFFERENTIABLE) == set(OPS) - {"swiglu_grad"}
    assert set(_torch_references()) == set(DIFFERENTIABLE)


@pytest.mark.slow
@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_backward_matches_autograd_of_the_torch_formula(
    ops: Ops, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # gradcheck wants float64, which no kernel takes: the op's backward is held instead to
    # autograd of the float32 formula, within the op's tolerance.
    spec = get_op(name)
    shape, lead = batched(spec, spec.example_shapes()[-1])
    _, tensors = tensors_for(spec, shape, "float32", lead)
    ours = [t.clone().requires_grad_() for t in tensors.values()]
    theirs = [t.clone().requires_grad_() for t in tensors.values()]
    out = getattr(torch.ops.tilewise, name)(*ours, **attributes(spec, shape))
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    launched: list[str] = []
    call = ops.call
    monkeypatch.setattr(ops, "call", lambda op, *a, **k: launched.append(op) or call(op, *a, **k))
    out.backward(dout)
    _torch_references()[name](*theirs, **attributes(spec, shape)).backward(dout)
    rtol, atol = spec.tolerance("float32", shape)
    for arg, a, b in zip(tensors, ours, theirs, strict=True):
        torch.testing.assert_close(
            a.grad, b.grad, rtol=rtol, atol=atol, msg=lambda m, arg=arg: f"{arg}: {m}"
        )
    # swiglu's backward is the fused kernel, and so is swiglu_mlp's elementwise part.
    assert launched == (["swiglu_grad"] if name in ("swiglu", "swiglu_mlp") else [])


class GeluThenSwiglu(torch.nn.Module):
    """x -> linear_add_gelu twice (gate and up) -> swiglu: the ops in a model's MLP."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        make = torch.Generator().manual_seed(0)
        self.wg = torch.nn.Parameter(torch.randn(hidden, inner, generator=make) / hidden**0.5)
        self.wu = torch.nn.Parameter(torch.randn(hidden, inner, generator=make) / hidden**0.5)
        self.b = torch.nn.Parameter(torch.zeros(inner))

    def forward(self, x: Any) -> Any:
        gate = torch.ops.tilewise.linear_add_gelu(x, self.wg, self.b)
        up = torch.ops.tilewise.linear_add_gelu(x, self.wu, self.b)
        return torch.ops.tilewise.swiglu(gate, up)


@pytest.mark.slow
# Inductor itself calls the deprecated torch.jit.script_method (torch 2.13), which the
# project's warnings-as-errors would turn into a compile failure.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_torch_compile_fullgraph_matches_eager(ops: Ops) -> None:
    module, x = GeluThenSwiglu(24, 40), torch.randn(2, 5, 24)
    compiled_module = torch.compile(module, fullgraph=True)
    compiled = compiled_module(x)
    torch.testing.assert_close(compiled, module(x))
    # A second batch shape recompiles with symbolic sizes: the fake impls' symbolic path.
    other = torch.randn(3, 7, 24)
    torch.testing.assert_close(compiled_module(other), module(other))
    compiled.sum().backward()
    assert module.wg.grad is not None and module.wg.grad.abs().sum() > 0


@pytest.mark.slow
def test_torch_export_traces_the_ops_and_the_program_runs(ops: Ops) -> None:
    module, x = GeluThenSwiglu(24, 40), torch.randn(2, 5, 24)
    program = torch.export.export(module, (x,))
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert {"tilewise.linear_add_gelu.default", "tilewise.swiglu.default"} <= targets
    torch.testing.assert_close(program.module()(x), module(x))
