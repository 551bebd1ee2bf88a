"""tilewise.load_ops: the tuned kernels called on numpy arrays, launched in this process.

Every output is compared with the op's numpy reference within its tolerance."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from tests_support import host_toolchain

import tilewise
from tests.api._support import live_server, make_settings
from tilewise import store as st
from tilewise.errors import BackendError, InputError
from tilewise.export import TableEntry, dump_document, table_document
from tilewise.kernels.backends._cpu_twin import CpuTwinBackend
from tilewise.kernels.ops import OpSpec, _memo, get_op, list_ops
from tilewise.kernels.targets import get_target
from tilewise.launch import Ops, load_ops
from tilewise.launch._host import Host
from tilewise.launch._twin import TwinLaunch
from tilewise.runtime import TilingTable
from tilewise.settings import Settings, get_settings
from tilewise.types import Shape, Tiling, Workload

TWIN = get_target("cpu-twin")
LAG = get_op("linear_add_gelu")
ODD = Shape({"M": 37, "N": 96, "K": 80})
ONE_ROW = Shape({"M": 1, "N": 96, "K": 80})


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """One build cache for the module: each variant compiles once."""
    return Settings(cache_dir=tmp_path_factory.mktemp("cache"))


def table_entry(spec: OpSpec, shape: Shape, dtype: str, tiling: Tiling) -> TableEntry:
    return TableEntry(spec.name, spec.version, "cpu-twin", dtype, shape, tiling, 1.0, None, None, 1)


def inputs_for(spec: OpSpec, shape: Shape, dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    """The spec's inputs, shaped as a caller passes them (OpSpec.layout)."""
    made = spec.make_inputs(shape, dtype, np.random.default_rng(seed))
    shapes = spec.array_shapes(shape)
    return {name: np.ascontiguousarray(value.reshape(shapes[name])) for name, value in made.items()}


def assert_matches(spec: OpSpec, shape: Shape, dtype: str, inputs: Mapping[str, Any], got: Any,  # type: ignore[no-untyped-def]
                   **parameters: float):  # fmt: skip
    """``got`` (the op's output, or the tuple of its outputs) against the reference (with the
    op's ``parameters`` given, the others at their defaults)."""
    wanted = spec.reference(inputs, shape, dtype, **parameters)
    outputs = got if isinstance(got, tuple) else (got,)
    assert len(outputs) == len(wanted), (len(outputs), list(wanted))
    rtol, atol = spec.tolerance(dtype, shape)
    for (name, want), out in zip(wanted.items(), outputs, strict=True):
        assert out.shape == spec.array_shapes(shape)[name] and out.dtype == want.dtype, name
        got32, want32 = out.astype(np.float32).ravel(), want.astype(np.float32).ravel()
        error = np.abs(got32 - want32)
        bad = ~(error <= np.float32(atol) + np.float32(rtol) * np.abs(want32))  # NaN is bad
        assert not bad.any(), f"{spec.name} {dtype} {dict(shape)} {name}: {int(bad.sum())} wrong"


def call(ops: Ops, spec: OpSpec, shape: Shape, dtype: str, **kw: Any) -> Any:
    inputs = inputs_for(spec, shape, dtype)
    attributes = {a: shape[a] for a in spec.attributes}
    out: Any = getattr(ops, spec.name)(*inputs.values(), **attributes, **kw)
    assert_matches(spec, shape, dtype, inputs, out)
    return out


def other_tiling(spec: OpSpec, shape: Shape, dtype: str) -> Tiling:
    """A valid tiling that is not the default, differing in one field: a runtime one where
    one can (no new build), else a compile-time one."""
    default = spec.default_tiling(shape, dtype, TWIN)
    for tunable in spec.tunables(shape, dtype, TWIN):
        for value in tunable.values:
            candidate = default.replace(**{tunable.name: value})
            if value != default[tunable.name] and spec.valid(candidate, shape, dtype, TWIN):
                return candidate
    raise AssertionError(f"{spec.name} {dict(shape)}: no other valid tiling")


