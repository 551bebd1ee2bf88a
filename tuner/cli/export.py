"""``tilewise export``: a tiling table as versioned JSON or a C header."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from tilewise.cli._common import (
    AnyToolchainOpt,
    app,
    err,
    fail,
    output_path,
    settings_for,
    write_atomically,
)

FORMATS = ("json", "header")


@app.command("export")
def export(
    op: Annotated[str, typer.Argument(help="Op name, see `tilewise ops`.")],
    target: Annotated[
        str | None, typer.Option("--target", help="Only this target (default: all).")
    ] = None,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="Only this dtype (default: all).")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="json (for tilewise.runtime) or header (C).")
    ] = "json",
    output: Annotated[
        str, typer.Option("--output", "-o", help="File to write; - for stdout.")
    ] = "-",
    db: Annotated[
        str | None, typer.Option("--db", help="SQLAlchemy URL; default from settings.")
    ] = None,
    any_toolchain: AnyToolchainOpt = False,
) -> None:
    """Export OP's tiling table as versioned JSON or a C header for a host TilingFunc."""
    from tilewise import export as exporting
    from tilewise.errors import InputError, TilewiseError

    settings = settings_for(db)
    try:
        if fmt not in FORMATS:
            raise InputError(f"unknown format {fmt!r}; one of: {', '.join(FORMATS)}")
        exporting.canonical_filters(op, target, dtype)  # bad names fail before the DB
        path = output_path(output)
        from tilewise import store

        db_handle = store.open_store(settings.db_url, create=False)
        try:
            with db_handle.session() as session:
                doc = exporting.table_document(
                    session, op=op, target=target, dtype=dtype, any_toolchain=any_toolchain
                )
        finally:
            db_handle.close()
        if fmt == "json":
            text = exporting.dump_document(doc)
        else:
            text = exporting.render_header(doc, op=op)
        if path is None:
            sys.stdout.write(text)
        else:
            write_atomically(path, text)
    except TilewiseError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")
    stale = doc["toolchains"]["other_toolchain_entries"]
    if stale:
        err.print(
            f"included {stale} entries measured with another toolchain (stale)"
            if any_toolchain
            else f"left out {stale} entries measured with another toolchain (stale; "
            "--any-toolchain to include them)",
            markup=False,
            highlight=False,
        )
    if path is not None:
        count = len(doc["entries"])
        if fmt == "header":  # the header holds the op's current version only
            from tilewise.kernels.ops import get_op

            version = get_op(op).version
            count = sum(1 for e in doc["entries"] if e["op_version"] == version)
        err.print(
            f"wrote {count} entries of {op} ({fmt}) to {path}",
            markup=False,
            highlight=False,
        )
