"""Bearer tokens on writes, 422s naming the field, the body size limit, CORS."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api._support import AUTH, TOKEN, make_settings
from tilewise.api import create_app
from tilewise.types import MAX_DIM

BODY: dict[str, Any] = {"op": "scale_relu_dropout", "shape": {"N": 65536}, "budget": 5}


BAD_AUTH: list[dict[str, str]] = [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"Bearer {TOKEN[:-1]}"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": TOKEN},
]


@pytest.mark.reliability
def test_writes_without_the_token_are_401(client: TestClient) -> None:
    for headers in BAD_AUTH:
        r = client.post("/v1/jobs", json=BODY, headers=headers)
        assert r.status_code == 401, headers
        assert r.headers["www-authenticate"] == "Bearer"
        assert client.post("/v1/jobs/1/cancel", headers=headers).status_code == 401, headers
    assert client.get("/v1/jobs").status_code == 200  # reads are open
    assert client.get("/v1/jobs").json()["jobs"] == []  # nothing was written
    assert client.post("/v1/jobs", json=BODY, headers=AUTH).status_code == 202


@pytest.mark.reliability
def test_auth_comes_before_validation(client: TestClient) -> None:
    # An anonymous caller learns nothing about what a valid body is, nor that it sent no JSON
    # (FastAPI parses a body before the route's dependencies run).
    assert client.post("/v1/jobs", json={"op": "nope"}).status_code == 401
    for body in (b"{not json", b"\xff\xfe", b"[" * 5000, b"1" * 5000):
        for route in ("/v1/jobs", "/v1/batches"):
            headers = {"Content-Type": "application/json"}
            r = client.post(route, content=body, headers=headers)
            assert r.status_code == 401, (route, body[:10], r.text)
            assert r.headers["www-authenticate"] == "Bearer"
            r = client.post(route, content=body, headers={**headers, **AUTH})
            assert r.status_code == 422, (route, body[:10], r.text)
    assert client.get("/v1/jobs").json()["jobs"] == []


def test_dev_mode_opens_writes(db_url: str) -> None:
    with TestClient(create_app(make_settings(db_url, api_token=None, dev_mode=True))) as client:
        assert client.post("/v1/jobs", json=BODY).status_code == 202


@pytest.mark.reliability
def test_no_token_configured_refuses_writes(db_url: str) -> None:
    with TestClient(create_app(make_settings(db_url, api_token=None))) as client:
        r = client.post("/v1/jobs", json=BODY, headers={"Authorization": "Bearer anything"})
        assert r.status_code == 403 and "api_token" in r.json()["detail"]
        assert client.get("/v1/ops").status_code == 200


@pytest.fixture
def small(db_url: str) -> Iterator[TestClient]:
    settings = make_settings(db_url, max_budget=100, max_elements=1 << 20, max_body_bytes=2048)
    with TestClient(create_app(settings)) as client:
        yield client


BAD_BODIES: list[tuple[dict[str, Any], list[str], str]] = [
    ({"op": "softmax_pro"}, ["body", "op"], "unknown op"),
    ({"dtype": "int8"}, ["body", "dtype"], "unknown dtype"),
    ({"target": "a100"}, ["body", "target"], "unknown target"),
    ({"shape": {"N": 64, "M": 3}}, ["body", "shape"], "unknown dim M"),
    ({"shape": {}}, ["body", "shape"], "missing dim N"),
    ({"shape": {"N": 0}}, ["body", "shape", "N"], "greater than 0"),
    ({"shape": {"N": -5}}, ["body", "shape", "N"], "greater than 0"),
    ({"shape": {"N": 1.5}}, ["body", "shape", "N"], "integer"),
    ({"shape": {"N": "64"}}, ["body", "shape", "N"], "integer"),
    ({"shape": {"N": MAX_DIM + 1}}, ["body", "shape", "N"], "less than or equal"),
    ({"shape": {"N": 1 << 21}}, ["body", "shape"], "above the limit"),  # max_elements
    ({"shape": 64}, ["body", "shape"], "dictionary"),  # neither an object nor its text form
    ({"shape": "N=sixty-four"}, ["body", "shape"], "N must be an integer"),
    ({"shape": "N=0"}, ["body", "shape", "N"], "greater than 0"),
    ({"shape": '{"N": 64'}, ["body", "shape"], "not a JSON object"),
    ({"budget": 0}, ["body", "budget"], "greater than or equal to 1"),
    ({"budget": 101}, ["body", "budget"], "between 1 and 100"),
    ({"seconds": -1}, ["body", "seconds"], "greater than 0"),
    ({"force": "maybe"}, ["body", "force"], "boolean"),
    # Strict, as the schema says: these were taken as budget 1, 5, 12 s and force true.
    ({"budget": True}, ["body", "budget"], "valid integer"),
    ({"budget": "5"}, ["body", "budget"], "valid integer"),
    ({"seconds": "12"}, ["body", "seconds"], "valid number"),
    ({"force": "yes"}, ["body", "force"], "boolean"),
    ({"priority": 3}, ["body", "priority"], "Extra inputs"),
]


@pytest.mark.reliability
def test_bad_job_requests_are_422_naming_the_field(small: TestClient) -> None:
    for change, loc, words in BAD_BODIES:
        r = small.post("/v1/jobs", json={**BODY, **change}, headers=AUTH)
        assert r.status_code == 422, (change, r.text)
        detail = r.json()["detail"]
        assert detail[0]["loc"] == loc, (change, detail)
        assert words in detail[0]["msg"], (change, detail)
    assert small.get("/v1/jobs").json()["jobs"] == []  # nothing was written


@pytest.mark.reliability
def test_missing_op_and_invalid_json_are_422(small: TestClient) -> None:
    r = small.post("/v1/jobs", json={"shape": {"N": 4}}, headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "op"]
    r = small.post(
        "/v1/jobs", content=b"{not json", headers={**AUTH, "Content-Type": "application/json"}
    )
    assert r.status_code == 422


@pytest.mark.reliability
def test_huge_body_is_413(small: TestClient) -> None:
    huge = {**BODY, "shape": {f"D{i}": i + 1 for i in range(2000)}}
    r = small.post("/v1/jobs", json=huge, headers=AUTH)
    assert r.status_code == 413
    # Without a Content-Length (chunked), the limit holds as well.
    chunks = (b"x" * 1024 for _ in range(8))
    r = small.post("/v1/jobs", content=chunks, headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 413
    assert small.post("/v1/jobs", json=BODY, headers=AUTH).status_code == 202


@pytest.mark.reliability
def test_cors_is_closed_by_default(client: TestClient) -> None:
    r = client.get("/v1/ops", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in r.headers
    pre = client.options(
        "/v1/jobs",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in pre.headers


@pytest.mark.reliability
def test_cors_allows_only_listed_origins(db_url: str) -> None:
    settings = make_settings(db_url, cors_origins=["https://build.example"])
    with TestClient(create_app(settings)) as client:
        ok = client.get("/v1/ops", headers={"Origin": "https://build.example"})
        assert ok.headers["access-control-allow-origin"] == "https://build.example"
        other = client.get("/v1/ops", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