def neighbour(spec: OpSpec, shape: Shape, dtype: str) -> tuple[TableEntry, Tiling]:
    """An entry at another shape whose tiling (not the default there: a default carries over as
    the default), carried over to ``shape``, passes the checks there; and that carried tiling."""
    for dim in spec.dims:
        for value in (shape[dim] + 1, shape[dim] * 2, shape[dim] - 1):
            try:
                near = spec.validate_shape({**shape, dim: value})
            except InputError:
                continue
            tiling = other_tiling(spec, near, dtype)
            carried = spec.carry(tiling, near, shape, dtype, TWIN)
            if near != shape and carried is not None and spec.valid(carried, shape, dtype, TWIN):
                return table_entry(spec, near, dtype, tiling), carried
    raise AssertionError(f"{spec.name} {dict(shape)}: no neighbour's tiling fits")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("spec", list_ops(), ids=lambda s: s.name)
def test_every_op_at_its_examples_exact_nearest_and_default(
    spec: OpSpec, dtype: str, settings: Settings
) -> None:
    for shape in spec.example_shapes():
        tiling = other_tiling(spec, shape, dtype)
        near, carried = neighbour(spec, shape, dtype)
        for table, source, want in (
            (TilingTable([table_entry(spec, shape, dtype, tiling)]), "exact", tiling),
            (TilingTable([near]), "nearest", carried),
            (TilingTable([]), "default", spec.default_tiling(shape, dtype, TWIN)),
        ):
            ops = load_ops(table, settings=settings)
            call(ops, spec, shape, dtype)
            choice = ops.last_choice
            assert choice is not None
            assert (choice.op, choice.dtype, choice.shape) == (spec.name, dtype, shape)
            assert (choice.source, choice.tiling) == (source, want)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", [ODD, ONE_ROW], ids=str)
def test_odd_shapes(shape: Shape, dtype: str, settings: Settings) -> None:
    ops = load_ops(TilingTable([]), settings=settings)
    call(ops, LAG, shape, dtype)
    assert ops.last_choice is not None and ops.last_choice.shape == shape


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_special_values_come_out_as_the_reference_gives_them(
    dtype: str, settings: Settings
) -> None:
    """relu(NaN) is NaN, in the reference (numpy's maximum) as in PyTorch: the kernel's
    compare-based ReLU turned it into a 0, hiding a NaN. Infinities and signed zeros too."""
    spec = get_op("scale_relu_dropout")
    values = [np.nan, 1.0, -np.nan, -2.0, np.inf, -np.inf, 0.0, -0.0]
    x = np.array(values * 64, dtype=np.dtype(dtype))
    shape = Shape({"N": x.size})
    got = load_ops(TilingTable([]), settings=settings).scale_relu_dropout(x)
    want = spec.reference({"x": x}, shape, dtype)["y"]
    assert np.isnan(got).sum() > 0
    np.testing.assert_array_equal(got, want)  # NaN where the reference has NaN


def test_an_entry_failing_the_checks_never_runs(settings: Settings) -> None:
    default = LAG.default_tiling(ODD, "float32", TWIN)
    broken = default.replace(baseM=256)  # in its domain, larger than the single-core block
    assert not LAG.valid(broken, ODD, "float32", TWIN)
    ops = load_ops(TilingTable([table_entry(LAG, ODD, "float32", broken)]), settings=settings)
    call(ops, LAG, ODD, "float32")
    assert ops.last_choice is not None
    assert (ops.last_choice.source, ops.last_choice.tiling) == ("default", default)


