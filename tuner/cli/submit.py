"""``tilewise submit``: send a manifest to a tilewise service as one batch, and with ``--wait``
follow it to the end and write the tiling table.

The manifest is checked here first (the same checks as the service's), then sent as
``POST /v1/batches``; ``--wait`` polls ``GET /v1/batches/{id}`` with a progress display (a
service that is away for a while, a restart, is waited for), prints each workload's outcome,
and with ``--export`` fetches the tiling table (``GET /v1/tables``, ``/v1/tables/{op}``) and
writes it atomically. Exit codes: 0 when every workload is tuned, 1 when one failed or was
cancelled (the others still ran; each failure is one ``error:`` line with its reason), 2 for
bad input or a service that refuses the manifest or cannot be reached.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tilewise.cli._common import (
    JsonOpt,
    ManifestArg,
    app,
    err,
    fail,
    output_path,
    print_table,
    report_failures,
    results_table,
    settings_for,
)
from tilewise.errors import InputError, StoreError, TilewiseError
from tilewise.files import write_atomically

if TYPE_CHECKING:
    import httpx

EXPORTS = ("header", "json")

#: A service that does not answer while --wait polls is asked again for this long.
UNREACHABLE_FOR_S = 300.0


@app.command("submit")
def submit(
    manifest_path: ManifestArg,
    url: Annotated[str, typer.Option("--url", help="The service, e.g. http://host:8000.")],
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow the batch until every workload is done.")
    ] = False,
    export: Annotated[
        str | None,
        typer.Option("--export", help="When done, write the tiling table: header or json."),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="The file --export writes; - for stdout."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Re-tune tuned workloads too.")] = False,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="Bearer token for writes; default: TILEWISE_API_TOKEN.",
            show_default=False,
        ),
    ] = None,
    poll: Annotated[float, typer.Option("--poll", min=0.05, help="Seconds between polls.")] = 2.0,
    as_json: JsonOpt = False,
) -> None:
    """Tune a manifest on a service as one batch; with --wait, exit code 1 if any failed."""
    from tilewise.manifest import load_manifest

    settings = settings_for(None)
    try:
        manifest = load_manifest(manifest_path)
        entries = manifest.entries(max_elements=settings.max_elements)
        path = _export_path(export, output)
        if path == "-" and as_json:
            raise InputError("--json and -o - would both write to stdout: name a file with -o")
        base = _base_url(url)
    except TilewiseError as exc:
        fail(str(exc))
    ops = list(dict.fromkeys(e.workload.op for e in entries))
    token = token if token is not None else settings.api_token
    client = _client(base, token)
    with client:
        body = {**manifest.to_document(), "force": force}
        batch = _answer(client, "POST", "/v1/batches", json=body, what="submit the manifest")
        try:  # from here on a Ctrl-C leaves a batch on the service: say where
            totals = batch["totals"]
            err.print(
                f"batch {batch['id']} on {base}: {totals['workloads']} workloads, "
                f"{totals['tuned']} tuned already, {totals['workloads'] - totals['tuned']} to "
                f"tune ({totals['budget']} evaluations)",
                highlight=False,
                soft_wrap=True,
            )
            if not (wait or export):
                if as_json:
                    print(json.dumps(batch))
                return
            _warn_unserved(client, batch)
            batch = _follow(client, batch, poll=poll)
        except KeyboardInterrupt:
            err.print(
                f"stopped following batch {batch['id']}: it goes on on the service "
                f"({base}/v1/batches/{batch['id']})",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(130) from None
        text = None if path is None else _table(client, ops, export or "json")
    rows = [_row(item) for item in batch["workloads"]]
    if len(rows) == len(entries):  # the service lists them as the manifest's entries
        for row, entry in zip(rows, entries, strict=True):
            row["where"] = entry.where
    if as_json:
        print(json.dumps(batch))
    else:
        title = f"batch {batch['id']} ({manifest.name or manifest_path}): {batch['status']}"
        # With the table on stdout, the results go to stderr.
        print_table(results_table(title, rows), console=err if path == "-" else None)
    if path is not None and text is not None:
        if path == "-":
            sys.stdout.write(text)
        else:
            try:
                write_atomically(path, text)
            except OSError as exc:
                fail(f"cannot write {path}: {exc.strerror or exc}")
        # One op's table, a header per op, or (JSON of several) the service's whole table.
        held = ", ".join(ops) if export == "header" or len(ops) == 1 else "every op it serves"
        where = "stdout" if path == "-" else path
        err.print(f"wrote the {export} table of {held} to {where}", highlight=False)
    if report_failures(rows):
        raise typer.Exit(1)


def _export_path(export: str | None, output: str | None) -> Path | Literal["-"] | None:
    """The file --export writes, "-" for stdout, None without --export."""
    if export is None:
        if output is not None:
            raise InputError("-o names the file of --export header|json: give --export too")
        return None
    if export not in EXPORTS:
        raise InputError(f"unknown --export {export!r}; one of: {', '.join(EXPORTS)}")
    if output is None:
        raise InputError(f"--export {export} needs -o FILE (- for stdout)")
    return output_path(output) or "-"


def _base_url(url: str) -> str:
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise InputError(f"--url {url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InputError(f"--url {url!r} is not an http(s) URL such as http://host:8000")
    return url.rstrip("/")


def _client(base: str, token: str | None) -> httpx.Client:
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=base, headers=headers, timeout=60.0)


def _answer(
    client: httpx.Client, method: str, path: str, *, what: str, **kwargs: Any
) -> dict[str, Any]:
    """The JSON answer of a request that must succeed; any failure ends the command (exit 2)."""
    import httpx

    try:
        response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        fail(f"cannot {what}: {client.base_url} does not answer: {exc}")
    if response.status_code >= 400:
        fail(f"cannot {what}: the service answered {response.status_code}: {_why(response)}")
    doc: dict[str, Any] = response.json()
    return doc


def _why(response: httpx.Response) -> str:
    """The service's reason: a 422's problems with their place in the manifest."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return response.text[:300]
    if isinstance(detail, list):
        from tilewise.manifest import where

        parts = []
        for problem in detail:
            loc = [p for p in problem.get("loc", []) if p != "body"]
            parts.append(f"{where(tuple(loc))}: {problem.get('msg')}")
        return "; ".join(parts)
    return str(detail)


