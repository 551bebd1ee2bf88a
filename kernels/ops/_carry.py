"""Carrying a tuned tiling over to a shape nobody tuned.

A tiling tuned at one shape holds values that only mean something there: ``singleCoreM = 128``
is "M in 8 pieces" at M = 1024 and "M in 2 pieces" at M = 256. Each tunable whose meaning depends
on the shape declares a :class:`~tilewise.kernels.ops._values.Carry` rule. :class:`CarryRules`
resolves an op's rules for one dtype and target and turns a tiling into its *relative* form
(:meth:`CarryRules.relative`: what keeps its meaning, e.g. the number of pieces) and a relative
form back into a tiling for any shape (:meth:`CarryRules.derive`). At the tuned shape the round
trip gives the tuned tiling back, value for value, for every tiling of the tuned shape's domains.

Each kind of rule writes its derivation twice, as Python statements and as a C expression:
:meth:`CarryRules.derive` runs the Python ones, compiled once per op, dtype and target into one
straight-line function (:attr:`CarryRules.python_source`); the C header applies the same rules
in the same integer arithmetic (:meth:`CarryRules.c_lines` writes them as C statements over the
helpers in :data:`C_HELPERS`), so Python and C re-derive the same tiling from the same relative
form. Every derived value is an integer of int32 range
or the derivation fails (None; the C function returns 0): tiling fields are int32 in C.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, NamedTuple

from tilewise.errors import InputError
from tilewise.kernels.ops._values import Carry
from tilewise.types import Shape, Tiling

if TYPE_CHECKING:
    from tilewise.kernels.ops._base import OpSpec
    from tilewise.kernels.targets import TargetProfile

__all__ = ["C_HELPERS", "CarryRules", "c_dim", "carry_rules"]

INT32_MAX = 2**31 - 1


def _div(a: int, b: int) -> int:
    """ceil(a / b), and a itself for b <= 0 (never met with validated tilings): the C helper's
    guard, kept here so that both sides stay one function."""
    return -(-a // b) if b > 0 else a


def _round(a: int, align: int) -> int:
    return _div(a, align) * align


def _per(a: int, b: int) -> int:
    """a / b rounded down, at least 1 (a itself for b <= 0): a product divided back."""
    return max(1, a // b) if b > 0 else a


def _count(stored: int, size: int, align: int) -> int:
    """The most blocks, at most ``stored``, that leave no block without work. More blocks than
    ``size`` always leave one without work, so the walk starts at ``size``: a count stored in
    a table is a number of steps no larger than the extent."""
    b = max(1, min(stored, size))
    while b > 1 and _round(_div(size, b), align) * (b - 1) >= size:
        b -= 1
    return b


def _cap(stored: int, bound: int, domain: Domain) -> int:
    """The largest value of ``domain`` within min(stored, bound), else its first."""
    limit = stored if stored < bound else bound
    best = domain[0]
    for v in domain:
        if v <= limit and (best > limit or v > best):
            best = v
    return best


def _py_round(x: str, align: int) -> str:
    """``_round(x, align)`` as a Python expression, for a constant ``align``."""
    if align == 1:
        return x
    return f"-(-{x} // {align}) * {align}" if align > 0 else f"{x} * {align}"


def _fits_int32(values: Domain) -> bool:
    return all(-INT32_MAX <= v <= INT32_MAX for v in values)


def _plain(values: Mapping[str, int]) -> dict[str, int]:
    if isinstance(values, Tiling):
        return dict(values._index)  # a copy of its own dict
    return dict(values)


class _Kind:
    """One kind of :class:`Carry`: the stored form, and the value re-derived from it as Python
    statements (setting ``v``) and as a C expression (``tilewise_*_`` helpers of
    :data:`C_HELPERS`). ``stored``, ``size`` and ``bound`` name variables; ``domain`` names the
    tunable's values."""

    def stored(self, value: int, size: int, carry: Carry) -> int:
        return value

    def py(self, stored: str, size: str, carry: Carry, bound: str, domain: Domain) -> list[str]:
        raise NotImplementedError

    def c(self, stored: str, size: str, carry: Carry, bound: str) -> str:
        raise NotImplementedError


class _Split(_Kind):
    def stored(self, value: int, size: int, carry: Carry) -> int:
        return _div(size, value)

    def py(self, stored: str, size: str, carry: Carry, bound: str, domain: Domain) -> list[str]:
        pieces = f"(-(-{size} // {stored}) if {stored} > 0 else {size})"  # _div
        return [f"v = {_py_round(pieces, carry.align)}"]

    def c(self, stored: str, size: str, carry: Carry, bound: str) -> str:
        return f"tilewise_round_({size}, {stored}, {carry.align})"


