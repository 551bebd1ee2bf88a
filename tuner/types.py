"""Frozen value objects shared by every layer: shapes, tilings and workloads."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tilewise.errors import InputError

#: What Shape.parse takes as a dim's name and value (the service's OpenAPI pattern's).
_DIM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIM_VALUE = re.compile(r"[+-]?[0-9]+")
#: Digits past any int64 (the bounds checks name a value that large; Python's int() refuses
#: strings of over 4300 digits).
_MAX_DIGITS = 40

DTYPES: tuple[str, ...] = ("float32", "float16")
DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2}
#: Other names people give the dtypes (numpy's, PyTorch's, CUDA's), for did-you-mean hints only:
#: a request names a dtype by its one name.
DTYPE_ALIASES: dict[str, str] = {
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "single": "float32",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
}

#: The largest extent accepted for one dimension: far past any real operator, small enough
#: that products of dims stay exact and allocations stay sane.
MAX_DIM = 1 << 24


def canonical_json(obj: Any) -> str:
    """Stable JSON text: sorted keys, no spaces. Used for keys and hashes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Shape(Mapping[str, int]):
    """Named dimensions of one problem, e.g. ``Shape({"M": 1024, "N": 1024, "K": 1024})``."""

    dims: tuple[tuple[str, int], ...]

    def __init__(self, dims: Mapping[str, int] | tuple[tuple[str, int], ...]) -> None:
        items = dims.items() if isinstance(dims, Mapping) else dims
        object.__setattr__(self, "dims", tuple(sorted((str(k), int(v)) for k, v in items)))
        object.__setattr__(self, "_index", dict(self.dims))  # O(1) reads on hot paths

    @classmethod
    def of_ints(cls, dims: Mapping[str, int]) -> Shape:
        """A Shape of a mapping whose keys are already str and values int, without converting
        each (the runtime builds one per first-time shape)."""
        shape = cls.__new__(cls)
        items = tuple(sorted(dims.items()))
        object.__setattr__(shape, "dims", items)
        object.__setattr__(shape, "_index", dict(items))
        return shape

    def __getitem__(self, key: str) -> int:
        value: int = self._index[key]  # type: ignore[attr-defined]
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.dims)

    def __hash__(self) -> int:
        return hash(self.dims)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Shape):
            return self.dims == other.dims
        if isinstance(other, Mapping):
            return dict(self.dims) == dict(other)
        return NotImplemented

    def key(self) -> str:
        """``"K=3,M=1,N=17"``: the text form, also what ``parse`` reads."""
        return ",".join(f"{k}={v}" for k, v in self.dims)

    def __str__(self) -> str:
        return self.key()

    @classmethod
    def parse(cls, text: str) -> Shape:
        """Read ``"M=1024,N=1024,K=1024"``; names are case-sensitive, white space around names
        and values is allowed. Values are written in ASCII digits (an optional sign, so that a
        negative value is named as such), as the service's published pattern says: Python's
        int() alone would also take ``4_096`` and other scripts' digits."""
        if not text.strip():
            raise InputError("shape: no dimensions given (expected e.g. M=1024,N=1024,K=1024)")
        dims: dict[str, int] = {}
        for part in text.split(","):
            if not part.strip():
                raise InputError(f"shape: an empty item between commas in {text!r}")
            name, sep, value = (p.strip() for p in part.partition("="))
            if not sep or not name:
                raise InputError(f"shape: expected NAME=VALUE, got {part.strip()!r}")
            if not _DIM_NAME.fullmatch(name):  # a quote or bracket around the text, say
                raise InputError(f"shape: {name!r} is not a dim name, in {text!r}")
            if name in dims:  # which value was meant? Not ours to pick
                raise InputError(f"shape: {name} given twice in {text!r}")
            if not _DIM_VALUE.fullmatch(value):
                raise InputError(f"shape: {name} must be an integer, got {value!r}")
            if len(value) > _MAX_DIGITS:  # int() refuses thousands of digits with a ValueError
                raise InputError(f"shape: {name} has {len(value)} digits: no dim is that large")
            dims[name] = int(value)
        return cls(dims)


