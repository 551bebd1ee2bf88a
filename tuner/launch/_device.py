"""Where the kernels of an :class:`~tilewise.launch.Ops` run: the extension point and its registry.

A :class:`Device` builds a variant through its target's backend (the backend's on-disk build
cache, shared with the tuner), loads it into this process, and returns a :class:`Launch` that
runs it on the addresses of its GM arguments. Implementations: ``cpu-twin`` (the variant's
``tw_run`` on the runner's thread pool, see :mod:`._twin`) and ``ascend`` (the generated
project's ``liblauncher.so`` through ACL, see :mod:`._ascend`), found by the target's backend.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tilewise.errors import BackendError, InputError
from tilewise.kernels.backends import Backend, BuildResult
from tilewise.kernels.ops import GmArg, OpSpec
from tilewise.kernels.targets import TargetProfile, get_target
from tilewise.settings import Settings

#: The Device of each backend, as ``module:class``, imported when first used.
DEVICES: dict[str, str] = {
    "cpu-twin": "tilewise.launch._twin:TwinDevice",
    "ascend": "tilewise.launch._ascend:AscendDevice",
}

V = TypeVar("V")


class Launch(Protocol):
    """One loaded variant with its tiling, launch size and buffer sizes fixed."""

    def __call__(
        self,
        gm: Sequence[int | None],
        *,
        packed: bytes | None = None,
        device_memory: bool = False,
        stream: int | None = None,
        device: int | None = None,
    ) -> None:
        """Run the kernel on the GM addresses ``gm`` in call order (None: the workspace, which
        the launch provides) and return when it is done.

        ``packed``: the tiling struct with other values of the op's parameters (None: the one
        prepared, parameters at their defaults). ``device_memory``: the addresses are device
        memory (on an Ascend target, NPU tensors) rather than host memory; ``stream``: the raw
        ACL stream to launch on (None: one of the launching thread); ``device``: the device id,
        instead of the Device's own. The cpu-twin ignores the last three: its memory is the
        host's and it has no streams.

        Raises:
            BackendError: the kernel or the runtime reported an error.
        """


class Device(ABC):
    """The contract: ``target`` is the profile whose table entries and checks apply; ``prepare``
    may be called from several threads at once (the caller serialises it per :class:`Ops`); a
    returned :class:`Launch` may be called from any thread (launches of the process are
    serialised inside it where the device needs that)."""

    target: TargetProfile
    backend: Backend
    #: Loaded variants by (op, defines): each is built (or found in the backend's build cache)
    #: and loaded once per Device.
    _variants: dict[tuple[str, tuple[tuple[str, str], ...]], Any]

    def _variant(
        self, spec: OpSpec, defines: dict[str, str], load: Callable[[BuildResult, Path], V]
    ) -> V:
        """The variant ``defines`` of ``spec``: built by the backend and loaded by ``load``
        (given the build and its artifact) at the first call, the same object afterwards.

        Raises:
            BackendError: the variant does not build.
        """
        key = (spec.name, tuple(sorted(defines.items())))
        if key not in self._variants:
            build = self.backend.build(spec, defines)
            if not build.ok or build.artifact is None:
                raise BackendError(
                    f"{spec.name} {defines}: the variant does not build: {build.error}"
                )
            self._variants[key] = load(build, build.artifact)
        loaded: V = self._variants[key]
        return loaded

    @abstractmethod
    def prepare(
        self,
        spec: OpSpec,
        defines: dict[str, str],
        *,
        args: tuple[GmArg, ...],
        packed: bytes,
        block_dim: int,
    ) -> Launch:
        """The launch of ``spec``'s variant ``defines`` (built and loaded once per Device) with
        the packed tiling struct ``packed`` on ``block_dim`` blocks, for GM arguments ``args``.

        Raises:
            BackendError: the variant does not build or cannot be loaded.
        """


def open_device(target: str, *, settings: Settings, device: int = 0) -> Device:
    """The Device of ``target``'s backend, on device ``device`` (Ascend targets).

    Raises:
        InputError: an unknown target, or a bad device id.
        BackendError: the backend's toolkit is missing (e.g. no CANN for an Ascend target).
    """
    profile = get_target(target)
    # Checked for every target: the twin has one device and ignores the id, but a program
    # run here with a bad one would fail only on an NPU host.
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise InputError(f"device must be a non-negative integer, got {device!r}")
    module, _, name = DEVICES[profile.backend].partition(":")
    made: Device = getattr(importlib.import_module(module), name)(
        profile, settings=settings, device=device
    )
    return made