#: A worker heard from within this many seconds serves its target.
ALIVE_WITHIN_S = 60.0


def _warn_unserved(client: httpx.Client, batch: dict[str, Any]) -> None:
    """Say so when a target of the batch's queued jobs has no live worker: they would wait
    until one starts."""
    import httpx

    waiting: dict[str, int] = {}
    for item in batch["workloads"]:
        if item["status"] == "queued":
            target = item["workload"]["target"]
            waiting[target] = waiting.get(target, 0) + 1
    if not waiting:
        return
    try:
        response = client.get("/v1/workers", params={"alive_within": ALIVE_WITHIN_S})
        alive = {w["target"] for w in response.json()} if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, TypeError, KeyError):
        alive = None
    for target, n in waiting.items():
        if alive is not None and target not in alive:
            err.print(
                f"warning: no worker of target {target} was heard from in the last"
                f" {ALIVE_WITHIN_S:.0f} s: its {n} workload(s) wait until one starts"
                f" (`tilewise worker --target {target}`)",
                highlight=False,
                soft_wrap=True,
            )


def _follow(client: httpx.Client, batch: dict[str, Any], *, poll: float) -> dict[str, Any]:
    """Poll the batch until it is done, showing its evaluations of its budget."""
    import httpx

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("evaluations | {task.fields[info]}"),
        TimeElapsedColumn(),
    )
    away_since: float | None = None
    with Progress(*columns, console=err) as bar:
        task = bar.add_task(f"batch {batch['id']}", total=batch["totals"]["budget"], info="")
        while True:
            t = batch["totals"]
            done = t["tuned"] + t["succeeded"] + t["failed"] + t["cancelled"]
            info = f"{done}/{t['workloads']} workloads done, {t['running']} running"
            if t["failed"] or t["cancelled"]:
                info += f", [red]{t['failed'] + t['cancelled']} failed[/red]"
            bar.update(task, completed=t["evaluations"], total=t["budget"], info=info)
            if batch["done"]:
                return batch
            time.sleep(poll)
            try:
                response = client.get(f"/v1/batches/{batch['id']}")
            except httpx.HTTPError as exc:
                response, reason = None, str(exc)
            if response is not None and response.status_code < 500:
                if response.status_code >= 400:
                    fail(f"cannot follow batch {batch['id']}: {_why(response)}")
                batch, away_since = response.json(), None
                continue
            if response is not None:
                reason = f"HTTP {response.status_code}: {_why(response)}"
            away_since = away_since or time.monotonic()
            if time.monotonic() - away_since > UNREACHABLE_FOR_S:
                raise StoreError(
                    f"the service stopped answering for {UNREACHABLE_FOR_S:.0f} s: {reason};"
                    f" the batch goes on there: GET {client.base_url}/v1/batches/{batch['id']}"
                )
            bar.console.print(f"the service does not answer ({reason}); asking again")


def _table(client: httpx.Client, ops: list[str], fmt: str) -> str:
    """The tiling table of ``ops``: the header of each op in turn (each is self-contained, with
    its own prefix and include guard), or the JSON document (of the op, or of every op)."""
    import httpx

    paths = (
        [f"/v1/tables/{op}" for op in ops] if fmt == "header" or len(ops) == 1 else ["/v1/tables"]
    )
    texts = []
    for path in paths:
        try:
            response = client.get(path, params={"format": fmt})
        except httpx.HTTPError as exc:
            fail(f"cannot fetch the {fmt} table: {client.base_url} does not answer: {exc}")
        if response.status_code != 200:
            fail(f"cannot fetch the {fmt} table ({path}): {response.status_code} {_why(response)}")
        texts.append(response.text)
    return "\n".join(texts)


def _row(item: dict[str, Any]) -> dict[str, Any]:
    w = item["workload"]
    shape = ",".join(f"{k}={v}" for k, v in sorted(w["shape"].items()))
    return {
        "where": f"workloads #{item['position']}",
        "op": w["op"],
        "dtype": w["dtype"],
        "target": w["target"],
        "shape": shape,
        "weight": item["weight"],
        "budget": item["budget"],
        "status": item["status"],
        "evaluations": item["evaluations"],
        "latency_us": item["latency_us"],
        "default_latency_us": item["default_latency_us"],
        "speedup": item["speedup"],
        "error": item["error"],
    }
