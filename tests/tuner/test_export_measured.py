"""Grid cells decided by measuring (``tilewise export --measure``): synthetic measurements from
a known truth, one cell's rule sample by sample, and the CLI measuring on the twin."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests_support import host_toolchain, ok_record, portfolio_best, tuned_best_and_default

from tests.tuner.test_export import COMPILERS, _ask_c, _build, _fields
from tests.tuner.test_export_portfolio import tilewise
from tests.tuner.test_runtime_choice import HELD_OUT, LAG, NEAR, TWIN, _ask, _exact_truth, _fill
from tilewise import store as st
from tilewise.export import render_header, table_document
from tilewise.export._choice import cell_index, parse_choices
from tilewise.export._measured_cells import decide_measured, measured_samples
from tilewise.runtime import TilingTable
from tilewise.types import Shape, Tiling, Workload


class Truth:
    """A measurement function: each tiling's times at a shape drawn around ``_exact_truth``
    (2% noise, 15 samples), counting the shapes and tilings it was asked."""

    def __init__(self, truth: str, seed: int = 3) -> None:
        self.truth, self.rng = truth, random.Random(seed)
        self.shapes: list[Shape] = []

    def __call__(
        self, spec: Any, target: Any, dtype: str, shape: Shape, tilings: Mapping[str, Tiling]
    ) -> dict[str, list[float]]:
        assert (spec, target, dtype) == (LAG, TWIN, "float32") and "default" in tilings
        self.shapes.append(shape)
        return {
            label: [
                _exact_truth(t, shape, self.truth) * math.exp(self.rng.gauss(0.0, 0.02))
                for _ in range(15)
            ]
            for label, t in tilings.items()
        }


def _measured_doc(store: st.Store, stored: str, measure: Truth) -> dict[str, Any]:
    with store.session() as session:
        _fill(session, stored=stored)
    with store.session() as session:
        return table_document(session, op=LAG.name, measure_cells=measure)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_measured_cells_choose_carried_tilings_where_they_are_faster(store: st.Store) -> None:
    """Under a truth where carried tilings beat the default, a grid decided by measuring picks
    them at most untuned shapes, and no answer is slower than the default by that truth."""
    truth = Truth("fast copies")
    doc = _measured_doc(store, "best", truth)
    (choice,) = doc["choices"]
    assert choice["model"]["kind"] == "measured"
    assert choice["model"]["sample_shapes"] == len(truth.shapes) > len(choice["cells"])
    # K, the same at every tuned shape, is measured there (not at its octave's middle, 724);
    # M and N, which the tuned shapes span, one octave past them on each side.
    assert {s["K"] for s in truth.shapes} == {512}
    assert (choice["low"], choice["size"]) == ([5, 8, 9], [9, 5, 1])
    table = TilingTable.from_document(doc)
    chose, gains = 0, []
    for dims in NEAR + HELD_OUT:
        shape = Shape(dims)
        default = LAG.default_tiling(shape, "float32", TWIN)
        answer = _ask(table, dims)
        assert answer.rule in ("measured_faster", "measured_default"), answer
        if answer.rule == "measured_faster":
            chose += 1
            assert answer.source == "nearest" and answer.workload is not None
            assert answer.predicted_gain is not None and answer.predicted_gain > 1.0
            tuned = answer.workload.shape
            exact = _ask(table, dict(tuned))
            assert answer.tiling == LAG.carry(exact.tiling, tuned, shape, "float32", TWIN)
        gain = _exact_truth(default, shape, "fast copies") / _exact_truth(
            answer.tiling, shape, "fast copies"
        )
        assert gain >= 0.95, (dims, answer)
        gains.append(gain)
    assert chose >= 0.75 * len(NEAR + HELD_OUT), chose
    assert sum(gains) / len(gains) > 1.5


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_measured_cells_keep_the_default_where_carried_tilings_are_slower(
    store: st.Store,
) -> None:
    doc = _measured_doc(store, "worst", Truth("slow copies"))
    (choice,) = doc["choices"]
    assert set(choice["cells"]) == {-1}
    table = TilingTable.from_document(doc)
    for dims in HELD_OUT:
        answer = _ask(table, dims)
        assert (answer.source, answer.rule) == ("default", "measured_default"), (dims, answer)
        assert answer.tiling == LAG.default_tiling(Shape(dims), "float32", TWIN)
        assert answer.predicted_gain is None or answer.predicted_gain < 1.0


def test_a_cell_samples_the_least_value_of_a_dim_at_its_lowest_octave() -> None:
    """Every value below the grid's lowest octave is clamped into that cell, down to the dim's
    least value: it is measured there too."""
    inner = measured_samples(LAG, (5, 9, 9), (True, False, False), (False, True, True))
    lowest = measured_samples(LAG, (5, 9, 9), (True, False, False), (True, True, True))
    assert sorted(s["M"] for s in inner) == [32, 45, 63]
    assert sorted(s["M"] for s in lowest) == [1, 32, 45, 63]
    # N and K do not span the grid: their least value is not sampled either.
    assert {(s["N"], s["K"]) for s in lowest} == {(724, 724)}


def _cell() -> tuple[list[Shape], list[Tiling], Any]:
    tuned = Shape({"M": 64, "N": 512, "K": 512})
    tiling = portfolio_best(tuned)
    rules = LAG.carry_rules("float32", TWIN)
    samples = measured_samples(LAG, (6, 9, 9), (True, False, False), (False, False, False))
    return samples, [rules.relative(tiling, tuned)], rules


def _scripted(factors: dict[int, float], samples: list[Shape]) -> Any:
    """Times where the one candidate takes ``factors[i]`` of the default's time at sample shape
    ``i`` (1.0: the same times), recording the sample shapes asked."""
    asked: list[int] = []

    def measure(spec: Any, target: Any, dtype: str, shape: Shape, tilings: Any) -> Any:
        index = samples.index(shape)
        asked.append(index)
        return {
            label: [
                (1.0 if label == "default" else factors[index]) * 100.0 * (1 + j / 100)
                for j in range(9)
            ]
            for label in tilings
        }

    measure.asked = asked  # type: ignore[attr-defined]
    return measure


def _decide(factors: dict[int, float]) -> tuple[tuple[int, float | None], list[int]]:
    samples, relatives, rules = _cell()
    assert len(samples) == 3
    measure = _scripted(factors, samples)
    decided = decide_measured(LAG, TWIN, "float32", samples, [0], relatives, rules, measure)
    return decided, measure.asked


def test_a_candidate_must_be_faster_at_most_sample_shapes_and_slower_at_none() -> None:
    # Faster everywhere: chosen, its gain the geometric mean over the sample shapes.
    assert _decide({0: 0.8, 1: 0.8, 2: 0.8}) == ((0, 1.25), [0, 1, 2])
    # Faster at two of three, the same at the third: chosen.
    (chosen, gain), _ = _decide({0: 0.8, 1: 1.0, 2: 0.8})
    assert chosen == 0 and gain == round((1.25 * 1.25) ** (1 / 3), 4)
    # Faster at one of three only: the default, with the gain measured.
    (chosen, gain), _ = _decide({0: 0.8, 1: 1.0, 2: 1.0})
    assert chosen == -1 and gain == round(1.25 ** (1 / 3), 4)
    # Faster at two, slower at the third (the cell's highest M): the default.
    (chosen, gain), _ = _decide({0: 0.8, 1: 0.8, 2: 1.2})
    assert chosen == -1
    # Slower at the first sample shape: not measured again at the others.
    assert _decide({0: 1.2, 1: 0.8, 2: 0.8}) == ((-1, round(1 / 1.2, 4)), [0])


def test_a_candidate_the_device_could_not_measure_is_not_chosen() -> None:
    samples, relatives, rules = _cell()

    def only_default(spec: Any, target: Any, dtype: str, shape: Shape, tilings: Any) -> Any:
        return {"default": [100.0] * 9}

    assert decide_measured(LAG, TWIN, "float32", samples, [0], relatives, rules, only_default) == (
        -1,
        None,
    )
    assert decide_measured(LAG, TWIN, "float32", samples, [], relatives, rules, only_default) == (
        -1,
        None,
    )


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_cli_export_measure_decides_the_grid_on_the_twin(store: st.Store, tmp_path: Path) -> None:
    """Two tuned shapes: ``--measure`` measures each cell's candidates on the twin; the grid
    says so, the runtime answers by it, and a later export without ``--measure`` too."""
    small = [Shape({"M": 16, "N": 64, "K": 64}), Shape({"M": 128, "N": 64, "K": 64})]
    with store.session() as session:
        tuned_best_and_default(session, small)
    out = tmp_path / "t.json"
    done = tilewise(
        "export", LAG.name, "--db", store.url, "--measure", "-o", str(out), tmp_path=tmp_path
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    (choice,) = doc["choices"]
    assert choice["model"]["kind"] == "measured" and choice["model"]["sample_shapes"] >= 4
    # M's octaves 4..7 tuned, one more on each side; N and K one octave each.
    assert (choice["low"], choice["size"]) == ([3, 6, 6], [6, 1, 1])
    table = TilingTable.from_file(out)
    assert table.rejected == []
    (grid,), _ = parse_choices(doc["choices"])
    for m in (1, 40, 100, 200):
        shape = Shape({"M": m, "N": 64, "K": 64})
        answer = _ask(table, dict(shape))
        picked = grid.cells[cell_index(grid, LAG, shape)]
        if picked < 0:
            assert answer.rule == "measured_default"
        else:
            assert answer.rule == "measured_faster"
            assert answer.workload is not None and answer.workload.shape == grid.shapes[picked]
    # Nothing measured at the cells' sample shapes was recorded as a workload.
    with store.session() as session:
        assert len(st.best_tilings(session, op=LAG.name)) == 2
    # The grid is kept: an export without --measure answers by it.
    again = tmp_path / "again.json"
    done = tilewise("export", LAG.name, "--db", store.url, "-o", str(again), tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(again.read_text())["choices"] == doc["choices"]


@pytest.mark.skipif(not COMPILERS, reason="no C compiler")
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("stored", "truth"), [("best", "fast copies"), ("worst", "slow copies")])
def test_header_answers_from_the_measured_grid(
    store: st.Store, stored: str, truth: str, tmp_path: Path
) -> None:
    """The header reads a measured grid (wider than the tuned octaves) as any other: the same
    answer as Python's wherever Python's chosen tiling passes its checks."""
    doc = _measured_doc(store, stored, Truth(truth))
    header = tmp_path / "lag.h"
    header.write_text(render_header(doc, op=LAG.name))
    table = TilingTable.from_document(doc)
    rng = np.random.default_rng(11)
    sweep = [
        (int(m), int(n), 512)
        for m, n in zip(2 ** rng.uniform(0, 14, 120), 2 ** rng.uniform(7, 13, 120), strict=True)
    ]
    queries = [("cpu-twin", "float32", s) for s in sweep]
    compiler, std = COMPILERS[0]
    exe = _build(header, LAG.name, tmp_path, compiler, std)
    rules: dict[str, int] = {}
    for (_, _, asked), c in zip(queries, _ask_c(exe, queries), strict=True):
        py = _ask(table, dict(zip(LAG.dims, asked, strict=True)))
        rules[py.rule] = rules.get(py.rule, 0) + 1
        if py.rule == "measured_faster":
            assert c == [1, *[py.tiling[f] for f in _fields(LAG, "cpu-twin", "float32", asked)]]
        elif py.rule == "measured_default":
            assert c == [0], asked
    expected = "measured_faster" if stored == "best" else "measured_default"
    assert rules.get(expected, 0) >= 0.9 * len(sweep), rules


def test_cell_measurer_asks_each_build_once_over_sample_shapes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A grid's sample shapes share their builds: each compile-time variant is asked of the
    backend once for all of them, while every shape's tilings are launched at that shape."""
    from contextlib import ExitStack

    from tests.fakes import FakeBackend
    from tilewise.kernels import backends
    from tilewise.kernels.ops import get_op
    from tilewise.search import cell_measurer
    from tilewise.settings import Settings

    fake = FakeBackend()
    monkeypatch.setattr(backends, "create_backend", lambda *a, **k: fake)
    spec, target = get_op("scale_relu_dropout"), TWIN
    shapes = [Shape({"N": n}) for n in (4096, 8192, 16384)]
    with ExitStack() as opened:
        measure = cell_measurer(Settings(cache_dir=tmp_path, repeats=3), opened)
        for shape in shapes:
            default = spec.default_tiling(shape, "float32", target)
            other = default.replace(bufferNum=3 - default["bufferNum"])  # the other build
            times = measure(spec, target, "float32", shape, {"default": default, "other": other})
            assert set(times) == {"default", "other"}
    assert len(fake.builds) == 2 and set(fake.builds.values()) == {1}
    assert sum(fake.checked.values()) == 2 * len(shapes)


