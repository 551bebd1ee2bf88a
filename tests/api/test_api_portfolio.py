"""/v1/tables with portfolio=K and within=X: the portfolio table of ``tilewise export
--portfolio K --within X``, which tilewise.runtime answers by its selection rule."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests_support import LAG, PORTFOLIO_SHAPES, TWIN, portfolio_tuned_set, tilewise

from tests.api._support import live_server, seed_tuned
from tilewise.export import load_portfolio
from tilewise.runtime import TilingTable
from tilewise.settings import Settings
from tilewise.store import Store, open_store

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
LAG_TABLE = f"/v1/tables/{LAG.name}"


def _seed(db: Store) -> None:
    with db.session() as session:
        portfolio_tuned_set(session)
    seed_tuned(db)  # a scale_relu_dropout workload: a second op


def _undated(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "generated_at"}


def _undated_text(text: str) -> str:
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", "<date>", text)


def test_a_portfolio_table_is_what_the_cli_exports(
    client: TestClient, db: Store, tmp_path: Path
) -> None:
    _seed(db)
    r = client.get(LAG_TABLE, params={"portfolio": 2, "within": 5})
    assert r.status_code == 200, r.text
    served = r.json()
    out = tmp_path / "p.json"
    done = tilewise(
        "export", LAG.name, "--portfolio", "2", "--within", "5", "-o", str(out),
        tmp_path=tmp_path, db=db.url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    exported = json.loads(out.read_text())
    assert _undated(served) == _undated(exported)
    assert served["portfolio"]["k"] == 2 and len(served["portfolio"]["groups"][0]["members"]) == 2
    # within defaults to the CLI's 5%; another share is another cover
    assert _undated(client.get(LAG_TABLE, params={"portfolio": 2}).json()) == _undated(exported)
    tight = client.get(LAG_TABLE, params={"portfolio": 2, "within": 0.5}).json()
    assert tight["portfolio"]["within"] == 0.005

    header = client.get(LAG_TABLE, params={"portfolio": 2, "format": "header"})
    assert header.status_code == 200
    cli_header = tmp_path / "p.h"
    done = tilewise(
        "export", LAG.name, "--portfolio", "2", "--format", "header", "-o", str(cli_header),
        tmp_path=tmp_path, db=db.url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tilewise_linear_add_gelu_member_tiling" in header.text
    assert _undated_text(header.text) == _undated_text(cli_header.read_text())


def test_every_ops_portfolio_in_one_document(client: TestClient, db: Store) -> None:
    _seed(db)
    every = client.get("/v1/tables", params={"portfolio": 2}).json()
    one = client.get(LAG_TABLE, params={"portfolio": 2}).json()
    groups = {g["op"]: g for g in every["portfolio"]["groups"]}
    assert set(groups) == {LAG.name, "scale_relu_dropout"}
    assert groups[LAG.name] == one["portfolio"]["groups"][0]
    assert [e for e in every["entries"] if e["op"] == LAG.name] == one["entries"]
    assert every["filters"]["op"] is None

    table = TilingTable.from_document(every)
    assert [p[:3] for p in table.portfolios()] == [
        (LAG.name, "cpu-twin", "float32"),
        ("scale_relu_dropout", "cpu-twin", "float32"),
    ]
    (portfolio,) = [p for p in load_portfolio(every) if p.op == LAG.name]
    asked = {"M": 100, "N": 300, "K": 200}
    answer = table.lookup(LAG.name, target="cpu-twin", dtype="float32", shape=asked)
    member, tiling = portfolio.choose(LAG, TWIN, asked)
    assert (answer.rule, answer.member, answer.tiling) == ("portfolio", member, tiling)
    # The plain table has no portfolio section: its lookups answer as before.
    plain = TilingTable.from_document(client.get("/v1/tables").json())
    assert plain.portfolios() == []
    assert plain.lookup(LAG.name, target="cpu-twin", dtype="float32", shape=asked).rule != (
        "portfolio"
    )


@pytest.mark.parametrize("path", ["/v1/tables", LAG_TABLE])
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"portfolio": 0}, "portfolio"),
        ({"portfolio": -2}, "portfolio"),
        ({"portfolio": "two"}, "portfolio"),
        ({"portfolio": 2, "within": -1}, "within"),
        ({"portfolio": 2, "within": 1000}, "within"),
        ({"portfolio": 2, "within": "nan"}, "within"),
        ({"portfolio": 2, "within": "five"}, "within"),
        ({"within": 5}, "within"),
    ],
)
def test_bad_portfolio_parameters_are_422_naming_them(
    client: TestClient, path: str, params: dict[str, Any], field: str
) -> None:
    r = client.get(path, params=params)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["query", field], error
    if params == {"within": 5}:
        assert "within goes with portfolio" in error["msg"]


def test_runtime_loads_a_portfolio_from_the_api(settings: Settings) -> None:
    db = open_store(settings.db_url)
    try:
        _seed(db)
    finally:
        db.close()
    with live_server(settings) as base:
        table = TilingTable.from_url(base, op=LAG.name, portfolio=1, within=2.5)
    ((op, target, dtype, members, shapes),) = table.portfolios()
    assert (op, target, dtype, members, shapes) == (LAG.name, "cpu-twin", "float32", 1, 4)
    answer = table.lookup(LAG.name, target="cpu-twin", dtype="float32", shape=PORTFOLIO_SHAPES[3])
    assert (answer.source, answer.rule, answer.member) == ("exact", "portfolio", 0)
    assert math.isfinite(answer.latency_us or math.nan)
