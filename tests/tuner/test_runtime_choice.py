"""A choice, not a copy: at shapes nobody tuned the runtime answers what a model fitted on every
record of the op predicts fastest (the re-derived tilings of the nearest tuned shapes, or the
default), and the default unless a candidate beats it by more than the model's own error; the
C header answers from the same grid."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests_support import host_toolchain

from tests.tuner.test_export import COMPILERS, _ask_c, _build, _fields
from tilewise import store as st
from tilewise.export import render_header, table_document
from tilewise.export._choice import cell_index, parse_choices
from tilewise.export._model import (
    FEATURES,
    MIN_RECORDS_PER_FEATURE,
    Pair,
    Sample,
    _held_out_error,
    features,
    fit_model,
)
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.runtime import TilingTable
from tilewise.types import Shape, Tiling, Workload

LAG = get_op("linear_add_gelu")
TWIN = get_target("cpu-twin")
TUNED = [{"M": m, "N": n, "K": 512} for m in (64, 256, 1024, 4096) for n in (512, 2048)]
HELD_OUT = [{"M": m, "N": n, "K": 512} for m in (40, 100, 400, 1500, 3000) for n in (700, 1400)]
#: Untuned shapes a little larger than each tuned one, within its grid cell.
NEAR = [{"M": d["M"] * 9 // 8, "N": d["N"] * 9 // 8, "K": 512} for d in TUNED]


#: Latencies as log-linear functions of the model's features (log2 of waves, bytes moved,
#: cube MACs, vector bytes, vector instructions, stages, blocks, the cost model's time; the
#: records name no threads, so waves count over the target's cores). "slow copies": the cost
#: model's time with a cost per wave, under which a tuned tiling carried to another shape loses
#: to that shape's default (as the project measured on the twin). "fast copies": synthetic, the
#: cost model's time falling with the vector instruction count, under which the default is
#: systematically slow and carried tilings win.
TRUTHS = {
    "slow copies": (0.4, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.9),
    "fast copies": (0.0, 0.0, 0.0, 0.0, -0.5, 0.0, 0.0, 1.0),
}


def _exact_truth(
    tiling: Tiling, shape: Shape, truth: str = "slow copies", units: int | None = None
) -> float:
    x = features(LAG, tiling, shape, "float32", TWIN, units)
    assert x is not None
    return float(2 ** sum(c * v for c, v in zip(TRUTHS[truth], x, strict=True)))


def _truth(
    tiling: Tiling,
    shape: Shape,
    rng: random.Random,
    truth: str = "slow copies",
    units: int | None = None,
) -> float:
    """:func:`_exact_truth` with 2% noise."""
    return _exact_truth(tiling, shape, truth, units) * math.exp(rng.gauss(0.0, 0.02))


def _valid_tilings(shape: Shape, rng: random.Random, count: int) -> list[Tiling]:
    tunables = LAG.tunables(shape, "float32", TWIN)
    found: list[Tiling] = []
    for _ in range(3000):
        tiling = Tiling({t.name: rng.choice(t.values) for t in tunables})
        if tiling not in found and LAG.valid(tiling, shape, "float32", TWIN):
            found.append(tiling)
            if len(found) == count:
                break
    return found


def _climb(shape: Shape, truth: str) -> list[Tiling]:
    """A tune's path: from the default, each tunable in turn set to its best value by
    :func:`_exact_truth`, twice over; every tiling kept on the way, the best last."""
    tiling = LAG.default_tiling(shape, "float32", TWIN)
    best, path = _exact_truth(tiling, shape, truth), [tiling]
    for _ in range(2):
        for tunable in LAG.tunables(shape, "float32", TWIN):
            for value in tunable.values:
                other = tiling.replace(**{tunable.name: value})
                if other != tiling and LAG.valid(other, shape, "float32", TWIN):
                    us = _exact_truth(other, shape, truth)
                    if us < best * 0.999:
                        best, tiling = us, other
                        path.append(tiling)
    return path


def _fill(
    session: Any,
    *,
    stored: str,
    seed: int = 7,
    threads: int | None = None,
    remeasured: float | None = None,
) -> None:
    """Each tuned shape measured at its default, a dozen random valid tilings and (for
    ``"best"``) a tune's path, latencies from :func:`_truth`: ``"best"`` stores the best
    measured tiling under the "fast copies" truth, ``"worst"`` the slowest under the "slow
    copies" one; never the default. With ``threads`` the records say they ran on that many
    host threads (as the twin's do) and the truth counts waves over them. With
    ``remeasured``, the three fastest measured tilings and the default are re-measured as a
    tune ends, side by side, at that share of their log ratio to the default."""
    truth = "fast copies" if stored == "best" else "slow copies"
    rng = random.Random(seed)
    for dims in TUNED:
        shape = Shape(dims)
        workload = st.commit_workload(
            session, Workload(LAG.name, LAG.version, "cpu-twin", "float32", shape)
        )
        default = LAG.default_tiling(shape, "float32", TWIN)
        tried = [default, *_valid_tilings(shape, rng, 12)]
        if stored == "best":
            tried += _climb(shape, truth)
        measured = {t: _truth(t, shape, rng, truth, threads) for t in tried}
        ids = {
            t: st.add_record(
                session,
                toolchain=host_toolchain(),
                workload_id=workload.id,
                tiling=t,
                status="ok",
                latency_us=us,
                spread=0.02,
                source="search",
                env={"host": "test"} if threads is None else {"threads": threads},
            ).id
            for t, us in measured.items()
        }
        others = sorted((t for t in measured if t != default), key=measured.__getitem__)
        entry = others[0] if stored == "best" else others[-1]
        if remeasured is not None:
            base = _exact_truth(default, shape, truth, threads)
            for t in [default, *others[:3]]:
                share = (_exact_truth(t, shape, truth, threads) / base) ** remeasured
                st.add_record(
                    session,
                    toolchain=host_toolchain(),
                    workload_id=workload.id,
                    tiling=t,
                    status="ok",
                    latency_us=base * share,
                    spread=0.01,
                    source="remeasure",
                    env={"host": "test"},
                )
        st.upsert_tiling(
            session,
            toolchain=host_toolchain(),
            workload_id=workload.id,
            record_id=ids[entry],
            tiling=entry,
            latency_us=measured[entry],
            default_latency_us=measured[default],
            speedup=measured[default] / measured[entry],
            evaluations=len(measured),
        )


def _doc(store: st.Store, stored: str) -> dict[str, Any]:
    with store.session() as session:
        _fill(session, stored=stored)
    with store.session() as session:
        return table_document(session, op=LAG.name)


def _ask(table: TilingTable, dims: dict[str, int]) -> Any:
    return table.lookup(LAG.name, target="cpu-twin", dtype="float32", shape=dims)


def test_a_model_fits_the_records_and_measures_its_error_on_held_out_shapes() -> None:
    rng = random.Random(3)
    samples = []
    for dims in TUNED:
        shape = Shape(dims)
        default = LAG.default_tiling(shape, "float32", TWIN)
        for t in [default, *_valid_tilings(shape, rng, 10)]:
            x = features(LAG, t, shape, "float32", TWIN)
            assert x is not None
            us = _truth(t, shape, rng)
            samples.append(Sample("cpu-twin/float32", shape, x, math.log(us), t == default))
    model = fit_model(samples)
    # The truth is log-linear in the features with 2% noise, which both the fit across shapes
    # and the fit within each shape reproduce down to the noise: the smaller held-out error
    # picks one of the two, and either is the truth's form (the cost model alone is not).
    assert model is not None and model.kind in {"loglinear", "within"}, model
    # The held-out error of a log ratio of two noisy latencies is about sqrt(2) * 2%.
    assert 0.01 < model.error < 0.06, model
    # Too few records for a coefficient per feature: the cost model, scaled, with its own error.
    sparse = [s for s in samples if s.is_default or s.x == samples[1].x] + [
        next(o for o in samples if o.shape == s.shape and not o.is_default)
        for s in samples
        if s.is_default
    ]
    cost = fit_model(sparse)
    assert cost is not None and cost.kind == "cost"
    assert cost.records == len(sparse) < MIN_RECORDS_PER_FEATURE * len(FEATURES)
    assert cost.coef == tuple(float(f == "cost_us") for f in FEATURES) and cost.error > 0
    # Too few shapes to hold any out: no model.
    few = [s for s in samples if s.shape in {Shape(TUNED[0]), Shape(TUNED[1])}]
    assert fit_model(few) is None


def test_a_shape_slow_as_a_whole_does_not_bend_the_model() -> None:
    """Each shape's records slower or faster as a whole by a factor no feature explains (a tune
    measured while the host was busy): the fit on each shape's records less its means predicts
    the ratios between one shape's tilings as well as without the factors; the fit across
    shapes must bend its coefficients to explain them, and is worse."""
    rng = random.Random(11)
    samples = []
    for dims in TUNED:
        shape = Shape(dims)
        offset = rng.uniform(-0.7, 0.7)  # natural log: 0.5x to 2x, the whole shape
        default = LAG.default_tiling(shape, "float32", TWIN)
        for t in [default, *_valid_tilings(shape, rng, 10)]:
            x = features(LAG, t, shape, "float32", TWIN)
            assert x is not None
            log_us = math.log(_truth(t, shape, rng)) + offset
            samples.append(Sample("cpu-twin/float32", shape, x, log_us, t == default))
    model = fit_model(samples)
    assert model is not None and model.kind == "within", model
    assert 0.01 < model.error < 0.06, model
    across = _held_out_error("loglinear", samples)
    assert across is not None and across > 2 * model.error, (across, model.error)


@pytest.mark.parametrize(("measured_share", "scale"), [(1.0, (0.95, 1.01)), (0.5, (0.45, 0.55))])
def test_the_re_measured_pairs_say_how_much_of_a_predicted_gain_is_real(
    measured_share: float, scale: tuple[float, float]
) -> None:
    """The records say the truth; the side-by-side re-measures of the best tilings against
    the default measure ``measured_share`` of each predicted log gain (a search's records
    over-state what its winners gain): the model keeps that share and its error is the
    re-measures' own."""
    rng = random.Random(13)
    samples, pairs = [], []
    for dims in TUNED:
        shape = Shape(dims)
        default = LAG.default_tiling(shape, "float32", TWIN)
        x_default = features(LAG, default, shape, "float32", TWIN)
        assert x_default is not None
        tried = [default, *_valid_tilings(shape, rng, 10)]
        for t in tried:
            x = features(LAG, t, shape, "float32", TWIN)
            assert x is not None
            log_us = math.log(_truth(t, shape, rng, "fast copies"))
            samples.append(Sample("cpu-twin/float32", shape, x, log_us, t == default))
        ranked = sorted(tried[1:], key=lambda t: _exact_truth(t, shape, "fast copies"))
        for t in ranked[:3]:
            x = features(LAG, t, shape, "float32", TWIN)
            assert x is not None
            slower = _exact_truth(t, shape, "fast copies") / _exact_truth(
                default, shape, "fast copies"
            )
            truth = math.log(slower)
            log_ratio = measured_share * truth + rng.gauss(0.0, 0.02)
            pairs.append(Pair("cpu-twin/float32", shape, x, x_default, log_ratio))
    model = fit_model(samples, pairs)
    assert model is not None and scale[0] < model.scale < scale[1], model
    assert model.error < 0.1, model
    # Re-measures that say nothing of the predictions: no gain is believed.
    noise = [p._replace(log_ratio=rng.gauss(0.0, 0.3)) for p in pairs]
    blind = fit_model(samples, noise)
    assert blind is not None and blind.scale < 0.2 and blind.error > 0.2, blind
    # Without pairs on enough shapes, the error is that of every record and nothing is scaled.
    few = fit_model(samples, [p for p in pairs if p.shape == Shape(TUNED[0])])
    assert few is not None and few.scale == 1.0 and few.error < 0.06, few


