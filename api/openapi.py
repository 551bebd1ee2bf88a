"""The constraints of a workload request, written into the OpenAPI schema so that a client
generated from it checks a request before sending it: the ops, dtypes and targets as enums,
each op's dim names, and the shape's two forms.

A shape is the same everywhere, in a JSON body as in a query string: the text
``"M=1024,N=512,K=256"`` or an object ``{"M": 1024, "N": 512, "K": 256}`` (in a query string,
as JSON text). The server's own checks (``tilewise.kernels.request``) are what decide; these
schemas only describe them (they are not enforced by the framework, whose messages would not
name the dim at fault or suggest the name that was meant).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from fastapi import FastAPI

from tilewise.kernels.ops import OPS, OpSpec, get_op, list_ops
from tilewise.kernels.targets import target_names
from tilewise.types import DTYPES, MAX_DIM

SHAPE_DESCRIPTION = (
    'Every dim of the op: the text "M=1024,N=512,K=256", or the object '
    '{"M": 1024, "N": 512, "K": 256} (in a query string, as JSON text). See GET /v1/ops/{op}.'
)

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def _text_pattern(names: str) -> str:
    pair = rf"\s*{names}\s*=\s*[0-9]+\s*"
    return rf"^{pair}(,{pair})*$"


def _object_schema(
    dims: Sequence[str], floors: dict[str, int], *, required: bool
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            d: {"type": "integer", "minimum": floors.get(d, 1), "maximum": MAX_DIM} for d in dims
        },
        "additionalProperties": False,
        "minProperties": 1,
    }
    if required:
        schema["required"] = list(dims)
    return schema


def shape_schema(spec: OpSpec | None = None) -> dict[str, Any]:
    """The schema of a shape: of ``spec``'s (its dims, all of them), or of any op's (the dims
    of every op, a shape taking some of them)."""
    if spec is None:
        dims = sorted({d for s in list_ops() for d in s.dims})
        floors = {d: f for s in list_ops() for d, f in s.dim_floors.items()}
    else:
        dims, floors = list(spec.dims), dict(spec.dim_floors)
    names = "(" + "|".join(re.escape(d) for d in dims) + ")"
    return {
        "anyOf": [
            _object_schema(dims, floors, required=spec is not None),
            {"type": "string", "pattern": _text_pattern(names)},
        ]
    }


def shape_query_schema() -> dict[str, Any]:
    """A shape in a query string: the text form, or the object as JSON text."""
    return {
        "type": "string",
        "anyOf": [{"pattern": _text_pattern(_NAME)}, {"pattern": r"^\s*\{.*\}\s*$"}],
    }


@cache
def enums() -> dict[str, list[str]]:
    """The names a request may use: op, dtype, target."""
    return {"op": sorted(OPS), "dtype": list(DTYPES), "target": target_names()}


def job_create_schema(schema: dict[str, Any]) -> None:
    """Complete the JSON schema pydantic writes for ``JobCreate``: the enums, the shape's two
    forms, and per op (``if`` op is X ``then``) its dims and dtypes."""
    properties = schema["properties"]
    for name, values in enums().items():
        properties[name]["enum"] = values
    examples = properties["shape"].get("examples")
    properties["shape"] = {
        **shape_schema(),
        "description": SHAPE_DESCRIPTION,
        **({"examples": examples} if examples else {}),
    }
    schema["allOf"] = [
        {
            "if": {"properties": {"op": {"const": spec.name}}, "required": ["op"]},
            "then": {
                "properties": {
                    "shape": shape_schema(spec),
                    "dtype": {"enum": list(spec.dtypes)},
                }
            },
        }
        for spec in map(get_op, sorted(OPS))
    ]


def with_settings_bounds(app: FastAPI, *, max_budget: int) -> None:
    """Serve a schema that also holds the bounds the settings set (the largest budget, a
    ``maximum`` of JobCreate's and BatchCreate's ``budget``): pydantic writes the models'
    fixed bounds only, and the schema is to carry what the server checks."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        schema = app.openapi_schema
        if schema is None:
            schema = plain()  # kept as app.openapi_schema: completed once, in place
            models = schema["components"]["schemas"]
            for model in ("JobCreate", "BatchCreate"):
                for branch in models[model]["properties"]["budget"].get("anyOf", []):
                    if branch.get("type") == "integer":
                        branch["maximum"] = min(branch.get("maximum", max_budget), max_budget)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
