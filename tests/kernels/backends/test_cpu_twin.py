"""The cpu-twin backend end to end: real builds of the Ascend C kernels, real launches."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.kernels.backends.fault_op.spec import FaultOp
from tilewise.kernels.backends import BuildLimits, MeasureOptions, _cpu_twin, _runner
from tilewise.kernels.backends._cpu_twin import CpuTwinBackend
from tilewise.kernels.ops import OpSpec, StructField, get_op, list_ops
from tilewise.kernels.targets import twin_target
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling

ONCE = MeasureOptions(warmup=0, repeats=1, max_seconds=1.0)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CpuTwinBackend]:
    settings = Settings(cache_dir=tmp_path_factory.mktemp("cache"), run_timeout_s=20.0)
    with CpuTwinBackend(settings) as twin:
        yield twin  # type: ignore[misc]


def random_valid_tilings(spec: OpSpec, shape: Shape, dtype: str, n: int, seed: int) -> list[Tiling]:
    target, rng = twin_target(), np.random.default_rng(seed)
    tunables = spec.tunables(shape, dtype, target)
    found: list[Tiling] = []
    for _ in range(20000):
        tiling = Tiling({t.name: int(rng.choice(t.values)) for t in tunables})
        if spec.check(tiling, shape, dtype, target).valid and tiling not in found:
            found.append(tiling)
            if len(found) == n:
                break
    return found


#: Every op at each of its example shapes (OpSpec.examples).
CASES = [(spec.name, shape) for spec in list_ops() for shape in spec.examples]


#: Tuned at one shape, asked at others: an op's example shapes carried to each other (core
#: splits and block counts then take values the searched domains do not hold).
CARRIED = [
    (spec.name, tuned, asked)
    for spec in list_ops()
    for tuned, asked in zip(spec.examples, spec.examples[1:] + spec.examples[:1], strict=True)
]


@pytest.mark.slow
@pytest.mark.parametrize(("op", "tuned", "asked"), CARRIED)
def test_carried_tilings_match_reference(
    backend: CpuTwinBackend, op: str, tuned: str, asked: str
) -> None:
    spec, target = get_op(op), twin_target()
    at, to = (spec.validate_shape(Shape.parse(s)) for s in (tuned, asked))
    ran = 0
    for tiling in random_valid_tilings(spec, at, "float32", 3, seed=len(tuned)):
        carried = spec.carry(tiling, at, to, "float32", target)
        assert carried is not None
        if not spec.valid(carried, to, "float32", target):
            continue  # the runtime walks on; nothing of it runs
        build = backend.build(spec, spec.compile_key(carried, "float32"))
        assert build.ok, build.error
        run = backend.run(
            build,
            spec,
            shape=to,
            dtype="float32",
            target=target,
            tiling=carried,
            check=True,
            measure=ONCE,
        )
        assert run.status == "ok", (dict(tiling), dict(carried), run.error)
        ran += 1
    assert ran


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("op", "shape"), CASES)
def test_kernel_matches_reference(backend: CpuTwinBackend, op: str, shape: str, dtype: str) -> None:
    spec, target = get_op(op), twin_target()
    parsed = spec.validate_shape(Shape.parse(shape))
    tilings = [
        spec.default_tiling(parsed, dtype, target),
        *random_valid_tilings(spec, parsed, dtype, 4, seed=len(shape)),
    ]
    for tiling in tilings:
        build = backend.build(spec, spec.compile_key(tiling, dtype))
        assert build.ok, build.error
        run = backend.run(
            build,
            spec,
            shape=parsed,
            dtype=dtype,
            target=target,
            tiling=tiling,
            check=True,
            measure=ONCE,
        )
        assert run.status == "ok", (dict(tiling), run.error)
        assert run.samples_us and run.samples_us[0] > 0


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_layernorm_two_pass_rows(backend: CpuTwinBackend, dtype: str) -> None:
    # H=5000 fits UB whole; force the split path with chunks that leave a ragged last chunk.
    spec, target = get_op("layernorm_gelu"), twin_target()
    shape = Shape({"R": 5, "H": 5000})
    for h_tile, buffers, blocks in ((256, 2, 2), (1024, 1, 1), (4096, 2, 5)):
        tiling = Tiling(
            {"rowsPerTile": 1, "hTile": h_tile, "blockDim": blocks, "bufferNum": buffers}
        )
        assert spec.check(tiling, shape, dtype, target).valid
        build = backend.build(spec, spec.compile_key(tiling, dtype))
        assert build.ok, build.error
        run = backend.run(
            build,
            spec,
            shape=shape,
            dtype=dtype,
            target=target,
            tiling=tiling,
            check=True,
            measure=ONCE,
        )
        assert run.status == "ok", (dict(tiling), run.error)


def test_builds_are_cached_and_report_spills_and_stack(backend: CpuTwinBackend) -> None:
    spec = get_op("scale_relu_dropout")
    first = backend.build(spec, {"DTYPE_X": "float", "BUFFER_NUM": "2"})
    again = backend.build(spec, {"DTYPE_X": "float", "BUFFER_NUM": "2"})
    assert first.ok and again.ok and again.cached and again.key == first.key
    assert first.stack_bytes is not None and first.stack_bytes > 0
    if backend.compiler.spill_checks:
        assert first.spills is not None
        strict = BuildLimits(max_loop_spills=-1, max_stack_bytes=1 << 20)
        assert first.violations(strict)["spills"] > 0
    tiny_stack = BuildLimits(max_loop_spills=1 << 20, max_stack_bytes=1)
    assert first.violations(tiny_stack)["stack"] > 0


def test_a_compiler_killed_by_a_signal_is_not_the_variants_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile ended by a signal (a kill of the process group, the OOM killer) says how it
    was stopped, not that the variant cannot build: not cached, so the next build builds."""
    spec = get_op("scale_relu_dropout")
    defines = {"DTYPE_X": "float", "BUFFER_NUM": "1"}
    with CpuTwinBackend(Settings(cache_dir=tmp_path / "cache")) as twin:
        real = twin._compile
        monkeypatch.setattr(
            twin, "_compile", lambda args, cwd: subprocess.CompletedProcess(args, -2, "", "")
        )
        killed = twin.build(spec, defines)
        assert not killed.ok and killed.error == "compiler killed by SIGINT"
        monkeypatch.setattr(twin, "_compile", real)
        built = twin.build(spec, defines)
    assert built.ok and not built.cached, built.error


