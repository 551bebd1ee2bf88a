"""The OpenAPI schema carries the real constraints of a request (op, dtype and target enums,
each op's dims, the shape's two forms), and the server takes a shape in either form in a body
as in a query string."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest
from fastapi.testclient import TestClient

from tests.api._support import AUTH
from tilewise.kernels.ops import OPS, list_ops
from tilewise.kernels.targets import target_names
from tilewise.types import DTYPES


@pytest.fixture(scope="module")
def spec(read_client: TestClient) -> dict[str, Any]:
    document: dict[str, Any] = read_client.get("/openapi.json").json()
    return document


def _body_validator(spec: dict[str, Any]) -> Any:
    """A validator of POST /v1/jobs bodies, as a client generated from the schema has one."""
    schema = {**spec["components"]["schemas"]["JobCreate"], "$defs": spec["components"]["schemas"]}
    return jsonschema_rs.Draft202012Validator(schema)


def test_the_job_body_names_the_ops_dtypes_and_targets(spec: dict[str, Any]) -> None:
    properties = spec["components"]["schemas"]["JobCreate"]["properties"]
    assert properties["op"]["enum"] == sorted(OPS)
    assert properties["dtype"]["enum"] == list(DTYPES)
    assert properties["target"]["enum"] == target_names()


GOOD = [
    {"op": "linear_add_gelu", "shape": {"M": 1, "N": 4096, "K": 4096}},
    {"op": "linear_add_gelu", "shape": "M=1,N=4096,K=4096", "dtype": "float16"},
    {"op": "conv_bias_leakyrelu", "shape": "N=1,C=3,H=8,W=8,K=4,R=3,S=3,stride=1,pad=0"},
    {"op": "swiglu", "shape": {"T": 4, "I": 8}, "target": "ascend910b1", "budget": 5},
]
BAD = [
    ({"op": "linear_add_gelo", "shape": {"M": 1, "N": 1, "K": 1}}, "op typo"),
    ({"op": "linear_add_gelu", "shape": {"M": 1, "N": 1, "K": 1}, "dtype": "fp16"}, "dtype"),
    ({"op": "linear_add_gelu", "shape": {"M": 1, "N": 1, "K": 1}, "target": "gpu"}, "target"),
    ({"op": "linear_add_gelu", "shape": {"m": 1, "N": 1, "K": 1}}, "dim in lower case"),
    ({"op": "linear_add_gelu", "shape": {"M": 1, "N": 1}}, "a dim missing"),
    ({"op": "linear_add_gelu", "shape": {"M": 1, "N": 1, "K": 1, "T": 1}}, "another op's dim"),
    ({"op": "linear_add_gelu", "shape": {"M": 0, "N": 1, "K": 1}}, "a zero dim"),
    ({"op": "conv_bias_leakyrelu", "shape": "N=1,C=3,H=8,W=8,K=4,R=3,S=3,stride=1,pad=-1"}, "<0"),
    ({"op": "linear_add_gelu", "shape": "256x256x256"}, "unnamed dims"),
    ({"op": "linear_add_gelu", "shape": "T=4,I=8"}, "another op's dims as text"),
]


def test_a_client_validating_with_the_schema_accepts_good_bodies_and_refuses_bad_ones(
    spec: dict[str, Any], client: TestClient
) -> None:
    validator = _body_validator(spec)
    for body in GOOD:
        assert validator.is_valid(body), body
        r = client.post("/v1/jobs", json=body, headers=AUTH)
        assert r.status_code in (200, 202), (body, r.text)  # the server agrees
    for body, why in BAD:
        assert not validator.is_valid(body), why
        r = client.post("/v1/jobs", json=body, headers=AUTH)
        assert r.status_code == 422, (why, r.text)  # and so does the server


@pytest.mark.parametrize(
    "path", ["/v1/tilings/{op}", "/v1/ops/{op}/analysis"], ids=["tilings", "analysis"]
)
def test_query_parameters_name_their_values(spec: dict[str, Any], path: str) -> None:
    parameters = {p["name"]: p["schema"] for p in spec["paths"][path]["get"]["parameters"]}
    assert parameters["op"]["enum"] == sorted(OPS)
    assert parameters["dtype"]["enum"] == list(DTYPES)
    assert parameters["target"]["enum"] == target_names()
    shape = jsonschema_rs.Draft202012Validator(parameters["shape"])
    for text in ("M=1024,N=512,K=256", '{"M": 1024, "N": 512, "K": 256}', "N=1"):
        assert shape.is_valid(text), text
    for text in ("256x256x256", "M=", "M=1;N=2", ""):
        assert not shape.is_valid(text), text


def test_both_shape_forms_are_one_workload_in_bodies(client: TestClient) -> None:
    first = client.post(
        "/v1/jobs", json={"op": "linear_add_gelu", "shape": "M=8, N=16, K=32"}, headers=AUTH
    )
    assert first.status_code == 202, first.text
    for shape in ({"M": 8, "N": 16, "K": 32}, '{"K": 32, "N": 16, "M": 8}'):
        again = client.post(
            "/v1/jobs", json={"op": "linear_add_gelu", "shape": shape}, headers=AUTH
        )
        assert again.status_code == 202, again.text
        assert again.json()["id"] == first.json()["id"]  # the same workload's job
    assert first.json()["workload"]["shape"] == {"M": 8, "N": 16, "K": 32}


@pytest.mark.parametrize(
    "path", ["/v1/tilings/linear_add_gelu", "/v1/ops/linear_add_gelu/analysis"]
)
def test_both_shape_forms_are_one_workload_in_queries(read_client: TestClient, path: str) -> None:
    answers = [
        read_client.get(path, params={"shape": shape}).json()
        for shape in ("M=64,N=96,K=128", '{"M": 64, "N": 96, "K": 128}')
    ]
    assert "detail" not in answers[0], answers[0]
    assert answers[0] == answers[1]


@pytest.mark.parametrize(
    ("where", "request_args", "hint"),
    [
        ("body", {"json": {"op": "swiglu", "shape": "4x8"}}, "(did you mean T=4,I=8?)"),
        ("body", {"json": {"op": "swiglu", "shape": '{"t": 4, "I": 8}'}}, "(did you mean T=4"),
        ("query", {"params": {"shape": "4x8"}}, "(did you mean T=4,I=8?)"),
        ("query", {"params": {"shape": "T=4,I=8", "dtype": "half"}}, "(did you mean float16?)"),
    ],
)
def test_422s_carry_the_hints(
    client: TestClient, where: str, request_args: dict[str, Any], hint: str
) -> None:
    if where == "body":
        r = client.post("/v1/jobs", headers=AUTH, **request_args)
    else:
        r = client.get("/v1/tilings/swiglu", **request_args)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"][0] == where and hint in error["msg"], error


def test_every_op_has_its_dims_in_the_schema(spec: dict[str, Any]) -> None:
    rules = spec["components"]["schemas"]["JobCreate"]["allOf"]
    by_op = {rule["if"]["properties"]["op"]["const"]: rule["then"] for rule in rules}
    assert set(by_op) == set(OPS)
    for op in list_ops():
        shape = by_op[op.name]["properties"]["shape"]["anyOf"][0]
        assert shape["required"] == list(op.dims) and shape["additionalProperties"] is False


def test_the_schema_holds_the_settings_budget_bound_and_strict_types(client: TestClient) -> None:
    """What the server refuses the schema refuses: a budget above settings.max_budget, and
    values of another JSON type (a budget of true or "5", a force of "yes")."""
    spec = client.get("/openapi.json").json()
    validator = _body_validator(spec)
    most = client.app.state.settings.max_budget  # type: ignore[attr-defined]
    batch = spec["components"]["schemas"]["BatchCreate"]["properties"]["budget"]["anyOf"]
    assert {"type": "integer", "minimum": 1, "maximum": most} in batch
    job = {"op": "swiglu", "shape": {"T": 4, "I": 8}}
    for change, good in [
        ({"budget": most}, True),
        ({"budget": most + 1}, False),
        ({"budget": True}, False),
        ({"budget": "5"}, False),
        ({"seconds": "12"}, False),
        ({"force": "yes"}, False),
    ]:
        body = {**job, **change}
        assert validator.is_valid(body) is good, body
        r = client.post("/v1/jobs", json=body, headers=AUTH)
        assert (r.status_code in (200, 202)) is good, (body, r.text)
