"""The dashboard's HTML and its inline SVG tuning curves (server side; the browser test looks
at the rendered page)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tests.api._support import AUTH, seed_tuned
from tilewise.api import views
from tilewise.api.charts import Curve, chart, sparkline
from tilewise.store import Store


def test_index_lists_best_tilings_and_jobs(client: TestClient, db: Store) -> None:
    seeded = seed_tuned(db)
    client.post("/v1/jobs", json={"op": "scale_relu_dropout", "shape": {"N": 4096}}, headers=AUTH)
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    row = re.search(
        rf'<tr class="tuned" data-workload="{seeded.workload.key}">(.*?)</tr>', html, re.S
    )
    assert row is not None
    cells = row.group(1)
    assert "scale_relu_dropout" in cells and "cpu-twin" in cells and "N=65536" in cells
    assert f"{seeded.best_us:.2f}" in cells and f"{seeded.default_us:.2f}" in cells
    assert f"{seeded.default_us / seeded.best_us:.2f}×" in cells
    assert '<svg class="spark"' in cells
    assert f'href="http://testserver/workloads/{seeded.workload.key}"' in cells
    assert 'id="jobs"' in html and "N=4096" in html and "queued" in html


def test_index_says_when_it_lists_only_the_newest_jobs(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "JOBS_SHOWN", 2)
    for n in (64, 128, 256):
        body = {"op": "scale_relu_dropout", "shape": {"N": n}, "budget": 3}
        client.post("/v1/jobs", json=body, headers=AUTH)
    html = client.get("/").text
    assert "The newest 2 of 3 jobs" in html and "N=64<" not in html
    monkeypatch.setattr(views, "JOBS_SHOWN", 3)
    assert 'id="jobs-shown"' not in client.get("/").text


def test_index_without_anything_tuned(client: TestClient) -> None:
    html = client.get("/").text
    assert 'id="no-tilings"' in html and "No jobs." in html


def test_workload_page_has_the_curve_and_records(client: TestClient, db: Store) -> None:
    seeded = seed_tuned(db)
    r = client.get(f"/workloads/{seeded.workload.key}")
    assert r.status_code == 200
    html = r.text
    best_line = re.search(r'<polyline class="best"[^>]*points="([^"]+)"', html)
    assert best_line is not None
    # One point per ok search record; the re-measure (1.0 µs) is not an evaluation: its own mark.
    assert len(best_line.group(1).split()) == len(seeded.latencies)
    assert html.count('class="pt default"') == 1  # the first, the default tiling
    assert html.count('class="pt search"') == len(seeded.latencies) - 1
    assert html.count('class="pt winner"') == 1  # the stored record, a re-measure
    assert 'class="default"' in html  # the default tiling's latency line
    assert 'id="records"' in html and "build_failed" in html and "remeasure" in html
    for link in re.findall(r'href="(/v1/workloads/[^"]+/records[^"]*)"', html):
        assert client.get(link).status_code == 200, link
    assert len(re.findall(r'href="/v1/workloads/[^"]+/records', html)) == 2  # JSON and CSV
    assert client.get("/workloads/0123456789abcdef").status_code == 404


def test_curve_is_best_so_far_of_ok_search_records(db: Store) -> None:
    from tilewise import store

    seeded = seed_tuned(db, latencies=(40.0, 55.0, 31.0, 33.0, 24.0))
    with store.session_scope(db) as session:
        records = store.records_for(session, workload_id=seeded.workload.id)
    curve = Curve.of(records)
    assert curve.latencies == (40.0, 55.0, 31.0, 33.0, 24.0)
    assert curve.best == (40.0, 40.0, 31.0, 31.0, 24.0)
    assert str(sparkline(Curve((1.0,), (1.0,)))) == ""
    assert "No measured evaluations" in str(chart(Curve((), ())))
    assert "<svg" in str(chart(Curve((5.0,), (5.0,))))  # a single point draws too


def test_public_surface_is_pinned() -> None:
    from tilewise import api

    assert api.__all__ == ["create_app"]