class Tiling(Mapping[str, int]):
    """The tunable values of one kernel variant: runtime fields and compile-time choices.

    Immutable. The values live in one dict in name order; ``entries``, the (name, value) pairs,
    is built when asked for (hashing, comparing): the runtime builds a Tiling for every shape
    it answers the first time and keeps it, and a tuple of pairs beside the dict doubled what
    each kept answer holds.
    """

    __slots__ = ("_index",)
    _index: dict[str, int]

    def __init__(self, values: Mapping[str, int] | tuple[tuple[str, int], ...]) -> None:
        items = values.items() if isinstance(values, Mapping) else values
        object.__setattr__(self, "_index", dict(sorted((str(k), int(v)) for k, v in items)))

    @property
    def entries(self) -> tuple[tuple[str, int], ...]:
        """The (name, value) pairs in name order."""
        return tuple(self._index.items())

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Tiling is immutable: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Tiling is immutable: cannot delete {name}")

    def __getstate__(self) -> dict[str, int]:
        return self._index

    def __setstate__(self, state: dict[str, int]) -> None:
        object.__setattr__(self, "_index", state)

    def __getitem__(self, key: str) -> int:
        return self._index[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __hash__(self) -> int:
        return hash(self.entries)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Tiling):
            return self._index == other._index
        if isinstance(other, Mapping):
            return self._index == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Tiling({self._index!r})"

    def key(self) -> str:
        return canonical_json(self._index)

    @classmethod
    def of_ints(cls, values: dict[str, int]) -> Tiling:
        """A Tiling of a dict whose keys are already str and values int, without converting
        each (the runtime builds one per candidate of a nearest lookup)."""
        tiling = cls.__new__(cls)
        object.__setattr__(tiling, "_index", dict(sorted(values.items())))
        return tiling

    @classmethod
    def of_sorted(cls, values: dict[str, int]) -> Tiling:
        """:meth:`of_ints` of a dict whose keys are also in name order already (a copy of a
        Tiling's own dict, values changed), taken as it is: nothing sorted, nothing copied."""
        tiling = cls.__new__(cls)
        object.__setattr__(tiling, "_index", values)
        return tiling

    def replace(self, **changes: int) -> Tiling:
        values = dict(self._index)  # str keys, int values already
        for name, value in changes.items():
            values[name] = int(value)
        if len(values) == len(self._index):  # no new field: still in name order
            return Tiling.of_sorted(values)
        return Tiling.of_ints(values)


@dataclass(frozen=True)
class Workload:
    """What is tuned: one op (at one version) on one target, dtype and shape."""

    op: str
    op_version: str
    target: str
    dtype: str
    shape: Shape
    key: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        text = f"{self.op}|{self.op_version}|{self.target}|{self.dtype}|{self.shape.key()}"
        object.__setattr__(self, "key", hashlib.sha256(text.encode()).hexdigest()[:32])

    @property
    def study_name(self) -> str:
        return f"tilewise-{self.op}-{self.key}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "op_version": self.op_version,
            "target": self.target,
            "dtype": self.dtype,
            "shape": dict(self.shape),
            "key": self.key,
        }


#: The toolchain id of what was measured before tilewise kept toolchains: always stale.
UNKNOWN_TOOLCHAIN = "unknown"


@dataclass(frozen=True)
class Toolchain:
    """What measured a tiling, besides the kernel: a timing holds only for the same compiler,
    the same twin headers (or CANN version) and the same target profile (chip limits).

    ``compiler`` is e.g. ``clang 19.1`` (on Ascend, ``CANN 8.1.RC1``); ``headers`` is
    ``twin 1a2b3c4d5e6f`` (a hash of the twin headers) or ``CANN 8.1.RC1``; ``profile`` a hash of
    the target profile's sizes. ``id`` is a short hash of them all: what tilings are keyed by.
    """

    backend: str
    compiler: str
    headers: str
    profile: str
    id: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.backend == UNKNOWN_TOOLCHAIN:
            ident = UNKNOWN_TOOLCHAIN
        else:
            parts = [self.backend, self.compiler, self.headers, self.profile]
            ident = hashlib.sha256(canonical_json(parts).encode()).hexdigest()[:12]
        object.__setattr__(self, "id", ident)

    @classmethod
    def unknown(cls) -> Toolchain:
        u = UNKNOWN_TOOLCHAIN
        return cls(u, u, u, u)

    @property
    def known(self) -> bool:
        return self.id != UNKNOWN_TOOLCHAIN

    def __str__(self) -> str:
        if not self.known:
            return "unknown toolchain"
        # On Ascend the compiler and the headers are both the CANN version: named once.
        if self.headers == self.compiler:
            return f"{self.compiler}, profile {self.profile}"
        return f"{self.compiler}, {self.headers}, profile {self.profile}"

    def to_dict(self) -> dict[str, str]:
        return {
            "id": self.id,
            "backend": self.backend,
            "compiler": self.compiler,
            "headers": self.headers,
            "profile": self.profile,
        }

    def stale_reason(self, current: Toolchain | None) -> str | None:
        """Why an entry measured with this toolchain is stale on ``current`` (None: it is not;
        ``current`` None: this host's toolchain is not known, nothing to compare with)."""
        if current is None or self.id == current.id:
            return None
        if not self.known:
            return "toolchain not recorded (tuned before tilewise kept toolchains)"
        reasons = []
        if self.backend != current.backend:
            reasons.append(f"measured on {self.backend} (now {current.backend})")
        if self.compiler != current.compiler:
            reasons.append(f"compiled with {self.compiler} (now {current.compiler})")
        # On Ascend both are the CANN version: said once.
        same_as_compiler = self.headers == self.compiler and current.headers == current.compiler
        if self.headers != current.headers and not same_as_compiler:
            old, new = self.headers.partition(" ")[0], current.headers.partition(" ")[0]
            reasons.append(
                "twin headers changed"
                if old == new == "twin"
                else f"built with {self.headers} (now {current.headers})"
            )
        if self.profile != current.profile:
            reasons.append("target profile changed")
        return "; ".join(reasons) or "another toolchain"
