"""The workload page's chart: search times, the default's evaluation, the re-measures and the
stored winner drawn apart, with round ticks on a linear or a log latency axis."""

from __future__ import annotations

import math
import random
import re

import pytest
from fastapi.testclient import TestClient

from tilewise import store
from tilewise.api.axes import axis
from tilewise.api.charts import Curve, chart
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.store import Store
from tilewise.types import Shape, Tiling, Workload


def _is_round(value: float) -> bool:
    """1, 2 or 5 × 10^k (or 0)."""
    if value == 0:
        return True
    k = math.floor(math.log10(abs(value)) + 1e-9)
    mantissa = abs(value) / 10.0**k
    return any(math.isclose(mantissa, m, rel_tol=1e-9) for m in (1, 2, 5))


def test_linear_ticks_are_round_and_cover_the_values() -> None:
    a = axis([3.2, 47.3], 300, 0, zero=True)
    assert a.ticks == (0, 10, 20, 30, 40, 50)
    assert a.labels == ("0", "10", "20", "30", "40", "50")
    assert a(0) == 300 and a(50) == 0 and a(25) == 150
    small = axis([0.013, 0.087], 100, 0, zero=True)
    assert small.labels == ("0.00", "0.02", "0.04", "0.06", "0.08", "0.10")
    rng = random.Random(7)
    for _ in range(300):
        values = [rng.uniform(0, 10 ** rng.uniform(-2, 6)) for _ in range(rng.randint(1, 5))]
        a = axis(values, 0, 1, zero=True)
        step = a.ticks[1] - a.ticks[0]
        assert _is_round(step), (values, a.ticks)
        assert a.lo <= min(values) and a.hi >= max(values)
        assert 2 <= len(a.ticks) <= 8, (values, a.ticks)
        # every tick a whole multiple of the round step, labelled without float noise
        assert all(math.isclose(t / step, round(t / step), abs_tol=1e-6) for t in a.ticks)
        assert all(
            float(text) == pytest.approx(t) for t, text in zip(a.ticks, a.labels, strict=True)
        )


def test_log_ticks_are_1_2_5_times_powers_of_ten() -> None:
    a = axis([3.1, 480.0], 0, 1, scale="log")
    assert a.labels == ("2", "5", "10", "20", "50", "100", "200", "500")
    assert a.ticks[0] <= 3.1 and a.ticks[-1] >= 480.0
    assert a(a.lo) == 0 and a(a.hi) == 1 and a(math.sqrt(2 * 500)) == pytest.approx(0.5)
    wide = axis([0.3, 40_000.0], 0, 1, scale="log")  # too many 1-2-5 ticks: the decades
    assert wide.labels == ("0.2", "1", "10", "100", "1000", "10000", "50000")
    one = axis([20.0], 0, 1, scale="log")  # one value on a tick still spans a step
    assert one.ticks == (20.0, 50.0)
    rng = random.Random(11)
    for _ in range(300):
        values = [10 ** rng.uniform(-3, 7) for _ in range(rng.randint(1, 6))]
        a = axis(values, 0, 1, scale="log")
        assert all(_is_round(t) for t in a.ticks), (values, a.ticks)
        assert a.lo <= min(values) * (1 + 1e-9) and a.hi >= max(values) * (1 - 1e-9)
    with pytest.raises(ValueError, match="positive"):
        axis([0.0, 1.0], 0, 1, scale="log")


def _run(db: Store) -> str:
    """A workload as two tuning runs leave it: each run's search (the default first in the
    first), then its side-by-side re-measures; the stored winner is the second run's re-measure
    of its best, slower than its search time (as on a shared machine)."""
    spec, profile = get_op("scale_relu_dropout"), get_target("cpu-twin")
    shape = Shape({"N": 65536})
    default = spec.default_tiling(shape, "float32", profile)
    tilings = [default.replace(bufferNum=b, blockDim=d) for b in (1, 2) for d in (8, 16, 24)]
    tilings = [default, *(t for t in tilings if t != default)][:6]
    with store.session_scope(db) as s:
        w = store.commit_workload(
            s, Workload(spec.name, spec.version, profile.name, "float32", shape)
        )

        def add(tiling: Tiling, latency: float, source: str) -> int:
            return store.add_record(
                s,
                workload_id=w.id,
                tiling=tiling,
                status="ok",
                latency_us=latency,
                source=source,
                env={"host": "test"},
            ).id

        add(tilings[0], 50.0, "default")
        add(tilings[1], 44.0, "search")
        add(tilings[2], 30.0, "search")
        add(tilings[2], 41.0, "remeasure")  # the first run's winner, re-measured
        add(tilings[0], 52.0, "remeasure")  # the default, re-measured
        add(tilings[3], 27.0, "search")
        add(tilings[4], 36.0, "search")
        winner = add(tilings[3], 33.0, "remeasure")
        add(tilings[2], 40.0, "remeasure")
        add(tilings[0], 51.0, "remeasure")
        store.upsert_tiling(
            s,
            workload_id=w.id,
            record_id=winner,
            tiling=tilings[3],
            latency_us=33.0,
            default_latency_us=51.0,
            speedup=51.0 / 33.0,
            evaluations=5,
        )
    return w.key


