"""tilewise.torch on NPU tensors, against the fake CANN toolkit only (never an NPU).

Without torch_npu no tensor is on an NPU here, so ``torch.ops.tilewise.<op>`` cannot be called
with one. What is tested instead: that torch_npu's device type is the one the ops dispatch on;
that the implementation picked for it (``runner("npu")``) runs the Ascend target's kernels
through the launcher on the tensors' own memory, CPU tensors standing for device memory (the
fake ACL's device memory is host memory); and the errors around it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch (the torch extra)")

import tilewise.torch  # noqa: E402 - registers torch.ops.tilewise after torch is known present
from tests.kernels.backends.ascend.ascend_fakes import install_npu_host  # noqa: E402
from tests.tuner.test_torch_ops import assert_close, attributes, batched, tensors_for  # noqa: E402
from tilewise.errors import BackendError, InputError  # noqa: E402
from tilewise.kernels.backends._ascend.backend import AscendBackend  # noqa: E402
from tilewise.kernels.ops import OpSpec, get_op  # noqa: E402
from tilewise.kernels.targets import get_target  # noqa: E402
from tilewise.launch import Ops  # noqa: E402
from tilewise.launch._ascend import AclVariant  # noqa: E402
from tilewise.runtime import TilingTable  # noqa: E402
from tilewise.settings import Settings  # noqa: E402
from tilewise.torch import _ops as torch_ops  # noqa: E402
from tilewise.torch import _shared  # noqa: E402
from tilewise.types import Shape  # noqa: E402

pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("g++") is None, reason="needs cmake and g++"
)

TARGET = "ascend910b2"


@pytest.fixture(scope="module")
def npu_ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ops]:
    """The NPU tensors' Ops on a fake NPU host: an empty table, the Ascend default tilings."""
    host = install_npu_host(tmp_path_factory.mktemp("npu-host"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ASCEND_HOME_PATH", str(host.home))
        patch.delenv("TILEWISE_ASCEND_RUN_MODE", raising=False)
        patch.setattr(AscendBackend, "dev_root", host.dev)
        yield tilewise.torch.use_table(TilingTable([]), target=TARGET, settings=host.settings)
        _shared._ops.pop(_shared.NPU, None)


def test_torch_npus_device_type_is_the_one_the_ops_dispatch_on() -> None:
    """torch_npu renames the PrivateUse1 backend to "npu": its tensors' device.type is what
    runner() keys on (checked in a fresh process: the renaming cannot be undone)."""
    code = (
        "import torch\n"
        "torch.utils.rename_privateuse1_backend('npu')\n"
        "import tilewise.torch._shared as s\n"
        "assert torch.device('npu:1').type == s.NPU, torch.device('npu:1')\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_npu_tensors_before_an_ascend_table_are_an_input_error() -> None:
    assert torch_ops.runner("cpu") is torch_ops._run_on_cpu
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_shared, "_ops", {})
        with pytest.raises(InputError, match=r"npu tensors run the kernels of an Ascend target: "
                           r"call tilewise.torch.use_table\(source, target='ascend910b2'\)"):  # fmt: skip
            torch_ops.runner("npu")


def test_an_ascend_table_without_cann_names_ascend_home_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.setattr("tilewise.kernels.backends._ascend.toolkit.DEFAULT_ROOTS", ())
    monkeypatch.setattr(_shared, "_ops", {})
    with pytest.raises(BackendError) as raised:
        tilewise.torch.use_table(
            TilingTable([]), target=TARGET, settings=Settings(cache_dir=tmp_path)
        )
    assert str(raised.value).startswith(
        "CANN toolkit not found: set ASCEND_HOME_PATH or source <toolkit>/set_env.sh"
    )
    assert _shared._ops == {}  # nothing half set up


def _cases() -> list[Any]:
    """One op of each family: a matmul with batch dims, an elementwise op, one with two
    outputs, the convolution."""
    return [
        pytest.param(get_op("linear_add_gelu"), Shape.parse("M=37,N=96,K=80"), id="linear"),
        pytest.param(get_op("swiglu"), Shape.parse("T=6,I=160"), id="swiglu"),
        pytest.param(get_op("swiglu_grad"), Shape.parse("T=4,I=96"), id="swiglu_grad"),
        pytest.param(
            get_op("conv_bias_leakyrelu"),
            Shape.parse("N=2,C=3,H=9,W=9,K=5,R=3,S=3,stride=2,pad=1"),
            id="conv",
        ),
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "example"), _cases())
def test_the_npu_runner_launches_the_ascend_kernels_on_the_tensors_memory(
    npu_ops: Ops, spec: OpSpec, example: Shape, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched: list[tuple[list[int | None], bool]] = []
    run = AclVariant.run

    def spy(self: AclVariant, device: int, stream: Any, device_memory: bool, gm: Any,
            *rest: Any) -> None:  # fmt: skip
        launched.append((list(gm), device_memory))
        run(self, device, stream, device_memory, gm, *rest)

    synchronized: list[Any] = []
    monkeypatch.setattr(AclVariant, "run", spy)
    monkeypatch.setattr(torch.cpu, "synchronize", lambda device=None: synchronized.append(device))

    shape, lead = batched(spec, example)
    arrays, tensors = tensors_for(spec, shape, "float32", lead)
    named = torch_ops._bind(spec, tuple(tensors.values()))
    # The conv's slope is an op parameter: a value other than its default reaches the kernel.
    given = {"negative_slope": -0.25} if spec.parameters else {}
    got = torch_ops.runner(_shared.NPU)(spec, named, {**attributes(spec, shape), **given})

    wanted = spec.reference(arrays, shape, "float32", **given)
    assert_close(spec, shape, "float32", wanted, got, lead)
    outputs = got if isinstance(got, tuple) else (got,)
    assert all(out.device == tensors[next(iter(tensors))].device for out in outputs)
    [(gm, device_memory)] = launched
    assert device_memory
    # The kernel got the tensors' own memory: every contiguous input and every output as is.
    assert {t.data_ptr() for t in tensors.values()} | {o.data_ptr() for o in outputs} <= set(gm)
    assert synchronized == [torch.device("cpu")]
    choice = npu_ops.last_choice
    assert choice is not None and (choice.op, choice.shape, choice.source) == (
        spec.name,
        shape,
        "default",
    )
    assert choice.tiling == spec.default_tiling(shape, "float32", get_target(TARGET))
