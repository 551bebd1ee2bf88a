"""GET /v1/misses: the shapes GET /v1/tilings answered without an exact entry, counted in memory,
recorded in batches, shown on the dashboard, and turned into a manifest a batch tunes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api._support import AUTH, make_settings, seed_tuned
from tilewise import store
from tilewise.api import create_app
from tilewise.api.misses import MissRecorder
from tilewise.errors import StoreError
from tilewise.settings import Settings
from tilewise.store import Store

OP = "scale_relu_dropout"


@pytest.fixture
def settings(db_url: str) -> Settings:
    """No background flush during a test: the counts reach the database when asked for."""
    return make_settings(db_url, misses_flush_s=3600)


def ask(client: TestClient, n: int, times: int = 1, **query: str) -> str:
    for _ in range(times):
        r = client.get(f"/v1/tilings/{OP}", params={"shape": f"N={n}", **query})
        assert r.status_code == 200, r.text
    source: str = r.json()["source"]
    return source


def stored(db: Store) -> dict[int, int]:
    with store.session_scope(db) as s:
        return {m.shape["N"]: m.count for m in store.list_misses(s)}


def test_lookups_without_an_exact_entry_are_counted_in_memory_then_listed(
    client: TestClient, db: Store
) -> None:
    seed_tuned(db, shape={"N": 65536})
    assert ask(client, 65536, times=4) == "exact"
    assert ask(client, 60000, times=3) == "nearest"
    assert ask(client, 64, times=2, dtype="float16") == "default"
    assert stored(db) == {}  # no write per request: nothing is in the database yet
    got = client.get("/v1/misses").json()
    assert got["dropped"] == 0
    rows = [
        (m["op"], m["target"], m["dtype"], m["shape"], m["count"], m["source"], m["tuned"])
        for m in got["misses"]
    ]
    assert rows == [
        (OP, "cpu-twin", "float32", {"N": 60000}, 3, "nearest", False),
        (OP, "cpu-twin", "float16", {"N": 64}, 2, "default", False),
    ]
    assert stored(db) == {60000: 3, 64: 2}  # flushed before the answer
    ask(client, 60000)
    assert client.get("/v1/misses").json()["misses"][0]["count"] == 4
    assert [m["shape"] for m in client.get("/v1/misses", params={"dtype": "float16"}).json()[
        "misses"]] == [{"N": 64}]  # fmt: skip
    assert client.get("/v1/misses", params={"op": "swiglu"}).json()["misses"] == []
    assert client.get("/v1/misses", params={"limit": 1}).json()["misses"][0]["count"] == 4


def test_a_shape_tuned_since_leaves_the_list(client: TestClient, db: Store) -> None:
    ask(client, 4096, times=2)
    ask(client, 8192)
    seed_tuned(db, shape={"N": 4096})
    assert [m["shape"] for m in client.get("/v1/misses").json()["misses"]] == [{"N": 8192}]
    everything = client.get("/v1/misses", params={"include_tuned": "true"}).json()["misses"]
    assert [(m["shape"], m["tuned"]) for m in everything] == [
        ({"N": 4096}, True),
        ({"N": 8192}, False),
    ]


def test_the_misses_manifest_is_a_batch_the_service_tunes(client: TestClient) -> None:
    ask(client, 4096, times=5)
    ask(client, 8192, times=1)
    ask(client, 64, dtype="float16")
    r = client.get("/v1/misses", params={"format": "manifest", "total_budget": 2})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "total_budget"]
    assert "below the 3 shapes" in r.json()["detail"][0]["msg"]
    # What POST /v1/batches would refuse is refused here, with the batch's words.
    most = client.app.state.settings.max_budget  # type: ignore[attr-defined]
    r = client.get("/v1/misses", params={"format": "manifest", "budget": most + 1})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "budget"]
    assert f"between 1 and {most}" in r.json()["detail"][0]["msg"]
    r = client.get("/v1/misses", params={"format": "manifest", "budget": 5, "total_budget": 2})
    assert r.status_code == 422 and "not both" in r.json()["detail"][0]["msg"], r.text
    r = client.get("/v1/misses", params={"format": "manifest", "total_budget": 22})
    assert r.status_code == 200, r.text
    manifest: dict[str, Any] = r.json()
    assert manifest["total_budget"] == 22
    assert manifest["workloads"] == [
        {"op": OP, "shapes": [{"N": 4096, "weight": 5}, {"N": 8192}]},
        {"op": OP, "dtype": "float16", "shapes": [{"N": 64}]},
    ]
    batch = client.post("/v1/batches", json=manifest, headers=AUTH)
    assert batch.status_code == 202, batch.text
    budgets = {
        (i["workload"]["dtype"], i["workload"]["shape"]["N"]): i["budget"]
        for i in batch.json()["workloads"]
    }
    assert budgets == {("float32", 4096): 10, ("float32", 8192): 6, ("float16", 64): 6}


def test_nothing_to_tune_and_bad_queries(client: TestClient) -> None:
    r = client.get("/v1/misses", params={"format": "manifest"})
    assert r.status_code == 404 and "no untuned shape" in r.json()["detail"]
    for query, loc in (
        ({"op": "nope"}, ["query", "op"]),
        ({"target": "gpu"}, ["query", "target"]),
        ({"dtype": "int8"}, ["query", "dtype"]),
        ({"limit": "0"}, ["query", "limit"]),
        ({"format": "yaml"}, ["query", "format"]),
    ):
        r = client.get("/v1/misses", params=query)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, (query, r.text)


def test_the_dashboard_shows_the_most_asked_untuned_shapes(client: TestClient, db: Store) -> None:
    ask(client, 60000, times=7)
    ask(client, 128, times=2)
    html = client.get("/").text
    rows = re.findall(r'<tr class="miss">(.*?)</tr>', html, re.S)
    assert len(rows) == 2
    assert "N=60000" in rows[0] and '<td class="num">7</td>' in rows[0]
    assert "N=128" in rows[1] and '<td class="num">2</td>' in rows[1]
    assert "/v1/misses?format=manifest" in html
    seed_tuned(db, shape={"N": 60000})
    again = client.get("/").text
    assert "N=60000" not in "".join(re.findall(r'<tr class="miss">(.*?)</tr>', again, re.S))


def test_no_misses_on_the_dashboard(client: TestClient) -> None:
    assert 'id="no-misses"' in client.get("/").text


def test_counts_are_written_at_shutdown(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        ask(client, 1024, times=3)
    db = store.open_store(settings.db_url, create=False)
    try:
        assert stored(db) == {1024: 3}
    finally:
        db.close()


def test_the_misses_table_is_bounded(db_url: str) -> None:
    with TestClient(create_app(make_settings(db_url, max_miss_shapes=2, misses_flush_s=3600))) as c:
        for n in (64, 128, 256):
            ask(c, n, times=n // 64)
        got = c.get("/v1/misses").json()
        assert [(m["shape"]["N"], m["count"]) for m in got["misses"]] == [(256, 4), (128, 2)]
        assert got["dropped"] == 1
        ask(c, 128)  # a known shape is still counted
        assert c.get("/v1/misses").json()["misses"][1]["count"] == 3


def test_a_failed_flush_keeps_its_counts_for_the_next(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = store.open_store(db_url)
    recorder = MissRecorder(db, flush_s=3600, max_rows=100)
    recorder.record(OP, "cpu-twin", "float32", {"N": 64}, "default")
    recorder.record(OP, "cpu-twin", "float32", {"N": 64}, "default")

    def away(*args: Any, **kwargs: Any) -> int:
        raise StoreError("cannot reach database: test")

    with monkeypatch.context() as patched:
        patched.setattr(store, "record_misses", away)
        with pytest.raises(StoreError):
            recorder.flush()
    recorder.record(OP, "cpu-twin", "float32", {"N": 64}, "default")  # asked meanwhile
    recorder.flush()
    assert stored(db) == {64: 3}
    recorder.flush()  # nothing new: nothing added
    assert stored(db) == {64: 3}
    db.close()
