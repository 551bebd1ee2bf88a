"""cpu-twin: the Ascend C kernel source compiled against kernels/twin and run on host threads."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tilewise.errors import BackendError
from tilewise.kernels.backends._base import Backend, BuildResult, MeasureOptions, RunResult
from tilewise.kernels.backends._compiler import (
    Compiler,
    count_loop_spills,
    find_compiler,
    max_stack_frame,
)
from tilewise.kernels.backends._problem import Problem
from tilewise.kernels.backends._runner import RunnerCrashed, RunnerProcess, RunnerTimeout
from tilewise.kernels.backends._toolchain import twin_toolchain
from tilewise.kernels.ops import OpSpec
from tilewise.kernels.targets import TargetProfile, twin_target
from tilewise.settings import Settings, get_settings
from tilewise.status import RecordStatus
from tilewise.types import Shape, Tiling, Toolchain

log = logging.getLogger(__name__)

TWIN_DIR = Path(__file__).resolve().parent.parent / "twin"


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def _runner_dir() -> Path:
    """The host side of the twin: the runner and the pool library the launcher loads."""
    return TWIN_DIR / "runner"


def _twin_sources_digest() -> str:
    """The headers a variant compiles against (the runner's own sources are not among them)."""
    runner = _runner_dir()
    files = sorted(
        p for p in TWIN_DIR.rglob("*") if p.suffix in {".h", ".hpp"} and runner not in p.parents
    )
    return _digest(*(p.read_bytes() for p in files))


def twin_headers_digest() -> str:
    """The twin headers' hash, computed once per process (part of the toolchain's key)."""
    global _HEADERS_DIGEST
    if _HEADERS_DIGEST is None:
        _HEADERS_DIGEST = _twin_sources_digest()
    return _HEADERS_DIGEST


_HEADERS_DIGEST: str | None = None


def _runner_sources_digest() -> str:
    return _digest(*(p.read_bytes() for p in sorted(_runner_dir().iterdir()) if p.is_file()))


def shim_source(spec: OpSpec) -> str:
    """The translation unit of one variant: the kernel file and its export, nothing else.

    Every field of the tiling struct is checked at compile time against the offset the Python
    side packs it at, so the C struct and ``OpSpec.tiling_struct`` can never drift apart.
    """
    unit, target = Shape({d: 1 for d in spec.dims}), twin_target()
    fields = spec.tiling_struct(
        spec.default_tiling(unit, "float32", target), unit, "float32", target
    )
    n_gm = len(spec.gm_args(unit, "float32"))
    lines = [
        f'#include "{spec.kernel_path}"',
        '#include "twin_launch.h"',
        f"TWIN_EXPORT_KERNEL({spec.entry}, {spec.tiling_type}, {n_gm})",
        *(f"TWIN_CHECK_FIELD({spec.tiling_type}, {f.name}, {4 * i})" for i, f in enumerate(fields)),
        f'static_assert(sizeof({spec.tiling_type}) == {4 * len(fields)}, "tiling struct size");',
    ]
    return "\n".join(lines) + "\n"


class CpuTwinBackend(Backend):
    name = "cpu-twin"

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        target: TargetProfile | None = None,
        device: int = 0,
    ) -> None:
        # The twin runs any target's sizes (they travel with each run) on all host cores;
        # target and device are accepted so every backend is created the same way.
        del target, device
        self.settings = settings or get_settings()
        self.compiler: Compiler = find_compiler(self.settings.compiler)
        if not self.compiler.spill_checks:
            log.warning(
                "cpu-twin builds with %s %s: register-spill checks are off (they need clang 15 "
                "or newer: apt-get install clang-19)",
                self.compiler.kind,
                self.compiler.version,
            )
        self._builds = self.settings.cache_dir / "builds"
        self._runner: RunnerProcess | None = None
        self._problem: Problem | None = None
        self._threads = self.settings.runner_threads or os.cpu_count() or 1

    # -- environment -------------------------------------------------------------------------
    def toolchain(self, target: TargetProfile) -> Toolchain:
        return twin_toolchain(f"{self.compiler.kind} {self.compiler.version}", target)

    def environment(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "compiler": f"{self.compiler.kind} {self.compiler.version}",
            "compiler_path": self.compiler.path,
            "flags": " ".join(self.compiler.flags()),
            "host": platform.node(),
            "cpu": platform.processor() or platform.machine(),
            "threads": self._threads,
            # Timings depend on the twin as much as on the kernel: a record names its twin.
            "twin": _twin_sources_digest()[:12],
        }

    # -- build -------------------------------------------------------------------------------
    def _compile(self, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        # In a process group of its own: a terminal's Ctrl-C reaches the tuner alone, which
        # finishes the evaluation in flight (this compile with it) before it stops.
        return subprocess.run(
            [self.compiler.path, *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=self.settings.build_timeout_s,
            check=False,
            process_group=0,
        )

    def build(self, spec: OpSpec, defines: dict[str, str]) -> BuildResult:
        shim = shim_source(spec)
        flags = [*self.compiler.flags(), f"-I{TWIN_DIR}"]
        flags += [f"-D{k}={v}" for k, v in sorted(defines.items())]
        key = _digest(
            spec.kernel_path.read_bytes(),
            _twin_sources_digest(),
            shim,
            " ".join(flags),
            self.compiler.path,
            self.compiler.version,
        )[:20]
        final = self._builds / spec.name / key
        env = {
            "compiler": f"{self.compiler.kind} {self.compiler.version}",
            "flags": " ".join(flags),
        }
        meta_path = final / "build.json"
        if meta_path.exists():
            known = json.loads(meta_path.read_text())
            return BuildResult(
                ok=known["ok"],
                key=key,
                artifact=final / "variant.so" if known["ok"] else None,
                error=known.get("error"),
                seconds=known["seconds"],
                cached=True,
                spills=known.get("spills"),
                stack_bytes=known.get("stack_bytes"),
                env=env,
            )

        self._builds.joinpath(spec.name).mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="build-", dir=self._builds / spec.name))
        started = time.perf_counter()
        meta: dict[str, Any] = {"ok": False}
        timed_out = False
        try:
            (work / "variant.cpp").write_text(shim)
            compiled = self._compile([*flags, "-c", "variant.cpp", "-o", "variant.o"], work)
            linked = None
            if compiled.returncode == 0:
                linked = self._compile(
                    ["-shared", "variant.o", "-o", "variant.so", "-lpthread"], work
                )
                if linked.returncode == 0:
                    meta["ok"] = True
                else:
                    meta["error"] = "link failed: " + linked.stderr[-2000:]
            else:
                errors = [line for line in compiled.stderr.splitlines() if "error" in line]
                meta["error"] = "compile failed: " + "\n".join(
                    errors[:10] or [compiled.stderr[-2000:]]
                )
            if self.compiler.spill_checks:
                meta["spills"] = count_loop_spills(compiled.stderr)
            meta["stack_bytes"] = max_stack_frame(work / "variant.su")
            killed = next((p.returncode for p in (compiled, linked) if p and p.returncode < 0), 0)
            if killed:
                meta["error"] = f"compiler killed by {signal.Signals(-killed).name}"
                timed_out = True
        except subprocess.TimeoutExpired:
            meta["error"] = f"compile timed out after {self.settings.build_timeout_s:.0f} s"
            timed_out = True
        meta["seconds"] = time.perf_counter() - started
        if timed_out:
            # Not cached: a timeout says how loaded the machine was, and a compiler killed by
            # a signal (the OOM killer, a kill of the process group) how it was stopped, not
            # that the variant cannot build; cached, either would fail this variant for every
            # later run and workload.
            shutil.rmtree(work, ignore_errors=True)
            return BuildResult(
                ok=False,
                key=key,
                artifact=None,
                error=meta["error"],
                seconds=meta["seconds"],
                env=env,
            )
        (work / "build.json").write_text(json.dumps(meta))
        try:
            os.replace(
                work, final
            )  # atomic: a concurrent build of the same key wins or loses whole
        except OSError:
            shutil.rmtree(work, ignore_errors=True)  # another process published it first
        return BuildResult(
            ok=meta["ok"],
            key=key,
            artifact=final / "variant.so" if meta["ok"] else None,
            error=meta.get("error"),
            seconds=meta["seconds"],
            cached=False,
            spills=meta.get("spills"),
            stack_bytes=meta.get("stack_bytes"),
            env=env,
        )

    def _host_tool(self, source: str, output: str, flags: list[str]) -> Path:
        """Build the runner directory's ``source`` into ``output`` (cached per sources)."""
        key = _digest(_runner_sources_digest(), _twin_sources_digest(), self.compiler.path)[:16]
        binary = self.settings.cache_dir / "runner" / key / output
        if binary.exists():
            return binary
        binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(f".tmp{os.getpid()}")
        done = self._compile(
            ["-std=c++17", "-O2", "-pthread", str(_runner_dir() / source), "-o", str(tmp), *flags],
            binary.parent,
        )
        if done.returncode != 0:
            raise BackendError(f"cannot build {source}: {done.stderr[-2000:]}")
        os.replace(tmp, binary)
        return binary

    def _runner_binary(self) -> Path:
        return self._host_tool("runner.cpp", "runner", ["-ldl"])

    def host_pool_library(self) -> Path:
        """The runner's thread pool as a shared library (``host_pool.cpp``), for launching
        variants in the calling process."""
        return self._host_tool("host_pool.cpp", "host_pool.so", ["-fPIC", "-shared"])

    @property
    def threads(self) -> int:
        """Host threads a launch runs its blocks on."""
        return self._threads

    # -- run ---------------------------------------------------------------------------------
    def _problem_for(self, spec: OpSpec, shape: Shape, dtype: str) -> Problem:
        p = self._problem
        if p is None or (p.spec.name, p.shape, p.dtype) != (spec.name, shape, dtype):
            if p is not None:
                p.close()
            self._problem = p = Problem(spec, shape, dtype)
        return p

    def _launch(
        self, build: BuildResult, problem: Problem, line_head: list[str], timeout: float
    ) -> dict[str, Any]:
        if self._runner is None:
            self._runner = RunnerProcess(self._runner_binary(), threads=self._threads)
        line = " ".join(["run", str(build.artifact), *line_head, *problem.gm_tokens()])
        return self._runner.request(line, timeout=timeout)

    def run(
        self,
        build: BuildResult,
        spec: OpSpec,
        *,
        shape: Shape,
        dtype: str,
        target: TargetProfile,
        tiling: Tiling,
        check: bool,
        measure: MeasureOptions,
    ) -> RunResult:
        if not build.ok or build.artifact is None:
            raise ValueError("run() needs a successful build")
        problem = self._problem_for(spec, shape, dtype)
        limits = target.limits(mix=spec.mix)
        sizes = [str(limits[m]) for m in ("ub", "l1", "l0a", "l0b", "l0c", "bt")]
        packed = spec.pack_tiling(tiling, shape, dtype, target).hex()
        block_dim = str(spec.block_dim(tiling, shape, dtype, target))
        n_gm = str(len(problem.args))
        timeout = self.settings.run_timeout_s

        def launch(warmup: int, repeats: int, seconds: float, checked: bool) -> dict[str, Any]:
            # Checked mode enforces the 32-byte rule and poisons fresh buffers; the timed runs
            # skip that bookkeeping, which the device does not pay either.
            head = [
                block_dim,
                str(warmup),
                str(repeats),
                f"{seconds:.3f}",
                *sizes,
                str(int(checked)),
                packed,
                n_gm,
            ]
            return self._launch(build, problem, head, timeout * (1 + warmup) + seconds)

        try:
            max_error = None
            if check:
                problem.poison_outputs()
                answer = launch(0, 1, timeout, checked=True)
                if not answer["ok"]:
                    return RunResult(RecordStatus.CRASHED, error=answer["error"])
                outcome = problem.check_outputs()
                if not outcome.ok:
                    return RunResult(
                        RecordStatus.WRONG, error=outcome.detail, max_error=outcome.max_error
                    )
                max_error = outcome.max_error
            if measure.warmup_s > 0:
                warm = launch(0, 1_000_000, measure.warmup_s, checked=False)
                if not warm["ok"]:
                    return RunResult(RecordStatus.CRASHED, error=warm["error"])
            answer = launch(measure.warmup, measure.repeats, measure.max_seconds, checked=False)
        except RunnerTimeout as exc:
            return RunResult(RecordStatus.TIMEOUT, error=str(exc))
        except RunnerCrashed as exc:
            return RunResult(RecordStatus.CRASHED, error=str(exc))
        if not answer["ok"]:
            return RunResult(RecordStatus.CRASHED, error=answer["error"])
        return RunResult(RecordStatus.OK, tuple(answer["samples_us"]), max_error=max_error)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._problem is not None:
            self._problem.close()
            self._problem = None
