"""The dashboard's sort links, filters, per-op page and log-scale chart in headless Chromium (as
test_dashboard_browser.py: Chromium is required; screenshots go to ``artifacts/``)."""

from __future__ import annotations

import html as htmllib
import re
from pathlib import Path

import pytest

from tests.api._support import live_server, make_settings, seed_tuned
from tests.api.test_dashboard_browser import ARTIFACTS, PNG_MAGIC, chromium, run_chromium
from tilewise.store import open_store


@pytest.mark.slow
def test_sorting_filtering_and_the_op_page_in_a_browser(db_url: str, tmp_path: Path) -> None:
    assert chromium()
    store = open_store(db_url)
    try:
        seeded = [
            seed_tuned(store, shape={"N": 4096}, latencies=(40.0, 30.0, 35.0)),
            seed_tuned(store, shape={"N": 1 << 20}, latencies=(300.0, 150.0, 200.0)),
            seed_tuned(store, shape={"N": 65536}, latencies=(90.0, 80.0, 85.0)),
            seed_tuned(
                store,
                op="linear_add_gelu",
                shape={"M": 64, "N": 256, "K": 256},
                dtype="float16",
                latencies=(70.0, 50.0, 60.0),
            ),
        ]
    finally:
        store.close()
    speedup = {s.workload.key: s.default_us / s.best_us for s in seeded}
    suffix = "pg" if db_url.startswith("postgresql") else "sqlite"
    with live_server(make_settings(db_url)) as base:
        index = run_chromium(tmp_path, "--dump-dom", f"{base}/").stdout
        # the header's link, as the browser resolved the page: no script involved
        link = re.search(r'<th[^>]*><a class="sort" data-sort="speedup" href="([^"]*)"', index)
        assert link is not None, index[:2000]
        by_speedup = run_chromium(
            tmp_path, "--dump-dom", f"{base}/{htmllib.unescape(link.group(1))}"
        ).stdout
        filtered = run_chromium(tmp_path, "--dump-dom", f"{base}/?dtype=float16").stdout
        op_page = run_chromium(tmp_path, "--dump-dom", f"{base}/ops/scale_relu_dropout").stdout
        ARTIFACTS.mkdir(exist_ok=True)
        shots = {
            ARTIFACTS / f"dashboard-sorted-{suffix}.png": f"{base}/?sort=speedup",
            ARTIFACTS / f"op-page-{suffix}.png": f"{base}/ops/scale_relu_dropout",
            ARTIFACTS / f"workload-log-{suffix}.png": (
                f"{base}/workloads/{seeded[1].workload.key}?scale=log"
            ),
        }
        for path, url in shots.items():
            path.unlink(missing_ok=True)
            run_chromium(tmp_path, f"--screenshot={path}", url)

    rows = re.findall(r'<tr class="tuned" data-workload="([0-9a-f]+)"', by_speedup)
    assert [round(speedup[k], 3) for k in rows] == [2.0, 1.4, 1.333, 1.125]
    assert re.findall(r'<tr class="tuned" data-workload="([0-9a-f]+)"', filtered) == [
        seeded[3].workload.key
    ]
    shapes = re.findall(r'<tr class="shape" data-workload="([0-9a-f]+)"', op_page)
    assert shapes == [seeded[0].workload.key, seeded[2].workload.key, seeded[1].workload.key]
    assert op_page.count('<circle class="pt"') == 3
    for path in shots:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, path