def test_an_export_scales_the_model_by_the_tunes_re_measures(store: st.Store) -> None:
    """The tunes' side-by-side re-measures find half the log gain their records say: the
    exported model keeps half, and a candidate must clear the error with half its gain."""
    with store.session() as session:
        _fill(session, stored="best", remeasured=0.5)
    with store.session() as session:
        doc = table_document(session, op=LAG.name)
    model = doc["choices"][0]["model"]
    assert model["scale"] < 0.9 and model["error"] < 0.1, model
    # The exported model, scaled, predicts what the re-measures found (the records it is
    # fitted on hold both a search's measures and the re-measures, so its own coefficients
    # predict more than half the gain, and the scale takes the rest off).
    rng = random.Random(17)
    misses = []
    for dims in TUNED:
        shape = Shape(dims)
        default = LAG.default_tiling(shape, "float32", TWIN)
        x_default = features(LAG, default, shape, "float32", TWIN)
        assert x_default is not None
        for t in _valid_tilings(shape, rng, 5):
            x = features(LAG, t, shape, "float32", TWIN)
            assert x is not None
            predicted = math.log(2) * sum(
                c * (a - b) for c, a, b in zip(model["coef"], x, x_default, strict=True)
            )
            truth = math.log(
                _exact_truth(t, shape, "fast copies") / _exact_truth(default, shape, "fast copies")
            )
            misses.append(model["scale"] * predicted - 0.5 * truth)
    assert math.sqrt(sum(m * m for m in misses) / len(misses)) < 0.15, misses