def test_a_shape_no_checked_tiling_fits_is_refused_before_any_build(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 1-D signal as NCHW: the input window of a 3-wide filter over 48,000 columns needs more
    # UB than the chip has, in the default tiling as in any other.
    x = np.ones((1, 16, 1, 48000), np.float32)
    w, b = np.ones((16, 16, 1, 3), np.float32), np.zeros(16, np.float32)
    ops = load_ops(TilingTable([]), settings=settings)
    monkeypatch.setattr(CpuTwinBackend, "build", lambda *a, **k: pytest.fail("built"))
    with pytest.raises(InputError, match=r"the op's default tiling fails its checks .*UB overflow"):
        ops.conv_bias_leakyrelu(x, w, b, stride=1, pad=1)


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("launched")

    monkeypatch.setattr(Host, "launch", refuse)


def _good() -> dict[str, np.ndarray]:
    return inputs_for(LAG, ODD, "float32")


def _bad_calls() -> Iterator[tuple[str, tuple[Any, ...], dict[str, Any], str]]:
    g = _good()
    x, w, b = g["x"], g["w"], g["bias"]
    out = np.empty((37, 96), np.float32)
    yield "list", (x.tolist(), w, b), {}, r"x must be a numpy array, got list"
    yield "float64", (x.astype(np.float64), w, b), {}, r"x has dtype float64; supported"
    yield "big-endian", (x.astype(">f4"), w, b), {}, r"x has dtype >f4; supported"
    yield "mixed", (x, w.astype(np.float16), b), {}, r"w has dtype float16, but x has float32"
    yield "strided", (x, np.asfortranarray(w), b), {}, r"w must be C-contiguous"
    yield "rank", (x.reshape(-1), w, b), {}, r"x must have 2 dimensions \(M, K\)"
    yield "dims", (x, w[:79], b), {}, r"w has K=79 \(axis 0\), but x has K=80"
    yield "bias", (x, w, b[:95]), {}, r"bias has N=95 \(axis 0\), but w has N=96"
    yield "empty", (x[:0], w, b), {}, r"dim M must be positive, got 0"
    yield "too many", (x, w, b, b), {}, r"takes 3 arrays \(x, w, bias\), got 4"
    yield "missing", (x, w), {}, r"missing input bias$"
    yield "misspelt", (x, w), {"b": b}, r"missing input bias \(got unknown keyword b\)"
    unaligned = np.frombuffer(bytearray(x.nbytes + 1), np.float32, offset=1, count=x.size)
    yield "unaligned", (unaligned.reshape(x.shape), w, b), {}, r"aligned \(np.require\(a, req"
    yield "twice", (x, w, b), {"w": w}, r"w given twice"
    yield "keyword", (x, w, b), {"stride": 1}, r"unknown keyword stride"
    yield "out shape", (x, w, b), {"out": out[:36]}, r"out \(out\) must be a float32 array"
    yield "out dtype", (x, w, b), {"out": np.empty((37, 96), np.float16)}, r"of shape \(37, 96\)"
    yield "out strided", (x, w, b), {"out": np.empty((96, 37), np.float32).T}, "C-contiguous"
    readonly = out.copy()
    readonly.flags.writeable = False
    yield "out read-only", (x, w, b), {"out": readonly}, r"out \(out\) is read-only"
    shared = np.empty(37 * 96 + 37 * 80, np.float32)
    xs = shared[: 37 * 80].reshape(37, 80)
    xs[...] = x
    yield "out overlaps", (xs, w, b), {"out": shared[37 * 80 - 1 : -1].reshape(37, 96)}, "overlaps"


BAD = list(_bad_calls())


@pytest.mark.usefixtures("no_launch")
@pytest.mark.parametrize(
    ("args", "kwargs", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD]
)
def test_bad_inputs_are_refused_before_any_launch(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str, settings: Settings
) -> None:
    ops = load_ops(TilingTable([]), settings=settings)
    with pytest.raises(InputError, match=message):
        ops.linear_add_gelu(*args, **kwargs)
    assert ops.last_choice is None


def test_an_op_name_misspelt_gets_a_hint(settings: Settings) -> None:
    ops = load_ops(TilingTable([]), settings=settings)
    with pytest.raises(AttributeError, match=r"has no op 'swigl' \(did you mean swiglu\?\)"):
        ops.swigl  # noqa: B018
    with pytest.raises(AttributeError, match=r"has no op 'matmul'$"):
        ops.matmul  # noqa: B018


def test_a_call_checked_before_lets_no_other_call_through(settings: Settings) -> None:
    """A kept plan serves the same call only: not the same shapes under other names, not an
    attribute of another type."""
    ops = load_ops(TilingTable([]), settings=settings)
    g = _good()
    ops.linear_add_gelu(g["x"], g["w"], g["bias"])
    # x's and w's arrays swapped by keyword: the shapes of the call before, in its order.
    with pytest.raises(InputError, match=r"w has K=37 \(axis 0\), but x has K=96"):
        ops.linear_add_gelu(w=g["x"], x=g["w"], bias=g["bias"])
    conv = get_op("conv_bias_leakyrelu")
    shape = conv.example_shapes()[0]  # stride=2, pad=1
    inputs = inputs_for(conv, shape, "float32")
    ops.conv_bias_leakyrelu(*inputs.values(), stride=2, pad=1)
    for stride in (2.0, np.float64(2)):
        with pytest.raises(InputError, match="dim stride must be an integer"):
            ops.conv_bias_leakyrelu(*inputs.values(), stride=stride, pad=1)
    with pytest.raises(InputError, match="dim pad must be an integer"):
        ops.conv_bias_leakyrelu(*inputs.values(), stride=2, pad=True)
    # The same shapes and attributes in another dtype: a plan of its own.
    halves = {name: value.astype(np.float16) for name, value in inputs.items()}
    got = ops.conv_bias_leakyrelu(*halves.values(), stride=2, pad=1)
    assert got.dtype == np.float16
    assert_matches(conv, shape, "float16", halves, got)


def test_output_shapes_and_launch_name_a_missing_input(settings: Settings) -> None:
    ops = load_ops(TilingTable([]), settings=settings)
    shapes = {"x": (37, 80), "w": (80, 96)}
    with pytest.raises(InputError, match="no shape for the input bias"):
        ops.output_shapes("linear_add_gelu", "float32", shapes, {})
    with pytest.raises(InputError, match="no shape for the input bias"):
        ops.launch("linear_add_gelu", "float32", shapes, {}, {})
    with pytest.raises(InputError, match="no shape for the input bias"):
        LAG.shape_of(shapes, {})
    # Lists for tuples: read, not kept (a list is no dict key).
    as_lists = {"x": [37, 80], "w": [80, 96], "bias": [96]}
    assert ops.output_shapes("linear_add_gelu", "float32", as_lists, {}) == {"out": (37, 96)}


def test_a_shape_too_large_for_the_tiling_struct_is_an_input_error(settings: Settings) -> None:
    """2**31 elements and more overflow swiglu's int32 totalLength: refused before a build."""
    ops = load_ops(TilingTable([]), settings=settings)
    big = (65536, 32769)
    with pytest.raises(
        InputError, match=r"totalLength = 2147549184 does not fit the kernel's int32"
    ):
        ops.output_shapes("swiglu", "float16", {"g": big, "u": big}, {})


def test_load_ops_names_a_bad_source_or_device_on_the_twin_too(settings: Settings) -> None:
    for device in (-1, "a", True, 1.0):
        with pytest.raises(InputError, match="device must be a non-negative integer"):
            load_ops(TilingTable([]), device=device, settings=settings)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"load_ops takes a TilingTable, .* got int"):
        load_ops(5, settings=settings)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="named by a path, got NoneType"):
        TilingTable.from_file(None)  # type: ignore[arg-type]


