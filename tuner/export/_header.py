"""The C header of one op's tiling table (see :mod:`tilewise.export` and the comment the header
starts with)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tilewise import __version__
from tilewise.errors import InputError
from tilewise.export._document import (
    FORMAT,
    FORMAT_VERSION,
    TableEntry,
    TableFormatError,
    checked_entry,
    is_default_tiling,
    load_entries,
)
from tilewise.types import MAX_DIM, Shape, Tiling

if TYPE_CHECKING:
    import jinja2

_log = logging.getLogger("tilewise.export")


def _c_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", text).lower()


def shape_order_key(shape: Mapping[str, int], dims: Sequence[str]) -> tuple[int, ...]:
    """Shapes as tuples in the op's dims order: their sort order breaks distance ties."""
    return tuple(shape[d] for d in dims)


def render_header(doc: Mapping[str, Any], *, op: str) -> str:
    """A C99/C++11 header with ``op``'s entries of the op's current version; see its comment.

    Raises:
        TableFormatError: ``doc`` is not a valid document.
        InputError: unknown op, or entries whose tiling fields are not the op's tunables.
    """
    from tilewise.kernels.ops import CARRY_C_HELPERS, c_dim, get_op
    from tilewise.kernels.targets import get_target

    spec = get_op(op)
    loaded = load_entries(doc, source="tiling table")
    if loaded.rejected:
        # Generated C is not a place to leave a row out quietly: the header is refused.
        raise TableFormatError(f"tiling table: {loaded.rejected[0]}")
    all_entries = [e for e in loaded.entries if e.op == op]
    entries = [e for e in all_entries if e.op_version == spec.version]
    stale = len(all_entries) - len(entries)
    dims = spec.dims
    upper = _c_name(op).upper()
    prefix = f"tilewise_{_c_name(op)}"

    groups: dict[tuple[str, str], list[TableEntry]] = {}
    for e in entries:
        groups.setdefault((e.target, e.dtype), []).append(e)
    fields: list[str] | None = None
    relatives: dict[int, Tiling] = {}
    defaults: dict[int, bool] = {}
    for (target, dtype), group in groups.items():
        spec.validate_dtype(dtype)
        if get_target(target).name != target:  # names go into C strings: only canonical ones
            raise InputError(f"{op}: target {target!r} is not a canonical target name")
        names = [t.name for t in spec.tunables(group[0].shape, dtype, get_target(target))]
        if fields is None:
            fields = names
        for e in group:
            if set(e.tiling) != set(names) or names != fields:
                raise InputError(
                    f"{op} {e.target} {e.dtype} {e.shape}: tiling fields "
                    f"{', '.join(sorted(e.tiling))} are not the op's tunables {', '.join(names)}"
                )
            if set(e.shape) != set(dims):
                raise InputError(f"{op}: entry shape {e.shape} does not have the dims {dims}")
            spec.validate_shape(e.shape)
            # As a TilingTable loads it, values outside their domains refused.
            relatives[id(e)] = checked_entry(e, spec, get_target(target))
            is_default = e.is_default if e.is_default is not None else is_default_tiling(e)
            defaults[id(e)] = is_default or bool(e.carry_slower)
    if fields is None:
        from tilewise.kernels.targets import twin_target

        unit = Shape({d: 1024 for d in dims})
        fields = [t.name for t in spec.tunables(unit, spec.dtypes[0], twin_target())]
    generated_at = str(doc.get("generated_at", "?"))
    if not re.fullmatch(r"[0-9A-Za-z:+.\- ]{1,40}", generated_at):
        generated_at = "?"

    def braces(items: Iterable[object]) -> str:  # a C initializer
        return "{" + ", ".join(str(x) for x in items) + "}"

    def row(e: TableEntry) -> str:
        logs = (repr(spec.log_position(d, e.shape[d])) for d in dims)
        relative = relatives[id(e)]
        return braces(
            (
                braces(e.shape[d] for d in dims),
                braces(logs),
                braces(e.tiling[f] for f in fields),
                braces(relative[f] for f in fields),
                int(defaults[id(e)]),
            )
        )

    grids = {
        (c.target, c.dtype): c
        for c in loaded.choices
        if c.op == op and c.op_version == spec.version and len(c.low) == len(dims)
    }

    def grid(target: str, dtype: str, rows: list[TableEntry]) -> dict[str, str] | None:
        """The choice grid's C initializers, its cells as row indices (-1: the default)."""
        choice = grids.get((target, dtype))
        if choice is None:
            return None
        where = {shape_order_key(e.shape, dims): i for i, e in enumerate(rows)}
        index = [
            where.get(shape_order_key(s, dims)) if set(s) == set(dims) else None
            for s in choice.shapes
        ]
        if None in index:
            # As the runtime does (Group._index_choice): the grid is not used, and the header
            # answers by the nearest rule, so that both give the same answers.
            _log.warning(
                "%s %s %s: the choice grid names a shape not in the table: answering by the "
                "nearest rule",
                op,
                target,
                dtype,
            )
            return None
        return {
            "low": braces(choice.low),
            "size": braces(choice.size),
            "cells": braces(-1 if c < 0 else index[c] for c in choice.cells),
            "model": str(choice.model.get("kind", "?")),
        }

    def carry_lines(target: str, dtype: str) -> list[str]:
        rules = spec.carry_rules(dtype, get_target(target))
        if list(rules.fields) != fields:
            raise InputError(f"{op}: the carry rules' fields are not the tiling's")
        return rules.c_lines(spec.c_extents)

    portfolios = _portfolios(doc, spec, fields, dims)
    # A portfolio answers its group's shapes (as in Python's runtime): it needs no entries.
    for key in portfolios:
        groups.setdefault(key, [])
    idents = {(t, d): f"{_c_name(t)}_{_c_name(d)}" for t, d in groups}
    if len(set(idents.values())) != len(idents):
        raise InputError(f"{op}: target/dtype names collide once made C identifiers")
    return _template().render(
        op=op,
        version=__version__,
        op_version=spec.version,
        format=FORMAT,
        format_version=FORMAT_VERSION,
        generated_at=generated_at,
        n_entries=len(entries),
        stale=stale,
        upper=upper,
        prefix=prefix,
        dims=dims,
        fields=fields,
        # In code the dims are named dim_<name>: a bare dim name may be a macro of the host's
        # headers (<complex.h> defines I).
        dim_names=", ".join(dims),
        dim_args=", ".join(c_dim(d) for d in dims),
        dim_params=", ".join(f"int64_t {c_dim(d)}" for d in dims),
        least_init=braces(spec.dim_floors.get(d, 1) for d in dims),
        asked_init=braces(c_dim(d) for d in dims),
        carry_helpers=CARRY_C_HELPERS,
        max_dim=MAX_DIM,
        # Asked for a portfolio, the header has its functions even where no group has one yet
        # (they answer -1 and 0): a host written against them builds before anything is tuned.
        portfolio=_portfolio_note(doc) if portfolios or doc.get("portfolio") else None,
        groups=[
            {
                "target": target,
                "dtype": dtype,
                "ident": idents[(target, dtype)],
                "rows": [row(e) for e in rows],
                "carry": carry_lines(target, dtype),
                "grid": grid(target, dtype, rows),
                "portfolio": portfolios.get((target, dtype)),
            }
            for (target, dtype), rows in sorted(
                (k, sorted(g, key=lambda e: shape_order_key(e.shape, dims)))
                for k, g in groups.items()
            )
        ],
    )