def test_the_model_counts_waves_over_the_threads_the_records_ran_on(store: st.Store) -> None:
    """The twin runs a launch's blocks on a few host threads, not on the NPU's cores whose
    on-chip sizes it keeps: a truth with waves over 2 threads is what the model fits when the
    records name their threads, and it fits worse counting waves over the cores."""
    with store.session() as session:
        _fill(session, stored="worst", threads=2)
    with store.session() as session:
        doc = table_document(session, op=LAG.name)
    model = doc["choices"][0]["model"]
    assert model["units"] == {"cpu-twin/float32": 2}
    assert model["kind"] == "loglinear" and model["error"] < 0.06, model
    rng = random.Random(5)
    over_threads, over_cores = [], []
    for dims in TUNED:
        shape = Shape(dims)
        default = LAG.default_tiling(shape, "float32", TWIN)
        for t in [default, *_valid_tilings(shape, rng, 10)]:
            log_us = math.log(_truth(t, shape, rng, units=2))
            for out, units in ((over_threads, 2), (over_cores, None)):
                x = features(LAG, t, shape, "float32", TWIN, units)
                assert x is not None
                out.append(Sample("cpu-twin/float32", shape, x, log_us, t == default))
    fitted, blind = fit_model(over_threads), fit_model(over_cores)
    assert fitted is not None and blind is not None
    assert fitted.error < 0.06 and blind.error > 2 * fitted.error, (fitted, blind)