def test_the_compiler_and_the_runner_are_out_of_the_terminals_process_group(
    tmp_path: Path,
) -> None:
    """A terminal's Ctrl-C signals its foreground process group: the tuner alone takes it (and
    finishes the evaluation in flight), so the compile and the launch it waits for are in
    process groups of their own."""
    spec = get_op("scale_relu_dropout")
    shape = Shape({"N": 4096})
    target = twin_target()
    groups = []
    real_run, real_popen = subprocess.run, subprocess.Popen

    def run(*args: Any, **kwargs: Any) -> Any:
        groups.append(kwargs.get("process_group"))
        return real_run(*args, **kwargs)

    class Popen(real_popen):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            groups.append(kwargs.get("process_group"))
            super().__init__(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_cpu_twin.subprocess, "run", run)
        patch.setattr(_runner.subprocess, "Popen", Popen)
        with CpuTwinBackend(Settings(cache_dir=tmp_path / "cache")) as twin:
            tiling = spec.default_tiling(shape, "float32", target)
            built = twin.build(spec, spec.compile_key(tiling, "float32"))
            assert built.ok, built.error
            ran = twin.run(
                built,
                spec,
                shape=shape,
                dtype="float32",
                target=target,
                tiling=tiling,
                check=True,
                measure=ONCE,
            )
            assert ran.status == "ok", ran.error
    assert groups and all(g == 0 for g in groups), groups


