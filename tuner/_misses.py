"""A shape a tiling table answered without an exact entry (see
:meth:`tilewise.runtime.TilingTable.misses`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tilewise.types import Shape

if TYPE_CHECKING:
    from tilewise.manifest import Manifest

Source = Literal["exact", "nearest", "default"]


@dataclass(frozen=True, slots=True)
class Miss:
    """A shape answered without an exact entry: how often it was asked, and the rule
    (``nearest`` or ``default``) of its latest answer."""

    op: str
    target: str
    dtype: str
    shape: Shape
    count: int
    source: Source

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "target": self.target,
            "dtype": self.dtype,
            "shape": dict(self.shape),
            "count": self.count,
            "source": self.source,
        }


def collect_misses(
    groups: Iterable[Any],
    *,
    op: str | None = None,
    target: str | None = None,
    dtype: str | None = None,
    clear: bool = False,
) -> tuple[list[Miss], int]:
    """The :class:`Miss` of every counted shape of the runtime's ``groups`` of ``op``,
    ``target`` and ``dtype`` (each when given), most asked first; and how many shapes ``clear``
    removed. A group's ``misses`` holds [count, source] by the shape's dict key: its value for
    one dim, else the tuple in dims order. The caller holds the lock of the counts."""
    found, removed = [], 0
    for g in groups:
        names = (g.spec.name, g.profile.name, g.dtype)
        if (op or names[0], target or names[1], dtype or names[2]) != names:
            continue
        for key, (count, source) in g.misses.items():
            values = key if len(g.dims) > 1 else (key,)
            shape = Shape({d: int(v) for d, v in zip(g.dims, values, strict=True)})
            found.append(Miss(*names, shape, count, source))
        if clear:
            removed += len(g.misses)
            g.misses = {}
    found.sort(key=lambda m: (-m.count, m.op, m.target, m.dtype, m.shape.dims))
    return found, removed


def misses_manifest(
    misses: Callable[..., list[Miss]], *, min_count: int = 1, **options: Any
) -> Manifest:
    """:meth:`TilingTable.misses_manifest <tilewise.runtime.TilingTable.misses_manifest>`."""
    from tilewise.manifest import manifest_of

    only = {k: options.pop(k) for k in ("op", "target", "dtype") if k in options}
    asked = [m for m in misses(**only) if m.count >= min_count]
    return manifest_of(((m.op, m.target, m.dtype, m.shape, m.count) for m in asked), **options)
