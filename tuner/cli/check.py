"""``tilewise check``: the static verdict on one tiling, optionally confirmed by Huawei's
compiler, or run on the target (``--run``) as the tuner runs a tiling."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

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
from tilewise.errors import InputError, TilewiseError, did_you_mean

if TYPE_CHECKING:
    from tilewise.kernels.request import WorkloadRequest
    from tilewise.search import Attempt
    from tilewise.settings import Settings
    from tilewise.types import Tiling

#: ``--tiling default``: the op's default tiling for the shape.
DEFAULT = "default"


@app.command()
def check(
    op: Annotated[str, typer.Argument(help="Op name.")],
    shape: ShapeOpt,
    tiling: Annotated[
        str,
        typer.Option(
            "--tiling",
            help='JSON, e.g. {"baseM": 128, ...}: the fields not given are the default '
            "tiling's for the shape. `default`: the default tiling.",
        ),
    ],
    dtype: DtypeOpt = "float32",
    target: TargetOpt = "cpu-twin",
    compiler: Annotated[
        bool, typer.Option("--compiler", help="Also run bishengir-compile on the UB plan.")
    ] = False,
    predict: Annotated[
        bool, typer.Option("--predict", help="Add the Ascend cost model's predicted time.")
    ] = False,
    run: Annotated[
        bool,
        typer.Option(
            "--run",
            help="Also build it, check its output against the reference and time it on the "
            "target, as the tuner measures (median and spread of the settings' repeats).",
        ),
    ] = False,
    db: DbOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Check one tiling: footprint per memory, limits, validity; no compile, no launch unless
    --run."""
    settings = settings_for(db)
    try:
        asked = workload_request(op, shape, dtype, target, settings)
        spec, parsed, dtype, profile = asked.spec, asked.shape, asked.dtype, asked.target
        chosen, from_default = _complete(asked, tiling)
        verdict = spec.check(chosen, parsed, dtype, profile)
        result: dict[str, Any] = verdict.to_dict()
        result["tiling"] = dict(chosen)
        result["from_default"] = from_default
        if compiler:
            from tilewise.kernels.backends import check_plan

            result["compiler"] = check_plan(spec, chosen, parsed, dtype, profile).to_dict()
        if predict:
            from tilewise.kernels.backends import predict as model

            result["predicted"] = model(spec, chosen, parsed, dtype, profile).to_dict()
        if run:  # an invalid tiling is not built: the static check is the tuner's first stage
            result["run"] = _run_dict(_attempt(asked, chosen, settings)) if verdict.valid else None
    except TilewiseError as exc:
        fail(str(exc))
    ran = result.get("run")
    if as_json:
        print(json.dumps(result))
    else:
        _print(result, from_default, profile.name)
    ok = result["valid"] and (ran is None or ran["status"] == "ok")
    raise typer.Exit(0 if ok else 1)


def _print(result: dict[str, Any], from_default: dict[str, int], target: str) -> None:
    typer.echo(f"valid: {result['valid']}")
    if from_default:
        filled = ", ".join(f"{k}={v}" for k, v in from_default.items())
        typer.echo(f"  from the default tiling for this shape: {filled}")
    for reason in result["reasons"]:
        typer.echo(f"  - {reason}")
    for memory, used in result["footprint"].items():
        typer.echo(f"  {memory:>4}: {used:>8} B of {result['limits'][memory]} B")
    if "compiler" in result:
        typer.echo(f"compiler: {json.dumps(result['compiler'])}")
    if "predicted" in result:
        typer.echo(f"predicted (cost model, not measured): {json.dumps(result['predicted'])}")
    if "run" not in result:
        return
    ran = result["run"]
    if ran is None:
        typer.echo(f"run on {target}: not run, the static check refused the tiling")
        return
    if ran["status"] != "ok":
        typer.echo(f"run on {target}: {ran['status']} at the {ran['stage']} stage: {ran['error']}")
        return
    error = ran["max_error"]
    checked = f"max |error| {error:.3g}" if error is not None else "checked"
    typer.echo(f"run on {target}: ok, output matches the reference ({checked})")
    spread = f"{100 * ran['spread']:.1f}%" if ran["spread"] is not None else "n/a"
    typer.echo(
        f"latency: median {ran['latency_us']:.1f} us over {len(ran['samples_us'])} runs, "
        f"spread {spread} (interquartile range over the median)"
    )


def _complete(asked: WorkloadRequest, text: str) -> tuple[Tiling, dict[str, int]]:
    """The tiling ``--tiling`` asks for, its missing fields taken from the op's default tiling
    for the shape; and those fields with their values."""
    from tilewise.types import Tiling

    spec, shape, dtype, target = asked.spec, asked.shape, asked.dtype, asked.target
    default = spec.default_tiling(shape, dtype, target)
    if text.strip() == DEFAULT:
        return default, {}
    given = _parse_tiling(text)
    tunables = spec.tunables(shape, dtype, target)
    names = [t.name for t in tunables]
    for key in given:
        if key not in names:
            raise InputError(
                f"--tiling: {spec.name} has no field {key!r}{did_you_mean(key, names)}; "
                f"its fields: {', '.join(names)}"
            )
    for tunable in tunables:  # as a loaded table's entries are checked
        value = given.get(tunable.name)
        outside = None if value is None else tunable.outside(value)
        if outside:
            raise InputError(f"--tiling: {outside}")
    from_default = {k: v for k, v in default.items() if k not in given}
    return Tiling({**default, **given}), from_default


def _attempt(asked: WorkloadRequest, tiling: Tiling, settings: Settings) -> Attempt:
    """The tiling built, launched (its output checked) and timed on the target's backend, as
    the tuner does it; nothing is recorded."""
    from tilewise.kernels.backends import create_backend
    from tilewise.search import Measurer

    # On an Ascend target without CANN this is the error that names what to install.
    with create_backend(asked.target.backend, settings=settings, target=asked.target) as backend:
        measurer = Measurer(
            spec=asked.spec,
            shape=asked.shape,
            dtype=asked.dtype,
            target=asked.target,
            backend=backend,
            settings=settings,
        )
        return measurer.attempt(tiling)


def _run_dict(attempt: Attempt) -> dict[str, Any]:
    run = attempt.run
    return {
        "status": str(attempt.status),
        "stage": attempt.stage,
        "error": attempt.error,
        "latency_us": attempt.latency_us,
        "spread": run.spread if run is not None and run.ok else None,
        "samples_us": list(run.samples_us) if run is not None else [],
        "max_error": run.max_error if run is not None else None,
    }


def _parse_tiling(text: str) -> dict[str, int]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"--tiling is not JSON ({exc.msg} at column {exc.colno}) nor `{DEFAULT}`"
        ) from None
    except (ValueError, RecursionError) as exc:
        # json.loads refuses some text without a JSONDecodeError: an integer of thousands of
        # digits (ValueError), deep nesting (RecursionError).
        raise InputError(f"--tiling is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InputError("--tiling must be a JSON object of field: integer")
    if not value:
        raise InputError(f"--tiling {{}} sets no field: give at least one, or `{DEFAULT}`")
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, int):
            raise InputError(f"--tiling field {key} must be an integer, got {item!r}")
        if abs(item) > 1 << 31:
            raise InputError(f"--tiling field {key}={item} is out of range")
    return value
