"""The cpu-twin as a :class:`~tilewise.launch._device.Device`: variants built by the cpu-twin
backend, loaded into this process and launched through ``tw_run`` on the runner's thread pool
(see :mod:`._host`). The arrays are passed by pointer: nothing is copied."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tilewise.kernels.backends._cpu_twin import CpuTwinBackend
from tilewise.kernels.ops import GmArg, OpSpec
from tilewise.kernels.ops._base import MEMORIES
from tilewise.kernels.targets import TargetProfile
from tilewise.launch._device import Device
from tilewise.launch._host import CoreLimits, Host, Variant, shared_host
from tilewise.settings import Settings


@dataclass(frozen=True)
class TwinLaunch:
    """A loaded variant, its packed tiling, blocks, core limits and workspace sizes."""

    host: Host
    variant: Variant
    packed: bytes
    block_dim: int
    limits: CoreLimits
    workspace: dict[int, int]  # GM position -> bytes

    def __call__(
        self,
        gm: Sequence[int | None],
        *,
        packed: bytes | None = None,
        device_memory: bool = False,
        stream: int | None = None,
        device: int | None = None,
    ) -> None:
        del device_memory, stream, device  # the twin's memory is the host's; it has no streams
        tiling = self.packed if packed is None else packed
        self.host.launch(self.variant, gm, self.workspace, tiling, self.block_dim, self.limits)


class TwinDevice(Device):
    """This host as the twin runs it: every core, host memory."""

    backend: CpuTwinBackend

    def __init__(self, target: TargetProfile, *, settings: Settings, device: int = 0) -> None:
        del device  # one host
        self.target = target
        self.backend = CpuTwinBackend(settings)
        self._host: Host | None = None
        self._variants = {}

    @property
    def host(self) -> Host:
        """The process's host pool, started at the first launch."""
        if self._host is None:
            self._host = shared_host(self.backend)
        return self._host

    def prepare(
        self,
        spec: OpSpec,
        defines: dict[str, str],
        *,
        args: tuple[GmArg, ...],
        packed: bytes,
        block_dim: int,
    ) -> TwinLaunch:
        variant = self._variant(spec, defines, lambda _, artifact: self.host.variant(artifact))
        limits = self.target.limits(mix=spec.mix)
        return TwinLaunch(
            host=self.host,
            variant=variant,
            packed=packed,
            block_dim=block_dim,
            # Unchecked, as the tuner's timed launches: the tiling passed the op's checks.
            limits=CoreLimits(*(limits[m] for m in MEMORIES), 0),
            workspace={i: a.nbytes for i, a in enumerate(args) if a.role == "workspace"},
        )
