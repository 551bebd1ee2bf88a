"""The value types of the op specs (tunables, GM arguments, footprints, checks, traffic, the
cost model's block work, tiling struct fields, scalar parameters) and the integer helpers every
spec uses."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np

from tilewise.types import DTYPE_BYTES

MEMORIES: tuple[str, ...] = ("ub", "l1", "l0a", "l0b", "l0c", "bt")

NUMPY_DTYPES: dict[str, type[np.floating]] = {"float32": np.float32, "float16": np.float16}
#: The Ascend C spelling of each dtype, handed to the kernel as ``-DDTYPE_X=...``.
C_DTYPES: dict[str, str] = {"float32": "float", "float16": "half"}


#: A baseline's call (buffers preallocated), and what turns a call over a row range into one on
#: two halves of the rows in two threads (the benchmark's thread pool). An op's
#: ``baselines.py`` returns (one thread, two threads or None) from ``numpy_baseline`` and
#: (function, tensors) from ``torch_baseline``.
Fn = Callable[[], object]
Split = Callable[[Callable[[slice], object], int], Fn]
Baseline = tuple[Fn, Fn | None]
TorchCase = tuple[Callable[..., Any], tuple[Any, ...]]


def align32(nbytes: int) -> int:
    """Round up to 32 bytes, as ``TPipe::InitBuffer`` does."""
    return (nbytes + 31) // 32 * 32


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class Bound(NamedTuple):
    """An upper bound of a capped tunable at the asked shape: ``round_up(ceil(X / per),
    align)``, where X is another tunable's carried value (``field``) or the product of extents
    (``extent``, names of :meth:`OpSpec.extents`), and ``per`` divides it by another tunable's
    carried value (rows per block: rows / blocks)."""

    field: str | None = None
    extent: tuple[str, ...] = ()
    per: str | None = None
    align: int = 1


@dataclass(frozen=True)
class Carry:
    """How a tunable's value carries over from the shape it was tuned at to another shape.

    The stored (relative) form is what keeps its meaning across shapes; it is re-derived for the
    asked shape by :mod:`tilewise.kernels.ops._carry` (and by the C header, in the same integer
    arithmetic). ``extent`` names sizes of :meth:`OpSpec.extents`, multiplied.

    * ``split``: the value is the size of each piece of the extent, a multiple of ``align``;
      stored as the number of pieces ``ceil(E / v)``, re-derived as
      ``round_up(ceil(E' / pieces), align)`` (a core split keeps its core count).
    * ``count``: the value is a number of blocks over the extent; kept, lowered until no block
      is left without work (``round_up(ceil(E' / b), align) * (b - 1) < E'``).
    * ``whole``: the value is a chunk of the extent or, as its largest value, the whole extent
      rounded up to ``align``; stored as 0 for "the whole", re-derived as the whole of E' or the
      chunk, never above the whole of E'.
    * ``cap``: the value is kept, lowered to the largest value of its (shape-independent)
      domain within ``bounds`` (a base block no larger than the core's block). With
      ``product``, what is kept is the value times that tunable's (rows per tile times the row
      length: the elements of a UB tile), stored as the product and divided by the tunable's
      carried value (at least 1) before the bounds apply.
    Tunables without a Carry keep their value.
    """

    kind: Literal["split", "count", "whole", "cap"]
    extent: tuple[str, ...] = ()
    align: int = 1
    bounds: tuple[Bound, ...] = ()
    product: str | None = None


@dataclass(frozen=True)
class Tunable:
    """One tunable: its domain, whether changing it needs a new build, and how its value carries
    over to another shape (``carry``; None: kept)."""

    name: str
    values: tuple[int, ...]
    doc: str
    compile_time: bool = False
    define: str | None = None  # the macro a compile-time tunable sets, e.g. "BUFFER_NUM"
    carry: Carry | None = None

    def outside(self, value: int) -> str | None:
        """Why ``value`` lies outside the domain's range, or None. The op's rules and footprints
        assume values within it: outside, footprints go negative and launches can hang."""
        low, high = min(self.values), max(self.values)
        if low <= value <= high:
            return None
        return f"{self.name}={value} is outside its domain {low}..{high} for this workload"

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "values": list(self.values),
            "compile_time": self.compile_time,
            "doc": self.doc,
        }


@dataclass(frozen=True)
class GmArg:
    """One global-memory argument of the kernel entry, in call order."""

    name: str
    role: Literal["in", "out", "workspace"]
    elements: int
    dtype: str  # a numpy dtype name ("float32", "float16", "uint8")

    @property
    def nbytes(self) -> int:
        return self.elements * np.dtype(self.dtype).itemsize


class Buffer(NamedTuple):
    """One on-chip buffer the kernel's Init allocates, as the device sees it.

    A named tuple: the runtime's nearest lookup builds the buffers of each tiling it checks
    against a shape not tuned, and a tuple is made in half the time of a frozen dataclass."""

    name: str
    memory: Literal["ub", "l1", "l0a", "l0b", "l0c", "bt"]
    nbytes: int  # already rounded as the allocator rounds it (32 B for TPipe buffers)


@dataclass(frozen=True)
class Footprint:
    """Bytes of each on-chip memory one core uses."""

    ub: int = 0
    l1: int = 0
    l0a: int = 0
    l0b: int = 0
    l0c: int = 0
    bt: int = 0

    def to_dict(self) -> dict[str, int]:
        return {m: getattr(self, m) for m in MEMORIES}


@dataclass(frozen=True)
class Check:
    """The static verdict on a tiling: no compile, no launch."""

    valid: bool
    reasons: tuple[str, ...]
    footprint: Footprint
    limits: Mapping[str, int]
    #: Constraint values in Optuna's sense: > 0 means violated, by that relative amount.
    constraints: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "valid": self.valid,
            "reasons": list(self.reasons),
            "footprint": self.footprint.to_dict(),
            "limits": dict(self.limits),
        }


@dataclass(frozen=True)
class Traffic:
    """Global-memory bytes and flops of the op, fused and as separate kernels."""

    fused_bytes: int
    unfused_bytes: int
    flops: int
    unfused_kernels: int


@dataclass(frozen=True)
class BlockWork:
    """What one block of a launch does, for the Ascend cost model (per core, in bytes/MACs).

    ``stages`` is how many CopyIn/Compute/CopyOut (or Iterate/epilogue) rounds the block runs;
    with ``overlapped`` (double buffering) the pipes work on different rounds at once.
    ``vector_calls`` counts vector instructions issued: each has a fixed issue cost, which is
    what makes tiny tiles slow even when the bytes are the same. ``cube_share`` is how many
    blocks one cube core serves in turn: a MIX launch's vector blocks of one AI core (two on a
    910B) each drive its cube, whose loads into L1 (``cube_gm_bytes`` of ``gm_bytes``) they
    share as well.
    """

    blocks: int  # blocks launched (waves = ceil(blocks / cores))
    cores: int  # cores they run on
    gm_bytes: float  # GM <-> UB/L1 traffic of the busiest block
    cube_macs: float  # multiply-accumulates on the cube, padding included
    vector_bytes: float  # bytes read by vector instructions
    vector_calls: float
    stages: int
    overlapped: bool
    cube_share: int = 1
    cube_gm_bytes: float = 0.0  # of gm_bytes, what the cube side loads (A and B into L1)


@dataclass(frozen=True)
class StructField:
    """One 4-byte field of the packed tiling struct: its C name, struct code and value."""

    name: str  # as written in C, e.g. "cube.baseM"
    code: Literal["i", "I", "f"]
    value: int | float


@dataclass(frozen=True)
class Parameter:
    """A scalar a caller passes by keyword that is no part of the shape (a LeakyReLU's slope, a
    dropout's probability and seed).

    It reaches the kernel through fields of the tiling struct, filled at launch: the value goes
    into ``field``, and where ``pack`` is given, ``pack(value)`` gives every field it fills (a
    seed's mix, a probability and the scale that follows from it). The tiling struct the spec
    builds holds the default's. A tiling serves every value: the workload, the table's lookup
    and the build never see it."""

    name: str
    default: float
    field: str  # the tiling struct's field, as written in C
    doc: str
    #: An integer (a seed), else a real number a float32 holds.
    integer: bool = False
    #: The values it takes: at least ``low``, at most ``high`` (below it with ``high_open``);
    #: None leaves that end to the field's type. A real number is checked as float32 holds it.
    low: float | None = None
    high: float | None = None
    high_open: bool = False
    #: The fields the value fills, by C name (None: ``field`` alone, holding the value).
    pack: Callable[[float], Mapping[str, float]] | None = None

    def fields(self, value: float) -> Mapping[str, float]:
        """The struct fields ``value`` fills, by C name."""
        return {self.field: value} if self.pack is None else self.pack(value)

    @property
    def domain(self) -> str:
        """The values it takes, as an error message names them (empty when unbounded)."""
        if self.low is None and self.high is None:
            return ""
        low = "" if self.low is None else _number(self.low)
        high = "" if self.high is None else _number(self.high)
        if not low:
            return f"{'below' if self.high_open else 'at most'} {high}"
        if not high:
            return f"at least {low}"
        return f"in [{low}, {high}{')' if self.high_open else ']'}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def itemsize(dtype: str) -> int:
    return DTYPE_BYTES[dtype]


def round_up(value: int, multiple: int) -> int:
    return ceil_div(value, multiple) * multiple


def floor_pow2(value: int) -> int:
    return 1 << max(0, int(math.log2(max(value, 1))))
