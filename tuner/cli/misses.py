"""``tilewise misses``: the shapes a service answered without an exact entry, most asked first,
as a table, JSON, or a tuning manifest (weights = how often each was asked) for ``tilewise
submit`` or ``tilewise tune-set``.

They come from the service (``--url``: ``GET /v1/misses``) or from its database (``--db``, the
settings' by default: ``tw_misses``). Shapes tuned since are left out unless
``--include-tuned``. Exit code 1 when there is no shape to list (no manifest written; JSON
lists none).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from tilewise.cli._common import (
    DbOpt,
    app,
    err,
    fail,
    print_table,
    settings_for,
)
from tilewise.errors import InputError, StoreError, TilewiseError

FORMATS = ("table", "json", "manifest")


@app.command("misses")
def misses(
    url: Annotated[
        str | None, typer.Option("--url", help="Ask this service (GET /v1/misses).")
    ] = None,
    db: DbOpt = None,
    op: Annotated[str | None, typer.Option("--op", help="Only this op.")] = None,
    target: Annotated[str | None, typer.Option("--target", help="Only this target.")] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="Only this dtype.")] = None,
    include_tuned: Annotated[
        bool, typer.Option("--include-tuned", help="Also shapes tuned since.")
    ] = False,
    min_count: Annotated[
        int, typer.Option("--min-count", min=1, help="Only shapes asked this often.")
    ] = 1,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", min=1, max=100_000, help="At most this many shapes, most asked first."
        ),
    ] = 1000,
    fmt: Annotated[str, typer.Option("--format", help="table, json or manifest.")] = "table",
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="The manifest's file (.yaml or .json).")
    ] = None,
    budget: Annotated[
        int | None, typer.Option("--budget", min=1, help="Manifest: evaluations per workload.")
    ] = None,
    total_budget: Annotated[
        int | None, typer.Option("--total-budget", min=1, help="Manifest: spread by weight.")
    ] = None,
) -> None:
    """List the shapes a service answered without a tuned entry, or write them as a manifest."""
    from tilewise.manifest import manifest_of

    try:
        if fmt not in FORMATS:
            raise InputError(f"unknown --format {fmt!r}; one of: {', '.join(FORMATS)}")
        if output is not None and fmt != "manifest":
            raise InputError("-o writes a manifest: give --format manifest")
        if url is not None and db is not None:
            raise InputError("--url or --db, not both")
        if budget is not None and total_budget is not None:
            raise InputError("--budget (per workload) or --total-budget, not both")
        if (budget is not None or total_budget is not None) and fmt != "manifest":
            raise InputError("--budget and --total-budget are a manifest's: give --format manifest")
        path = None if output is None else Path(output).expanduser()
        if path is not None and not path.parent.is_dir():
            raise InputError(f"cannot write {path}: no directory {path.parent}")
        filters = _filters(op, target, dtype)
        rows = (
            _from_service(url, filters, include_tuned=include_tuned, limit=limit)
            if url is not None
            else _from_db(settings_for(db).db_url, filters, include_tuned, limit)
        )
    except TilewiseError as exc:
        fail(str(exc))
    rows = [r for r in rows if r["count"] >= min_count]
    if fmt == "json":
        print(json.dumps({"misses": rows}))
        if not rows:  # as the table's: exit code 1 when there is no shape to list
            raise typer.Exit(1)
        return
    if not rows or (fmt == "manifest" and all(r["tuned"] for r in rows)):
        err.print("no untuned shape was asked (of these filters)", highlight=False)
        raise typer.Exit(1)
    if fmt == "table":
        print_table(_table(rows, tuned=include_tuned))
        return
    try:
        manifest = manifest_of(
            (
                (r["op"], r["target"], r["dtype"], r["shape"], r["count"])
                for r in rows
                if not r["tuned"]
            ),
            name="shapes asked without an exact entry",
            budget=budget,
            total_budget=total_budget,
        )
    except TilewiseError as exc:  # a total budget below the shapes: tune-set would refuse it
        fail(str(exc))
    if path is None:
        print(manifest.dumps(), end="")
        return
    try:
        manifest.write(path)
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or exc}")
    shapes = sum(len(g.shapes) for g in manifest.workloads)
    err.print(f"wrote a manifest of {shapes} shapes to {path}", highlight=False)


def _filters(op: str | None, target: str | None, dtype: str | None) -> dict[str, str]:
    """The filters with canonical names; an unknown one is an InputError."""
    from tilewise.errors import did_you_mean
    from tilewise.kernels.ops import get_op
    from tilewise.kernels.targets import get_target
    from tilewise.types import DTYPE_ALIASES, DTYPES

    found = {}
    if op is not None:
        found["op"] = get_op(op).name
    if target is not None:
        found["target"] = get_target(target).name
    if dtype is not None:
        if dtype not in DTYPES:
            hint = did_you_mean(dtype, DTYPES, aliases=DTYPE_ALIASES)
            raise InputError(f"unknown dtype {dtype!r}{hint}; one of {', '.join(DTYPES)}")
        found["dtype"] = dtype
    return found


def _from_service(
    url: str, filters: dict[str, str], *, include_tuned: bool, limit: int
) -> list[dict[str, Any]]:
    import httpx

    params: dict[str, Any] = {**filters, "limit": limit, "include_tuned": include_tuned}
    where = url.rstrip("/") + "/v1/misses"
    try:
        response = httpx.get(where, params=params, timeout=60.0)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise StoreError(f"cannot ask {where}: {exc}") from exc
    if response.status_code != 200:
        raise StoreError(f"cannot ask {where}: HTTP {response.status_code} {response.text[:300]}")
    rows: list[dict[str, Any]] = response.json()["misses"]
    return rows


def _from_db(
    url: str, filters: dict[str, str], include_tuned: bool, limit: int
) -> list[dict[str, Any]]:
    from tilewise import store
    from tilewise.kernels.backends import current_toolchain_ids
    from tilewise.kernels.ops import OPS, get_op

    db = store.open_store(url, create=False)
    try:
        versions = {name: get_op(name).version for name in OPS}
        op, target, dtype = (filters.get(k) for k in ("op", "target", "dtype"))
        with db.session() as s:
            untuned = store.list_misses(
                s,
                op=op,
                target=target,
                dtype=dtype,
                untuned=versions,
                toolchains=current_toolchain_ids(store.workload_targets(s)),
                limit=limit,
            )
            if include_tuned:
                rows = store.list_misses(s, op=op, target=target, dtype=dtype, limit=limit)
            else:
                rows = untuned
    finally:
        db.close()
    open_ = {(m.op, m.target, m.dtype, m.shape) for m in untuned}
    return [
        {
            "op": m.op,
            "target": m.target,
            "dtype": m.dtype,
            "shape": dict(m.shape),
            "count": m.count,
            "source": m.source,
            "tuned": (m.op, m.target, m.dtype, m.shape) not in open_,
            "first_at": m.first_at.isoformat(),
            "last_at": m.last_at.isoformat(),
        }
        for m in rows
    ]


def _table(rows: list[dict[str, Any]], *, tuned: bool) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title="shapes asked without an exact entry, most asked first",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for name in ("op", "target", "dtype", "shape", "asked", "answered with", "last asked (UTC)"):
        table.add_column(name, justify="right" if name == "asked" else "left", no_wrap=True)
    if tuned:
        table.add_column("tuned since")
    for r in rows:
        shape = ",".join(f"{k}={v}" for k, v in r["shape"].items())
        last = datetime.fromisoformat(r["last_at"].replace("Z", "+00:00"))
        cells = [r["op"], r["target"], r["dtype"], shape, str(r["count"]), r["source"]]
        cells.append(last.strftime("%Y-%m-%d %H:%M:%S"))
        table.add_row(*cells, *(["yes" if r["tuned"] else ""] if tuned else []))
    return table