def test_unknown_op_and_conv_attributes(settings: Settings) -> None:
    ops = load_ops(TilingTable([]), settings=settings)
    with pytest.raises(AttributeError, match="no op 'matmul'"):
        ops.matmul  # noqa: B018
    assert {s.name for s in list_ops()} <= set(dir(ops))
    conv = get_op("conv_bias_leakyrelu")
    g = inputs_for(conv, conv.example_shapes()[0], "float32")
    with pytest.raises(InputError, match="missing keyword pad"):
        ops.conv_bias_leakyrelu(*g.values(), stride=2)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_conv_slope_is_a_parameter_every_slope_runs_with_one_plan(
    dtype: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = get_op("conv_bias_leakyrelu")
    shape = conv.validate_shape(Shape.parse("N=2,C=3,H=11,W=9,K=7,R=2,S=3,stride=2,pad=1"))
    tiling = other_tiling(conv, shape, dtype)
    ops = load_ops(TilingTable([table_entry(conv, shape, dtype, tiling)]), settings=settings)
    inputs = inputs_for(conv, shape, dtype, seed=4)
    rtol, atol = conv.tolerance(dtype, shape)
    outputs = {}
    for slope in (0.0, 0.2, -0.5, 0.1, None):
        given = {} if slope is None else {"negative_slope": slope}
        got = ops.conv_bias_leakyrelu(*inputs.values(), stride=2, pad=1, **given)
        want = conv.reference(inputs, shape, dtype, **given)["out"]
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=rtol, atol=atol)
        assert ops.last_choice is not None
        assert (ops.last_choice.tiling, ops.last_choice.source) == (tiling, "exact")
        outputs[slope] = got
    assert len(ops._plans) == 1  # the slope is no part of the plan's key
    assert (outputs[0.0] >= 0).all() and (outputs[0.2] < 0).any() and (outputs[-0.5] > 0).all()
    np.testing.assert_array_equal(outputs[None], outputs[0.1])  # the default is 0.1

    launched: list[str] = []
    monkeypatch.setattr(Host, "launch", lambda *a, **k: launched.append("x"))
    for bad, message in (
        (float("nan"), "negative_slope must be finite"),
        ("0", "negative_slope must be a real number"),
        (True, "negative_slope must be a real number"),
    ):
        with pytest.raises(InputError, match=message):
            ops.conv_bias_leakyrelu(*inputs.values(), stride=2, pad=1, negative_slope=bad)
    with pytest.raises(InputError, match="unknown keyword negative_slope; attributes: none"):
        ops.linear_add_gelu(*inputs_for(LAG, ODD, dtype).values(), negative_slope=0.0)
    assert launched == []