class _Count(_Kind):
    def py(self, stored: str, size: str, carry: Carry, bound: str, domain: Domain) -> list[str]:
        return [f"v = _count({stored}, {size}, {carry.align})"]

    def c(self, stored: str, size: str, carry: Carry, bound: str) -> str:
        return f"tilewise_count_({size}, {stored}, {carry.align})"


class _Whole(_Kind):
    def stored(self, value: int, size: int, carry: Carry) -> int:
        return 0 if value >= _round(size, carry.align) else value

    def py(self, stored: str, size: str, carry: Carry, bound: str, domain: Domain) -> list[str]:
        return [
            f"v = {_py_round(size, carry.align)}",
            f"if {stored} > 0 and {stored} < v: v = {stored}",
        ]

    def c(self, stored: str, size: str, carry: Carry, bound: str) -> str:
        return f"tilewise_whole_({size}, {stored}, {carry.align})"


class _Cap(_Kind):
    def py(self, stored: str, size: str, carry: Carry, bound: str, domain: Domain) -> list[str]:
        values = repr(domain)
        if list(domain) != sorted(domain):
            return [f"v = _cap({stored}, {bound}, {values})"]
        # Ascending: the largest value within the limit by bisection, else the first.
        return [
            f"i = bisect_right({values}, {stored} if {stored} < {bound} else {bound})",
            f"v = {values}[i - 1] if i else {domain[0]}",
        ]

    def c(self, stored: str, size: str, carry: Carry, bound: str) -> str:
        return f"tilewise_cap_({stored}, {bound}, d, (int)(sizeof d / sizeof d[0]))"


Domain = tuple[int, ...]
_KINDS: dict[str, _Kind] = {
    "split": _Split(),
    "count": _Count(),
    "whole": _Whole(),
    "cap": _Cap(),
}


class _Rule(NamedTuple):
    """One tunable's resolved rule."""

    field: str
    carry: Carry
    kind: _Kind
    domain: Domain  # the tunable's values (read by caps, whose domain no shape changes)


