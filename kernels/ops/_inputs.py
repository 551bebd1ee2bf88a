"""Checking what a caller gives an op: a shape, the arrays of a call (their numpy shapes and
keyword attributes) and the op's parameters. Each check raises InputError naming the problem;
:class:`~tilewise.kernels.ops._base.OpSpec` offers them as methods."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from tilewise.errors import InputError, close_matches
from tilewise.types import MAX_DIM, Shape

if TYPE_CHECKING:
    from tilewise.kernels.ops._base import OpSpec
    from tilewise.kernels.ops._values import Parameter

FLOAT32_MAX = float(np.finfo(np.float32).max)


def validate_shape(
    spec: OpSpec, shape: Mapping[str, int], *, max_elements: int | None = None
) -> Shape:
    """What :meth:`OpSpec.validate_shape` returns or raises."""
    if not isinstance(shape, Mapping):
        raise InputError(
            f"{spec.name}: a shape maps dim names to integers, got {type(shape).__name__}"
        )
    unknown = sorted(set(shape) - set(spec.dims), key=str)
    if unknown:
        raise InputError(
            f"{spec.name}: unknown dim {', '.join(map(str, unknown))}; dims are "
            f"{', '.join(spec.dims)}{_renamed_dims_hint(spec, shape, unknown)}"
        )
    missing = [d for d in spec.dims if d not in shape]
    if missing:
        raise InputError(f"{spec.name}: missing dim {', '.join(missing)}")
    for dim in spec.dims:
        value = shape[dim]
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise InputError(f"{spec.name}: dim {dim} must be an integer, got {value!r}")
        floor = spec.dim_floors.get(dim, 1)
        if value < floor:
            must = {0: "non-negative", 1: "positive"}.get(floor, f"at least {floor}")
            raise InputError(f"{spec.name}: dim {dim} must be {must}, got {value}")
        if value > MAX_DIM:
            raise InputError(f"{spec.name}: dim {dim}={value} exceeds the limit {MAX_DIM}")
    result = Shape({d: int(shape[d]) for d in spec.dims})
    if max_elements is not None:
        largest = max(arg.elements for arg in spec.gm_args(result, "float32"))
        if largest > max_elements:
            raise InputError(
                f"{spec.name}: shape {result} needs a tensor of {largest} elements, "
                f"above the limit {max_elements}"
            )
    return result


def _renamed_dims_hint(spec: OpSpec, shape: Mapping[str, int], unknown: list[str]) -> str:
    """`` (did you mean M=256,N=256,K=256?)`` when every unknown dim is a dim misspelt (in
    another case, say), and so the whole shape with the dims renamed; else the renames."""
    renames = {u: close_matches(u, spec.dims) for u in unknown}
    found = {u: d[0] for u, d in renames.items() if len(d) == 1 and d[0] not in shape}
    if not found:
        return ""
    fixed = {found.get(k, k): v for k, v in shape.items()}
    if len(found) == len(unknown) == len(set(found.values())) and set(fixed) == set(spec.dims):
        return f" (did you mean {','.join(f'{d}={fixed[d]}' for d in spec.dims)}?)"
    return f" (did you mean {', '.join(f'{d} for {u}' for u, d in found.items())}?)"


def shape_of(
    spec: OpSpec, shapes: Mapping[str, tuple[int, ...]], attributes: Mapping[str, int]
) -> Shape:
    """What :meth:`OpSpec.shape_of` returns or raises."""
    sizes: dict[str, int] = {}
    seen_in: dict[str, str] = {}
    holders: dict[str, list[str]] = {}  # per dim, every input whose shape holds it
    for name, role in spec.roles.items():
        if role != "in":
            continue
        if name not in shapes:
            raise InputError(f"{spec.name}: no shape for the input {name}")
        dims, got = spec.layout[name], tuple(shapes[name])
        if len(got) != len(dims):
            raise InputError(
                f"{spec.name}: {name} must have {len(dims)} dimension{'s' * (len(dims) != 1)} "
                f"({', '.join(dims)}), got shape {got}"
            )
        for axis, (dim, size) in enumerate(zip(dims, got, strict=True)):
            if dim in sizes and sizes[dim] != size:
                raise InputError(
                    f"{spec.name}: {name} has {dim}={size} (axis {axis}), but "
                    f"{seen_in[dim]} has {dim}={sizes[dim]}"
                )
            sizes[dim], seen_in[dim] = size, name
            holders.setdefault(dim, []).append(name)
    unknown = sorted(set(attributes) - set(spec.attributes))
    if unknown:
        takes = ", ".join(spec.attributes) or "none"
        if spec.parameters:
            takes += f"; parameters: {', '.join(p.name for p in spec.parameters)}"
        raise InputError(f"{spec.name}: unknown keyword {', '.join(unknown)}; attributes: {takes}")
    missing = [a for a in spec.attributes if a not in attributes]
    if missing:
        raise InputError(f"{spec.name}: missing keyword {', '.join(missing)}")
    try:
        return spec.validate_shape({**sizes, **attributes})
    except InputError as exc:
        # Where the value the message names came from: a keyword, or the inputs holding it.
        named = re.search(r"\bdim (\w+)", str(exc))
        culprit = named.group(1) if named else None
        if culprit in attributes:
            where = f"given as the keyword {culprit}"
        elif culprit in holders:
            inputs = list(dict.fromkeys(holders[culprit]))
            where = f"read from the shape{'s' * (len(inputs) > 1)} of {', '.join(inputs)}"
        else:
            where = f"read from the shapes of {', '.join(dict.fromkeys(seen_in.values()))}"
        raise InputError(f"{exc} ({where})") from None


def bind_parameters(spec: OpSpec, given: Mapping[str, object]) -> dict[str, float]:
    """What :meth:`OpSpec.bind_parameters` returns or raises."""
    names = [p.name for p in spec.parameters]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise InputError(
            f"{spec.name}: unknown parameter {', '.join(unknown)}; "
            f"parameters: {', '.join(names) or 'none'}"
        )
    return {p.name: _bind(spec, p, given.get(p.name, p.default)) for p in spec.parameters}


def _bind(spec: OpSpec, parameter: Parameter, value: object) -> float:
    """One parameter's value, checked: an int for an integer, else a real number as the
    kernel's float32 field holds it; within the parameter's domain."""
    name = f"{spec.name}: {parameter.name}"
    # True is no number here, though Python counts it as one.
    boolean = isinstance(value, bool | np.bool_)
    if parameter.integer:
        if boolean or not isinstance(value, int | np.integer):
            raise InputError(f"{name} must be an integer, got {value!r}")
        number: float = int(value)
    else:
        if boolean or not isinstance(value, int | float | np.integer | np.floating):
            raise InputError(f"{name} must be a real number, got {value!r}")
        number = float(value)
        if not math.isfinite(number) or abs(number) > FLOAT32_MAX:
            raise InputError(
                f"{name} must be finite and within float32's range "
                f"(the kernel's tiling struct holds it as one), got {value!r}"
            )
    held = number if parameter.integer else float(np.float32(number))
    if not _within(parameter, held):
        # A value within the domain that float32 rounds out of it (p = 0.99999999 is 1.0).
        rounded = f" ({held!r} as a float32)" if _within(parameter, number) else ""
        raise InputError(f"{name} must be {parameter.domain}, got {value!r}{rounded}")
    return number


def _within(parameter: Parameter, value: float) -> bool:
    low, high = parameter.low, parameter.high
    if low is not None and value < low:
        return False
    return high is None or value < high or (value == high and not parameter.high_open)