def test_a_copied_tiling_predicted_slower_than_the_default_is_not_answered(
    store: st.Store,
) -> None:
    doc = _doc(store, "worst")
    assert len(doc["choices"]) == 1
    choice = doc["choices"][0]
    assert choice["model"]["kind"] in ("loglinear", "cost") and choice["model"]["error"] > 0
    table = TilingTable.from_document(doc)
    without = TilingTable.from_document({**doc, "choices": []})
    copied_slower = 0
    for dims in HELD_OUT:
        shape = Shape(dims)
        default = LAG.default_tiling(shape, "float32", TWIN)
        answer = _ask(table, dims)
        old = _ask(without, dims)
        if old.rule == "carried" and _exact_truth(old.tiling, shape) > _exact_truth(default, shape):
            copied_slower += 1
        # The entries are the slowest tilings measured: no carried one beats the default.
        assert (answer.source, answer.rule) == ("default", "predicted_default"), (dims, answer)
        assert answer.tiling == default
        assert answer.predicted_gain is None or answer.predicted_gain < 1.0
    # The nearest rule alone would have answered a slower copy at most of these shapes.
    assert copied_slower >= len(HELD_OUT) // 2


def test_a_copied_tiling_predicted_faster_is_chosen(store: st.Store) -> None:
    """Where the records say that carried tilings beat the default, the model picks them, and
    the answer is never slower than the default by the truth the records came from."""
    truth = "fast copies"
    doc = _doc(store, "best")
    table = TilingTable.from_document(doc)
    error = doc["choices"][0]["model"]["error"]
    chose, gains = 0, []
    for dims in NEAR + HELD_OUT:
        shape = Shape(dims)
        default = LAG.default_tiling(shape, "float32", TWIN)
        answer = _ask(table, dims)
        assert answer.rule in ("chosen", "predicted_default"), answer
        if answer.rule == "chosen":
            chose += 1
            assert answer.source == "nearest" and answer.workload is not None
            assert answer.predicted_gain is not None
            assert answer.predicted_gain > math.exp(error)
            tuned = answer.workload.shape
            exact = _ask(table, dict(tuned))
            assert answer.tiling == LAG.carry(exact.tiling, tuned, shape, "float32", TWIN)
        gain = _exact_truth(default, shape, truth) / _exact_truth(answer.tiling, shape, truth)
        # Never slower than the default beyond the noise.
        assert gain >= 0.95, (dims, answer)
        gains.append(gain)
    assert chose >= 0.75 * len(NEAR + HELD_OUT), chose
    assert np.mean(gains) > 1.5