def _portfolios(
    doc: Mapping[str, Any], spec: Any, fields: list[str], dims: Sequence[str]
) -> dict[tuple[str, str], dict[str, Any]]:
    """The template data of the document's portfolio groups of the op's current version (see
    :mod:`tilewise.export._portfolio_doc`), by (target, dtype).

    Raises:
        TableFormatError: a malformed portfolio section, or two portfolios of one group.
        InputError: an unknown or not canonical target, a dtype the op does not take, members
            whose fields are not the tiling's, shapes the op does not take.
    """
    from tilewise.export._portfolio_doc import check_domains, load_portfolio
    from tilewise.kernels.targets import get_target

    out: dict[tuple[str, str], dict[str, Any]] = {}
    for i, g in enumerate(load_portfolio(doc)):
        if g.op != spec.name or g.op_version != spec.version:
            continue
        where = f"portfolio.groups[{i}]"
        if get_target(g.target).name != g.target:  # names go into C strings: only canonical ones
            raise InputError(f"{where}: target {g.target!r} is not a canonical target name")
        spec.validate_dtype(g.dtype)
        if (g.target, g.dtype) in out:
            raise TableFormatError(
                f"{where}: a second portfolio for {spec.name} {g.target} {g.dtype}"
            )
        members, defaults = [], []
        for m in g.members:
            if m is not None and set(m) != set(fields):
                raise InputError(
                    f"{spec.name} portfolio: member fields {', '.join(sorted(m))} are not the "
                    f"op's tunables {', '.join(fields)}"
                )
            members.append("{" + ", ".join(str(0 if m is None else m[f]) for f in fields) + "}")
            defaults.append(int(m is None))
        for shape in g.shapes:
            spec.validate_shape(shape)
        check_domains(g, spec, get_target(g.target), where)
        rows = []
        tilings = g.tilings or (None,) * len(g.shapes)
        for shape, member, tiling in sorted(
            zip(g.shapes, g.member_of, tilings, strict=True),
            key=lambda x: shape_order_key(x[0], dims),
        ):
            spec.validate_shape(shape)
            logs = ", ".join(repr(spec.log_position(d, shape[d])) for d in dims)
            if tiling is not None and set(tiling) != set(fields):
                raise InputError(f"{spec.name} portfolio: a tuned shape's tiling fields differ")
            at = "{" + ", ".join(str(0 if tiling is None else tiling[f]) for f in fields) + "}"
            rows.append(
                "{{" + ", ".join(str(shape[d]) for d in dims) + "}, {" + logs + f"}}, {member}, "
                f"{int(tiling is not None)}, {at}}}"
            )
        out[(g.target, g.dtype)] = {
            "members": members,
            "defaults": "{" + ", ".join(map(str, defaults)) + "}",
            "rows": rows,
        }
    return out


def _portfolio_note(doc: Mapping[str, Any]) -> dict[str, str]:
    """The k and within the header's portfolio comment names (numbers only)."""
    raw = doc.get("portfolio") or {}
    k, within = raw.get("k"), raw.get("within")
    return {
        "k": str(k) if isinstance(k, int) and not isinstance(k, bool) else "?",
        "within_pct": (
            f"{within * 100:g}"
            if isinstance(within, int | float) and not isinstance(within, bool)
            else "?"
        ),
    }


@cache
def _template() -> jinja2.Template:
    import jinja2  # at first use: the runtime imports this module and never renders C

    templates = Path(__file__).parent.parent / "templates"
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # C, not HTML
    )
    environment.filters["c_name"] = _c_name
    return environment.get_template("tiling_table.h.j2")
