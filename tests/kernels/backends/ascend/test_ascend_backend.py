"""AscendBackend end to end on a fake CANN (fake ascendc.cmake, ACL and msprof; see fake_cann/).

The real generated CMakeLists.txt and host_runner.cpp are configured, compiled, linked and run
here; the "kernel" is a host stand-in, so this proves the host side and the protocol, not the
device.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernels.backends.ascend.ascend_fakes import make_toolkit
from tilewise.errors import BackendError, InputError
from tilewise.kernels.backends import MeasureOptions, create_backend
from tilewise.kernels.backends._ascend import backend as ascend_backend
from tilewise.kernels.backends._ascend.backend import (
    PRIOR_SAMPLES,
    AscendBackend,
    compiler_errors,
    describe_runner_error,
    parse_runner_output,
)
from tilewise.kernels.backends._ascend.cost_model import rank
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.settings import Settings
from tilewise.types import Shape

pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("g++") is None, reason="needs cmake and g++"
)

TARGET = get_target("ascend910b1")
SPEC = get_op("scale_relu_dropout")
SHAPE = Shape({"N": 5000})
ONCE = MeasureOptions(warmup=1, repeats=3, max_seconds=5.0)


@pytest.fixture
def fake_home(tmp_path: Path) -> Path:
    return make_toolkit(tmp_path / "Ascend", functional=True)


@pytest.fixture
def npu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "davinci0").write_text("")
    monkeypatch.setattr(AscendBackend, "dev_root", dev)


def make_backend(fake_home: Path, tmp_path: Path, **options: object) -> AscendBackend:
    settings = Settings(cache_dir=tmp_path / "cache", run_timeout_s=20.0, build_timeout_s=120.0)
    return AscendBackend(settings, target="ascend910b1", toolkit=fake_home, **options)  # type: ignore[arg-type]


@pytest.fixture
def backend(fake_home: Path, tmp_path: Path, npu: None) -> Iterator[AscendBackend]:
    with make_backend(fake_home, tmp_path) as ascend:
        yield ascend  # type: ignore[misc]


def defines(dtype: str = "float32") -> dict[str, str]:
    return SPEC.compile_key(SPEC.default_tiling(SHAPE, dtype, TARGET), dtype)


def test_build_then_run_checked(backend: AscendBackend) -> None:
    built = backend.build(SPEC, defines())
    assert built.ok, built.error
    assert built.artifact is not None and built.artifact.name == "host_runner"
    assert not built.cached
    assert backend.build(SPEC, defines()).cached
    tiling = SPEC.default_tiling(SHAPE, "float32", TARGET)
    result = backend.run(
        built,
        SPEC,
        shape=SHAPE,
        dtype="float32",
        target=TARGET,
        tiling=tiling,
        check=True,
        measure=ONCE,
    )
    assert result.status == "ok", result.error
    assert len(result.samples_us) == 3 and all(s >= 0 for s in result.samples_us)
    assert result.max_error == 0.0


@pytest.mark.slow
def test_the_twin_backed_fake_runs_the_kernel_file_itself(tmp_path: Path, npu: None) -> None:
    """With make_toolkit(kernels="twin") the kernel library is the op's own Ascend C file on
    the CPU twin: a MIX (matmul) op in float16 comes back right, and a tiling the twin cannot
    fit in UB faults at the stream's synchronisation, as on a device."""
    home = make_toolkit(tmp_path / "Twin", functional=True, kernels="twin")
    lag, shape = get_op("linear_add_gelu"), Shape({"M": 37, "N": 96, "K": 80})
    with make_backend(home, tmp_path) as backend:
        tiling = lag.default_tiling(shape, "float16", TARGET)
        built = backend.build(lag, lag.compile_key(tiling, "float16"))
        assert built.ok, built.error
        run = {"shape": shape, "dtype": "float16", "target": TARGET, "measure": ONCE}
        result = backend.run(built, lag, tiling=tiling, check=True, **run)  # type: ignore[arg-type]
        assert result.status == "ok" and result.max_error is not None, result.error
        big = SPEC.default_tiling(SHAPE, "float32", TARGET).replace(tileLength=16384)
        assert not SPEC.valid(big, SHAPE, "float32", TARGET)
        built = backend.build(SPEC, SPEC.compile_key(big, "float32"))
        failed = backend.run(
            built, SPEC, shape=SHAPE, dtype="float32", target=TARGET, tiling=big, check=True,
            measure=ONCE,
        )  # fmt: skip
    assert failed.status == "crashed"
    assert failed.error is not None
    assert failed.error.startswith("aclrtSynchronizeStream failed: aclError 507015: block 0:")
    assert "UB overflow" in failed.error and "ACL_ERROR_RT_AICORE_EXCEPTION" in failed.error


