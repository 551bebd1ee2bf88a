"""The service serves the tilings of its host's toolchain: lookups and tables leave a stale one
out (``any_toolchain=true`` lets it stand in); the workload detail and page list the stored
winners per toolchain, say why one is stale, and show the history of winners."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from tests_support import host_toolchain

from tests.api._support import seed_tuned
from tilewise.store import Store
from tilewise.types import Toolchain

OLD = Toolchain("cpu-twin", "clang 18.1", host_toolchain().headers, host_toolchain().profile)
SHAPE = {"N": 65536}


def test_a_stale_tiling_is_not_served_unless_any_toolchain(client: TestClient, db: Store) -> None:
    seeded = seed_tuned(db, toolchain=OLD)
    query = {"shape": "N=65536", "target": "cpu-twin", "dtype": "float32"}
    served = client.get("/v1/tilings/scale_relu_dropout", params=query).json()
    assert served["source"] == "default" and served["tiling"] != dict(seeded.best)
    anyway = client.get(
        "/v1/tilings/scale_relu_dropout", params={**query, "any_toolchain": "true"}
    ).json()
    assert anyway["source"] == "exact" and anyway["tiling"] == dict(seeded.best)
    table = client.get("/v1/tables/scale_relu_dropout").json()
    assert table["entries"] == [] and table["toolchains"]["other_toolchain_entries"] == 1
    table = client.get("/v1/tables", params={"any_toolchain": "true"}).json()
    assert [e["tiling"] for e in table["entries"]] == [dict(seeded.best)]


def test_workload_detail_lists_toolchains_staleness_and_history(
    client: TestClient, db: Store
) -> None:
    seeded = seed_tuned(db, toolchain=OLD)
    fresh = seed_tuned(db, latencies=(40.0, 20.0))  # the same workload, this host's toolchain
    assert fresh.workload.key == seeded.workload.key
    r = client.get(f"/v1/workloads/{seeded.workload.key}")
    assert r.status_code == 200, r.text
    detail = r.json()
    assert detail["workload"]["shape"] == SHAPE
    assert detail["current_toolchain"]["id"] == host_toolchain().id
    by_compiler = {t["toolchain"]["compiler"]: t for t in detail["tilings"]}
    mine = by_compiler[host_toolchain().compiler]
    assert mine["current"] is True and mine["stale"] is None and mine["latency_us"] == 20.0
    old = by_compiler["clang 18.1"]
    assert old["current"] is False
    assert old["stale"] == f"compiled with clang 18.1 (now {host_toolchain().compiler})"
    history = detail["history"]
    assert [(h["toolchain"], h["reason"]) for h in history] == [
        (OLD.id, "first winner"),
        (host_toolchain().id, "first winner"),
    ]
    assert history[1]["latency_us"] == 20.0 and history[1]["tiling"] == dict(fresh.best)
    assert client.get("/v1/workloads/" + "0" * 32).status_code == 404


def test_dashboard_says_stale_and_why_and_lists_the_history(client: TestClient, db: Store) -> None:
    seeded = seed_tuned(db, toolchain=OLD)
    index = client.get("/").text
    row = re.search(rf'data-workload="{seeded.workload.key}">(.*?)</tr>', index, re.S)
    assert row is not None and "stale toolchain" in row.group(1)
    assert "compiled with clang 18.1" in row.group(1)
    page = client.get(f"/workloads/{seeded.workload.key}").text
    assert (
        "Not tuned with this host&#39;s toolchain" in page or "Not tuned with this host's" in page
    )
    toolchains = re.search(r'<table id="toolchains">(.*?)</table>', page, re.S)
    assert toolchains is not None and "clang 18.1" in toolchains.group(1)
    assert "stale</span> compiled with clang 18.1" in toolchains.group(1)
    history = re.search(r'<table id="history">(.*?)</table>', page, re.S)
    assert history is not None and "first winner" in history.group(1)
    assert OLD.id in history.group(1)
