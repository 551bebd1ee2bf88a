"""One (op, shape, dtype, target) request, resolved and checked once for every entry point.

The command line, the REST API and the worker all take a workload by its names; each used to
check it with its own copy of the same four steps. :func:`resolve_request` is that one copy. It
raises a :class:`RequestError` that names the field at fault, so the API can blame the right
query parameter or body field and the command line can print one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from tilewise.errors import InputError
from tilewise.kernels.ops import OpSpec, get_op
from tilewise.kernels.targets import TargetProfile, get_target
from tilewise.types import Shape, Workload

Field = Literal["op", "shape", "dtype", "target"]

__all__ = ["RequestError", "WorkloadRequest", "parse_shape", "resolve_request"]


class RequestError(InputError):
    """An InputError about one field of a request (``op``, ``shape``, ``dtype`` or ``target``)."""

    def __init__(self, field: Field, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class WorkloadRequest:
    """A checked request: the op's spec, the validated shape, the dtype and the target."""

    spec: OpSpec
    shape: Shape
    dtype: str
    target: TargetProfile

    @property
    def workload(self) -> Workload:
        return Workload(self.spec.name, self.spec.version, self.target.name, self.dtype, self.shape)


@contextmanager
def _field(name: Field) -> Iterator[None]:
    try:
        yield
    except RequestError:
        raise
    except InputError as exc:
        raise RequestError(name, str(exc)) from exc


def resolve_request(
    op: str | OpSpec,
    shape: str | Mapping[str, int],
    dtype: str,
    target: str,
    *,
    max_elements: int | None = None,
) -> WorkloadRequest:
    """Check a request field by field: the op exists, the shape (any form :func:`parse_shape`
    reads) is one of the op's within ``max_elements`` per tensor, the dtype is the op's, the
    target is known (its canonical profile is returned).

    Raises:
        RequestError: naming the first field at fault, in the order op, shape, dtype, target.
    """
    with _field("op"):
        spec = op if isinstance(op, OpSpec) else get_op(op)
    with _field("shape"):
        parsed = parse_shape(shape, spec)
        valid = spec.validate_shape(parsed, max_elements=max_elements)
    with _field("dtype"):
        spec.validate_dtype(dtype)
    with _field("target"):
        profile = get_target(target)
    return WorkloadRequest(spec, valid, dtype, profile)


#: Extents without names, as shapes are often written: ``256x256x256``, ``256,256``, ``2*4``.
_UNNAMED = re.compile(r"\s*\d+(\s*[x×*,]\s*\d+)*\s*")


def parse_shape(shape: str | Mapping[str, int], spec: OpSpec | None = None) -> Mapping[str, int]:
    """A shape in any of the forms a request may give it, the same in a query string, a JSON
    body or on the command line: the text ``"M=1024,N=512,K=256"``, a JSON object as text
    (``'{"M": 1024, "N": 512, "K": 256}'``), or a mapping. The dims and their values are not
    checked here (:meth:`OpSpec.validate_shape` does); with the ``spec``, extents written
    without their names (``256x512x256``) get a hint naming them.

    Raises:
        InputError: text in neither form.
    """
    if not isinstance(shape, str):
        return shape
    text = shape.strip()
    if not text.startswith("{"):
        return _parse_text(text, spec)
    try:
        value = json.loads(text, object_pairs_hook=once_each)
    except KeyTwice as exc:  # the text form refuses "M given twice" too
        raise InputError(f"shape: {exc.key} given twice in {text!r}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting thousands deep
        raise InputError(f"shape: not a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise InputError("shape: a JSON shape is an object of dim: integer")
    return value


class KeyTwice(ValueError):
    """A JSON object gives ``key`` twice (:func:`once_each`)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} is given twice in one object")
        self.key = key


def once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook`` for input people write: a key given twice raises
    :class:`KeyTwice` (json alone keeps the last value, silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise KeyTwice(key)
        out[key] = value
    return out


def _parse_text(text: str, spec: OpSpec | None) -> Shape:
    """``Shape.parse``, with a hint when the text gives the extents without their names."""
    try:
        return Shape.parse(text)
    except InputError as exc:
        if spec is None or "=" in text or not _UNNAMED.fullmatch(text):
            raise
        values = re.findall(r"\d+", text)
        if len(values) == len(spec.dims):
            named = ",".join(f"{d}={v}" for d, v in zip(spec.dims, values, strict=True))
            raise InputError(f"{exc} (did you mean {named}?)") from None
        example = ",".join(f"{d}=..." for d in spec.dims)
        raise InputError(f"{exc}; {spec.name}'s dims go by name: {example}") from None
