"""The manifest's model: its document, its checks against the ops, and where an error is."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError

from tilewise.errors import InputError
from tilewise.files import write_atomically
from tilewise.kernels.request import RequestError, WorkloadRequest, resolve_request
from tilewise.types import MAX_DIM, Shape, Workload

#: The largest budget a manifest may ask for (per workload or in total): far above any tune.
MAX_BUDGET = 10_000_000

Loc = tuple[str | int, ...]


def where(loc: Loc) -> str:
    """``("workloads", 0, "shapes", 1)`` → ``"workloads[0].shapes[1]"``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "manifest"


class ManifestError(InputError):
    """A manifest that cannot be used; ``loc`` is the place at fault (``()`` for the whole),
    and the message starts with it."""

    def __init__(self, loc: Loc, message: str, *, source: str | None = None) -> None:
        head = f"{source}: " if source else ""
        super().__init__(f"{head}{where(loc)}: {message}")
        self.loc = tuple(loc)
        self.reason = message


#: Problems named in one ManifestError (the rest are counted).
MAX_PROBLEMS = 3


def structure_error(exc: ValidationError, source: str | None = None) -> ManifestError:
    """The first problem's place as the error's ``loc``; the message names each problem."""
    problems = []
    for error in exc.errors():
        loc = tuple(p for p in error.get("loc", ()) if isinstance(p, str | int))
        problems.append((loc, str(error.get("msg", "invalid")).removeprefix("Value error, ")))
    first_loc, first = problems[0]
    message = "; ".join([first] + [f"{where(loc)}: {msg}" for loc, msg in problems[1:MAX_PROBLEMS]])
    more = len(problems) - MAX_PROBLEMS
    if more > 0:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ManifestError(first_loc, message, source=source)


def _error(kind: str, message: str, loc: Loc, value: object) -> InitErrorDetails:
    # The value received in the message: YAML reads 1e3 as text, and "a dim is a whole
    # number" alone left the reader looking at a number.
    error = PydanticCustomError(kind, message + ", got {got}", {"got": repr(value)})
    return InitErrorDetails(type=error, loc=loc, input=value)


class ShapeItem(BaseModel):
    """One shape of a workload: its dims and how often the application runs it."""

    model_config = ConfigDict(frozen=True)

    dims: dict[str, int]
    weight: float = 1.0

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, value: Any) -> Any:
        """The document's forms: ``{M: 1, ..., weight: 10}`` or ``"M=1,N=2,K=3"``. The errors
        name the dim (``shapes[1].K``), as the document has no ``dims`` key."""
        if isinstance(value, ShapeItem):
            return value
        if isinstance(value, str):
            try:
                return {"dims": dict(Shape.parse(value)), "weight": 1.0}
            except InputError as exc:
                raise ValueError(str(exc)) from None
        if not isinstance(value, Mapping):
            raise ValueError(
                "a shape is a mapping of dims (and an optional weight), e.g. {M: 1, N: 4096,"
                f" K: 4096, weight: 10}}, or text such as M=1,N=4096,K=4096; got {value!r}"
            )
        if set(value) == {"dims", "weight"} or set(value) == {"dims"}:
            if not isinstance(value["dims"], Mapping):
                message = "dims is a mapping of dim names to whole numbers"
                error = _error("dims_type", message, ("dims",), value["dims"])
                raise ValidationError.from_exception_data("shape", [error])
            value = {**value["dims"], **({"weight": value["weight"]} if "weight" in value else {})}
        errors: list[InitErrorDetails] = []
        dims: dict[str, int] = {}
        weight: Any = value.get("weight", 1.0)
        for name, dim in value.items():
            if name == "weight":
                continue
            if not isinstance(name, str) or not name:
                errors.append(_error("dim_name", "a dim is named by a string", (), name))
            elif isinstance(dim, bool) or not isinstance(dim, int):
                errors.append(_error("dim_type", "a dim is a whole number", (name,), dim))
            elif not 0 <= dim <= MAX_DIM:
                # Most ops need a dim of 1 or more (conv pad takes 0): entries() checks each.
                message = f"a dim is not negative and at most {MAX_DIM}"
                errors.append(_error("dim_range", message, (name,), dim))
            else:
                dims[name] = dim
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            errors.append(_error("weight_type", "a weight is a number", ("weight",), weight))
        elif not (math.isfinite(weight) and weight > 0):
            message = "a weight is a positive, finite number (how often the shape runs)"
            errors.append(_error("weight_range", message, ("weight",), weight))
        if not dims and not errors:
            errors.append(_error("no_dims", "a shape needs its dims", (), dict(value)))
        if errors:
            raise ValidationError.from_exception_data("shape", errors)
        return {"dims": dims, "weight": float(weight)}

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # What a document holds (the flat mapping or the text), not the parsed fields.
        return {
            "title": "Shape",
            "anyOf": [
                {
                    "type": "object",
                    "description": "Every dim of the op, and how often the application runs it.",
                    "properties": {"weight": {"type": "number", "exclusiveMinimum": 0}},
                    "additionalProperties": {"type": "integer", "minimum": 0, "maximum": MAX_DIM},
                    "minProperties": 1,
                    "examples": [{"M": 1, "N": 4096, "K": 4096, "weight": 10}],
                },
                {"type": "string", "examples": ["M=1,N=4096,K=4096"]},
            ],
        }

    def to_document(self) -> dict[str, Any]:
        """The flat form, ``{M: 1, N: 4096, K: 4096, weight: 10}`` (no weight when it is 1)."""
        if self.weight == 1.0:
            return dict(self.dims)
        weight = int(self.weight) if self.weight.is_integer() else self.weight
        return {**self.dims, "weight": weight}