def test_a_grid_naming_a_shape_the_table_lacks_falls_back_to_the_nearest_rule(
    store: st.Store,
) -> None:
    doc = _doc(store, "best")
    doc["entries"] = [e for e in doc["entries"] if e["shape"] != TUNED[0]]
    table = TilingTable.from_document(doc)
    answer = _ask(table, HELD_OUT[3])
    assert answer.rule in ("carried", "kept_default", "measured_slower")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cells": [0]}, "one value per cell"),
        ({"size": [60, 60, 60]}, "at most 4096 cells"),
        ({"cells": "x"}, "cells: expected a list"),
        ({"model": 3}, "model: expected an object"),
    ],
)
def test_a_bad_choice_grid_is_named_and_left_out(
    store: st.Store, change: dict[str, Any], message: str
) -> None:
    doc = _doc(store, "best")
    bad = {**doc["choices"][0], **change}
    found, rejected = parse_choices([bad])
    assert found == [] and message in rejected[0]
    table = TilingTable.from_document({**doc, "choices": [bad]})
    assert table.skipped == {"invalid entry": 1} and message in table.rejected[0]
    assert _ask(table, HELD_OUT[0]).rule in ("carried", "kept_default", "measured_slower")


@pytest.mark.skipif(not COMPILERS, reason="no C compiler")
@pytest.mark.parametrize("stored", ["best", "worst"])
def test_header_answers_from_the_same_grid(store: st.Store, stored: str, tmp_path: Path) -> None:
    doc = _doc(store, stored)
    (choice,) = parse_choices(doc["choices"])[0]
    header = tmp_path / "lag.h"
    header.write_text(render_header(doc, op=LAG.name))
    table = TilingTable.from_document(doc)
    rng = np.random.default_rng(5)
    sweep = [tuple(d.values()) for d in TUNED]
    sweep += [
        (int(m), int(n), int(k))
        for m, n, k in zip(
            2 ** rng.uniform(0, 14, 150),
            2 ** rng.uniform(5, 13, 150),
            2 ** rng.uniform(6, 11, 150),
            strict=True,
        )
    ]
    sweep += list(itertools.product((1, 9000), (16, 20000), (512,)))  # outside the grid
    queries = [("cpu-twin", "float32", s) for s in sweep]
    rules: dict[str, int] = {}
    for compiler, std in COMPILERS:
        exe = _build(header, LAG.name, tmp_path, compiler, std)
        rules = {}
        for (_, _, asked), c in zip(queries, _ask_c(exe, queries), strict=True):
            shape = Shape(dict(zip(LAG.dims, asked, strict=True)))
            py = _ask(table, dict(shape))
            fields = _fields(LAG, "cpu-twin", "float32", asked)
            rules[py.rule] = rules.get(py.rule, 0) + 1
            if py.rule == "exact":
                assert c == [2, *[py.tiling[f] for f in fields]]
            elif py.rule == "chosen":
                assert c == [1, *[py.tiling[f] for f in fields]], asked
            elif py.rule == "predicted_default":
                assert c == [0], asked
            else:
                # Python's chosen tiling failed its validity check at this shape: C, which
                # cannot check, answers the grid's pick carried over.
                pick = choice.cells[cell_index(choice, LAG, shape)]
                assert pick >= 0 and c[0] == 1, (asked, py)
    assert rules.get("exact") == len(TUNED)
    answered = rules.get("chosen", 0) + rules.get("predicted_default", 0)
    assert answered >= 0.9 * (len(sweep) - len(TUNED)), rules
    if stored == "best":
        assert rules.get("chosen", 0) > 0, rules
    else:
        assert rules.get("chosen", 0) == 0 and rules.get("predicted_default", 0) > 0, rules