def test_wrong_answer(
    fake_home: Path, tmp_path: Path, npu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_KERNEL_WRONG", "1")  # before the toolkit environment is captured
    with make_backend(fake_home, tmp_path) as backend:
        built = backend.build(SPEC, defines())
        tiling = SPEC.default_tiling(SHAPE, "float32", TARGET)
        result = backend.run(
            built,
            SPEC,
            shape=SHAPE,
            dtype="float32",
            target=TARGET,
            tiling=tiling,
            check=True,
            measure=ONCE,
        )
    assert result.status == "wrong"
    assert result.error is not None and result.error.startswith("y: ")


def test_acl_error_is_a_crash_with_its_meaning(
    fake_home: Path, tmp_path: Path, npu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACL_SYNC_ERROR", "507015")
    with make_backend(fake_home, tmp_path) as backend:
        built = backend.build(SPEC, defines())
        tiling = SPEC.default_tiling(SHAPE, "float32", TARGET)
        result = backend.run(
            built,
            SPEC,
            shape=SHAPE,
            dtype="float32",
            target=TARGET,
            tiling=tiling,
            check=True,
            measure=ONCE,
        )
    assert result.status == "crashed"
    assert result.error is not None
    assert "aclrtSynchronizeStream failed: aclError 507015" in result.error
    assert "ub address out of bounds" in result.error
    assert "ACL_ERROR_RT_AICORE_EXCEPTION" in result.error


def test_compile_error_is_a_failed_build(backend: AscendBackend) -> None:
    built = backend.build(SPEC, {"DTYPE_X": "no_such_type", "BUFFER_NUM": "2"})
    assert not built.ok and built.artifact is None
    assert built.error is not None and built.error.startswith("compile failed: ")
    assert "no_such_type" in built.error
    again = backend.build(SPEC, {"DTYPE_X": "no_such_type", "BUFFER_NUM": "2"})
    assert again.cached and not again.ok and again.error == built.error


def test_a_build_timeout_is_not_cached(
    backend: AscendBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stalled(*args: object, **kwargs: object) -> None:
        raise ascend_backend._TimedOut("cmake did not finish in 120 s")

    monkeypatch.setattr(ascend_backend, "_execute", stalled)
    first = backend.build(SPEC, defines())
    assert not first.ok and first.error == "build timed out after 120 s"
    again = backend.build(SPEC, defines())
    assert not again.cached and not again.ok
    assert not list((backend._builds / SPEC.name).iterdir())  # nothing kept, not even scratch
    monkeypatch.undo()
    assert backend.build(SPEC, defines()).ok  # an unloaded host builds it


def test_msprof_timing(
    fake_home: Path, tmp_path: Path, npu: None, caplog: pytest.LogCaptureFixture
) -> None:
    backend = make_backend(fake_home, tmp_path, msprof=True)
    with backend:
        built = backend.build(SPEC, defines())
        tiling = SPEC.default_tiling(SHAPE, "float32", TARGET)
        result = backend.run(
            built,
            SPEC,
            shape=SHAPE,
            dtype="float32",
            target=TARGET,
            tiling=tiling,
            check=True,
            measure=ONCE,
        )
        assert result.status == "ok", result.error
        assert result.samples_us == (10.5, 11.5, 12.5)  # Task Durations the fake msprof wrote
        assert backend.last_profile is not None and backend.last_profile.throttled
        assert backend.environment()["timing"] == "msprof op"
    assert "throttled: 1 of 3 launches" in caplog.text


def test_run_mode_not_offered(fake_home: Path, tmp_path: Path) -> None:
    with make_backend(fake_home, tmp_path, run_mode="sim") as backend:
        built = backend.build(SPEC, defines())
        assert built.ok, built.error
        tiling = SPEC.default_tiling(SHAPE, "float32", TARGET)
        with pytest.raises(
            BackendError, match="run mode sim needs CANN's simulator for Ascend910B1"
        ):
            backend.run(
                built,
                SPEC,
                shape=SHAPE,
                dtype="float32",
                target=TARGET,
                tiling=tiling,
                check=True,
                measure=ONCE,
            )


def test_other_soc_is_refused(backend: AscendBackend) -> None:
    built = backend.build(SPEC, defines())
    other = get_target("ascend910b4")
    with pytest.raises(BackendError, match="builds for Ascend910B1, asked to run Ascend910B4"):
        backend.run(
            built,
            SPEC,
            shape=SHAPE,
            dtype="float32",
            target=other,
            tiling=SPEC.default_tiling(SHAPE, "float32", other),
            check=False,
            measure=ONCE,
        )


def test_options_are_checked(fake_home: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown run mode"):
        make_backend(fake_home, tmp_path, run_mode="gpu")
    with pytest.raises(InputError, match="device must be"):
        make_backend(fake_home, tmp_path, device=-1)
    with pytest.raises(BackendError, match="pass target="):
        AscendBackend(Settings(cache_dir=tmp_path), toolkit=fake_home)


def test_environment(backend: AscendBackend) -> None:
    assert backend.environment() == {
        "backend": "ascend",
        "soc": "Ascend910B1",
        "run_mode": "npu",
        "device": 0,
        "cann_version": "8.1.RC1",
        "toolkit": str(backend.toolkit.home),
        "timing": "aclrtEvent",
    }


def test_registry_entry(monkeypatch: pytest.MonkeyPatch, fake_home: Path) -> None:
    monkeypatch.setenv("ASCEND_HOME_PATH", str(fake_home))
    with pytest.raises(BackendError, match="pass target="):
        create_backend("ascend")  # the toolkit is found; the SoC must be given


def test_parse_runner_output() -> None:
    assert parse_runner_output('[INFO] noise\n{"ok":true,"samples_us":[1.5,2.0]}\n') == {
        "ok": True,
        "samples_us": [1.5, 2.0],
    }
    assert parse_runner_output("{broken\n") is None
    assert parse_runner_output('{"other":1}\n') is None


def test_describe_runner_error() -> None:
    answer = {
        "ok": False,
        "stage": "launch",
        "acl_error": 507015,
        "error": "launch failed: aclError 507015",
    }
    assert describe_runner_error(answer) == (
        "launch failed: aclError 507015 [ACL_ERROR_RT_AICORE_EXCEPTION: AI Core exception, e.g. the "
        "UB address out of bounds (a tiling whose buffers overflow UB)]"
    )
    assert describe_runner_error({"ok": False, "acl_error": 1, "error": "x"}) == "x"


def test_compiler_errors_picks_error_lines() -> None:
    log = "[ 10%] Building\nfoo.cpp:3:1: error: bad\nnote: here\nld: undefined reference to `f'\n"
    assert compiler_errors(log) == "foo.cpp:3:1: error: bad\nld: undefined reference to `f'"
    assert compiler_errors("a\nb\n") == "a\nb"


def test_prior_tilings_are_the_cost_models_fastest(backend: AscendBackend) -> None:
    priors = backend.prior_tilings(SPEC, SHAPE, "float32", TARGET, limit=3)
    ranked = rank(SPEC, SHAPE, "float32", TARGET, samples=PRIOR_SAMPLES, seed=0)
    assert priors == [tiling for tiling, _ in ranked[:3]]


def test_the_analytic_ub_check_is_left_as_the_op_says(backend: AscendBackend) -> None:
    tiling = SPEC.default_tiling(SHAPE, "float32", TARGET)
    check = SPEC.check(tiling, SHAPE, "float32", TARGET)
    assert backend.settings.ub_check == "analytic"
    assert backend.refine_check(SPEC, tiling, SHAPE, "float32", TARGET, check) is check
