"""A workload's records, exported: `tilewise records` and GET /v1/workloads/{key}/records, as
JSON and as a space that `tilewise tune replay` reads back (on SQLite and PostgreSQL)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests_support import tilewise

from tests.api._support import make_settings
from tests.fakes import FakeBackend
from tilewise import store
from tilewise.api import create_app
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import twin_target
from tilewise.search import Budget, ReplaySpace, Tuner
from tilewise.settings import Settings
from tilewise.store import RecordRow, RecordSource, RecordStatus, WorkloadRow
from tilewise.types import Shape, Tiling

SHAPE = Shape({"N": 1 << 16})
CRASH_TILE = 1024


def _latency(tiling: Tiling) -> float | None:
    if tiling["tileLength"] == CRASH_TILE:
        return None  # crashes: an `inf` row
    return 1000.0 / tiling["blockDim"] + abs(tiling["tileLength"] - 2048) / 100


def _remeasured(tiling: Tiling, n: int) -> list[float] | None:
    # Slower than the search's times: a time of the re-measures in the CSV would show.
    latency = _latency(tiling)
    return None if latency is None else [1.5 * latency] * 3


@pytest.fixture
def tuned(db_url: str, tmp_path: Path) -> tuple[WorkloadRow, list[RecordRow]]:
    """scale_relu_dropout tuned with the fake backend: default, search (crashes among them),
    infeasible proposals and re-measures."""
    settings = Settings(db_url=db_url, cache_dir=tmp_path / "cache", remeasure_top=2)
    db = store.open_store(db_url)
    try:
        tuner = Tuner(
            spec=get_op("scale_relu_dropout"),
            shape=SHAPE,
            dtype="float32",
            target=twin_target(),
            backend=FakeBackend(_latency, remeasure=_remeasured),
            db=db,
            settings=settings,
            strategy="random",  # proposes tilings the static check refuses, too
        )
        tuner.run(Budget(16), seed=3)
        with db.session() as s:
            workload = store.get_workload(s, workload_id=tuner.workload_id)
            records = store.records_for(s, workload_id=tuner.workload_id)
    finally:
        db.close()
    assert workload is not None
    return workload, records


def _measured(records: list[RecordRow]) -> dict[str, RecordRow]:
    """The first search measurement of each tiling that ran or failed to run."""
    found: dict[str, RecordRow] = {}
    for r in records:
        searched = r.source in (RecordSource.SEARCH, RecordSource.DEFAULT)
        if searched and r.status != RecordStatus.INFEASIBLE:
            found.setdefault(r.tiling_key, r)
    return found


def test_the_cli_and_the_api_export_the_same_records(
    tuned: tuple[WorkloadRow, list[RecordRow]], db_url: str, tmp_path: Path
) -> None:
    workload, records = tuned
    statuses = {r.status for r in records}
    sources = {r.source for r in records}
    # The run left every kind the export must handle, or this test shows less than it says.
    assert {RecordStatus.OK, RecordStatus.CRASHED, RecordStatus.INFEASIBLE} <= statuses
    assert RecordSource.REMEASURE in sources

    done = tilewise(
        "records", "scale_relu_dropout", "--shape", SHAPE.key(), tmp_path=tmp_path, db=db_url
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["format"] == "tilewise.records"
    assert doc["workload"]["key"] == workload.key and doc["workload"]["shape"] == dict(SHAPE)
    assert [r["id"] for r in doc["records"]] == [r.id for r in records]
    for got, row in zip(doc["records"], records, strict=True):
        assert got["tiling"] == dict(row.tiling)
        assert (got["status"], got["source"]) == (row.status, row.source)
        assert got["latency_us"] == row.latency_us
        assert got["samples_us"] == (None if row.samples_us is None else list(row.samples_us))

    with TestClient(create_app(make_settings(db_url))) as client:
        r = client.get(f"/v1/workloads/{workload.key}/records")
        assert r.status_code == 200
        assert r.json() == doc
        csv_api = client.get(f"/v1/workloads/{workload.key}/records?format=csv")
        assert csv_api.status_code == 200
        assert csv_api.headers["content-type"].startswith("text/csv")
        missing = client.get(f"/v1/workloads/{'0' * 32}/records")
        assert missing.status_code == 404 and "no workload" in missing.json()["detail"]
        bad = client.get("/v1/workloads/not-a-key/records")
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["path", "key"]

    out = tmp_path / "space.csv"
    done = tilewise(
        "records", "scale_relu_dropout", "--shape", SHAPE.key(), "--format", "csv", "-o",
        str(out), tmp_path=tmp_path, db=db_url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_text() == csv_api.text


def test_the_csv_is_the_search_measurements_as_a_replay_space(
    tuned: tuple[WorkloadRow, list[RecordRow]], db_url: str, tmp_path: Path
) -> None:
    _, records = tuned
    out = tmp_path / "space.csv"
    done = tilewise(
        "records", "scale_relu_dropout", "--shape", SHAPE.key(), "--format", "csv", "-o",
        str(out), tmp_path=tmp_path, db=db_url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader(io.StringIO(out.read_text())))
    names = [t.name for t in get_op("scale_relu_dropout").tunables(SHAPE, "float32", twin_target())]
    assert rows[0] == [*names, "time_ms"]
    measured = _measured(records)
    assert len(rows) - 1 == len(measured)
    assert f"wrote {len(measured)} tilings (csv) to {out}" in done.stderr
    by_tiling = {tuple(int(v) for v in row[:-1]): row[-1] for row in rows[1:]}
    for r in measured.values():
        time_ms = by_tiling[tuple(r.tiling[n] for n in names)]
        if r.status == RecordStatus.OK:
            assert r.latency_us is not None and float(time_ms) == r.latency_us / 1000
        else:
            assert r.tiling["tileLength"] == CRASH_TILE and time_ms == "inf"
    remeasured = {r.latency_us for r in records if r.source == RecordSource.REMEASURE}
    searched = {r.latency_us for r in measured.values()}
    assert remeasured - searched, "the re-measures must differ to show they are left out"
    assert not any(
        math.isfinite(float(t)) and float(t) * 1000 in remeasured - searched
        for t in by_tiling.values()
    )

    # Round trip: the replay reads the file back as the same space and finds its optimum.
    space = ReplaySpace(out)
    best_ok = min(r.latency_us for r in measured.values() if r.latency_us is not None)
    assert space.configs == len(measured)
    assert {tuple(c[n] for n in names) for c in space.candidates()} == {
        tuple(r.tiling[n] for n in names) for r in measured.values()
    }
    assert space.optimum_ms == pytest.approx(best_ok / 1000)
    replay = tilewise(
        "tune", "replay", "--space", str(out), "--budget", str(len(measured) * 4),
        "--strategy", "random", "--seed", "0", "--json", tmp_path=tmp_path,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stderr
    result = json.loads(replay.stdout)
    assert result["optimum_ms"] == pytest.approx(best_ok / 1000)
    assert set(result["best"]["config"]) == set(names)
    assert result["evaluations"] <= len(measured)  # no configuration is evaluated twice


def test_records_of_an_untuned_workload(db_url: str, tmp_path: Path) -> None:
    store.open_store(db_url).close()  # a migrated, empty database
    done = tilewise("records", "swiglu", "--shape", "T=4,I=8", tmp_path=tmp_path, db=db_url)
    assert done.returncode == 1
    assert done.stdout == "" and "no records (not tuned)" in done.stderr


def test_records_bad_input_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    out = tmp_path / "out.csv"
    for args, message in [
        (["records", "swiglu", "--shape", "T=4,I=8", "--format", "xml"], "unknown format 'xml'"),
        (["records", "swiglu", "--shape", "T=4,i=8"], "(did you mean T=4,I=8?)"),
        (["records", "swiglu", "--shape", "T=4,I=8", "-o", str(out)], "does not exist"),
    ]:
        done = tilewise(*args, tmp_path=tmp_path, db=f"sqlite:///{db}")
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], lines
    assert not db.exists() and not out.exists()
