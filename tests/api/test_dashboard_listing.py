"""The dashboard's filters and sort orders on the index, and the per-op page of speedup across
shapes: plain links and GET forms, bad values a 422 naming the parameter."""

from __future__ import annotations

import html as htmllib
import re

import pytest
from fastapi.testclient import TestClient

from tests.api._support import Seeded, seed_tuned
from tilewise.store import Store


def _seed(db: Store) -> list[Seeded]:
    """Five tuned workloads of three ops and two dtypes, with distinct speedups and latencies."""
    return [
        seed_tuned(db, shape={"N": 4096}, latencies=(40.0, 30.0, 35.0)),  # 1.33x, 30 µs
        seed_tuned(db, shape={"N": 1 << 20}, latencies=(300.0, 150.0, 200.0)),  # 2.00x, 150
        seed_tuned(db, shape={"N": 65536}, latencies=(90.0, 80.0, 85.0)),  # 1.125x, 80
        seed_tuned(
            db,
            op="linear_add_gelu",
            shape={"M": 64, "N": 256, "K": 256},
            dtype="float16",
            latencies=(70.0, 50.0, 60.0),  # 1.40x, 50
        ),
        seed_tuned(db, op="swiglu", shape={"T": 64, "I": 688}, latencies=(42.0, 40.0, 41.0)),
    ]


def _rows(page: str) -> list[str]:
    """The workload keys of the index's table of best tilings, in the page's order."""
    table = re.search(r'<table id="tilings">(.*?)</table>', page, re.S)
    return (
        []
        if table is None
        else re.findall(r'<tr class="tuned" data-workload="([0-9a-f]+)"', table.group(1))
    )


def _link(page: str, sort: str) -> str:
    """The href of the table's header link that sorts by ``sort``."""
    found = re.search(rf'<th[^>]*><a class="sort" data-sort="{sort}" href="([^"]*)"', page)
    assert found is not None, sort
    return htmllib.unescape(found.group(1))


def test_index_filters_by_op_target_and_dtype(client: TestClient, db: Store) -> None:
    seeded = _seed(db)
    keys = [s.workload.key for s in seeded]
    page = client.get("/").text
    assert _rows(page) == sorted(
        keys,
        key=lambda k: next(
            (s.workload.op, s.workload.dtype, s.workload.shape.key())
            for s in seeded
            if s.workload.key == k
        ),
    )
    assert re.search(r'<form id="filters" method="get"', page)
    for name in ("op", "target", "dtype", "sort", "order"):
        assert f'<select name="{name}"' in page, name

    srd = client.get("/?op=scale_relu_dropout").text
    assert set(_rows(srd)) == set(keys[:3])
    assert (
        "(3 of 5 tuned workloads)" in srd and '<option value="scale_relu_dropout" selected>' in srd
    )
    assert _rows(client.get("/?dtype=float16").text) == [keys[3]]
    assert set(_rows(client.get("/?target=cpu-twin&dtype=float32").text)) == set(keys) - {keys[3]}
    assert _rows(client.get("/?op=&target=&dtype=").text) == _rows(page)  # the form's "all"
    none = client.get("/?op=linear_add_gelu&dtype=float32").text
    assert _rows(none) == [] and 'id="no-match"' in none and 'id="no-tilings"' not in none
    # the per-op pages of the ops tuned
    assert re.findall(r'href="http://testserver/ops/([a-z_]+)"', page) == [
        "linear_add_gelu",
        "scale_relu_dropout",
        "swiglu",
    ]


