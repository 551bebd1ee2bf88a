"""The calling process as a cpu-twin host: the runner's thread pool and variants, in process.

The pool is the runner's (``kernels/twin/runner/thread_pool.h``, built into ``host_pool.so`` by
the cpu-twin backend): a launch runs its blocks on every host core, as in the runner. Variants
are the backend's builds, loaded with ``dlopen`` once per path (a build's path names its
content, so a loaded library is never stale).

A forked child starts a pool of its own at its first launch (the parent's threads are not in
it). One process-wide lock serialises launches: the pool serves one ``parallel_for`` at a time,
and a variant keeps ``tw_run``'s error message in a static string until its next call. ctypes
releases the GIL for the call, so other Python threads run while a kernel does.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tilewise.errors import BackendError
from tilewise.forks import renew_in_child
from tilewise.kernels.backends._cpu_twin import CpuTwinBackend

#: The TW_ABI_VERSION of twin_abi.h that the structs below mirror: a variant of another is refused.
ABI_VERSION = 1
#: Each workspace starts on its own page, as the runner maps them.
_PAGE = 4096


class CoreLimits(ctypes.Structure):
    """``struct TwCoreLimits`` of twin_abi.h."""

    _fields_ = [
        (name, ctypes.c_uint32) for name in ("ub", "l1", "l0a", "l0b", "l0c", "bt", "checked")
    ]


class _TwHost(ctypes.Structure):
    """``struct TwHost`` of twin_abi.h, filled by the pool library."""

    _fields_ = [("parallel_for", ctypes.c_void_p), ("impl", ctypes.c_void_p)]


class Variant:
    """One built variant, loaded: its ``tw_run`` (which checks the GM count and the tiling
    size it is given)."""

    def __init__(self, path: Path) -> None:
        try:
            lib = ctypes.CDLL(str(path))
            abi, self._run = lib.tw_abi_version, lib.tw_run
        except (OSError, AttributeError) as exc:
            raise BackendError(f"cannot load the variant {path}: {exc}") from exc
        abi.restype = ctypes.c_int
        if abi() != ABI_VERSION:
            raise BackendError(f"{path} has ABI version {abi()}, this code speaks {ABI_VERSION}")
        self.path = path
        self._run.restype = ctypes.c_char_p
        self._run.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int32,
            ctypes.c_char_p,
            ctypes.c_uint32,
            ctypes.c_uint32,
            ctypes.POINTER(CoreLimits),
            ctypes.POINTER(_TwHost),
        ]

    def run(
        self,
        gm: ctypes.Array[ctypes.c_void_p],
        tiling: bytes,
        block_dim: int,
        limits: CoreLimits,
        host: _TwHost,
    ) -> str | None:
        """``tw_run``: None, or the error the kernel or the twin reported."""
        error = self._run(
            gm, len(gm), tiling, len(tiling), block_dim, ctypes.byref(limits), ctypes.byref(host)
        )
        return None if error is None else bytes(error).decode(errors="replace")


class Host:
    """The pool, the loaded variants and the workspace GM of every launch in this process."""

    def __init__(self, library: Path, threads: int) -> None:
        try:
            lib = ctypes.CDLL(str(library))
        except OSError as exc:
            raise BackendError(f"cannot load the host pool {library}: {exc}") from exc
        lib.tw_pool_create.restype = ctypes.c_void_p
        lib.tw_pool_create.argtypes = [ctypes.c_uint32]
        lib.tw_pool_host.argtypes = [ctypes.c_void_p, ctypes.POINTER(_TwHost)]
        lib.tw_pool_threads.restype = ctypes.c_uint32
        lib.tw_pool_threads.argtypes = [ctypes.c_void_p]
        lib.tw_pool_destroy.argtypes = [ctypes.c_void_p]
        self._lib, self._asked = lib, threads
        self._host = _TwHost()
        self._pool: int | None = None
        self._closed = False
        self._start()
        self.threads = int(lib.tw_pool_threads(self._pool))
        self.lock = threading.Lock()
        self._variants: dict[Path, Variant] = {}
        self._workspace = np.empty(0, np.uint8)
        self._workspace_base = 0  # its page-aligned address, found when it is allocated
        atexit.register(self._close)
        os.register_at_fork(after_in_child=self._forget_pool)

    def _start(self) -> None:
        pool = self._lib.tw_pool_create(self._asked)
        if not pool:
            raise BackendError(f"cannot start a pool of {self._asked} host threads")
        self._pool = pool
        self._lib.tw_pool_host(pool, ctypes.byref(self._host))

    def _forget_pool(self) -> None:
        # A fork copies the forking thread alone: the pool's workers are not in the child, and a
        # launch (or the pool's destruction at exit) would wait for them forever. The child starts
        # a pool of its own at its first launch; its copy of the parent's is left untouched. The
        # lock may have been held by another thread of the parent.
        self.lock = threading.Lock()
        self._pool = None

    def _close(self) -> None:
        # Joins the workers before the interpreter tears down; a launch in flight finishes first.
        with self.lock:
            self._closed = True
            if self._pool:
                self._lib.tw_pool_destroy(self._pool)
                self._pool = None

    def variant(self, path: Path) -> Variant:
        with self.lock:
            found = self._variants.get(path)
            if found is None:
                found = self._variants[path] = Variant(path)
            return found

    def _workspace_at(self, nbytes: int) -> int:
        """The address of ``nbytes`` of zeroed, page-aligned scratch GM, as fresh as the
        runner's (valid under the lock only: every launch reuses it)."""
        if self._workspace.size < nbytes + _PAGE:
            self._workspace = np.zeros(nbytes + _PAGE, np.uint8)
            base = int(self._workspace.ctypes.data)
            self._workspace_base = base + (-base) % _PAGE
        ctypes.memset(self._workspace_base, 0, nbytes)
        return self._workspace_base

    def launch(
        self,
        variant: Variant,
        gm: Sequence[int | None],
        workspace: Mapping[int, int],
        tiling: bytes,
        block_dim: int,
        limits: CoreLimits,
    ) -> None:
        """Run ``variant`` on the GM addresses ``gm`` in call order; position ``i`` of
        ``workspace`` (None in ``gm``) gets ``workspace[i]`` bytes of scratch GM.

        Raises:
            BackendError: the kernel or the twin reported an error.
        """
        pointers = (ctypes.c_void_p * len(gm))(*gm)
        sizes = {i: -(-n // _PAGE) * _PAGE for i, n in workspace.items()}
        with self.lock:
            if self._closed:
                raise BackendError("the host pool is closed (the interpreter is exiting)")
            if not self._pool:
                self._start()  # the first launch in a forked child
            address = self._workspace_at(sum(sizes.values()))
            for position, size in sizes.items():
                pointers[position] = address
                address += size
            error = variant.run(pointers, tiling, block_dim, limits, self._host)
        if error is not None:
            raise BackendError(f"{variant.path}: {error}")


_HOST: Host | None = None
_HOST_LOCK = threading.Lock()
renew_in_child(sys.modules[__name__], "_HOST_LOCK")


def shared_host(backend: CpuTwinBackend) -> Host:
    """The process's host, started on first use with ``backend``'s pool library and threads."""
    global _HOST
    with _HOST_LOCK:
        if _HOST is None:
            _HOST = Host(backend.host_pool_library(), backend.threads)
        return _HOST
