"""An Ascend NPU as a :class:`~tilewise.launch._device.Device`: variants built by the Ascend
backend (its CMake project, in its build cache), launched in this process through the project's
``liblauncher.so`` (``templates/launcher.cpp.j2``: the host runner's ACL launch as a C ABI).

Host arrays make a round trip: each launch allocates device memory, copies the inputs in, runs
the kernel, waits for it and copies the outputs back (no copy is kept between launches). Device
addresses (NPU tensors) are used as they are; only the workspace is allocated per launch.

Tested against a fake CANN toolkit only (tests/kernels/backends/ascend/fake_cann: a fake ACL on
host memory, the kernels compiled against the CPU twin), never on an NPU.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tilewise.errors import BackendError
from tilewise.kernels.backends import BuildResult
from tilewise.kernels.backends._ascend.backend import AscendBackend
from tilewise.kernels.backends._ascend.processes import describe_runner_error
from tilewise.kernels.backends._ascend.project import sys_workspace_bytes
from tilewise.kernels.ops import GmArg, OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.launch._device import Device
from tilewise.settings import Settings

#: The TW_ACL_ABI_VERSION of launcher.cpp.j2 that the calls below speak.
ABI_VERSION = 1

#: One launch at a time in the process: ACL calls of several launchers interleaved on one
#: device gain nothing here (each launch waits for its kernel), and the lock keeps them apart.
_LAUNCH_LOCK = threading.Lock()


class AclVariant:
    """One build's ``liblauncher.so``, loaded, with its kernel library opened."""

    def __init__(self, launcher: Path, kernels: Path, *, gm_args: int, tiling_bytes: int) -> None:
        try:
            lib = ctypes.CDLL(str(launcher))
        except OSError as exc:
            raise BackendError(
                f"cannot load {launcher}: {exc} (are CANN's libraries on LD_LIBRARY_PATH? "
                "source <toolkit>/set_env.sh before starting Python)"
            ) from exc
        lib.tw_acl_abi_version.restype = ctypes.c_int32
        if lib.tw_acl_abi_version() != ABI_VERSION:
            raise BackendError(
                f"{launcher} has ABI version {lib.tw_acl_abi_version()}, this code speaks "
                f"{ABI_VERSION}"
            )
        lib.tw_acl_gm_args.restype = ctypes.c_int32
        lib.tw_acl_tiling_bytes.restype = ctypes.c_uint32
        if (lib.tw_acl_gm_args(), lib.tw_acl_tiling_bytes()) != (gm_args, tiling_bytes):
            raise BackendError(
                f"{launcher} takes {lib.tw_acl_gm_args()} GM args and a "
                f"{lib.tw_acl_tiling_bytes()}-byte tiling, the op {gm_args} and {tiling_bytes}"
            )
        lib.tw_acl_open.restype = ctypes.c_char_p
        lib.tw_acl_open.argtypes = [ctypes.c_char_p]
        error = lib.tw_acl_open(str(kernels).encode())
        if error is not None:
            raise BackendError(f"{launcher}: {bytes(error).decode(errors='replace')}")
        self._run = lib.tw_acl_run
        self._run.restype = ctypes.c_char_p
        self._run.argtypes = [
            ctypes.c_int32,  # device
            ctypes.c_void_p,  # stream
            ctypes.c_int32,  # on_device
            ctypes.POINTER(ctypes.c_void_p),  # gm
            ctypes.POINTER(ctypes.c_uint64),  # bytes
            ctypes.c_int32,  # n_gm
            ctypes.c_char_p,  # tiling
            ctypes.c_uint32,  # tiling_bytes
            ctypes.c_uint32,  # block_dim
            ctypes.c_uint64,  # sys_workspace
            ctypes.POINTER(ctypes.c_int64),  # acl_error
        ]
        self.path = launcher

    def run(
        self,
        device: int,
        stream: int | None,
        device_memory: bool,
        gm: ctypes.Array[ctypes.c_void_p],
        sizes: ctypes.Array[ctypes.c_uint64],
        tiling: bytes,
        block_dim: int,
        sys_workspace: int,
    ) -> None:
        code = ctypes.c_int64(0)
        with _LAUNCH_LOCK:
            error = self._run(
                device, stream, int(device_memory), gm, sizes, len(gm), tiling, len(tiling),
                block_dim, sys_workspace, ctypes.byref(code),
            )  # fmt: skip
        if error is not None:
            message = bytes(error).decode(errors="replace")
            detail = describe_runner_error({"error": message, "acl_error": code.value})
            raise BackendError(f"{self.path}: {detail}")


@dataclass(frozen=True)
class AscendLaunch:
    """A loaded variant, its packed tiling, blocks and buffer sizes, on one device by default."""

    variant: AclVariant
    packed: bytes
    block_dim: int
    sizes: tuple[int, ...]  # bytes of each GM argument, workspace without the system part
    sys_workspace: int
    device: int

    def __call__(
        self,
        gm: Sequence[int | None],
        *,
        packed: bytes | None = None,
        device_memory: bool = False,
        stream: int | None = None,
        device: int | None = None,
    ) -> None:
        self.variant.run(
            self.device if device is None else device,
            stream,
            device_memory,
            (ctypes.c_void_p * len(gm))(*gm),
            (ctypes.c_uint64 * len(self.sizes))(*self.sizes),
            self.packed if packed is None else packed,
            self.block_dim,
            self.sys_workspace,
        )


class AscendDevice(Device):
    """One NPU of this host (``device``), through CANN's toolkit and ACL.

    Raises (at construction) BackendError when CANN is not found (it names ASCEND_HOME_PATH and
    set_env.sh), when the run mode is not ``npu``, or when the host has no NPU.
    """

    backend: AscendBackend

    def __init__(self, target: TargetProfile, *, settings: Settings, device: int = 0) -> None:
        self.target = target
        self.backend = AscendBackend(settings, target=target, device=device)
        if self.backend.run_mode != "npu":
            raise BackendError(
                f"in-process launches on {target.name} run on the NPU: the run mode is "
                f"{self.backend.run_mode} (unset TILEWISE_ASCEND_RUN_MODE, or set it to npu)"
            )
        self.backend.check_run_mode()
        self.device = device
        self._variants = {}

    def prepare(
        self,
        spec: OpSpec,
        defines: dict[str, str],
        *,
        args: tuple[GmArg, ...],
        packed: bytes,
        block_dim: int,
    ) -> AscendLaunch:

        def load(build: BuildResult, _: Path) -> AclVariant:
            launcher, kernels = self.backend.launch_libraries(build)
            return AclVariant(launcher, kernels, gm_args=len(args), tiling_bytes=len(packed))

        variant = self._variant(spec, defines, load)
        return AscendLaunch(
            variant=variant,
            packed=packed,
            block_dim=spec.launch_blocks(block_dim, self.target),  # AI cores for a MIX kernel
            sizes=tuple(a.nbytes for a in args),
            sys_workspace=sys_workspace_bytes(spec),
            device=self.device,
        )
