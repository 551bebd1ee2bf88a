"""The dashboard's filters and sort orders: which query parameters its pages take, their checks
(a bad value is a 422 naming the parameter), and the links that change them.

Everything is a plain link or a form that submits with GET: the pages need no JavaScript.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any, Protocol, TypeVar
from urllib.parse import urlencode

from fastapi import Query

from tilewise.api.axes import SCALES, Scale
from tilewise.api.deps import blame
from tilewise.api.errors import FieldError
from tilewise.errors import did_you_mean
from tilewise.kernels.ops import OPS, get_op
from tilewise.kernels.targets import get_target, list_targets
from tilewise.store import TilingRow, WorkloadRow
from tilewise.types import DTYPES

#: sort key -> its order when first chosen (the best first: fastest, largest speedup, newest).
SORTS: dict[str, str] = {"op": "asc", "speedup": "desc", "latency": "asc", "updated": "desc"}
ORDERS = ("asc", "desc")


class Listed(Protocol):
    @property
    def workload(self) -> WorkloadRow: ...

    @property
    def tiling(self) -> TilingRow: ...


R = TypeVar("R", bound=Listed)


@dataclass(frozen=True)
class Filters:
    """What the index's table of best tilings shows: ``None`` = every op, target, dtype."""

    op: str | None = None
    target: str | None = None
    dtype: str | None = None
    sort: str = "op"
    order: str = "asc"

    def query(self, **changes: Any) -> str:
        """The query string of these filters with ``changes`` (defaults left out)."""
        changed = replace(self, **changes)
        params = {
            "op": changed.op,
            "target": changed.target,
            "dtype": changed.dtype,
            "sort": None if changed.sort == "op" and changed.order == "asc" else changed.sort,
            "order": None if changed.order == SORTS[changed.sort] else changed.order,
        }
        text = urlencode({k: v for k, v in params.items() if v})
        return f"?{text}" if text else "?"

    def sort_link(self, key: str) -> str:
        """Sort by ``key``: its first order, or the other one when it is already the sort."""
        if key == self.sort:
            return self.query(order="desc" if self.order == "asc" else "asc")
        return self.query(sort=key, order=SORTS[key])

    def arrow(self, key: str) -> str:
        return ("▲" if self.order == "asc" else "▼") if key == self.sort else ""

    @property
    def active(self) -> bool:
        return any((self.op, self.target, self.dtype))


def _op(value: str | None) -> str | None:
    if not value:
        return None
    with blame("query", "op"):
        return get_op(value).name


def _target(value: str | None) -> str | None:
    if not value:
        return None
    with blame("query", "target"):
        return get_target(value).name


def _dtype(value: str | None) -> str | None:
    if not value:
        return None
    if value not in DTYPES:
        raise FieldError(
            ("query", "dtype"),
            f"unknown dtype {value!r}{did_you_mean(value, DTYPES)}; one of {', '.join(DTYPES)}",
        )
    return value


def _choice(name: str, value: str | None, choices: Sequence[str]) -> str | None:
    if not value:
        return None
    if value not in choices:
        raise FieldError(
            ("query", name),
            f"unknown {name} {value!r}{did_you_mean(value, choices)}; one of {', '.join(choices)}",
        )
    return value


Text = Annotated[str | None, Query()]


def filters(
    op: Text = None,
    target: Text = None,
    dtype: Text = None,
    sort: Text = None,
    order: Text = None,
) -> Filters:
    """The index's ``?op=&target=&dtype=&sort=&order=``; an empty value is no filter."""
    key = _choice("sort", sort, tuple(SORTS)) or "op"
    return Filters(
        _op(op),
        _target(target),
        _dtype(dtype),
        key,
        _choice("order", order, ORDERS) or SORTS[key],
    )


def op_filters(target: Text = None, dtype: Text = None) -> Filters:
    """A per-op page's ``?target=&dtype=``."""
    return Filters(target=_target(target), dtype=_dtype(dtype))


def scale(scale: Text = None) -> Scale:
    """A chart's ``?scale=linear|log`` (linear when absent)."""
    return "log" if _choice("scale", scale, SCALES) == "log" else "linear"


def apply(rows: Sequence[R], f: Filters) -> list[R]:
    """``rows`` (in the store's order: op, target, dtype, shape) filtered and sorted by ``f``.
    Rows without a speedup (no default measured) come last in either order."""
    kept = [
        r
        for r in rows
        if (f.op is None or r.workload.op == f.op)
        and (f.target is None or r.workload.target == f.target)
        and (f.dtype is None or r.workload.dtype == f.dtype)
    ]
    reverse = f.order == "desc"
    if f.sort == "op":
        return kept[::-1] if reverse else kept
    if f.sort == "latency":
        return sorted(kept, key=lambda r: r.tiling.latency_us, reverse=reverse)
    if f.sort == "updated":
        return sorted(kept, key=lambda r: r.tiling.updated_at, reverse=reverse)
    known = [r for r in kept if r.tiling.speedup is not None]
    unknown = [r for r in kept if r.tiling.speedup is None]
    return [*sorted(known, key=lambda r: r.tiling.speedup or 0.0, reverse=reverse), *unknown]


def listed(rows: Sequence[R], f: Filters) -> dict[str, Any]:
    """The index's table context: the rows shown, the filters, and the choices of the form."""
    return {
        "tuned": apply(rows, f),
        "tuned_total": len(rows),
        "filters": f,
        "tuned_ops": sorted({r.workload.op for r in rows}),
        "choices": choices(),
        "sorts": tuple(SORTS),
    }


def choices() -> dict[str, list[str]]:
    """The values each filter's select offers."""
    return {
        "op": sorted(OPS),
        "target": [t.name for t in list_targets()],
        "dtype": list(DTYPES),
    }