def test_index_sorts_by_speedup_latency_op_and_update(client: TestClient, db: Store) -> None:
    seeded = _seed(db)
    by = {s.workload.key: s for s in seeded}

    def speedup(k: str) -> float:
        return by[k].default_us / by[k].best_us

    page = client.get("/").text
    link = _link(page, "speedup")
    assert link == "?sort=speedup"  # the best first: descending
    down = _rows(client.get("/" + link).text)
    assert [round(speedup(k), 3) for k in down] == [2.0, 1.4, 1.333, 1.125, 1.05]
    # the same header link on the sorted page turns the order around
    sorted_page = client.get("/" + link).text
    assert "speedup▼" in sorted_page
    up_link = _link(sorted_page, "speedup")
    assert up_link == "?sort=speedup&order=asc"
    assert _rows(client.get("/" + up_link).text) == down[::-1]

    fastest = _rows(client.get("/?sort=latency").text)
    assert [by[k].best_us for k in fastest] == [30.0, 40.0, 50.0, 80.0, 150.0]
    slowest = _rows(client.get("/?sort=latency&order=desc").text)
    assert slowest == fastest[::-1]
    newest = _rows(client.get("/?sort=updated").text)
    assert newest == [s.workload.key for s in reversed(seeded)]
    assert _rows(client.get("/?sort=op&order=desc").text) == _rows(page)[::-1]
    # filters and sort together, and the sort links keep the filters
    both = client.get("/?op=scale_relu_dropout&sort=speedup&order=asc").text
    assert [round(speedup(k), 3) for k in _rows(both)] == [1.125, 1.333, 2.0]
    assert _link(both, "latency") == "?op=scale_relu_dropout&sort=latency"


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        (
            "op=linear_add_gelo",
            "op",
            "unknown op 'linear_add_gelo' (did you mean linear_add_gelu?)",
        ),
        ("target=cpu-twni", "target", "unknown target 'cpu-twni'"),
        ("dtype=fp16", "dtype", "unknown dtype 'fp16'"),
        ("sort=speed", "sort", "unknown sort 'speed' (did you mean speedup?)"),
        ("sort=latency&order=up", "order", "unknown order 'up'; one of asc, desc"),
    ],
)
def test_index_refuses_a_bad_filter(client: TestClient, query: str, field: str, says: str) -> None:
    r = client.get(f"/?{query}")
    assert r.status_code == 422
    (detail,) = r.json()["detail"]
    assert detail["loc"] == ["query", field]
    assert says in detail["msg"]


def test_op_page_shows_speedup_across_shapes(client: TestClient, db: Store) -> None:
    seeded = _seed(db)
    r = client.get("/ops/scale_relu_dropout")
    assert r.status_code == 200
    page = r.text
    table = re.search(r'<table id="op-shapes">(.*?)</table>', page, re.S)
    assert table is not None
    rows = re.findall(
        r'<tr class="shape" data-workload="([0-9a-f]+)">(.*?)</tr>', table.group(1), re.S
    )
    # sorted along the shape axis, the one dim that varies: N
    assert [k for k, _ in rows] == [
        seeded[0].workload.key,
        seeded[2].workload.key,
        seeded[1].workload.key,
    ]
    assert '<th class="num">N</th>' in page
    for s, (_, cells) in zip((seeded[0], seeded[2], seeded[1]), rows, strict=True):
        assert f"{s.default_us / s.best_us:.2f}×" in cells and str(s.workload.shape["N"]) in cells
    svg = re.search(r'<svg class="speedups"[^>]*>.*?</svg>', page, re.S)
    assert svg is not None
    chart = svg.group(0)
    assert 'data-xscale="log"' in chart  # 4096 .. 1048576
    assert chart.count('<circle class="pt"') == 3
    assert chart.count('class="series"') == 1 and "cpu-twin float32" in chart
    for s in seeded[:3]:
        assert f'href="/workloads/{s.workload.key}"' in chart
    xticks = re.findall(r'class="xtick"[^>]*>([^<]+)<', chart)
    assert xticks == ["2k", "10k", "100k", "1M", "2M"]  # decades: 2 .. 2000 thousand is many
    yticks = [float(t) for t in re.findall(r'class="ytick"[^>]*>([^<]+)<', chart)]
    assert yticks[0] == 0 and yticks[-1] >= 2.0
    assert 'class="parity"' in chart  # the default's 1x
    # one dtype of another op: the product of dims when several vary
    lag = client.get("/ops/linear_add_gelu?dtype=float16").text
    assert seeded[3].workload.key in lag and "selected>float16" in lag
    assert client.get("/ops/linear_add_gelu?dtype=float32").text.count('<tr class="shape"') == 0


def test_op_page_refuses_unknown_names(client: TestClient) -> None:
    missing = client.get("/ops/linear_add_gelo")
    assert missing.status_code == 404
    assert "did you mean linear_add_gelu?" in missing.json()["detail"]
    bad = client.get("/ops/linear_add_gelu?dtype=bf16")
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["query", "dtype"]
    empty = client.get("/ops/swiglu")
    assert empty.status_code == 200 and 'id="no-shapes"' in empty.text