@pytest.mark.slow
@pytest.mark.skipif(not COMPILERS, reason="no C compiler")
@pytest.mark.parametrize("op", ["conv_bias_leakyrelu", "swiglu_mlp"])
def test_header_and_python_agree_on_other_ops_grids(op: str, tmp_path: Path) -> None:
    """A grid over the export tests' tuned shapes of ops with other dims (a convolution's
    padding may be 0), decided by the "fast copies" latencies as the model (error 0: every
    predicted gain counts), under which many cells choose a carried tiling."""
    from tests.tuner.test_export import _document, _near, _tuned_entry, _tuned_shapes
    from tilewise.export import load_entries
    from tilewise.export._choice import build_choice
    from tilewise.export._model import Model

    spec = get_op(op)
    rng = random.Random(11)
    raw = [_tuned_entry(op, s, "cpu-twin", "float32", rng) for s in _tuned_shapes(op)]
    model = Model("loglinear", TRUTHS["fast copies"], {"cpu-twin/float32": 0.0}, 0.0, 0, 0)
    grid = build_choice(spec, TWIN, "float32", load_entries(_document(raw)).entries, model)
    assert grid is not None
    doc = {**_document(raw), "choices": [grid.to_dict()]}
    header = tmp_path / f"{op}.h"
    header.write_text(render_header(doc, op=op))
    table = TilingTable.from_document(doc)
    queries = [
        ("cpu-twin", "float32", tuple(_near(d, s[d], rng) for d in spec.dims))
        for s in _tuned_shapes(op)
        for _ in range(4)
    ]
    rules: dict[str, int] = {}
    compiler, std = COMPILERS[0]
    exe = _build(header, op, tmp_path, compiler, std)
    for (_, _, asked), c in zip(queries, _ask_c(exe, queries), strict=True):
        shape = Shape(dict(zip(spec.dims, asked, strict=True)))
        py = table.lookup(op, target="cpu-twin", dtype="float32", shape=dict(shape))
        fields = _fields(spec, "cpu-twin", "float32", asked)
        rules[py.rule] = rules.get(py.rule, 0) + 1
        if py.rule == "exact":
            assert c == [2, *[py.tiling[f] for f in fields]]
        elif py.rule == "chosen":
            assert c == [1, *[py.tiling[f] for f in fields]], asked
        elif py.rule == "predicted_default":
            assert c == [0], asked
        else:
            assert grid.cells[cell_index(grid, spec, shape)] >= 0 and c[0] == 1, (asked, py)
    assert rules.get("chosen", 0) + rules.get("predicted_default", 0) >= 0.8 * len(queries)
    assert rules.get("chosen", 0) > 0, rules