class CarryRules:
    """An op's carry rules for one dtype and target; see the module docstring."""

    def __init__(self, spec: OpSpec, fields: tuple[str, ...], rules: tuple[_Rule, ...]) -> None:
        self.spec = spec
        #: The tiling's fields in tunables order (the C header's field order).
        self.fields = fields
        #: Rules in the order they apply: every rule but the caps first, then the caps in their
        #: declaration order (a cap's bound reads values carried before it).
        self.rules = rules
        #: The extents (products of :meth:`OpSpec.extents` names) the rules read.
        self.extents: tuple[tuple[str, ...], ...] = tuple(
            dict.fromkeys(
                [r.carry.extent for r in rules if r.carry.extent]
                + [b.extent for r in rules for b in r.carry.bounds if b.extent]
            )
        )
        # Whether a rule reads a size the op derives from its dims (a conv's output pixels).
        self._derived = any(n not in spec.dims for names in self.extents for n in names)
        # Each extent with its one name (read without a product), else None.
        self._one = tuple((names, names[0] if len(names) == 1 else None) for names in self.extents)
        #: What :meth:`derive` runs: the rules as straight-line Python (the runtime derives a
        #: tiling on every first-time answer), from the same kinds as the C header's lines.
        self.python_source = self._python_source()
        namespace = {"bisect_right": bisect_right, "_count": _count, "_cap": _cap, "_per": _per}
        exec(compile(self.python_source, f"<carry rules of {spec.name}>", "exec"), namespace)
        self._derive: Callable[[dict[str, int], Mapping[str, int]], dict[str, int] | None]
        self._derive = namespace["derive"]  # type: ignore[assignment]

    def _sizes(self, shape: Mapping[str, int]) -> dict[tuple[str, ...], int]:
        if self._derived:
            sizes = self.spec.extents(Shape(shape))
        else:
            sizes = shape._index if type(shape) is Shape else shape  # type: ignore[attr-defined]
        return {
            names: sizes[one] if one is not None else math.prod([sizes[n] for n in names])
            for names, one in self._one
        }

    def relative(self, tiling: Mapping[str, int], shape: Shape) -> Tiling:
        """``tiling`` (of ``shape``) in the form that keeps its meaning at another shape."""
        sizes = self._sizes(shape)
        out = _plain(tiling)
        for rule in self.rules:
            carry = rule.carry
            value = out[rule.field] * (tiling[carry.product] if carry.product else 1)
            out[rule.field] = rule.kind.stored(value, sizes.get(carry.extent, 0), carry)
        return Tiling(out)

    def derive(self, relative: Mapping[str, int], shape: Mapping[str, int]) -> Tiling | None:
        """The tiling a relative form stands for at ``shape``; None when a value would leave
        int32 (a split of an extent beyond it)."""
        if self._derived:
            sizes: Mapping[str, int] = self.spec.extents(Shape(shape))
        else:
            sizes = shape._index if type(shape) is Shape else shape  # type: ignore[attr-defined]
        out = self._derive(_plain(relative), sizes)
        if out is None:
            return None
        if type(relative) is Tiling:
            return Tiling.of_sorted(out)  # a Tiling's fields, in its (name) order
        return Tiling.of_ints(out)

    def _python_source(self) -> str:
        """``def derive(t, s)``: the rules applied in order to ``t`` (a copy of the relative
        form, changed in place and returned) at the sizes ``s`` (the dims, or
        :meth:`OpSpec.extents` where a rule reads a derived size); None when a value leaves
        int32. The same arithmetic as the C header's lines (:meth:`c_lines`)."""
        lines = ["def derive(t, s):"]
        extent = {names: f"e{i}" for i, names in enumerate(self.extents)}
        for names, var in extent.items():
            lines.append(f"    {var} = " + " * ".join(f"s[{n!r}]" for n in names))
        for rule in self.rules:
            carry = rule.carry
            lines.append(f"    # {rule.field}: {carry.kind}")
            bounds = []
            for b in carry.bounds:
                x = f"t[{b.field!r}]" if b.field is not None else extent[b.extent]
                if b.per is not None:
                    lines.append(f"    p = t[{b.per!r}]")
                    x = f"(-(-{x} // p) if p > 0 else {x})"  # _div
                bounds.append(_py_round(x, b.align))
            bound = str(INT32_MAX)
            if bounds:
                lines.append(f"    b = {bounds[0]}")
                for other in bounds[1:]:
                    lines += [f"    x = {other}", "    if x < b: b = x"]
                lines.append(f"    if b > {INT32_MAX}: b = {INT32_MAX}")
                bound = "b"
            stored = f"t[{rule.field!r}]"
            if carry.product is not None:
                stored = f"_per({stored}, t[{carry.product!r}])"
            lines.append(f"    st = {stored}")
            size = extent[carry.extent] if carry.extent else "0"
            lines += [f"    {line}" for line in rule.kind.py("st", size, carry, bound, rule.domain)]
            if not (isinstance(rule.kind, _Cap) and _fits_int32(rule.domain)):
                # A cap answers a value of its domain: no check when they all fit.
                lines.append(f"    if not -{INT32_MAX} <= v <= {INT32_MAX}: return None")
            lines.append(f"    t[{rule.field!r}] = v")
        lines.append("    return t")
        return "\n".join(lines) + "\n"

    def carry(self, tiling: Mapping[str, int], tuned: Shape, asked: Shape) -> Tiling | None:
        """``tiling`` of the ``tuned`` shape carried over to ``asked`` (itself when they are the
        same shape)."""
        if tuned == asked:
            return Tiling(tiling)
        return self.derive(self.relative(tiling, tuned), asked)

    def c_lines(self, extent_c: Mapping[str, str]) -> list[str]:
        """C statements that derive ``t`` (int32_t[fields]) from ``rel`` (the relative form) at
        the asked shape, inside a function whose dims are int64_t variables named by
        :func:`c_dim`; each returns 0 from the function when a value leaves int32. ``extent_c``
        holds the C expression of each extent name that is not a dim.

        Raises:
            InputError: a rule reads an extent that has no C expression.
        """
        index = {name: i for i, name in enumerate(self.fields)}
        lines = []
        for names in self.extents:
            parts = []
            for n in names:
                if n in self.spec.dims:
                    parts.append(c_dim(n))
                elif n in extent_c:
                    parts.append(f"({_c_dims(extent_c[n], self.spec.dims)})")
                else:
                    raise InputError(f"{self.spec.name}: extent {n} has no C expression")
            lines.append(f"const int64_t {_c_extent(names)} = {' * '.join(parts)};")
        lines.append(f"memcpy(t, rel, sizeof(int32_t) * {len(self.fields)});")
        for rule in self.rules:
            carry, i = rule.carry, index[rule.field]
            bounds = [
                "tilewise_round_("
                + (f"t[{index[b.field]}]" if b.field is not None else _c_extent(b.extent))
                + (f", t[{index[b.per]}]" if b.per is not None else ", 1")
                + f", {b.align})"
                for b in carry.bounds
            ]
            bound = bounds[0] if bounds else ""
            for other in bounds[1:]:
                bound = f"tilewise_min_({bound}, {other})"
            size = _c_extent(carry.extent) if carry.extent else "0"
            stored = f"rel[{i}]"
            if carry.product is not None:
                stored = f"tilewise_per_({stored}, t[{index[carry.product]}])"
            expr = rule.kind.c(stored, size, carry, bound)
            lines.append(f"/* {rule.field}: {carry.kind} */")
            if isinstance(rule.kind, _Cap):
                domain = ", ".join(str(v) for v in rule.domain)
                lines += [
                    "{",
                    f"    static const int32_t d[] = {{{domain}}};",
                    f"    if (!tilewise_set_(&t[{i}], {expr})) return 0;",
                    "}",
                ]
            else:
                lines.append(f"if (!tilewise_set_(&t[{i}], {expr})) return 0;")
        return lines


