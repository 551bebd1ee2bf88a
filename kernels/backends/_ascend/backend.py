"""ascend: the kernel sources built with CANN for one SoC and launched through ACL.

Each variant is a CMake project (see :mod:`.project`) built in the cache; its ``host_runner``
is started once per trial on the worker's device, reads the GM inputs from the files of a
:class:`~tilewise.kernels.backends._problem.Problem`, writes the checked launch's outputs back
to them (so the answer is judged by the same code as the twin's), and prints one JSON line with
event timings. With ``msprof=True`` the timed launches run under ``msprof op`` instead and the
samples are its Task Durations.

Of the contract's hooks, ``prior_tilings`` gives the tilings the analytic cost model (see
:mod:`.cost_model`) ranks fastest: on an NPU every evaluation is a compile and a launch, so the
search starts from them. ``refine_check`` takes the UB verdict from Huawei's compiler (see
:mod:`.plan_check`) when the settings ask for ``ub_check=compiler``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tilewise.errors import BackendError, InputError
from tilewise.kernels.backends._ascend import msprof as msprof_csv
from tilewise.kernels.backends._ascend.cost_model import rank
from tilewise.kernels.backends._ascend.plan_check import compiler_check
from tilewise.kernels.backends._ascend.processes import (
    _digest,
    _execute,
    _TimedOut,
    compiler_errors,
    describe_runner_error,
    parse_runner_output,
)
from tilewise.kernels.backends._ascend.project import (
    build_command,
    configure_command,
    project_files,
    runner_command,
    sys_workspace_bytes,
    write_project,
)
from tilewise.kernels.backends._ascend.toolkit import RUN_MODES, Toolkit, find_toolkit
from tilewise.kernels.backends._base import Backend, BuildResult, MeasureOptions, RunResult
from tilewise.kernels.backends._problem import Problem
from tilewise.kernels.backends._toolchain import ascend_toolchain
from tilewise.kernels.ops import Check, OpSpec
from tilewise.kernels.targets import TargetProfile, get_target
from tilewise.settings import Settings, get_settings
from tilewise.status import RecordStatus
from tilewise.types import Shape, Tiling, Toolchain

log = logging.getLogger(__name__)

#: Random tilings the cost model ranks for prior_tilings (a few ms per op), from a fixed seed so
#: that every worker of a workload starts from the same priors.
PRIOR_SAMPLES = 2000


class AscendBackend(Backend):
    name = "ascend"
    #: Where the NPU device nodes (davinci0 ...) appear.
    dev_root = Path("/dev")

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        target: TargetProfile | str | None = None,
        device: int = 0,
        run_mode: str | None = None,
        msprof: bool | None = None,
        toolkit: Path | str | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        run_mode = run_mode or self.settings.ascend_run_mode
        msprof = self.settings.ascend_msprof if msprof is None else msprof
        self.toolkit: Toolkit = find_toolkit(toolkit)
        if run_mode not in RUN_MODES:
            raise InputError(f"unknown run mode {run_mode!r}; known: {', '.join(RUN_MODES)}")
        if isinstance(device, bool) or not isinstance(device, int) or device < 0:
            raise InputError(f"device must be a non-negative integer, got {device!r}")
        if target is None:
            raise BackendError(
                "the ascend backend builds for one SoC: pass target=, e.g. "
                "create_backend('ascend', target='ascend910b2', device=0)"
            )
        self.target = get_target(target) if isinstance(target, str) else target
        if self.target.backend != self.name:
            raise InputError(f"target {self.target.name} is not an Ascend SoC")
        self.soc = self.target.soc
        self.device = device
        self.run_mode = run_mode
        self.msprof = msprof
        self._builds = self.settings.cache_dir / "ascend" / f"{self.soc}-{run_mode}"
        self._env: dict[str, str] | None = None
        self._mode_checked = False
        self._problem: Problem | None = None
        self.last_profile: msprof_csv.MsprofReport | None = None

    # -- what the search may know before measuring -------------------------------------------
    def refine_check(
        self,
        spec: OpSpec,
        tiling: Tiling,
        shape: Shape,
        dtype: str,
        target: TargetProfile,
        check: Check,
    ) -> Check:
        """With ``ub_check=compiler`` the UB verdict is bishengir-compile's on the kernel's
        buffer plan instead of the analytic footprint's."""
        if self.settings.ub_check != "compiler":
            return check
        return compiler_check(spec, tiling, shape, dtype, target, check)

    def prior_tilings(
        self, spec: OpSpec, shape: Shape, dtype: str, target: TargetProfile, *, limit: int
    ) -> list[Tiling]:
        """The tilings the cost model ranks fastest."""
        ranked = rank(spec, shape, dtype, target, samples=PRIOR_SAMPLES, seed=0)
        return [tiling for tiling, _ in ranked[:limit]]

    # -- environment -------------------------------------------------------------------------
    def toolchain(self, target: TargetProfile) -> Toolchain:
        return ascend_toolchain(self.toolkit.version, target)

    def environment(self) -> dict[str, Any]:
        timing = {"cpu": "wall clock (CANN cpu mode)", "sim": "simulator"}.get(
            self.run_mode, "msprof op" if self.msprof else "aclrtEvent"
        )
        return {
            "backend": self.name,
            "soc": self.soc,
            "run_mode": self.run_mode,
            "device": self.device,
            "cann_version": self.toolkit.version,
            "toolkit": str(self.toolkit.home),
            "timing": timing,
        }

    def _toolkit_env(self) -> dict[str, str]:
        if self._env is None:
            self._env = self.toolkit.environment()
        return dict(self._env)

    def _run_env(self, artifact: Path) -> dict[str, str]:
        env = self._toolkit_env()
        paths = [str(artifact.parent), *(str(p) for p in self._library_dirs(artifact))]
        if self.run_mode == "sim":
            paths.insert(0, str(self.toolkit.simulator_lib(self.soc)))
        if env.get("LD_LIBRARY_PATH"):
            paths.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(paths)
        return env

    def launch_libraries(self, build: BuildResult) -> tuple[Path, Path]:
        """The in-process launcher of a successful build (``liblauncher.so``, see the project's
        ``launcher.cpp``) and the kernel library it loads.

        Raises:
            BackendError: the build has none (only run mode ``npu`` builds a launcher).
        """
        if not build.ok or build.artifact is None:
            raise ValueError("launch_libraries() needs a successful build")
        launcher = build.artifact.parent / "liblauncher.so"
        kernels = [
            found
            for directory in (build.artifact.parent, *self._library_dirs(build.artifact))
            for found in sorted(directory.glob("libkernels*.so"))
        ]
        if not launcher.is_file() or not kernels:
            raise BackendError(
                f"{build.artifact.parent} has no liblauncher.so and libkernels.so (run mode "
                f"{self.run_mode}: only run mode npu builds a launcher)"
            )
        return launcher, kernels[0]

    @staticmethod
    def _library_dirs(artifact: Path) -> list[Path]:
        meta = artifact.parent.parent / "build.json"
        if not meta.exists():
            return []
        known = json.loads(meta.read_text())
        return [artifact.parent.parent / d for d in known.get("library_dirs", [])]

    # -- build -------------------------------------------------------------------------------
    def _cmake(self, env: Mapping[str, str]) -> str:
        found = shutil.which("cmake", path=env.get("PATH"))
        if found is None:
            raise BackendError("cmake not found on PATH: install CMake 3.16 or newer")
        return found

    def _result(self, key: str, final: Path, meta: Mapping[str, Any], cached: bool) -> BuildResult:
        return BuildResult(
            ok=bool(meta["ok"]),
            key=key,
            artifact=final / "build" / "host_runner" if meta["ok"] else None,
            error=meta.get("error"),
            seconds=float(meta["seconds"]),
            cached=cached,
            env={
                "soc": self.soc,
                "run_mode": self.run_mode,
                "cann_version": self.toolkit.version,
                "defines": meta.get("defines", ""),
            },
        )

    def build(self, spec: OpSpec, defines: dict[str, str]) -> BuildResult:
        try:
            files = project_files(spec, defines)
        except ValueError as exc:
            return BuildResult(ok=False, key="invalid", error=f"cannot generate project: {exc}")
        key = _digest(
            spec.kernel_path.read_bytes(),
            *(f"{name}\n{text}" for name, text in sorted(files.items())),
            self.soc,
            self.run_mode,
            str(self.toolkit.home),
            self.toolkit.version,
        )[:20]
        final = self._builds / spec.name / key
        meta_path = final / "build.json"
        if meta_path.exists():
            return self._result(key, final, json.loads(meta_path.read_text()), cached=True)

        env = self._toolkit_env()
        cmake = self._cmake(env)
        self._builds.joinpath(spec.name).mkdir(parents=True, exist_ok=True)
        # CMake bakes absolute paths into its build tree, so the project is built where it will
        # live; a private directory name first, renamed into place whole when done.
        work = Path(tempfile.mkdtemp(prefix="build-", dir=self._builds / spec.name))
        meta = self._build_in(spec, defines, work, cmake, env)
        if meta.pop("timed_out", False):
            # Not cached: a timeout says how loaded the host was, not that the variant cannot
            # build; cached, it would fail this variant for every later run and workload.
            shutil.rmtree(work, ignore_errors=True)
            return self._result(key, work, meta, cached=False)
        (work / "build.json").write_text(json.dumps(meta))
        try:
            os.replace(work, final)
        except OSError:
            shutil.rmtree(work, ignore_errors=True)  # another process published it first
            if meta_path.exists():
                return self._result(key, final, json.loads(meta_path.read_text()), cached=True)
        if meta["ok"] and not (final / "build" / "host_runner").exists():
            meta = {**meta, "ok": False, "error": "build tree moved; rebuild"}
        return self._result(key, final, meta, cached=False)

    def _build_in(
        self,
        spec: OpSpec,
        defines: Mapping[str, str],
        work: Path,
        cmake: str,
        env: Mapping[str, str],
    ) -> dict[str, Any]:
        started = time.perf_counter()
        meta: dict[str, Any] = {
            "ok": False,
            "defines": " ".join(f"{k}={v}" for k, v in sorted(defines.items())),
        }
        source, build = work / "project", work / "build"
        write_project(spec, defines, source)
        steps = [
            (
                "configure",
                configure_command(
                    source=source,
                    build=build,
                    soc=self.soc,
                    run_mode=self.run_mode,
                    toolkit_home=self.toolkit.home,
                    cmake=cmake,
                ),
            ),
            ("compile", build_command(build=build, cmake=cmake)),
        ]
        timeout = self.settings.build_timeout_s
        try:
            for stage, argv in steps:
                done = _execute(argv, env=env, timeout=timeout, cwd=work)
                (work / f"{stage}.log").write_text(done.stdout + done.stderr)
                if done.returncode != 0:
                    meta["error"] = f"{stage} failed: " + compiler_errors(done.stdout + done.stderr)
                    break
            else:
                if (build / "host_runner").exists():
                    meta["ok"] = True
                    # ascendc_library may put libkernels.so below the build root; the run
                    # needs its directory on LD_LIBRARY_PATH (paths relative: the tree moves).
                    meta["library_dirs"] = sorted(
                        {str(p.parent.relative_to(work)) for p in build.rglob("libkernels*.so")}
                    )
                else:
                    meta["error"] = "compile failed: the build produced no host_runner"
        except _TimedOut:
            meta["error"] = f"build timed out after {timeout:.0f} s"
            meta["timed_out"] = True
        meta["seconds"] = time.perf_counter() - started
        return meta

    # -- run ---------------------------------------------------------------------------------
    def check_runnable(self) -> None:
        self.check_run_mode()

    def check_run_mode(self) -> None:
        """Raises BackendError naming what this host lacks for the run mode (and msprof)."""
        if self._mode_checked:
            return
        offered = self.toolkit.run_modes(self.soc, dev_root=self.dev_root)
        if self.run_mode not in offered:
            needs = {
                "npu": "an Ascend NPU on this host (/dev/davinci*, driver installed)",
                "sim": f"CANN's simulator for {self.soc} ({self.toolkit.simulator_lib(self.soc)})",
                "cpu": f"CANN's CPU debug library ({self.toolkit.home / 'tools' / 'tikicpulib'})",
            }[self.run_mode]
            raise BackendError(
                f"run mode {self.run_mode} needs {needs}; this host offers: "
                f"{', '.join(offered) or 'none'}"
            )
        if self.msprof and self.toolkit.tool("msprof", self._toolkit_env()) is None:
            raise BackendError("msprof timing asked for, but msprof is not in the CANN toolkit")
        self._mode_checked = True

    def _problem_for(self, spec: OpSpec, shape: Shape, dtype: str) -> Problem:
        p = self._problem
        if p is None or (p.spec.name, p.shape, p.dtype) != (spec.name, shape, dtype):
            if p is not None:
                p.close()
            self._problem = p = Problem(spec, shape, dtype)
        return p

    def _launch(
        self, argv: Sequence[str], env: Mapping[str, str], timeout: float
    ) -> RunResult | dict[str, Any]:
        """Run the host runner (or msprof around it): its answer, or a failed RunResult."""
        try:
            done = _execute(argv, env=env, timeout=timeout)
        except _TimedOut as exc:
            return RunResult(RecordStatus.TIMEOUT, error=str(exc))
        answer = parse_runner_output(done.stdout)
        if answer is None:
            how = (
                f"killed by signal {-done.returncode}"
                if done.returncode < 0
                else f"exit code {done.returncode}"
            )
            tail = (done.stderr or done.stdout).strip()[-1500:]
            return RunResult(
                RecordStatus.CRASHED, error=f"host runner gave no answer ({how}): {tail}"
            )
        if not answer["ok"]:
            return RunResult(RecordStatus.CRASHED, error=describe_runner_error(answer))
        return answer

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
        if target.soc != self.soc:
            raise BackendError(f"this backend builds for {self.soc}, asked to run {target.soc}")
        self.check_run_mode()
        problem = self._problem_for(spec, shape, dtype)
        env = self._run_env(build.artifact)
        timeout = self.settings.run_timeout_s * (2 + measure.warmup) + measure.max_seconds

        def argv(*, checked: bool, warmup: int, repeats: int) -> list[str]:
            return runner_command(
                build.artifact or Path(),
                device=self.device,
                block_dim=spec.launch_blocks(spec.block_dim(tiling, shape, dtype, target), target),
                tiling=spec.pack_tiling(tiling, shape, dtype, target),
                check=checked,
                warmup=warmup,
                repeats=repeats,
                max_seconds=measure.max_seconds,
                sys_workspace=sys_workspace_bytes(spec),
                gm_tokens=problem.gm_tokens(),
            )

        timed_here = not (self.msprof and self.run_mode == "npu")
        if check:
            problem.poison_outputs()
        answer = self._launch(
            argv(
                checked=check,
                warmup=measure.warmup if timed_here else 0,
                repeats=measure.repeats if timed_here else 1,
            ),
            env,
            timeout,
        )
        if isinstance(answer, RunResult):
            return answer
        max_error = None
        if check:
            outcome = problem.check_outputs()
            if not outcome.ok:
                return RunResult(
                    RecordStatus.WRONG, error=outcome.detail, max_error=outcome.max_error
                )
            max_error = outcome.max_error
        if timed_here:
            return RunResult(RecordStatus.OK, tuple(answer["samples_us"]), max_error=max_error)
        return self._profile(
            spec,
            argv(checked=False, warmup=0, repeats=measure.repeats),
            env,
            timeout,
            measure,
            max_error,
        )

    def _profile(
        self,
        spec: OpSpec,
        app: Sequence[str],
        env: Mapping[str, str],
        timeout: float,
        measure: MeasureOptions,
        max_error: float | None,
    ) -> RunResult:
        tool = self.toolkit.tool("msprof", env)
        assert tool is not None  # check_run_mode made sure
        with tempfile.TemporaryDirectory(prefix="msprof-") as out:
            command = msprof_csv.op_command(
                tool,
                kernel_name=spec.entry,
                launch_count=measure.repeats,
                output=Path(out),
                app=app,
            )
            answer = self._launch(command, env, timeout * 4)  # msprof replays each launch
            if isinstance(answer, RunResult):
                return answer
            try:
                report = msprof_csv.collect(Path(out), spec.entry)
            except msprof_csv.MsprofParseError as exc:
                return RunResult(RecordStatus.CRASHED, error=f"msprof: {exc}")
        self.last_profile = report
        note = report.throttle_note()
        if note:
            log.warning("%s on device %d: %s", spec.name, self.device, note)
        return RunResult(RecordStatus.OK, report.samples_us, max_error=max_error)

    def close(self) -> None:
        if self._problem is not None:
            self._problem.close()
            self._problem = None
