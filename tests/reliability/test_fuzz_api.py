"""Bad input over HTTP: schemathesis against the running app's own OpenAPI schema.

A real uvicorn server (loopback, free port) on SQLite, and again on PostgreSQL, with a tuned
workload of every op at each of its example shapes (a conv with ``pad=0`` among them) and one
job in the database; schemathesis generates valid and invalid requests for every
operation of the schema (a bounded number per operation, derandomized so CI is repeatable) and
sends them with the writer's token, so that writes get past auth and into validation. Every
answer must be below 500, and every rejection a 4xx that says what is wrong: a 422 whose every
``detail[].loc`` names a part of the request (``["query", "shape"]``, ``["body", "budget"]``), a
404 naming the missing thing. Values the generators rarely reach (64-bit overflows, NUL bytes,
NaN, lone surrogates, deep nesting, a conv filter larger than its image) are sent as a fixed
list on top: several were a 5xx or a 400 naming nothing before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.api._support import AUTH, live_server, make_settings, seed_tuned
from tests.reliability._report import record
from tests.reliability._server import pg_database
from tilewise import store
from tilewise.api import create_app
from tilewise.kernels.ops import list_ops
from tilewise.store import open_store

pytestmark = pytest.mark.reliability

#: Generated requests per operation and generation mode (positive, negative) in the fuzzing
#: phase; schemathesis adds its example and coverage cases on top.
MAX_EXAMPLES = 60
SEED = 20261122

PARTS = {"body", "query", "path", "header", "cookie"}


class Tally:
    """What the server answered, by operation and status, over every generated request."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.seen: Counter[tuple[str, int]] = Counter()

    def add(self, label: str, status: int) -> None:
        self.seen[(label, status)] += 1

    def record(self) -> None:
        statuses: Counter[int] = Counter()
        for (_, status), n in self.seen.items():
            statuses[status] += n
        record(
            f"fuzz: REST API, every operation ({self.database})",
            requests=statuses.total(),
            operations=len({label for label, _ in self.seen if not label.startswith("edge ")}),
            edge_cases=sum(n for (label, _), n in self.seen.items() if label.startswith("edge ")),
            ok_2xx=sum(n for s, n in statuses.items() if s < 300),
            rejected_4xx=sum(n for s, n in statuses.items() if 400 <= s < 500),
            errors_5xx=sum(n for s, n in statuses.items() if s >= 500),
            statuses={str(k): v for k, v in sorted(statuses.items())},
        )


@dataclass(frozen=True)
class Live:
    url: str
    database: str


@pytest.fixture(scope="module")
def tally(live: Live) -> Iterator[Tally]:
    seen = Tally(live.database)
    yield seen
    seen.record()


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    """A live server on a database holding tuned workloads of every op and one queued job."""
    with ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('fuzz-api') / 'tilewise.db'}"
        else:
            url = stack.enter_context(pg_database(request.getfixturevalue("pg_admin")))
        db = open_store(url)
        try:
            # A tuned workload of every op at each of its example shapes (a conv with pad=0
            # among them): every lookup, table and dashboard page has entries of every op.
            for spec in list_ops():
                for shape in spec.example_shapes():
                    seed_tuned(db, op=spec.name, shape=dict(shape))
            seeded = seed_tuned(db, shape={"N": 65536})
            with store.session_scope(db) as session:
                store.create_job(session, workload_id=seeded.workload.id, budget_evals=5)
        finally:
            db.close()
        yield Live(stack.enter_context(live_server(make_settings(url))), request.param)


# The schema is built at import (pytest collects one test per operation from it), from the app
# the server runs; test_the_server_serves_this_schema checks they are the same document.
# (schemathesis.pytest.from_fixture would load it from the server, but does not run on pytest 9.)
SCHEMA_DOC = create_app(make_settings("sqlite:///:memory:")).openapi()
schema = schemathesis.openapi.from_dict(SCHEMA_DOC)
schema.config.seed = SEED
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    max_examples=MAX_EXAMPLES,
    deterministic=True,
)


def test_the_server_serves_this_schema(live: Live) -> None:
    assert httpx.get(f"{live.url}/openapi.json", timeout=30).json() == SCHEMA_DOC


def _declared(case: Any) -> dict[str, set[str]]:
    """The parameter names of the case's operation, by location."""
    names: dict[str, set[str]] = {}
    for parameter in case.operation.iter_parameters():
        names.setdefault(parameter.location, set()).add(parameter.name)
    return names