def _find(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    assert found is not None, pattern
    return found.group(1)


def _apex_y(path_d: str) -> float:
    """The y of a triangle mark's first point, its apex (5 px above the value's y)."""
    return float(_find(r"^M[\d.]+,([\d.]+)", path_d))


def test_curve_sets_the_default_and_the_remeasures_apart(db: Store) -> None:
    _run(db)
    with store.session_scope(db) as s:
        (w,) = [w for w, _ in store.best_tilings(s)]
        curve = Curve.of(store.records_for(s, workload_id=w.id))
    assert curve.latencies == (50.0, 44.0, 30.0, 27.0, 36.0)
    assert curve.best == (50.0, 44.0, 30.0, 27.0, 27.0)
    assert curve.defaults == (0,)
    assert [(m.after, m.latency_us, m.default) for m in curve.remeasures] == [
        (3, 41.0, False),
        (3, 52.0, True),
        (5, 33.0, False),
        (5, 40.0, False),
        (5, 51.0, True),
    ]


def test_workload_chart_marks_remeasures_and_the_stored_winner(
    client: TestClient, db: Store
) -> None:
    key = _run(db)
    html = client.get(f"/workloads/{key}").text
    svg = re.search(r'<svg class="chart"[^>]*>.*?</svg>', html, re.S)
    assert svg is not None
    chart_svg = svg.group(0)
    assert 'data-scale="linear"' in chart_svg
    assert chart_svg.count('class="pt search"') == 4  # the default's evaluation is its own mark
    assert chart_svg.count('class="pt default"') == 1
    assert chart_svg.count('class="pt remeasure"') == 2
    assert chart_svg.count('class="pt remeasure-default"') == 2
    assert chart_svg.count('class="pt winner"') == 1
    legend = re.findall(r'class="legend-entry"[^>]*>([^<]+)<', chart_svg)
    assert legend == [
        "search time",
        "default (search)",
        "re-measure",
        "default re-measured",
        "stored winner",
        "best search time so far",
        "default, re-measured",
        "stored winner, re-measured",
    ]
    # The stored winner's line sits at the stored (re-measured) latency, on its re-measure's mark,
    # not at the best search time (27 µs) where the best-so-far line ends.
    line_y = float(_find(r'<line class="winner"[^>]*y1="([\d.]+)"', chart_svg))
    mark = _find(r'<path class="pt winner" d="([^"]+)"', chart_svg)
    assert _apex_y(mark) + 5 == pytest.approx(line_y, abs=0.11)  # the triangle rises 5 px
    best = _find(r'<polyline class="best"[^>]*points="([^"]+)"', chart_svg)
    last_best_y = float(best.split()[-1].split(",")[1])
    assert last_best_y > line_y  # 27 µs is drawn below 33 µs
    assert "stored winner, re-measured 33.0 µs" in chart_svg
    assert "default, re-measured 51.0 µs" in chart_svg
    assert "best <em>search</em> time so far" in html
    ticks = [float(t) for t in re.findall(r'class="ytick"[^>]*>([^<]+)<', chart_svg)]
    assert ticks == [0, 10, 20, 30, 40, 50, 60]


def test_log_scale_option(client: TestClient, db: Store) -> None:
    key = _run(db)
    page = client.get(f"/workloads/{key}")
    assert 'href="?scale=log"' in page.text and "<strong>linear</strong>" in page.text
    html = client.get(f"/workloads/{key}?scale=log").text
    assert 'data-scale="log"' in html and "<strong>log</strong>" in html
    assert 'href="?scale=linear"' in html
    ticks = [float(t) for t in re.findall(r'class="ytick"[^>]*>([^<]+)<', html)]
    assert ticks == [20, 50, 100]
    assert all(_is_round(t) for t in ticks)
    bad = client.get(f"/workloads/{key}?scale=logarithmic")
    assert bad.status_code == 422
    (detail,) = bad.json()["detail"]
    assert detail["loc"] == ["query", "scale"]
    assert "unknown scale 'logarithmic'" in detail["msg"] and "log" in detail["msg"]


def test_chart_draws_a_search_only_curve() -> None:
    svg = str(chart(Curve((5.0, 3.0), (5.0, 3.0))))
    assert svg.count('class="pt search"') == 2 and 'class="pt remeasure' not in svg
    assert 'class="winner"' not in svg and "stored winner" not in svg


def test_jobs_tables_label_a_running_jobs_best_as_a_search_time(
    client: TestClient, db: Store
) -> None:
    key = _run(db)
    with store.session_scope(db) as s:
        w = store.find_workload(s, key=key)
        assert w is not None
        running = store.create_job(s, workload_id=w.id, budget_evals=9)
        done = store.create_job(s, workload_id=w.id, budget_evals=9)
    for job in (running, done):
        with store.session_scope(db) as s:
            claimed = store.claim_job(s, worker_id=f"w{job.id}", lease_seconds=60)
            assert claimed is not None
            store.update_job_progress(
                s,
                job_id=claimed.id,
                worker_id=f"w{claimed.id}",
                evaluations=4,
                best_latency_us=27.0,
                speedup=None,
            )
    with store.session_scope(db) as s:
        store.finish_job(
            s,
            job_id=done.id,
            worker_id=f"w{done.id}",
            status="succeeded",
            evaluations=5,
            best_latency_us=33.0,
            speedup=51.0 / 33.0,
        )
    for page in ("/", f"/workloads/{key}"):
        html = client.get(page).text
        table = re.search(r'<table id="jobs">(.*?)</table>', html, re.S)
        assert table is not None, page
        cells = re.findall(
            r'<td class="num">([^<]*(?:<span class="muted">search</span>)?)</td>', table.group(1)
        )
        assert '27.00 <span class="muted">search</span>' in cells, (page, cells)
        assert "33.00" in cells, (page, cells)