def test_out_is_written_in_place(settings: Settings) -> None:
    ops = load_ops(TilingTable([]), settings=settings)
    g = _good()
    out = np.full((37, 96), np.nan, np.float32)
    address = out.ctypes.data
    for _ in range(3):
        got = ops.linear_add_gelu(g["x"], g["w"], bias=g["bias"], out=out)
        assert got is out and out.ctypes.data == address
    assert_matches(LAG, ODD, "float32", g, out)


def test_read_only_inputs_and_views_are_launched_from_their_own_data(settings: Settings) -> None:
    # The launch reads each array's address through ctypes' from_buffer, which refuses a
    # read-only buffer: such an input takes .ctypes instead, and gives the same result.
    ops = load_ops(TilingTable([]), settings=settings)
    g = _good()
    expected = ops.linear_add_gelu(g["x"], g["w"], bias=g["bias"])
    frozen = {name: value.copy() for name, value in g.items()}
    for value in frozen.values():
        value.flags.writeable = False
    got = ops.linear_add_gelu(frozen["x"], frozen["w"], bias=frozen["bias"])
    assert np.array_equal(got, expected)
    # A view into a larger buffer, at an offset: its own data is launched, not the buffer's.
    offset = np.concatenate([np.zeros(5, np.float32), g["bias"]])[5:]
    assert np.array_equal(ops.linear_add_gelu(g["x"], g["w"], bias=offset), expected)


