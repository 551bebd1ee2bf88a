"""`tilewise bench kernels`: the JSON row schema, on one tiny shape with a stub backend."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from tests.fakes import FakeBackend
from tilewise.bench import kernels as bk
from tilewise.errors import InputError
from tilewise.settings import Settings


def stub_backend() -> FakeBackend:
    """No compile, no launch: latency falls with tileLength, so tuning can beat the default."""
    return FakeBackend(lambda tiling: 100.0 + 1e5 / tiling["tileLength"], spread=(1.0,))


MACHINE = bk.Machine(peak_flops=1e11, bandwidth=2e10, how="stub")


@pytest.mark.parametrize("budget", [0, 3])
def test_row_schema_for_a_tiny_shape(tmp_path: Path, budget: int) -> None:
    settings = Settings(db_url="sqlite://", cache_dir=tmp_path / "cache", remeasure_top=1)
    row = bk.bench_case(
        "scale_relu_dropout",
        {"N": 4096},
        backend=stub_backend(),
        settings=settings,
        machine=MACHINE,
        budget=budget,
        with_torch=False,
        settle=0.0,
    )
    row = json.loads(json.dumps(row))  # JSON-serialisable as printed
    assert set(bk.ROW_KEYS) <= set(row)
    assert (row["op"], row["shape"], row["dtype"]) == ("scale_relu_dropout", {"N": 4096}, "float32")
    for key in ("default_ms", "tuned_ms", "numpy_ms", "numpy_2t_ms", "roofline_ms"):
        assert isinstance(row[key], float) and row[key] > 0, key
    assert row["torch_eager_ms"] is None and row["torch_compile_ms"] is None
    assert row["budget"] == budget
    assert row["default_ms"] == pytest.approx(
        0.1 + 100 / row["default_tiling"]["tileLength"], abs=1e-3
    )
    if budget == 0:
        assert row["tuned_ms"] == row["default_ms"] and row["tune"] is None
    else:
        assert row["tuned_ms"] <= row["default_ms"] and row["tune"]["evaluations"] >= 1
    assert row["bound"] == "memory" and row["bw_fraction"] is not None
    assert row["rounds"] == bk.ROUNDS and row["spread"]["default"] == 0.0  # the stub never moves
    assert row["roofline_ms"] == pytest.approx(2 * 4096 * 4 / 2e10 * 1e3, rel=1e-2)


def test_cases_cover_the_issue_shapes_and_reject_unknown_ops() -> None:
    assert len(bk.cases(None)) == 9
    assert bk.cases("swiglu") == [("swiglu", {"T": 2048, "I": 2752})]
    assert bk.cases("swiglu_grad") == [("swiglu_grad", {"T": 2048, "I": 2752})]
    with pytest.raises(InputError):
        bk.cases("nope")


def test_roofline_uses_the_bandwidth_of_a_copy_of_the_same_size_when_faster() -> None:
    sizes: list[int] = []

    def stream(nbytes: int) -> float:
        sizes.append(nbytes)
        return 5e10 if nbytes < 1 << 20 else 1e10  # a cache, then slower than the stub's 2e10

    machine = bk.Machine(peak_flops=1e11, bandwidth=2e10, how="stub", stream=stream)
    assert machine.bandwidth_for(4096) == 5e10
    assert machine.bandwidth_for(1 << 24) == 2e10  # never below the large-stream bandwidth
    assert machine.roofline_ms(0, 4096) == pytest.approx(4096 / 5e10 * 1e3)
    assert sizes == [4096, 1 << 24, 4096]
    assert MACHINE.bandwidth_for(4096) == 2e10  # no stream: one bandwidth for every size


def test_rounds_visit_every_contender_in_turn_and_keep_the_median() -> None:
    calls: list[tuple[str, int]] = []

    def contender(name: str, values: list[float | None]) -> bk.Timer:
        left = iter(values)

        def measure(warmup: int) -> float | None:
            calls.append((name, warmup))
            return next(left)

        return measure

    got = bk.interleaved(
        {
            "a": contender("a", [50.0, 3.0, 1.0, 2.0]),  # the first visit is not timed
            "b": contender("b", [None, None, 7.0, 5.0]),
            "c": contender("c", [None, None, None, None]),
        },
        rounds=3,
        settle=0.0,
    )
    # A slow moment slows one round of each contender, not one column.
    assert [name for name, _ in calls] == ["a", "b", "c"] * 4
    assert got == {"a": [3.0, 1.0, 2.0], "b": [7.0, 5.0], "c": []}
    # inclusive quartiles: 1.5 and 2.5 around 2; 5.5 and 6.5 around 6
    assert bk.spread(got["a"]) == 0.5 and bk.spread(got["b"]) == pytest.approx(1 / 6, abs=1e-3)
    assert bk.spread([4.0]) is None
    # WARM_MS of warm-up, by what the contender last took (one run when not known yet).
    assert [w for name, w in calls if name == "a"] == [1, 4, 67, 100]
    assert [w for name, w in calls if name == "b"] == [1, 1, 1, 29]


def test_the_cli_default_budget_is_the_benchmarks() -> None:
    # The CLI spells the default out (its start-up must not import numpy): keep the two equal.
    from tilewise.cli.bench import kernels

    assert inspect.signature(kernels).parameters["budget"].default == bk.DEFAULT_BUDGET