@pytest.mark.parametrize("db_url", ["sqlite", "postgresql"], indirect=True)
def test_a_kept_measured_grid_answers_later_exports_while_its_tunes_hold(
    store: st.Store, db_url: str
) -> None:
    """A grid measured once is kept: every later export of the same tunes (the service's, the
    runtime's from the database) answers by it, and by the model's once a tune changes."""
    from tilewise.export import keep_measured_grids

    truth = Truth("fast copies")
    measured = _measured_doc(store, "best", truth)
    (grid,) = measured["choices"]
    assert grid["model"]["kind"] == "measured" and len(grid["model"]["basis"]) == 32
    with store.session() as session:
        plain = table_document(session, op=LAG.name)  # nothing kept yet: the model's grid
        assert keep_measured_grids(session, measured) == 1
    assert plain["choices"][0]["model"]["kind"] != "measured"
    with store.session() as session:
        later = table_document(session, op=LAG.name)
    assert later["choices"] == [grid]
    asked = len(truth.shapes)
    table = TilingTable.from_db(db_url, op=LAG.name)
    rules = {_ask(table, dims).rule for dims in HELD_OUT}
    assert rules <= {"measured_faster", "measured_default"} and "measured_faster" in rules
    assert len(truth.shapes) == asked  # answered from the kept grid: nothing measured again

    # A tuned shape's tiling replaced (a re-tune): the kept grid no longer holds.
    first = Shape(measured["entries"][0]["shape"])
    with store.session() as session:
        workload = st.find_workload(
            session, key=Workload(LAG.name, LAG.version, "cpu-twin", "float32", first).key
        )
        assert workload is not None
        default = LAG.default_tiling(first, "float32", TWIN)
        record_id = ok_record(session, workload.id, default, 1.0)
        st.upsert_tiling(
            session,
            toolchain=host_toolchain(),
            workload_id=workload.id,
            record_id=record_id,
            tiling=default,
            latency_us=1.0,
            default_latency_us=1.0,
            speedup=1.0,
            evaluations=1,
        )
    with store.session() as session:
        after = table_document(session, op=LAG.name)
    assert [c["model"]["kind"] for c in after["choices"]] != ["measured"]
