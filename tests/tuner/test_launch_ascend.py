"""tilewise.load_ops on an Ascend target, against the fake CANN toolkit only (never an NPU).

The fake toolkit in twin mode (tests/kernels/backends/ascend/fake_cann) builds the Ascend
backend's generated project for real (CMake, the ACL host runner and ``liblauncher.so``); its
ACL runs on host memory and its "kernel library" is the op's own Ascend C file compiled against
the CPU twin. So these tests prove the launch path from Python (the project, the launcher's C
ABI, dlopen of each variant's kernel library, the copies in and out, the tiling looked up for
the Ascend target, the errors), and that the kernels compute the reference answer with the
Ascend target's tilings on the twin; they prove nothing about the device.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.kernels.backends.ascend.ascend_fakes import FakeNpuHost, install_npu_host
from tests.tuner.test_launch import assert_matches, call, inputs_for
from tilewise.errors import BackendError, InputError
from tilewise.export import TableEntry
from tilewise.kernels.backends._ascend.backend import AscendBackend
from tilewise.kernels.ops import OpSpec, get_op, list_ops
from tilewise.kernels.targets import TargetProfile, get_target
from tilewise.launch import Ops, load_ops
from tilewise.launch._ascend import AclVariant, AscendLaunch
from tilewise.runtime import TilingTable
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling

pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("g++") is None, reason="needs cmake and g++"
)

TARGET = "ascend910b2"
SRD = get_op("scale_relu_dropout")


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeNpuHost]:
    """One fake host and build cache for the module: each variant builds once."""
    host = install_npu_host(tmp_path_factory.mktemp("npu-host"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ASCEND_HOME_PATH", str(host.home))
        patch.delenv("TILEWISE_ASCEND_RUN_MODE", raising=False)
        patch.setattr(AscendBackend, "dev_root", host.dev)
        yield host


@pytest.fixture(scope="module")
def ascend(fake: FakeNpuHost) -> TargetProfile:
    return get_target(TARGET)


def entry(spec: OpSpec, target: str, shape: Shape, dtype: str, tiling: Tiling) -> TableEntry:
    return TableEntry(spec.name, spec.version, target, dtype, shape, tiling, 1.0, None, None, 1)


def other_tiling(spec: OpSpec, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
    """A valid tiling of ``target`` other than its default, differing in a runtime field."""
    default = spec.default_tiling(shape, dtype, target)
    for tunable in spec.runtime_tunables(shape, dtype, target):
        for value in tunable.values:
            candidate = default.replace(**{tunable.name: value})
            if value != default[tunable.name] and spec.valid(candidate, shape, dtype, target):
                return candidate
    raise AssertionError(f"{spec.name} {dict(shape)}: no other valid tiling")


@pytest.mark.slow
@pytest.mark.parametrize("spec", list_ops(), ids=lambda s: s.name)
def test_every_op_runs_through_the_ascend_launcher_with_the_ascend_default(
    spec: OpSpec, fake: FakeNpuHost, ascend: TargetProfile
) -> None:
    shape = spec.example_shapes()[-1]
    ops = load_ops(TilingTable([]), target=TARGET, settings=fake.settings)
    assert ops.target == TARGET
    call(ops, spec, shape, "float32")
    choice = ops.last_choice
    assert choice is not None and choice.source == "default"
    assert choice.tiling == spec.default_tiling(shape, "float32", ascend)


@pytest.mark.slow
def test_float16_and_float32_variants_of_one_op_each_load_their_own_kernel_library(
    fake: FakeNpuHost,
) -> None:
    """Every variant's kernel library is called libkernels.so: loaded by name, the second
    would bind to the first (float32 code on float16 data: wrong answers or a crash)."""
    lag = get_op("linear_add_gelu")
    shape = Shape({"M": 37, "N": 96, "K": 80})
    ops = load_ops(TilingTable([]), target=TARGET, settings=fake.settings)
    for dtype in ("float32", "float16", "float32"):
        call(ops, lag, shape, dtype)


@pytest.mark.slow
def test_the_tiling_is_the_ascend_targets_entry_not_the_twins(
    fake: FakeNpuHost, ascend: TargetProfile
) -> None:
    shape = Shape({"N": 70001})
    tuned = other_tiling(SRD, shape, "float32", ascend)
    twin = SRD.default_tiling(shape, "float32", get_target("cpu-twin")).replace(tileLength=1024)
    assert twin != tuned and SRD.valid(twin, shape, "float32", get_target("cpu-twin"))
    table = TilingTable(
        [
            entry(SRD, TARGET, shape, "float32", tuned),
            entry(SRD, "cpu-twin", shape, "float32", twin),
        ]
    )
    ops = load_ops(table, target=TARGET, settings=fake.settings)
    call(ops, SRD, shape, "float32")
    assert ops.last_choice is not None
    assert (ops.last_choice.source, ops.last_choice.tiling) == ("exact", tuned)
    on_twin = load_ops(table, settings=fake.settings)
    call(on_twin, SRD, shape, "float32")
    assert on_twin.last_choice is not None and on_twin.last_choice.tiling == twin


@pytest.mark.slow
def test_out_is_written_and_device_addresses_are_used_as_they_are(fake: FakeNpuHost) -> None:
    """``out=`` receives the copy back; ``launch(device_memory=True)`` hands the addresses to
    the kernel as device memory (the fake ACL's device memory is host memory)."""
    shape = Shape({"N": 8192})
    ops = load_ops(TilingTable([]), target=TARGET, settings=fake.settings)
    x = inputs_for(SRD, shape, "float32")["x"]
    out = np.full_like(x, np.nan)
    assert ops.scale_relu_dropout(x, out=out) is out
    assert_matches(SRD, shape, "float32", {"x": x}, out)
    for device_memory in (True, False):
        y = np.full_like(x, np.nan)
        shapes = {"x": x.shape}
        assert ops.output_shapes(SRD.name, "float32", shapes, {}) == {"y": y.shape}
        choice = ops.launch(
            SRD.name, "float32", shapes, {}, {"x": x.ctypes.data, "y": y.ctypes.data},
            device_memory=device_memory, device=0,
        )  # fmt: skip
        assert choice == ops.last_choice and choice.shape == shape
        assert_matches(SRD, shape, "float32", {"x": x}, y)


@pytest.mark.slow
def test_the_conv_slope_is_packed_per_call_into_the_same_variant(fake: FakeNpuHost) -> None:
    conv = get_op("conv_bias_leakyrelu")
    shape = conv.example_shapes()[-1]  # built already by the every-op test when run with it
    ops = load_ops(TilingTable([]), target=TARGET, settings=fake.settings)
    inputs = inputs_for(conv, shape, "float32", seed=3)
    keywords = {a: shape[a] for a in conv.attributes}
    got = {}
    for slope in (0.0, -0.5, None):
        given = {} if slope is None else {"negative_slope": slope}
        got[slope] = ops.conv_bias_leakyrelu(*inputs.values(), **keywords, **given)
        assert_matches(conv, shape, "float32", inputs, got[slope], **given)
    assert len(ops._plans) == 1
    assert (got[0.0] >= 0).all() and (got[-0.5] > 0).all() and (got[None] < 0).any()


@pytest.mark.slow
def test_a_kernel_fault_is_a_backend_error_with_the_acl_meaning(
    fake: FakeNpuHost, ascend: TargetProfile
) -> None:
    shape = Shape({"N": 4096})
    ops = load_ops(TilingTable([]), target=TARGET, settings=fake.settings)
    x = inputs_for(SRD, shape, "float32")["x"]
    y = ops.scale_relu_dropout(x)
    launch = ops._plan(SRD, "float32", {"x": x.shape}, {}).launch
    assert isinstance(launch, AscendLaunch)
    # The same variant with a tile no UB holds: the twin under the fake kernel refuses it, and
    # ACL reports it at the stream's synchronisation, as an AI Core exception.
    tiling = SRD.default_tiling(shape, "float32", ascend).replace(tileLength=16384)
    assert not SRD.valid(tiling, shape, "float32", ascend)
    broken = dataclasses.replace(launch, packed=SRD.pack_tiling(tiling, shape, "float32", ascend))
    gm = [x.ctypes.data, y.ctypes.data, None]
    with pytest.raises(BackendError, match=r"aclrtSynchronizeStream failed: aclError 507015: "
                       r"block 0: InitBuffer: UB overflow.*ACL_ERROR_RT_AICORE_EXCEPTION"):  # fmt: skip
        broken(gm)
    with pytest.raises(BackendError, match="n_gm is 2, scale_relu_dropout takes 3"):
        launch(gm[:2])
    with pytest.raises(BackendError, match=r"aclrtSetDevice failed: aclError 107001.*no such"):
        launch(gm, device=9)
    launch(gm)  # the device is still usable after each of those
    assert_matches(SRD, shape, "float32", {"x": x}, y)


def test_bad_inputs_are_refused_before_any_launch(
    fake: FakeNpuHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("launched")

    monkeypatch.setattr(AclVariant, "run", refuse)
    ops = load_ops(TilingTable([]), target=TARGET, settings=fake.settings)
    x = np.ones(64, np.float32)
    with pytest.raises(InputError, match="x has dtype float64; supported"):
        ops.scale_relu_dropout(x.astype(np.float64))
    with pytest.raises(InputError, match="x must be C-contiguous"):
        ops.scale_relu_dropout(np.ones(128, np.float32)[::2])
    with pytest.raises(InputError, match="dtype bfloat16; supported"):
        ops.launch(SRD.name, "bfloat16", {"x": (64,)}, {}, {"x": 0, "y": 0})
    with pytest.raises(InputError, match="no address for y"):
        ops.launch(SRD.name, "float32", {"x": (64,)}, {}, {"x": x.ctypes.data})


def test_variants_come_from_the_ascend_backends_build_cache(fake: FakeNpuHost) -> None:
    shape = Shape({"N": 1003})
    call(load_ops(TilingTable([]), target=TARGET, settings=fake.settings), SRD, shape, "float32")
    backend = AscendBackend(fake.settings, target=TARGET)
    tiling = SRD.default_tiling(shape, "float32", get_target(TARGET))
    assert backend.build(SRD, SRD.compile_key(tiling, "float32")).cached


@pytest.mark.parametrize("source", [TilingTable([]), "sqlite:////nonexistent/tilewise.db", None])
def test_without_cann_the_error_names_ascend_home_path_before_the_table_is_read(
    source: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.setenv("TILEWISE_DB_URL", "sqlite:////nonexistent/default.db")
    monkeypatch.setattr("tilewise.kernels.backends._ascend.toolkit.DEFAULT_ROOTS", ())
    with pytest.raises(BackendError) as raised:
        load_ops(source, target=TARGET, settings=Settings(cache_dir=tmp_path))
    message = str(raised.value)
    assert message.startswith("CANN toolkit not found: set ASCEND_HOME_PATH or source")
    assert "set_env.sh" in message
    with pytest.raises(BackendError, match="CANN toolkit not found"):
        Ops(TilingTable([]), target=TARGET, settings=Settings(cache_dir=tmp_path))


def test_a_host_without_an_npu_or_in_another_run_mode_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = install_npu_host(tmp_path)
    monkeypatch.setenv("ASCEND_HOME_PATH", str(host.home))
    monkeypatch.setattr(AscendBackend, "dev_root", tmp_path / "no-dev")
    with pytest.raises(BackendError, match="run mode npu needs an Ascend NPU on this host"):
        load_ops(TilingTable([]), target=TARGET, settings=host.settings)
    monkeypatch.setattr(AscendBackend, "dev_root", host.dev)
    sim = host.settings.model_copy(update={"ascend_run_mode": "sim"})
    with pytest.raises(BackendError, match="run on the NPU: the run mode is sim"):
        load_ops(TilingTable([]), target=TARGET, settings=sim)
    with pytest.raises(InputError, match="device must be a non-negative integer"):
        load_ops(TilingTable([]), target=TARGET, device=-1, settings=host.settings)
    with pytest.raises(InputError, match="unknown target 'ascend999'"):
        load_ops(TilingTable([]), target="ascend999", settings=host.settings)
