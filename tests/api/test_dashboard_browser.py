"""The dashboard in a real browser: headless Chromium against uvicorn on a seeded database.

Chromium is required (CI installs the Debian packages ``chromium`` and ``chromium-driver``):
without it these tests fail, they do not skip. ``TILEWISE_CHROMIUM`` names another binary.
Screenshots are kept in ``artifacts/`` at the repository root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.api._support import AUTH, live_server, make_settings, seed_tuned
from tilewise.store import open_store

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def chromium() -> str:
    for name in (os.environ.get("TILEWISE_CHROMIUM"), "chromium", "chromium-browser"):
        path = name and shutil.which(name)
        if path:
            return path
    pytest.fail(
        "headless Chromium is needed for the dashboard tests and was not found: "
        "`apt-get install -y chromium chromium-driver` (or set TILEWISE_CHROMIUM)",
        pytrace=False,
    )


def run_chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1280,900",
        *args,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"chromium failed ({result.returncode}): {result.stderr[-2000:]}"
    return result


def test_dashboard_renders_tuned_workloads(
    db_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    binary = chromium()  # fail first, before any setup, when it is missing
    assert binary
    settings = make_settings(db_url)
    store = open_store(db_url)
    try:
        seeded = [
            seed_tuned(store),
            seed_tuned(store, shape={"N": 1 << 20}, latencies=(310.0, 280.0, 290.0, 250.0)),
            seed_tuned(
                store,
                op="linear_add_gelu",
                shape={"M": 512, "N": 512, "K": 256},
                dtype="float16",
                latencies=(90.0, 70.0, 75.0, 61.0),
            ),
        ]
    finally:
        store.close()

    with live_server(settings) as base:
        import httpx

        queued = httpx.post(
            f"{base}/v1/jobs",
            json={"op": "scale_relu_dropout", "shape": {"N": 4096}, "budget": 7},
            headers=AUTH,
        )
        assert queued.status_code == 202

        dom = run_chromium(tmp_path, "--dump-dom", f"{base}/").stdout
        ARTIFACTS.mkdir(exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)
        shot = ARTIFACTS / f"dashboard-{name}.png"
        shot.unlink(missing_ok=True)
        run_chromium(tmp_path, f"--screenshot={shot}", f"{base}/")
        key = seeded[2].workload.key
        curve_shot = ARTIFACTS / f"workload-{name}.png"
        curve_shot.unlink(missing_ok=True)
        run_chromium(tmp_path, f"--screenshot={curve_shot}", f"{base}/workloads/{key}")
        workload_dom = run_chromium(tmp_path, "--dump-dom", f"{base}/workloads/{key}").stdout

    # The table of best tilings, one row per tuned workload, as the browser built it.
    table = re.search(r'<table id="tilings">(.*?)</table>', dom, re.S)
    assert table is not None, dom[:2000]
    rows = re.findall(
        r'<tr class="tuned" data-workload="([0-9a-f]+)">(.*?)</tr>', table.group(1), re.S
    )
    assert sorted(k for k, _ in rows) == sorted(s.workload.key for s in seeded)
    for s in seeded:
        cells = dict(rows)[s.workload.key]
        assert s.workload.op in cells and s.workload.shape.key() in cells
        assert f"{s.best_us:.2f}" in cells
        assert f"{s.default_us / s.best_us:.2f}×" in cells
        assert '<svg class="spark"' in cells
    assert 'id="jobs"' in dom and "N=4096" in dom and "0/7" in dom

    assert '<polyline class="best"' in workload_dom and "linear_add_gelu" in workload_dom
    for path in (shot, curve_shot):
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, path


def test_api_docs_render_with_no_internet(tmp_path: Path) -> None:
    """Swagger UI and ReDoc draw the API's operations in a browser that can resolve no host but
    the service's own (as on an NPU cluster without internet)."""
    binary = chromium()
    assert binary
    settings = make_settings(f"sqlite:///{tmp_path / 'tilewise.db'}")
    offline = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"
    with live_server(settings) as base:
        swagger = run_chromium(
            tmp_path, offline, "--virtual-time-budget=10000", "--dump-dom", f"{base}/docs"
        ).stdout
        redoc = run_chromium(
            tmp_path, offline, "--virtual-time-budget=10000", "--dump-dom", f"{base}/redoc"
        ).stdout
    # Swagger UI's list of operations, one summary per path and method, built by its script.
    paths = set(re.findall(r'class="opblock-summary-path"[^>]*data-path="([^"]+)"', swagger))
    assert {"/v1/jobs", "/v1/tilings/{op}", "/metrics"} <= paths, swagger[:2000]
    # ReDoc's menu links each operation by its id, and its pages show the paths.
    assert len(re.findall(r'href="#tag/[^"]+/operation/', redoc)) >= len(paths), redoc[:2000]
    assert "/v1/tilings/{op}" in redoc