class WorkloadGroup(BaseModel):
    """One op in one or several dtypes at several shapes; the manifest's defaults fill what it
    leaves out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: str = Field(description="Op name, see `tilewise ops`.")
    dtype: str | list[str] | None = Field(
        default=None, description="One dtype or several; default: the manifest's."
    )
    target: str | None = Field(default=None, description="Default: the manifest's.")
    shapes: list[ShapeItem] = Field(min_length=1)

    @field_validator("dtype")
    @classmethod
    def _dtypes(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and not value:
            raise ValueError("name one dtype or more")
        return value


class Manifest(BaseModel):
    """A tuning manifest (see the module docstring). Parse one with :func:`load_manifest` or
    :func:`parse_manifest`; :meth:`entries` checks it against the ops."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, max_length=200)
    target: str = "cpu-twin"
    dtype: str = "float32"
    # Strict: a budget of `true` or "40" is a mistake to report, not a number to guess.
    budget: int | None = Field(
        default=None, ge=1, le=MAX_BUDGET, strict=True, description="Evaluations per workload."
    )
    total_budget: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BUDGET,
        strict=True,
        description="Evaluations in all, spread by weight.",
    )
    workloads: list[WorkloadGroup] = Field(min_length=1)
    #: The file (or URL) it was read from, named in the errors of :meth:`entries`.
    _source: str | None = PrivateAttr(default=None)

    @property
    def source(self) -> str | None:
        """The file (or URL) it was read from, if any: the head of its errors."""
        return self._source

    @field_validator("name")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        # A control character is no part of a name; NUL is one PostgreSQL cannot store.
        if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("a name holds no control characters (NUL, newline, tab ...)")
        return value

    @model_validator(mode="after")
    def _one_budget(self) -> Manifest:
        if self.budget is not None and self.total_budget is not None:
            raise ValueError(
                "give budget (per workload) or total_budget (spread by weight), not both"
            )
        return self

    def entries(self, *, max_elements: int | None = None) -> list[ManifestEntry]:
        """The workloads to tune, checked against the ops (``resolve_request``), in manifest
        order; a workload listed twice is one entry with the sum of the weights.

        Raises:
            ManifestError: naming the first place at fault.
        """
        found: dict[str, ManifestEntry] = {}
        for i, group in enumerate(self.workloads):
            dtypes = group.dtype if isinstance(group.dtype, list) else [group.dtype or self.dtype]
            target = group.target or self.target
            for j, item in enumerate(group.shapes):
                for k, dtype in enumerate(dtypes):
                    try:
                        asked = resolve_request(
                            group.op, item.dims, dtype, target, max_elements=max_elements
                        )
                    except RequestError as exc:
                        loc = _place(i, j, exc.field, group, dtype_index=k)
                        raise ManifestError(loc, str(exc), source=self.source) from exc
                    key = asked.workload.key
                    if key in found:
                        first = found[key]
                        weight = first.weight + item.weight
                        if not math.isfinite(weight):
                            raise ManifestError(
                                ("workloads", i, "shapes", j, "weight"),
                                f"the weights of this workload, listed more than once, sum "
                                f"to more than a float holds ({first.weight:g} + "
                                f"{item.weight:g})",
                                source=self.source,
                            )
                        found[key] = ManifestEntry(asked, weight, first.loc)
                    else:
                        found[key] = ManifestEntry(
                            asked, item.weight, ("workloads", i, "shapes", j)
                        )
        return list(found.values())

    def to_document(self) -> dict[str, Any]:
        """The document (JSON- and YAML-ready) this manifest was read from, in its short form."""
        doc: dict[str, Any] = {}
        if self.name is not None:
            doc["name"] = self.name
        doc["target"] = self.target
        doc["dtype"] = self.dtype
        if self.budget is not None:
            doc["budget"] = self.budget
        if self.total_budget is not None:
            doc["total_budget"] = self.total_budget
        doc["workloads"] = [
            {
                "op": g.op,
                **({"dtype": g.dtype} if g.dtype is not None else {}),
                **({"target": g.target} if g.target is not None else {}),
                "shapes": [s.to_document() for s in g.shapes],
            }
            for g in self.workloads
        ]
        return doc

    def dumps(self, *, fmt: str = "yaml") -> str:
        """The document as YAML (``fmt="yaml"``) or JSON text."""
        doc = self.to_document()
        if fmt == "json":
            return json.dumps(doc, indent=2) + "\n"
        if fmt != "yaml":
            raise InputError(f"unknown manifest format {fmt!r}; yaml or json")
        import yaml

        # Shapes one per line, in flow style, as people write them.
        lines = []
        for key, value in doc.items():
            if key != "workloads":
                text = yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False)
                lines.append(text.rstrip())
        lines.append("workloads:")
        for group in doc["workloads"]:
            head = {k: v for k, v in group.items() if k != "shapes"}
            first = True
            for key, value in head.items():
                text = yaml.safe_dump(
                    {key: value}, default_flow_style=True, sort_keys=False, width=1 << 16
                )
                text = text.strip().removeprefix("{").removesuffix("}")
                lines.append(f"  {'- ' if first else '  '}{text}")
                first = False
            lines.append("    shapes:")
            for shape in group["shapes"]:
                text = yaml.safe_dump(
                    shape, default_flow_style=True, sort_keys=False, width=1 << 16
                ).strip()
                lines.append(f"      - {text.removesuffix('...').strip()}")
        return "\n".join(lines) + "\n"

    def write(self, path: str | Path) -> None:
        """Write the document to ``path``, JSON for a ``.json`` name and YAML otherwise, through
        a temporary file and a rename (:func:`tilewise.files.write_atomically`)."""
        path = Path(path)
        write_atomically(path, self.dumps(fmt="json" if path.suffix.lower() == ".json" else "yaml"))