def _c_extent(names: tuple[str, ...]) -> str:
    return "size_" + "_".join(names)


def c_dim(name: str) -> str:
    """The C variable of a dim in the header's code: a bare dim name may be a macro of the
    host's headers (``<complex.h>`` defines ``I``)."""
    return f"dim_{name}"


def _c_dims(expression: str, dims: tuple[str, ...]) -> str:
    """A C expression over the dims (OpSpec.c_extents) with each dim named by :func:`c_dim`."""
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: c_dim(m[0]) if m[0] in dims else m[0], expression)


@cache
def carry_rules(spec: OpSpec, dtype: str, target: TargetProfile) -> CarryRules:
    """``spec``'s carry rules for ``dtype`` on ``target``, from its tunables' declarations.

    Raises:
        InputError: a cap bounded by a tunable that is not the op's or is carried after it; a
            cap without bounds or another kind without an extent.
    """
    probe = Shape({d: max(1, spec.dim_floors.get(d, 1)) for d in spec.dims})
    tunables = spec.tunables(probe, dtype, target)
    fields = tuple(t.name for t in tunables)
    declared = [t for t in tunables if t.carry is not None]
    ordered = [t for t in declared if t.carry and t.carry.kind != "cap"]
    ordered += [t for t in declared if t.carry and t.carry.kind == "cap"]
    done = {t.name for t in tunables if t.carry is None or t.carry.kind != "cap"}
    rules = []
    for tunable in ordered:
        carry = tunable.carry
        assert carry is not None
        if (carry.kind == "cap") != bool(carry.bounds) or (carry.kind == "cap") == bool(
            carry.extent
        ):
            raise InputError(
                f"{spec.name}: {tunable.name}: a cap has bounds and no extent, other carry "
                "kinds an extent and no bounds"
            )
        if carry.product is not None and carry.kind != "cap":
            raise InputError(f"{spec.name}: {tunable.name}: only a cap keeps a product")
        for bound in carry.bounds:
            for name in (bound.field, bound.per, carry.product):
                if name is not None and name not in done:
                    raise InputError(
                        f"{spec.name}: {tunable.name} is capped by {name}, which is not one of "
                        "its tunables carried before it"
                    )
        rules.append(_Rule(tunable.name, carry, _KINDS[carry.kind], tunable.values))
        done.add(tunable.name)
    return CarryRules(spec, fields, tuple(rules))


#: The C helpers the header's carry functions call (defined once per translation unit).
C_HELPERS = """\
#ifndef TILEWISE_CARRY_HELPERS_
#define TILEWISE_CARRY_HELPERS_
/* ceil(a / b) rounded up to a multiple of align (a itself for b <= 0). */
static inline int64_t tilewise_round_(int64_t a, int64_t b, int64_t align)
{
    int64_t q = b > 0 ? (a + b - 1) / b : a;
    return (q + align - 1) / align * align;
}
static inline int64_t tilewise_min_(int64_t a, int64_t b) { return a < b ? a : b; }
/* a / b rounded down, at least 1 (a itself for b <= 0). */
static inline int64_t tilewise_per_(int64_t a, int64_t b)
{
    return b > 0 ? (a / b > 1 ? a / b : 1) : a;
}
/* The most blocks, at most b, that leave no block without work. */
static inline int64_t tilewise_count_(int64_t size, int64_t b, int64_t align)
{
    if (b > size) b = size; /* more blocks than the extent leave one without work */
    if (b < 1) b = 1;
    while (b > 1 && tilewise_round_(size, b, align) * (b - 1) >= size) --b;
    return b;
}
/* The whole extent rounded up (stored 0), or the chunk, never above the whole. */
static inline int64_t tilewise_whole_(int64_t size, int64_t stored, int64_t align)
{
    int64_t whole = tilewise_round_(size, 1, align);
    return stored <= 0 ? whole : tilewise_min_(stored, whole);
}
/* The largest domain value within min(value, bound), else the smallest. */
static inline int64_t tilewise_cap_(int64_t value, int64_t bound, const int32_t* d, int n)
{
    int64_t limit = tilewise_min_(value, bound);
    int64_t best = d[0];
    int i;
    for (i = 0; i < n; ++i) {
        if (d[i] <= limit && (best > limit || d[i] > best)) best = d[i];
    }
    return best;
}
static inline int tilewise_set_(int32_t* out, int64_t v)
{
    if (v < -2147483647 || v > 2147483647) return 0;
    *out = (int32_t)v;
    return 1;
}
#endif
"""