def assert_names_the_field(case: Any, response: Any) -> None:
    body = response.json()
    detail = body["detail"]
    assert isinstance(detail, list) and detail, body
    declared = _declared(case)
    for error in detail:
        loc = error["loc"]
        assert loc and loc[0] in PARTS, f"422 without a field: {error}"
        assert error["msg"], error
        if loc[0] in ("query", "path", "header") and len(loc) > 1:
            assert loc[1] in declared.get(loc[0], set()) or loc[0] == "header", (
                f"422 names {loc}, not a parameter of {case.operation.label}: {error}"
            )
        if loc[0] in ("query", "path"):
            assert len(loc) > 1, f"422 names no {loc[0]} parameter: {error}"


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_5xx_and_every_rejection_names_the_field(live: Live, tally: Tally, case: Any) -> None:
    response = case.call(base_url=live.url, headers=AUTH, timeout=30)
    tally.add(case.operation.label, response.status_code)
    assert response.status_code < 500, (case.as_curl_command(), response.text[:500])
    if response.status_code == 422:
        assert_names_the_field(case, response)
    elif response.status_code == 404:
        detail = response.json()["detail"]
        assert isinstance(detail, str) and detail, response.text
    elif 400 <= response.status_code < 500:
        assert response.status_code in (401, 405, 413), (case.as_curl_command(), response.text)


# Outside the schema (include_in_schema=False): the dashboard's workload page takes any key.
@settings(max_examples=60, deadline=None, derandomize=True)
@given(key=st.text(min_size=1, max_size=80))
def test_dashboard_workload_keys(live: Live, tally: Tally, key: str) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as client:
        r = client.get(f"/workloads/{quote(key, safe='')}")
    tally.add("GET /workloads/{key}", r.status_code)
    assert r.status_code < 500, (key, r.text[:300])


def test_dashboard_op_pages(live: Live) -> None:
    """Every op's page draws its tuned shapes (a conv with pad=0 among them)."""
    with httpx.Client(base_url=live.url, timeout=30) as client:
        for spec in list_ops():
            r = client.get(f"/ops/{spec.name}")
            assert r.status_code == 200, (spec.name, r.text[:300])
            assert r.text.count('<tr class="shape"') >= len(spec.example_shapes()), spec.name


# The dashboard's filters, sort orders and chart scale: any text is a page or a 422 naming it.
@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(["op", "target", "dtype", "sort", "order", "scale"]),
    value=st.text(min_size=1, max_size=40),
    op=st.text(min_size=1, max_size=40),
)
def test_dashboard_filters(live: Live, tally: Tally, name: str, value: str, op: str) -> None:
    page = "/workloads/" + "0" * 32 if name == "scale" else "/"
    with httpx.Client(base_url=live.url, timeout=30) as client:
        r = client.get(page, params={name: value})
        o = client.get(f"/ops/{quote(op, safe='')}")
    tally.add(f"GET {page}?{name}=", r.status_code)
    tally.add("GET /ops/{op}", o.status_code)
    assert r.status_code in (200, 404, 422), (name, value, r.text[:300])
    if r.status_code == 422:
        assert r.json()["detail"][0]["loc"] == ["query", name], r.text
    assert o.status_code in (200, 404), (op, o.text[:300])


