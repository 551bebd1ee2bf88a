"""``tilewise ops``: the ops, their dims, dtypes and tunables."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Column, Table

from tilewise.cli._common import JsonOpt, app, out
from tilewise.types import Shape


@app.command()
def ops(as_json: JsonOpt = False) -> None:
    """List the ops with their dims, dtypes and tunables."""
    from tilewise.kernels.ops import list_ops
    from tilewise.kernels.targets import twin_target

    target = twin_target()
    rows: list[dict[str, Any]] = []
    for spec in list_ops():
        unit = Shape({d: 1024 for d in spec.dims})
        tunables = spec.tunables(unit, spec.dtypes[0], target)
        rows.append(
            {
                "op": spec.name,
                "summary": spec.summary,
                "dims": list(spec.dims),
                "dtypes": list(spec.dtypes),
                "tunables": [t.to_dict() for t in tunables],
            }
        )
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    # An op's name is what a user types next: never cut to fit (at 80 columns, when piped);
    # the lists wrap at their commas instead.
    widest = max((len(row["op"]) for row in rows), default=2)
    table = Table(
        Column("op", no_wrap=True, min_width=widest),
        "dims",
        "dtypes",
        "tunables (compile-time marked *)",
        title="tilewise ops",
    )
    for row in rows:
        names = ", ".join(t["name"] + ("*" if t["compile_time"] else "") for t in row["tunables"])
        table.add_row(row["op"], ", ".join(row["dims"]), ", ".join(row["dtypes"]), names)
    out.print(table)