def _place(i: int, j: int, field: str, group: WorkloadGroup, *, dtype_index: int) -> Loc:
    """Where a resolve_request error belongs: the field of the group, its shape, or the
    manifest's default the group inherited."""
    if field == "op":
        return ("workloads", i, "op")
    if field == "shape":
        return ("workloads", i, "shapes", j)
    if field == "dtype":
        if group.dtype is None:
            return ("dtype",)
        return (
            ("workloads", i, "dtype", dtype_index)
            if isinstance(group.dtype, list)
            else (
                "workloads",
                i,
                "dtype",
            )
        )
    return ("workloads", i, "target") if group.target is not None else ("target",)


@dataclass(frozen=True)
class ManifestEntry:
    """One workload of a manifest, checked: what to tune, its weight, and where it was listed
    (the first place, when listed more than once)."""

    request: WorkloadRequest
    weight: float
    loc: Loc

    @property
    def workload(self) -> Workload:
        return self.request.workload

    @property
    def where(self) -> str:
        return where(self.loc)


def manifest_of(
    shapes: Iterable[tuple[str, str, str, Mapping[str, int], float]],
    *,
    name: str | None = None,
    budget: int | None = None,
    total_budget: int | None = None,
) -> Manifest:
    """A manifest of (op, target, dtype, shape, weight) tuples, one workload group per
    (op, target, dtype) in first-seen order, the most frequent target and dtype as defaults."""
    from tilewise.kernels.ops import OPS, get_op

    groups: dict[tuple[str, str, str], list[ShapeItem]] = {}
    for op, target, dtype, shape, weight in shapes:
        # Dims in the op's order, as people write them (M, N, K).
        known = get_op(op).dims if op in OPS else ()
        order = known if set(known) == set(shape) else sorted(shape)
        dims = {d: int(shape[d]) for d in order}
        groups.setdefault((op, target, dtype), []).append(ShapeItem(dims=dims, weight=weight))
    if not groups:
        raise InputError("no shapes: a manifest needs one workload or more")
    if budget is not None and total_budget is not None:
        raise InputError("give budget (per workload) or total_budget (spread by weight), not both")
    count = sum(len(items) for items in groups.values())
    if total_budget is not None and total_budget < count:  # tune-set would refuse the file
        raise InputError(
            f"total budget {total_budget} is below the {count} shapes to tune: each needs at "
            "least one evaluation"
        )
    targets = [t for (_, t, _) in groups]
    dtypes = [d for (_, _, d) in groups]
    target = max(dict.fromkeys(targets), key=targets.count)
    dtype = max(dict.fromkeys(dtypes), key=dtypes.count)
    try:
        return Manifest(
            name=name,
            target=target,
            dtype=dtype,
            budget=budget,
            total_budget=total_budget,
            workloads=[
                WorkloadGroup(
                    op=op,
                    dtype=None if d == dtype else d,
                    target=None if t == target else t,
                    shapes=items,
                )
                for (op, t, d), items in groups.items()
            ],
        )
    except ValidationError as exc:  # a budget of 0, say
        raise structure_error(exc) from None