def test_an_op_with_two_outputs_returns_and_takes_a_tuple(settings: Settings) -> None:
    grad = get_op("swiglu_grad")
    shape = grad.example_shapes()[-1]
    ops = load_ops(TilingTable([]), settings=settings)
    inputs = inputs_for(grad, shape, "float32")
    dg, du = call(ops, grad, shape, "float32")
    out = (np.empty_like(dg), np.empty_like(du))
    got = ops.swiglu_grad(*inputs.values(), out=out)
    assert got[0] is out[0] and got[1] is out[1]
    assert_matches(grad, shape, "float32", inputs, got)
    with pytest.raises(InputError, match=r"out must be a tuple of 2 arrays \(dg, du\), got 1"):
        ops.swiglu_grad(*inputs.values(), out=out[0])
    with pytest.raises(InputError, match=r"out \(du\) overlaps out \(dg\)$"):
        ops.swiglu_grad(*inputs.values(), out=(out[0], out[0]))
    first = next(iter(inputs))
    with pytest.raises(InputError, match=rf"out \(dg\) overlaps the input {first}$"):
        ops.swiglu_grad(*inputs.values(), out=(inputs[first], out[1]))
    listed = ops.swiglu_grad(*inputs.values(), out=list(out))  # a list for the tuple
    assert listed[0] is out[0] and listed[1] is out[1]


def test_variants_come_from_the_tuners_build_cache(settings: Settings) -> None:
    ops = load_ops(TilingTable([]), settings=settings)
    call(ops, LAG, ODD, "float32")
    assert ops.last_choice is not None
    defines = LAG.compile_key(ops.last_choice.tiling, "float32")
    assert CpuTwinBackend(settings).build(LAG, defines).cached


def test_a_kernel_error_is_a_backend_error(settings: Settings) -> None:
    ops = load_ops(TilingTable([]), settings=settings)
    g = _good()
    out = ops.linear_add_gelu(*g.values())
    plan = ops._plan(LAG, "float32", {name: a.shape for name, a in g.items()}, {})
    launch = plan.launch
    assert isinstance(launch, TwinLaunch)
    with pytest.raises(BackendError, match="n_gm is 4, the kernel expects 5"):
        launch.host.launch(launch.variant, [a.ctypes.data for a in (*g.values(), out)], {},
                           launch.packed, launch.block_dim, launch.limits)  # fmt: skip
    assert launch.host.threads == CpuTwinBackend(settings).threads


# Python 3.12+ warns of any fork in a process with threads (the pool's): that is the case here.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_launches_on_a_pool_of_its_own(settings: Settings) -> None:
    # The parent's pool threads are not in the child: without a pool of its own, its first
    # launch waited for them forever (a DataLoader worker, multiprocessing with fork).
    ops = load_ops(TilingTable([]), settings=settings)
    spec = get_op("swiglu")
    inputs = inputs_for(spec, Shape({"T": 2, "I": 16}), "float32")
    expected = ops.swiglu(**inputs)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only when both launches give the parent's answer
        try:
            signal.alarm(60)
            fresh = load_ops(TilingTable([]), settings=settings).swiglu(**inputs)
            again = ops.swiglu(**inputs)
            os._exit(
                0 if np.array_equal(fresh, expected) and np.array_equal(again, expected) else 3
            )
        finally:
            os._exit(4)
    deadline = time.monotonic() + 90
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's launch did not return")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    assert np.array_equal(ops.swiglu(**inputs), expected)  # the parent's pool still serves


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_finds_the_locks_another_thread_held_free(settings: Settings) -> None:
    # Another thread of the parent building a variant (the plan lock), keeping an answer (the
    # table's) or making an op's memo when the fork came: in the child that lock was held for
    # ever.
    table = TilingTable([])
    ops = load_ops(table, settings=settings)
    spec = get_op("swiglu")
    inputs = inputs_for(spec, Shape({"T": 3, "I": 16}), "float32")
    want = spec.reference(inputs, Shape({"T": 3, "I": 16}), "float32")["out"]
    _memo._MEMOS.clear()  # the child makes the op's memos anew
    held = [ops._lock, table._lock, table._miss_lock, _memo._MEMOS_LOCK]
    for lock in held:
        lock.acquire()
    try:
        pid = os.fork()
        if pid == 0:  # the child: a shape no plan is kept for needs every lock
            try:
                signal.alarm(60)
                got = ops.swiglu(**inputs)
                os._exit(0 if np.allclose(got, want, rtol=1e-5, atol=1e-5) else 3)
            finally:
                os._exit(4)
    finally:
        for lock in held:
            lock.release()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # -14: SIGALRM, the child waited


