"""``tilewise show``: the stored best tiling of one workload."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from tilewise.cli._common import (
    DbOpt,
    DtypeOpt,
    JsonOpt,
    ShapeOpt,
    TargetOpt,
    app,
    fail,
    out,
    settings_for,
    workload_request,
)
from tilewise.errors import TilewiseError


@app.command()
def show(
    op: Annotated[str, typer.Argument(help="Op name.")],
    shape: ShapeOpt,
    dtype: DtypeOpt = "float32",
    target: TargetOpt = "cpu-twin",
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the stored best tiling of a workload."""
    from tilewise import store
    from tilewise.types import Workload

    settings = settings_for(db)
    try:
        asked = workload_request(op, shape, dtype, target, settings)
        spec, parsed, dtype, profile = asked.spec, asked.shape, asked.dtype, asked.target
        workload = Workload(spec.name, spec.version, profile.name, dtype, parsed)
        # create=False: a database that does not exist (a SQLite file not there, a mistyped
        # path) is an error naming it, not a database where nothing is tuned; none is created.
        db_handle = store.open_store(settings.db_url, create=False)
        try:
            with db_handle.session() as s:
                row = store.find_workload(s, key=workload.key)
                best = store.get_tiling(s, workload_id=row.id) if row else None
        finally:
            db_handle.close()
    except TilewiseError as exc:
        fail(str(exc))
    if best is None:
        # What a model calling the op would get for this shape: the runtime's own answer.
        from tilewise.runtime import TilingTable

        try:
            table = TilingTable.from_db(settings.db_url, op=spec.name, target=profile.name)
            answer = table.lookup(spec.name, target=profile.name, dtype=dtype, shape=parsed)
        except TilewiseError as exc:
            fail(str(exc))
        if as_json:
            doc = {"workload": workload.to_dict(), "tuned": False, "runtime": answer.to_dict()}
            print(json.dumps(doc))
        else:
            out.print(
                f"{spec.name} {parsed} {dtype} on {profile.name}: not tuned "
                f"(run `tilewise tune {spec.name} --shape {parsed.key()}`)"
            )
            tuned = answer.workload.shape.key() if answer.workload is not None else None
            gain = answer.predicted_gain
            origin = {
                "chosen": f"the tiling tuned for {tuned}, re-derived for this shape, predicted "
                f"{gain}x the default's speed by the table's model",
                "predicted_default": "this shape's default: no tuned shape's tiling was "
                "predicted faster by more than the table's model's error",
                "carried": f"the tiling tuned for {tuned}, re-derived for this shape",
                "kept_default": f"this shape's default: the nearest tuned shape ({tuned}) kept "
                "its default",
                "measured_slower": f"this shape's default: the tiling tuned for {tuned} measured "
                "slower than the default at other shapes",
            }.get(answer.rule, "the op's default heuristic (no tuned shape of the op fits)")
            away = f" (log2 distance {answer.distance:.2f})" if tuned is not None else ""
            out.print(
                f"the runtime answers {answer.source}: {origin}{away}: "
                f"{json.dumps(dict(answer.tiling))}"
            )
        raise typer.Exit(1)
    result = {
        "workload": workload.to_dict(),
        "tuned": True,
        "tiling": dict(best.tiling),
        "latency_us": best.latency_us,
        "default_latency_us": best.default_latency_us,
        "speedup": best.speedup,
        "evaluations": best.evaluations,
    }
    if as_json:
        print(json.dumps(result))
    else:
        speed = f"{best.speedup:.2f}x" if best.speedup else "n/a"
        out.print(
            f"{spec.name} {parsed} {dtype} on {profile.name}: {json.dumps(dict(best.tiling))}"
        )
        out.print(
            f"latency {best.latency_us:.1f} us, speedup over default {speed}, "
            f"{best.evaluations} evaluations"
        )
