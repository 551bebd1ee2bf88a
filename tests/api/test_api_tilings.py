"""/v1/tilings (lookup through tilewise.runtime) and /v1/tables (export)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api._support import live_server, seed_tuned
from tilewise.api.lookup import LookupCache
from tilewise.export import FORMAT, FORMAT_VERSION
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.runtime import TilingTable
from tilewise.settings import Settings
from tilewise.store import Store, open_store
from tilewise.types import Shape

URL = "/v1/tilings/scale_relu_dropout"


def test_lookup_exact_nearest_and_default(client: TestClient, db: Store) -> None:
    seeded = seed_tuned(db)
    exact = client.get(f"{URL}?shape=N=65536").json()
    assert exact["source"] == "exact"
    assert exact["tiling"] == dict(seeded.best)
    assert exact["latency_us"] == seeded.best_us
    assert exact["workload"]["key"] == seeded.workload.key

    nearest = client.get(f"{URL}?shape=N=60000").json()
    assert nearest["source"] == "nearest" and nearest["rule"] == "carried"
    spec, twin = get_op("scale_relu_dropout"), get_target("cpu-twin")
    carried = spec.carry(seeded.best, Shape({"N": 65536}), Shape({"N": 60000}), "float32", twin)
    assert carried is not None and nearest["tiling"] == dict(carried)
    assert nearest["workload"]["shape"] == {"N": 65536} and nearest["distance"] > 0

    other_dtype = client.get(f"{URL}?shape=N=65536&dtype=float16").json()
    assert (other_dtype["source"], other_dtype["rule"]) == ("default", "default")
    assert other_dtype["workload"] is None and other_dtype["latency_us"] is None
    assert other_dtype["tiling"] == dict(spec.default_tiling(Shape({"N": 65536}), "float16", twin))


def test_lookup_answers_as_the_runtime_library_does(client: TestClient, db: Store) -> None:
    seed_tuned(db)
    seed_tuned(db, shape={"N": 1 << 20}, latencies=(300.0, 250.0, 260.0))
    table = TilingTable.from_db(db.url)
    for n in (1000, 65536, 100_000, 1 << 20, 3 << 20):
        api = client.get(f"{URL}?shape=N={n}").json()
        lib = table.lookup("scale_relu_dropout", target="cpu-twin", dtype="float32", shape={"N": n})
        assert (api["source"], api["rule"], api["tiling"]) == (
            lib.source,
            lib.rule,
            dict(lib.tiling),
        ), n


def test_table_is_reloaded_when_tilings_change(client: TestClient, db: Store) -> None:
    lookup: LookupCache = client.app.state.lookup  # type: ignore[attr-defined]
    lookup.check_s = 0.0  # check the fingerprint on every request
    assert client.get(f"{URL}?shape=N=65536").json()["source"] == "default"
    loads = lookup.loads
    assert client.get(f"{URL}?shape=N=65536").json()["source"] == "default"
    assert lookup.loads == loads  # nothing changed: no reload
    seed_tuned(db)
    assert client.get(f"{URL}?shape=N=65536").json()["source"] == "exact"
    assert lookup.loads == loads + 1


def test_lookup_bad_query_names_the_field(client: TestClient) -> None:
    r = client.get(f"{URL}?shape=N=-4")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "shape"]
    r = client.get(f"{URL}?shape=N=1,N=5")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "shape"]
    assert "N given twice" in r.json()["detail"][0]["msg"]
    r = client.get(URL, params={"shape": '{"N": 64, "N": 128}'})  # json.loads keeps the last
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "shape"]
    assert "N given twice" in r.json()["detail"][0]["msg"]
    r = client.get(f'{URL}?shape="N=5"')  # quoted, as in a shell
    assert r.status_code == 422 and "'\"N' is not a dim name" in r.json()["detail"][0]["msg"]
    r = client.get(f"{URL}?shape=N=4&target=tpu")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "target"]


def test_tables_json_and_header(client: TestClient, db: Store) -> None:
    seeded = seed_tuned(db)
    seed_tuned(db, op="linear_add_gelu", shape={"M": 256, "N": 256, "K": 128}, latencies=(9.0, 7.0))
    doc = client.get("/v1/tables/scale_relu_dropout").json()
    assert (doc["format"], doc["format_version"]) == (FORMAT, FORMAT_VERSION)
    assert len(doc["entries"]) == 1
    entry = doc["entries"][0]
    assert entry["tiling"] == dict(seeded.best) and entry["latency_us"] == seeded.best_us
    assert (
        TilingTable.from_document(doc)
        .lookup("scale_relu_dropout", target="cpu-twin", dtype="float32", shape={"N": 65536})
        .source
        == "exact"
    )

    every = client.get("/v1/tables").json()
    assert sorted(e["op"] for e in every["entries"]) == ["linear_add_gelu", "scale_relu_dropout"]
    assert client.get("/v1/tables?dtype=float16").json()["entries"] == []
    assert len(client.get("/v1/tables?target=CPU-TWIN").json()["entries"]) == 2

    header = client.get("/v1/tables/scale_relu_dropout?format=header")
    assert header.status_code == 200
    assert header.headers["content-type"].startswith("text/x-c")
    assert "#ifndef TILEWISE_SCALE_RELU_DROPOUT_H" in header.text
    assert "tilewise_scale_relu_dropout_lookup" in header.text


def test_tables_bad_filters(client: TestClient) -> None:
    r = client.get("/v1/tables/scale_relu_dropout?format=yaml")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "format"]
    r = client.get("/v1/tables?target=nope")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "target"]
    r = client.get("/v1/tables?dtype=int4")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "dtype"]
    assert client.get("/v1/tables/nope").status_code == 404


def test_runtime_loads_from_the_api(settings: Settings) -> None:
    """tilewise.runtime's from_url reads what /v1/tables serves (over real HTTP)."""
    db = open_store(settings.db_url)
    try:
        seed_tuned(db)
    finally:
        db.close()
    with live_server(settings) as base:
        table = TilingTable.from_url(base, op="scale_relu_dropout")
        everything = TilingTable.from_url(base)
    assert len(table) == 1 and len(everything) == 1
    answer = table.lookup(
        "scale_relu_dropout", target="cpu-twin", dtype="float32", shape={"N": 65536}
    )
    assert answer.source == "exact"