# Values the generators rarely reach, each a bug once (a 500 or 503, or a 400 naming nothing):
# integers past 64 bits, NUL bytes (PostgreSQL refuses them in text), non-finite numbers (Python
# reads Infinity and NaN in JSON), numbers of thousands of digits, deep nesting, bodies that are
# not UTF-8, lone surrogates (valid JSON escapes, not UTF-8).
_JOB = b'{"op": "scale_relu_dropout", "shape": {"N": 64}'
# no output pixel (the filter does not fit): the tensor sizes divided by zero
_CONV = "N%3D256,C%3D211,H%3D40,W%3D13,K%3D86,R%3D125,S%3D211,stride%3D96,pad%3D18"
EDGES: list[tuple[str, str, bytes | None, list[str]]] = [
    ("GET", "/v1/jobs/99999999999999999999999", None, ["path", "job_id"]),
    ("GET", "/v1/jobs/-99999999999999999999999", None, ["path", "job_id"]),
    ("GET", "/v1/jobs/9223372036854775808", None, ["path", "job_id"]),
    ("POST", "/v1/jobs/9223372036854775808/cancel", None, ["path", "job_id"]),
    ("GET", "/v1/jobs?limit=99999999999999999999999", None, ["query", "limit"]),
    ("GET", "/v1/jobs?op=%00", None, ["query", "op"]),
    ("GET", "/v1/jobs?status=%00", None, ["query", "status"]),
    ("GET", "/v1/workers?alive_within=1e300", None, ["query", "alive_within"]),
    ("GET", "/v1/workers?alive_within=inf", None, ["query", "alive_within"]),
    ("GET", "/v1/workers?alive_within=nan", None, ["query", "alive_within"]),
    ("GET", "/v1/tilings/scale_relu_dropout?shape=N%3D" + "9" * 5000, None, ["query", "shape"]),
    ("GET", "/v1/tilings/scale_relu_dropout?shape=N%3D5%00", None, ["query", "shape"]),
    ("GET", "/v1/tilings/scale_relu_dropout?shape=N%3D64&dtype=%00", None, ["query", "dtype"]),
    (
        "GET",
        "/v1/tilings/scale_relu_dropout?shape=N%3D64&target=%ED%A0%80",
        None,
        ["query", "target"],
    ),
    (
        "GET",
        "/v1/ops/linear_add_gelu/analysis?shape=M%3D16777216,N%3D16777216,K%3D16777216",
        None,
        ["query", "shape"],
    ),
    ("GET", "/v1/ops/swiglu?shape=T%3D1e3,I%3D4", None, ["query", "shape"]),
    ("GET", f"/v1/tilings/conv_bias_leakyrelu?shape={_CONV}", None, ["query", "shape"]),
    ("GET", f"/v1/ops/conv_bias_leakyrelu/analysis?shape={_CONV}", None, ["query", "shape"]),
    ("GET", "/v1/tables?target=%00", None, ["query", "target"]),
    ("GET", "/v1/tables/swiglu?dtype=%FF", None, ["query", "dtype"]),
    ("POST", "/v1/jobs", _JOB + b', "seconds": Infinity}', ["body", "seconds"]),
    ("POST", "/v1/jobs", _JOB + b', "seconds": NaN}', ["body", "seconds"]),
    ("POST", "/v1/jobs", _JOB + b', "budget": 1e400}', ["body", "budget"]),
    ("POST", "/v1/jobs", _JOB + b', "budget": 99999999999999999999999}', ["body", "budget"]),
    ("POST", "/v1/jobs", _JOB + b', "budget": ' + b"9" * 5000 + b"}", ["body"]),
    ("POST", "/v1/jobs", b"[" * 20000 + b"]" * 20000, ["body"]),
    ("POST", "/v1/jobs", b"\xff\xfe{}", ["body"]),
    (
        "POST",
        "/v1/jobs",
        b'{"op": "scale_relu_dropout\\u0000", "shape": {"N": 64}}',
        ["body", "op"],
    ),
    (
        "POST",
        "/v1/jobs",
        b'{"op": "scale_relu_dropout", "shape": {"N\\u0000": 64}}',
        ["body", "shape"],
    ),
    (
        "POST",
        "/v1/jobs",
        b'{"op": "scale_relu_dropout", "shape": {"\\ud800": 64}}',
        ["body", "shape"],
    ),
    ("POST", "/v1/jobs", _JOB + b', "dtype": "\\udfff"}', ["body", "dtype"]),
    ("POST", "/v1/jobs", _JOB + b', "\\ud800": 1}', ["body"]),
    (
        "POST",
        "/v1/jobs",
        b'{"op": "scale_relu_dropout", "shape": {"N": 1e400}}',
        ["body", "shape", "N"],
    ),
    (
        "POST",
        "/v1/jobs",
        b'{"op": "scale_relu_dropout", "shape": {"N": 16777217}}',
        ["body", "shape", "N"],
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "loc"), EDGES, ids=[f"{m} {p[:60]}" for m, p, _, _ in EDGES]
)
def test_edge_values_are_422_naming_the_field(
    live: Live, tally: Tally, method: str, path: str, body: bytes | None, loc: list[str]
) -> None:
    headers = {**AUTH, "Content-Type": "application/json"}
    jobs_before = httpx.get(f"{live.url}/v1/jobs", timeout=30).json()["jobs"]
    r = httpx.request(method, f"{live.url}{path}", content=body, headers=headers, timeout=30)
    tally.add(f"edge {method} {path.split('?')[0]}", r.status_code)
    assert r.status_code == 422, r.text[:300]
    detail = r.json()["detail"]
    assert detail[0]["loc"][: len(loc)] == loc, detail
    assert detail[0]["msg"], detail
    assert httpx.get(f"{live.url}/v1/jobs", timeout=30).json()["jobs"] == jobs_before