def test_two_threads_get_their_own_answers_and_choices(settings: Settings) -> None:
    ops = load_ops(TilingTable([]), settings=settings)
    errors: list[BaseException] = []

    def work(shape: Shape, dtype: str) -> None:
        try:
            for _ in range(20):
                call(ops, LAG, shape, dtype)
                assert ops.last_choice is not None and ops.last_choice.shape == shape
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=(ODD, "float32")),
        threading.Thread(target=work, args=(ONE_ROW, "float16")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert ops.last_choice is None  # this thread called nothing


# ---------------------------------------------------------------------------------------------
# Where the table comes from


@pytest.fixture
def tuned(db_url: str) -> Iterator[tuple[str, Tiling]]:
    """A database with one linear_add_gelu entry at ODD (a tiling other than the default)."""
    tiling = other_tiling(LAG, ODD, "float32")
    store = st.open_store(db_url)
    try:
        with store.session() as session:
            row = st.commit_workload(
                session, Workload(LAG.name, LAG.version, "cpu-twin", "float32", ODD)
            )
            record = st.add_record(session, workload_id=row.id, tiling=tiling, status="ok",
                                   latency_us=5.0, source="search", env={"host": "test"},
                                   toolchain=host_toolchain())  # fmt: skip
            st.upsert_tiling(session, workload_id=row.id, record_id=record.id, tiling=tiling,
                             latency_us=5.0, default_latency_us=9.0, speedup=1.8, evaluations=3,
                             toolchain=host_toolchain())  # fmt: skip
    finally:
        store.close()
    yield db_url, tiling


def _document(url: str) -> str:
    store = st.open_store(url, create=False)
    try:
        with store.session() as session:
            return dump_document(table_document(session))
    finally:
        store.close()


def _runs_exact(ops: Ops, tiling: Tiling) -> None:
    call(ops, LAG, ODD, "float32")
    assert ops.last_choice is not None
    assert (ops.last_choice.source, ops.last_choice.tiling) == ("exact", tiling)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_load_ops_from_a_database_url_a_file_and_a_service(
    tuned: tuple[str, Tiling], settings: Settings, tmp_path: Path
) -> None:
    url, tiling = tuned
    _runs_exact(load_ops(url, settings=settings), tiling)

    path = tmp_path / "tilings.json"
    path.write_text(_document(url))
    _runs_exact(load_ops(path, settings=settings), tiling)
    _runs_exact(load_ops(str(path), settings=settings), tiling)

    seen: list[httpx.Request] = []

    def serve(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text=path.read_text())

    ops = load_ops("http://tw.example/", settings=settings, transport=httpx.MockTransport(serve))
    _runs_exact(ops, tiling)
    [request] = seen
    assert request.url.path == "/v1/tables"
    assert dict(request.url.params) == {"format": "json", "target": "cpu-twin"}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_load_ops_from_a_live_service(tuned: tuple[str, Tiling], settings: Settings) -> None:
    url, tiling = tuned
    with live_server(make_settings(url)) as base:
        _runs_exact(load_ops(base, settings=settings), tiling)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_load_ops_defaults_to_the_settings_database(
    tuned: tuple[str, Tiling], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, tiling = tuned
    monkeypatch.setenv("TILEWISE_DB_URL", url)
    monkeypatch.setenv("TILEWISE_CACHE_DIR", str(settings.cache_dir))
    get_settings.cache_clear()
    try:
        _runs_exact(tilewise.load_ops(), tiling)
    finally:
        get_settings.cache_clear()
