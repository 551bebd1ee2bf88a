"""``tilewise records``: one workload's records, as JSON or as a space ``tune replay`` reads."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from tilewise.cli._common import (
    DbOpt,
    DtypeOpt,
    ShapeOpt,
    TargetOpt,
    app,
    err,
    fail,
    output_path,
    settings_for,
    workload_request,
)
from tilewise.errors import InputError, TilewiseError
from tilewise.files import write_atomically


@app.command()
def records(
    op: Annotated[str, typer.Argument(help="Op name.")],
    shape: ShapeOpt,
    dtype: DtypeOpt = "float32",
    target: TargetOpt = "cpu-twin",
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="json (every record) or csv (the measured tilings as a space for "
            "`tilewise tune replay --space FILE.csv`).",
        ),
    ] = "json",
    output: Annotated[
        str, typer.Option("--output", "-o", help="File to write; - for stdout.")
    ] = "-",
    db: DbOpt = None,
) -> None:
    """Export the records of one workload: every tiling tried, its status and latency."""
    from tilewise import store
    from tilewise.records import FORMATS, records_csv, records_document

    settings = settings_for(db)
    try:
        if fmt not in FORMATS:
            raise InputError(f"unknown format {fmt!r}; one of: {', '.join(FORMATS)}")
        asked = workload_request(op, shape, dtype, target, settings)
        path = output_path(output)
        db_handle = store.open_store(settings.db_url, create=False)
        try:
            with db_handle.session() as s:
                row = store.find_workload(s, key=asked.workload.key)
                found = store.records_for(s, workload_id=row.id) if row is not None else []
        finally:
            db_handle.close()
        if row is None or not found:
            err.print(
                f"{asked.spec.name} {asked.shape} {asked.dtype} on {asked.target.name}: "
                "no records (not tuned)",
                markup=False,
                highlight=False,
            )
            raise typer.Exit(1)
        if fmt == "json":
            text = json.dumps(records_document(row, found), indent=1) + "\n"
        else:
            text = records_csv(row, found)
        if path is None:
            sys.stdout.write(text)
        else:
            write_atomically(path, text)
    except TilewiseError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")
    if path is not None:
        # The CSV is the recorded space: one row per measured tiling, without the re-measures.
        what = f"{len(found)} records" if fmt == "json" else f"{text.count(chr(10)) - 1} tilings"
        err.print(f"wrote {what} ({fmt}) to {path}", markup=False, highlight=False)
