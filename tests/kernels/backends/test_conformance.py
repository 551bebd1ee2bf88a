"""The Backend contract (kernels/backends/_base.py), checked on every backend the same way.

The cpu-twin builds for real (one small op and shape: a single variant is compiled), the Ascend
backend runs on the fake CANN toolkit (see ascend/ascend_fakes.py: the generated CMake project
and host runner are built and run on this host), and tests/fakes.py's FakeBackend stands for the
backends written for tests.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes import FakeBackend
from tests.kernels.backends.ascend.ascend_fakes import make_toolkit
from tilewise.kernels.backends import Backend, BuildResult, MeasureOptions, RunResult
from tilewise.kernels.ops import Check, get_op
from tilewise.kernels.targets import TargetProfile, get_target, twin_target
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling

SPEC = get_op("scale_relu_dropout")
SHAPE = Shape({"N": 5000})
DTYPE = "float32"
#: A variant no compiler accepts: its element type does not exist.
BAD_TYPE = "no_such_type"


@dataclass(frozen=True)
class Case:
    """A backend under test and the target it builds for."""

    backend: Backend
    target: TargetProfile

    @property
    def tiling(self) -> Tiling:
        return SPEC.default_tiling(SHAPE, DTYPE, self.target)

    def defines(self) -> dict[str, str]:
        return SPEC.compile_key(self.tiling, DTYPE)

    def run(self, *, check: bool, measure: MeasureOptions) -> RunResult:
        build = self.backend.build(SPEC, self.defines())
        assert build.ok, build.error
        return self.backend.run(
            build,
            SPEC,
            shape=SHAPE,
            dtype=DTYPE,
            target=self.target,
            tiling=self.tiling,
            check=check,
            measure=measure,
        )


def _cpu_twin(root: Path) -> Case:
    from tilewise.kernels.backends._cpu_twin import CpuTwinBackend

    settings = Settings(cache_dir=root / "cache", run_timeout_s=20.0)
    return Case(CpuTwinBackend(settings), twin_target())


def _ascend(root: Path) -> Case:
    if shutil.which("cmake") is None or shutil.which("g++") is None:
        pytest.skip("needs cmake and g++")
    from tilewise.kernels.backends._ascend.backend import AscendBackend

    settings = Settings(cache_dir=root / "cache", run_timeout_s=20.0, build_timeout_s=120.0)
    home = make_toolkit(root / "Ascend", functional=True)
    backend = AscendBackend(settings, target="ascend910b1", toolkit=home)
    # An NPU's device node, so the run mode npu is offered here (the fake ACL runs on the host).
    backend.dev_root = root / "dev"
    backend.dev_root.mkdir()
    (backend.dev_root / "davinci0").write_text("")
    return Case(backend, get_target("ascend910b1"))


def _fake(root: Path) -> Case:
    def build_error(defines: Mapping[str, str]) -> str | None:
        if defines.get("DTYPE_X") == BAD_TYPE:
            return f"compile failed: unknown type name '{BAD_TYPE}'"
        return None

    return Case(FakeBackend(build_error=build_error), twin_target())


@pytest.fixture(scope="module", params=["cpu-twin", "ascend", "fake"])
def case(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Case]:
    make = {"cpu-twin": _cpu_twin, "ascend": _ascend, "fake": _fake}[request.param]
    made = make(tmp_path_factory.mktemp(request.param))
    with made.backend:
        yield made


def test_build_returns_a_build_result_cached_the_second_time(case: Case) -> None:
    first = case.backend.build(SPEC, case.defines())
    assert isinstance(first, BuildResult)
    assert first.ok and first.error is None, first.error
    again = case.backend.build(SPEC, case.defines())
    assert again.ok and again.cached and again.key == first.key


def test_a_bad_build_is_a_failed_build_result_not_an_exception(case: Case) -> None:
    built = case.backend.build(SPEC, {**case.defines(), "DTYPE_X": BAD_TYPE})
    assert isinstance(built, BuildResult)
    assert not built.ok and built.artifact is None
    assert built.error and BAD_TYPE in built.error


def test_a_checked_run_of_a_right_answer_is_ok(case: Case) -> None:
    result = case.run(check=True, measure=MeasureOptions(warmup=1, repeats=3, max_seconds=5.0))
    assert isinstance(result, RunResult)
    assert result.ok and result.error is None, result.error
    assert len(result.samples_us) == 3 and all(s >= 0 for s in result.samples_us)
    assert result.median_us is not None


@pytest.mark.parametrize(
    ("warmup", "repeats", "warmup_s"), [(0, 1, 0.0), (3, 2, 0.05)], ids=["cold", "warmed"]
)
def test_measure_takes_repeats_samples_and_no_warmup_ones(
    case: Case, warmup: int, repeats: int, warmup_s: float
) -> None:
    measure = MeasureOptions(warmup=warmup, repeats=repeats, max_seconds=5.0, warmup_s=warmup_s)
    result = case.run(check=False, measure=measure)
    assert result.ok, result.error
    assert len(result.samples_us) == repeats


def test_refine_check_returns_a_check_of_the_same_tiling(case: Case) -> None:
    check = SPEC.check(case.tiling, SHAPE, DTYPE, case.target)
    refined = case.backend.refine_check(SPEC, case.tiling, SHAPE, DTYPE, case.target, check)
    assert isinstance(refined, Check)
    # The default tiling fits by every account: no backend's own verdict turns it down.
    assert refined.valid and refined.valid == check.valid


def test_prior_tilings_are_at_most_limit_valid_tilings(case: Case) -> None:
    priors = case.backend.prior_tilings(SPEC, SHAPE, DTYPE, case.target, limit=3)
    assert isinstance(priors, list) and len(priors) <= 3
    names = {t.name for t in SPEC.tunables(SHAPE, DTYPE, case.target)}
    for tiling in priors:
        assert isinstance(tiling, Tiling) and set(tiling) == names
        assert SPEC.check(tiling, SHAPE, DTYPE, case.target).valid
    assert case.backend.prior_tilings(SPEC, SHAPE, DTYPE, case.target, limit=0) == []


def test_environment_is_a_json_dict_naming_the_backend(case: Case) -> None:
    env = case.backend.environment()
    assert isinstance(env, dict) and env["backend"] == case.backend.name
    assert json.loads(json.dumps(env)) == env  # kept with every record