# A padding of 0 is a valid conv: its workloads must not stop any table from loading.
CONV = {"N": 2, "C": 5, "H": 13, "W": 11, "K": 20, "R": 3, "S": 2, "stride": 1}
CONV_URL = "/v1/tilings/conv_bias_leakyrelu"


def _conv_query(**changes: int) -> str:
    return ",".join(f"{d}={v}" for d, v in {**CONV, "pad": 0, **changes}.items())


def test_a_conv_with_pad_0_is_served_by_every_route(client: TestClient, db: Store) -> None:
    conv = seed_tuned(db, op="conv_bias_leakyrelu", shape={**CONV, "pad": 0})
    elementwise = seed_tuned(db)

    exact = client.get(f"{CONV_URL}?shape={_conv_query()}").json()
    assert exact["source"] == "exact" and exact["tiling"] == dict(conv.best)
    # pad 0 -> 1 is one step on the log scale, as pad 1 -> 3 is
    for pad, distance in ((1, 1.0), (3, 2.0)):
        near = client.get(f"{CONV_URL}?shape={_conv_query(pad=pad)}")
        assert near.status_code == 200, near.text
        assert (near.json()["source"], near.json()["distance"]) == ("nearest", distance)
        assert near.json()["workload"]["shape"]["pad"] == 0
    assert client.get(f"{URL}?shape=N=65536").json()["tiling"] == dict(elementwise.best)

    doc = client.get("/v1/tables").json()
    assert {e["op"] for e in doc["entries"]} == {"conv_bias_leakyrelu", "scale_relu_dropout"}
    for table in (TilingTable.from_document(doc), TilingTable.from_db(db.url)):
        assert len(table) == 2 and table.skipped == {}
        answer = table.lookup(
            "conv_bias_leakyrelu", target="cpu-twin", dtype="float32", shape={**CONV, "pad": 0}
        )
        assert answer.source == "exact" and answer.tiling == conv.best

    header = client.get("/v1/tables/conv_bias_leakyrelu?format=header")
    assert header.status_code == 200 and "TILEWISE_CONV_BIAS_LEAKYRELU_H" in header.text


def test_a_negative_padding_is_422_naming_the_shape(client: TestClient) -> None:
    r = client.get(f"{CONV_URL}?shape={_conv_query(pad=-1)}")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "shape"]
    assert "pad must be non-negative" in r.json()["detail"][0]["msg"]


def test_the_service_answers_by_a_kept_measured_grid(client: TestClient, db: Store) -> None:
    """A grid measured by ``tilewise export --measure`` and kept answers the service's lookups
    and tables once it is kept: the service itself never measures."""
    from tests.tuner.test_export_measured import Truth, _measured_doc
    from tests.tuner.test_runtime_choice import HELD_OUT
    from tilewise.export import keep_measured_grids

    lookup: LookupCache = client.app.state.lookup  # type: ignore[attr-defined]
    lookup.check_s = 0.0  # check the fingerprint on every request
    measured = _measured_doc(db, "best", Truth("fast copies"))
    url = "/v1/tilings/linear_add_gelu"

    def rules() -> set[str]:
        shapes = [",".join(f"{k}={v}" for k, v in dims.items()) for dims in HELD_OUT]
        return {client.get(f"{url}?shape={shape}").json()["rule"] for shape in shapes}

    assert not rules() & {"measured_faster", "measured_default"}
    with db.session() as session:
        keep_measured_grids(session, measured)
    assert rules() <= {"measured_faster", "measured_default"}
    table = client.get("/v1/tables/linear_add_gelu").json()
    assert table["choices"] == measured["choices"]
