"""Kernel faults in a real study on the cpu-twin: a variant that segfaults, one that aborts, one
that hangs, one whose build fails and one whose compiler never finishes.

The faults come from a test-only Ascend C kernel (``kernels/faults.cpp`` here), built and
launched by the real cpu-twin backend like any op: the twin has no special case for it. Each
fault must become one record with its status and reason, the runner must come back after each
crash or hang, and the study must go on to its budget and store a winner.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernels.backends.fault_op.spec import FaultOp
from tests.reliability._report import record
from tilewise import store
from tilewise.kernels.backends import MeasureOptions
from tilewise.kernels.backends._cpu_twin import CpuTwinBackend
from tilewise.kernels.ops import Tunable
from tilewise.kernels.targets import TargetProfile, twin_target
from tilewise.search import Budget, Tuner
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

KERNEL = Path(__file__).parent / "kernels" / "faults.cpp"
SHAPE = Shape({"N": 4096})
COPY_MODES = (0, 4, 5)
SEGFAULT, ABORT, HANG = 1, 2, 3
BUILD_OK, BUILD_FAILS, BUILD_STALLS = 0, 1, 2


class FaultsOp(FaultOp):
    """The backend tests' fault op with more faults: ``build`` is compile-time (FAULT_BUILD),
    ``mode`` runtime (abort and two more copy modes besides copy, segfault and hang)."""

    name, summary = "rel_faults", "faulty test kernel"
    entry, kernel_file = "faults", "faults.cpp"
    compile_tunables = (
        Tunable(
            "build",
            (BUILD_OK, BUILD_FAILS, BUILD_STALLS),
            "0 ok, 1 fails, 2 stalls",
            True,
            "FAULT_BUILD",
        ),
    )

    def __init__(self, kernel_dir: Path) -> None:
        self.kernel_dir = kernel_dir

    @property
    def kernel_path(self) -> Path:
        return self.kernel_dir / self.kernel_file

    def runtime_tunables(
        self, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Tunable, ...]:
        return (Tunable("mode", (0, 1, 2, 3, 4, 5), "0/4/5 copy, 1 segv, 2 abort, 3 hang"),)

    def default_tiling(self, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
        return Tiling({"mode": 0, "build": BUILD_OK})


@pytest.fixture
def faults_op(tmp_path: Path) -> Iterator[FaultsOp]:
    """The op on a copy of the kernel beside ``stall.fifo``, a named pipe with no writer."""
    kernel_dir = tmp_path / "kernel"
    kernel_dir.mkdir()
    shutil.copy(KERNEL, kernel_dir / KERNEL.name)
    fifo = kernel_dir / "stall.fifo"
    os.mkfifo(fifo)
    yield FaultsOp(kernel_dir)
    # A compiler still blocked on the pipe (none should be: the timeout kills it) reads EOF;
    # with no reader left, the open fails and there is nothing to release.
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_crashes_hangs_and_broken_builds_are_records_and_the_study_goes_on(
    faults_op: FaultsOp, twin_cache: Path, tmp_path: Path
) -> None:
    spec, target = faults_op, twin_target()
    # The variant that builds, and the runner, are compiled first with the usual generous
    # timeout: the short one below is for the stalled compiler, not for a loaded machine.
    with CpuTwinBackend(Settings(cache_dir=twin_cache, _env_file=None)) as warm:  # type: ignore[call-arg]
        build = warm.build(
            spec, spec.compile_key(spec.default_tiling(SHAPE, "float32", target), "float32")
        )
        assert build.ok, build.error
        warm.run(
            build,
            spec,
            shape=SHAPE,
            dtype="float32",
            target=target,
            tiling=Tiling({"mode": 0, "build": 0}),
            check=True,
            measure=MeasureOptions(0, 1, 0.1),
        )

    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        db_url=f"sqlite:///{tmp_path / 'faults.db'}",
        cache_dir=twin_cache,
        build_timeout_s=8.0,
        run_timeout_s=2.0,
        runner_threads=1,
        warmup=0,
        repeats=3,
        max_measure_s=0.2,
        remeasure_top=2,
    )
    space = 6 * 3
    db = store.open_store(settings.db_url)
    try:
        with CpuTwinBackend(settings) as backend:
            tuner = Tuner(
                spec=spec,
                shape=SHAPE,
                dtype="float32",
                target=target,
                backend=backend,
                db=db,
                settings=settings,
                strategy="random",
            )
            result = tuner.run(Budget(space), seed=7)
        with db.session() as s:
            records = store.records_for(s, workload_id=tuner.workload_id)
            winner = store.get_tiling(s, workload_id=tuner.workload_id, toolchain=None)
    finally:
        db.close()

    searched = [r for r in records if r.source != store.SOURCE_REMEASURE]
    by_tiling = {(r.tiling["build"], r.tiling["mode"]): r for r in searched}
    assert len(searched) == len(by_tiling) == space, Counter(r.tiling_key for r in searched)
    assert result.progress.evaluations == space and not result.stopped

    for mode in range(6):
        failed = by_tiling[(BUILD_FAILS, mode)]
        assert failed.status == "build_failed", failed
        assert "compile failed" in (failed.error or "")
        assert "tilewise_no_such_header.h" in (failed.error or "")
        stalled = by_tiling[(BUILD_STALLS, mode)]
        assert stalled.status == "build_failed", stalled
        assert "compile timed out after 8 s" in (stalled.error or "")
    segv, abort, hang = (by_tiling[(BUILD_OK, m)] for m in (SEGFAULT, ABORT, HANG))
    assert segv.status == "crashed" and "SIGSEGV" in (segv.error or ""), segv
    assert abort.status == "crashed" and "SIGABRT" in (abort.error or ""), abort
    assert hang.status == "timeout" and "runner killed" in (hang.error or ""), hang
    for mode in COPY_MODES:
        ok = by_tiling[(BUILD_OK, mode)]
        assert ok.status == "ok" and ok.latency_us, ok

    # The runner came back after every crash and hang: a launch succeeded after each of them
    # (at the latest the re-measures, which run after the search).
    last_fault = max(r.id for r in (segv, abort, hang))
    assert any(r.status == "ok" and r.id > last_fault for r in records)
    assert winner is not None and winner.tiling["build"] == BUILD_OK
    assert winner.tiling["mode"] in COPY_MODES
    assert result.best is not None and result.best.tiling == Tiling(winner.tiling)

    # A compiler timeout is not cached as the variant's verdict (the machine may just have been
    # loaded): once the include no longer stalls, the same variant builds.
    stall = faults_op.kernel_dir / "stall.fifo"
    stall.unlink()
    stall.write_text("")
    with CpuTwinBackend(settings.model_copy(update={"build_timeout_s": 180.0})) as again:
        rebuilt = again.build(spec, spec.compile_key(Tiling({"mode": 0, "build": 2}), "float32"))
    assert rebuilt.ok and not rebuilt.cached, rebuilt.error

    statuses = Counter(r.status.value for r in searched)
    faults = space - statuses["ok"]
    record(
        "kernel faults (segfault, abort, hang, build failure, compiler stall)",
        faults_injected=faults,
        survived=faults,
        trials=space,
        ok=statuses["ok"],
        crashed=statuses["crashed"],
        timeout=statuses["timeout"],
        build_failed=statuses["build_failed"],
        lost=0,
    )