def test_warmup_seconds_launch_the_kernel_that_long_before_the_timed_runs(
    backend: CpuTwinBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, target = get_op("scale_relu_dropout"), twin_target()
    shape = Shape({"N": 1 << 16})
    tiling = spec.default_tiling(shape, "float32", target)
    build = backend.build(spec, spec.compile_key(tiling, "float32"))
    heads: list[list[str]] = []
    launch = backend._launch

    def spy(build: object, problem: object, head: list[str], timeout: float) -> object:
        heads.append(head)
        return launch(build, problem, head, timeout)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "_launch", spy)
    started = time.perf_counter()
    run = backend.run(
        build,
        spec,
        shape=shape,
        dtype="float32",
        target=target,
        tiling=tiling,
        check=False,
        measure=MeasureOptions(warmup=1, repeats=3, max_seconds=1.0, warmup_s=0.2),
    )
    assert run.ok and len(run.samples_us) == 3
    # head: block_dim, warmup, repeats, seconds, ...: launches until 0.2 s have passed, then
    # the timed launch with its own warm-up count.
    assert [h[1:4] for h in heads] == [["0", "1000000", "0.200"], ["1", "3", "1.000"]]
    assert time.perf_counter() - started >= 0.2


def test_wrong_answer_is_caught(backend: CpuTwinBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, target = get_op("scale_relu_dropout"), twin_target()
    shape = Shape({"N": 4096})
    tiling = spec.default_tiling(shape, "float32", target)
    build = backend.build(spec, spec.compile_key(tiling, "float32"))
    honest = spec.tiling_struct

    def lying_struct(*args: object) -> tuple[StructField, ...]:
        # The block ends short of the elements (the others stay as the output was filled).
        fields = honest(*args)  # type: ignore[arg-type]
        return tuple(
            StructField(f.name, f.code, int(f.value) // 2) if f.name == "totalLength" else f
            for f in fields
        )

    monkeypatch.setattr(spec, "tiling_struct", lying_struct)
    run = backend.run(
        build,
        spec,
        shape=shape,
        dtype="float32",
        target=target,
        tiling=tiling,
        check=True,
        measure=ONCE,
    )
    assert run.status == "wrong" and "elements wrong" in (run.error or "")


def test_twin_api_violation_fails_the_trial_with_its_message(backend: CpuTwinBackend) -> None:
    # A tiling the static check would reject, forced through: the twin's InitBuffer refuses it.
    spec, target = get_op("scale_relu_dropout"), twin_target()
    shape = Shape({"N": 1 << 16})
    tiling = Tiling({"tileLength": 16384, "blockDim": 4, "bufferNum": 2})
    assert not spec.check(tiling, shape, "float32", target).valid
    build = backend.build(spec, spec.compile_key(tiling, "float32"))
    run = backend.run(
        build,
        spec,
        shape=shape,
        dtype="float32",
        target=target,
        tiling=tiling,
        check=True,
        measure=ONCE,
    )
    assert run.status == "crashed"
    assert "UB" in (run.error or "") and "188416" in (run.error or "")


@pytest.mark.slow
def test_crash_and_hang_fail_one_trial_and_the_runner_restarts(tmp_path: Path) -> None:
    spec, target, shape = FaultOp(), twin_target(), Shape({"N": 64})
    settings = Settings(cache_dir=tmp_path / "cache", run_timeout_s=2.0)
    with CpuTwinBackend(settings) as twin:
        build = twin.build(spec, {"DTYPE_X": "float"})
        assert build.ok, build.error

        def run(mode: int) -> tuple[str, str | None]:
            result = twin.run(
                build,
                spec,
                shape=shape,
                dtype="float32",
                target=target,
                tiling=Tiling({"mode": mode}),
                check=True,
                measure=ONCE,
            )
            return result.status, result.error

        assert run(0) == ("ok", None)
        status, error = run(1)
        assert status == "crashed" and "SIGSEGV" in (error or "")
        assert run(0) == ("ok", None)
        status, error = run(2)
        assert status == "timeout" and "runner killed" in (error or "")
        assert run(0) == ("ok", None)


def test_environment_names_the_twin_sources(
    backend: CpuTwinBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = backend.environment()["twin"]
    twin = tmp_path / "twin"
    shutil.copytree(_cpu_twin.TWIN_DIR, twin)
    monkeypatch.setattr(_cpu_twin, "TWIN_DIR", twin)
    assert backend.environment()["twin"] == before  # same sources, same name
    with (twin / "twin" / "vec.h").open("a") as f:
        f.write("// a change to the twin\n")
    assert backend.environment()["twin"] != before
