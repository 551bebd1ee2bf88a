"""``tilewise check``: the static verdict on one tiling, optionally confirmed by Huawei's
compiler."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from tilewise.cli._common import (
    DbOpt,
    DtypeOpt,
    ShapeOpt,
    TargetOpt,
    app,
    fail,
    settings_for,
    workload_request,
)
from tilewise.errors import InputError, TilewiseError


@app.command()
def check(
    op: Annotated[str, typer.Argument(help="Op name.")],
    shape: ShapeOpt,
    tiling: Annotated[str, typer.Option("--tiling", help='JSON, e.g. {"baseM": 128, ...}.')],
    dtype: DtypeOpt = "float32",
    target: TargetOpt = "cpu-twin",
    compiler: Annotated[
        bool, typer.Option("--compiler", help="Also run bishengir-compile on the UB plan.")
    ] = False,
    predict: Annotated[
        bool, typer.Option("--predict", help="Add the Ascend cost model's predicted time.")
    ] = False,
    db: DbOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Check one tiling: footprint per memory, limits, validity; no compile, no launch."""
    from tilewise.types import Tiling

    settings = settings_for(db)
    try:
        asked = workload_request(op, shape, dtype, target, settings)
        spec, parsed, dtype, profile = asked.spec, asked.shape, asked.dtype, asked.target
        chosen = Tiling(_parse_tiling(tiling))
        verdict = spec.check(chosen, parsed, dtype, profile)
        result: dict[str, Any] = verdict.to_dict()
        if compiler:
            from tilewise.kernels.backends import check_plan

            result["compiler"] = check_plan(spec, chosen, parsed, dtype, profile).to_dict()
        if predict:
            from tilewise.kernels.backends import predict as model

            result["predicted"] = model(spec, chosen, parsed, dtype, profile).to_dict()
    except TilewiseError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(result))
    else:
        typer.echo(f"valid: {result['valid']}")
        for reason in result["reasons"]:
            typer.echo(f"  - {reason}")
        for memory, used in result["footprint"].items():
            typer.echo(f"  {memory:>4}: {used:>8} B of {result['limits'][memory]} B")
        if "compiler" in result:
            typer.echo(f"compiler: {json.dumps(result['compiler'])}")
        if "predicted" in result:
            typer.echo(f"predicted (cost model, not measured): {json.dumps(result['predicted'])}")
    raise typer.Exit(0 if result["valid"] else 1)


def _parse_tiling(text: str) -> dict[str, int]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--tiling is not JSON: {exc.msg} at column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:
        # json.loads refuses some text without a JSONDecodeError: an integer of thousands of
        # digits (ValueError), deep nesting (RecursionError). Tracebacks before; found by the CLI
        # fuzz test.
        raise InputError(f"--tiling is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InputError("--tiling must be a JSON object of field: integer")
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, int):
            raise InputError(f"--tiling field {key} must be an integer, got {item!r}")
        if abs(item) > 1 << 31:
            raise InputError(f"--tiling field {key}={item} is out of range")
    return value
