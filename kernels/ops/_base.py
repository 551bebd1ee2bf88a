"""The op spec: everything tilewise knows about one fused operator besides its kernel source.

An :class:`OpSpec` subclass describes one Ascend C kernel file: the shape dims and dtypes it takes,
its tunables (runtime fields of the tiling struct and compile-time choices), and pure functions of
``(tiling, shape, dtype, target)``:

* :meth:`OpSpec.footprint` — bytes each on-chip memory holds for that tiling. It must equal what
  the kernel's ``Init`` allocates (every ``InitBuffer``, rounded up to 32 B, and the Matmul
  object's L1/L0 buffers), so a tiling rejected here is exactly one the device would reject.
* :meth:`OpSpec.rules` — every other validity rule violated (alignment, divisibility, core count).
* :meth:`OpSpec.default_tiling` — what a developer would write by hand: the baseline.
* :meth:`OpSpec.reference` and :meth:`OpSpec.tolerance` — the numpy answer and how close is right.
* :meth:`OpSpec.traffic` — bytes moved and flops, fused and unfused, for the fusion analysis.
* :meth:`OpSpec.tiling_struct` — the packed tiling struct the kernel receives, field by field.
* :meth:`OpSpec.carry` — a tiling tuned at one shape, re-derived for another by the tunables'
  carry rules (:mod:`tilewise.kernels.ops._carry`).

Dims are the shape: a tiling is tuned, stored and looked up per shape. A scalar that changes
what the kernel computes but not how it is tiled (a LeakyReLU's slope) is a
:attr:`OpSpec.parameters` entry instead: passed per call, packed into its tiling struct field at
launch (:meth:`OpSpec.pack_tiling`), taken by :meth:`OpSpec.reference` by keyword, and no part
of a workload, so one tuned tiling serves every value.

Specs hold no state; every method may be called from any thread.
"""

from __future__ import annotations

import hashlib
import math
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from functools import cached_property, lru_cache
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import numpy as np

from tilewise.errors import InputError, did_you_mean
from tilewise.kernels.ops import _inputs
from tilewise.kernels.ops._carry import CarryRules, carry_rules
from tilewise.kernels.ops._memo import ReadMemo, memo_of
from tilewise.kernels.ops._values import (
    C_DTYPES,
    MEMORIES,
    NUMPY_DTYPES,
    Baseline,
    BlockWork,
    Bound,
    Buffer,
    Carry,
    Check,
    Fn,
    Footprint,
    GmArg,
    Parameter,
    Split,
    StructField,
    TorchCase,
    Traffic,
    Tunable,
    align32,
    ceil_div,
    floor_pow2,
    itemsize,
    round_up,
)
from tilewise.kernels.targets import TargetProfile
from tilewise.types import DTYPE_ALIASES, DTYPES, Shape, Tiling

# The value types and helpers live in _values; the op modules import them from here too.
__all__ = [
    "C_DTYPES",
    "MEMORIES",
    "NUMPY_DTYPES",
    "Baseline",
    "BlockWork",
    "Bound",
    "Buffer",
    "Carry",
    "Check",
    "Fn",
    "Footprint",
    "GmArg",
    "OpSpec",
    "Parameter",
    "Split",
    "StructField",
    "TorchCase",
    "Traffic",
    "Tunable",
    "align32",
    "ceil_div",
    "floor_pow2",
    "itemsize",
    "round_up",
]


class OpSpec(ABC):
    """The contract of one fused operator; see the module docstring."""

    name: ClassVar[str]
    summary: ClassVar[str]
    dims: ClassVar[tuple[str, ...]]
    #: Small shapes that exercise the op's edge cases (a single row, ragged tiles, a zero
    #: padding), as ``Shape.parse`` reads them, small enough to run on the twin in a test: the
    #: tests that sweep every op use these (and :attr:`benchmark_shapes` where nothing runs).
    examples: ClassVar[tuple[str, ...]]
    #: The model-sized shapes ``tilewise bench kernels`` times the kernel at.
    benchmark_shapes: ClassVar[tuple[str, ...]] = ()
    #: The least value of a dim where it is not 1 (a padding may be 0).
    dim_floors: ClassVar[Mapping[str, int]] = {}
    dtypes: ClassVar[tuple[str, ...]] = DTYPES
    #: Kernel entry point, the C tiling struct it takes, and the file that holds both.
    entry: ClassVar[str]
    tiling_type: ClassVar[str]
    kernel_file: ClassVar[str]
    #: Cube + vector (MIX) kernels have 256 B less UB.
    mix: ClassVar[bool] = False
    #: The tunables' names, once some workload's tunables were built (see _tunable_names).
    _names: frozenset[str] | None = None
    #: How a caller passes the op's arrays (``tilewise.load_ops``): the numpy shape of each input
    #: and output, keyed by GM argument name, as dims (or names :meth:`extents` adds).
    layout: ClassVar[Mapping[str, tuple[str, ...]]]
    #: Dims no array holds, which a caller passes by keyword (a convolution's stride and pad).
    attributes: ClassVar[tuple[str, ...]] = ()
    #: Scalars a caller may pass by keyword that are no part of the shape (see the module
    #: docstring); :meth:`reference` takes each by keyword, at its default when not given.
    parameters: ClassVar[tuple[Parameter, ...]] = ()
    #: The C expression (over the dims) of each name :meth:`extents` adds that a carry rule
    #: reads: the C header re-derives tilings with them.
    c_extents: ClassVar[Mapping[str, str]] = {}

    # -- identity --------------------------------------------------------------------------
    @property
    def kernel_path(self) -> Path:
        return Path(__file__).parent / self.name / self.kernel_file

    @cached_property
    def version(self) -> str:
        """Hash of the kernel source and the spec source: a changed kernel is a new workload.

        The spec source is every class from the op's own up to OpSpec (not included): a spec that
        inherits another op's tiling changes when that op's class does."""
        import inspect

        digest = hashlib.sha256(self.kernel_path.read_bytes())
        for cls in type(self).__mro__[: type(self).__mro__.index(OpSpec)]:
            digest.update(inspect.getsource(cls).encode())
        return digest.hexdigest()[:12]

    # -- inputs ----------------------------------------------------------------------------
    def validate_shape(self, shape: Mapping[str, int], *, max_elements: int | None = None) -> Shape:
        """Return ``shape`` as a :class:`Shape`, or raise InputError naming what is wrong."""
        return _inputs.validate_shape(self, shape, max_elements=max_elements)

    @cached_property
    def roles(self) -> dict[str, str]:
        """Each GM argument's role ("in", "out" or "workspace") by name, in call order."""
        unit = Shape({d: 1 for d in self.dims})
        return {arg.name: arg.role for arg in self.gm_args(unit, "float32")}

    def extents(self, shape: Shape) -> Mapping[str, int]:
        """The sizes :attr:`layout` names: the dims, and what an op derives from them."""
        return shape

    def array_shapes(self, shape: Shape) -> dict[str, tuple[int, ...]]:
        """The numpy shape of each input and output at ``shape``, by GM argument name."""
        sizes = self.extents(shape)
        return {name: tuple(sizes[d] for d in dims) for name, dims in self.layout.items()}

    def shape_of(
        self, shapes: Mapping[str, tuple[int, ...]], attributes: Mapping[str, int]
    ) -> Shape:
        """The shape of a call, read from its inputs' numpy shapes (by GM argument name) and
        the :attr:`attributes` given by keyword.

        Raises:
            InputError: an input of the wrong rank, two inputs that disagree on a dim, a
                missing or unknown attribute, or a shape the op does not take; the message
                names the argument.
        """
        return _inputs.shape_of(self, shapes, attributes)

    def bind_parameters(self, given: Mapping[str, object]) -> dict[str, float]:
        """Every one of :attr:`parameters` by name: its value in ``given``, else its default.

        Raises:
            InputError: a name that is no parameter of the op, a value that is not a finite
                real number a float32 holds (the tiling struct's field is one; an integer for
                an integer parameter), or one outside the parameter's domain.
        """
        return _inputs.bind_parameters(self, given)

    def baselines(self) -> ModuleType:
        """The op's ``baselines`` module, beside its spec: ``numpy_baseline(shape, inputs,
        split)`` and ``torch_baseline(shape, tensors)``, the unfused alternatives the kernels
        benchmark times the kernel against."""
        import importlib

        return importlib.import_module(type(self).__module__.rsplit(".", 1)[0] + ".baselines")

    def matmul_flops(self, shape: Shape) -> int:
        """Flops of the op's matrix multiplications (2 per multiply-add); 0 for an op without
        one. The kernels benchmark holds these ops to the machine's peak, the others to its
        bandwidth."""
        return 0

    def example_shapes(self) -> list[Shape]:
        """:attr:`examples`, validated."""
        return self.parse_shapes(self.examples)

    def parse_shapes(self, texts: tuple[str, ...]) -> list[Shape]:
        """Shapes written as ``Shape.parse`` reads them (:attr:`examples`,
        :attr:`benchmark_shapes`), validated."""
        return [self.validate_shape(Shape.parse(text)) for text in texts]

    def log_position(self, dim: str, value: int) -> float:
        """Where ``value`` of ``dim`` lies on the log2 scale that shape distances are measured
        on: ``log2(value)``, shifted so that the dim's floor sits at 0 (``log2(pad + 1)`` for a
        padding that may be 0). The runtime, the C header and the warm start share it."""
        return math.log2(value + 1 - self.dim_floors.get(dim, 1))

    def shape_distance(self, a: Mapping[str, int], b: Mapping[str, int]) -> float:
        """Sum over the dims of the distance of their log positions."""
        return sum(abs(self.log_position(d, a[d]) - self.log_position(d, b[d])) for d in self.dims)

    def validate_dtype(self, dtype: str) -> str:
        if dtype not in self.dtypes:
            hint = did_you_mean(dtype, self.dtypes, aliases=DTYPE_ALIASES)
            raise InputError(
                f"{self.name}: unknown dtype {dtype!r}{hint}; supported: {', '.join(self.dtypes)}"
            )
        return dtype

    # -- the search space --------------------------------------------------------------------
    #: Compile-time tunables (template parameters / macros); never shape-dependent.
    compile_tunables: ClassVar[tuple[Tunable, ...]] = ()

    @abstractmethod
    def runtime_tunables(
        self, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Tunable, ...]:
        """Domains of the tiling-struct fields searched for this workload. The domains may
        depend on the workload; the names may not (the checks rely on it)."""

    def tunables(self, shape: Shape, dtype: str, target: TargetProfile) -> tuple[Tunable, ...]:
        """Every tunable of this workload: runtime fields, then compile-time choices."""
        return (*self.runtime_tunables(shape, dtype, target), *self.compile_tunables)

    @lru_cache(maxsize=1024)  # noqa: B019 - specs are module-level singletons
    def _tunable_names(self, shape: Shape, dtype: str, target: TargetProfile) -> frozenset[str]:
        names = frozenset(t.name for t in self.tunables(shape, dtype, target))
        # Every op's names are the same for every workload (tests/kernels/ops/test_specs.py holds
        # each op to it): kept once, they spare a shape never seen before from building its
        # tunables just to name them (the runtime's nearest search checks such shapes).
        self._names = names
        return names

    def compile_key(self, tiling: Tiling, dtype: str) -> dict[str, str]:
        """The compile-time part of a tiling as ``-D`` macros: a build is keyed by this only."""
        defines = {"DTYPE_X": C_DTYPES[dtype]}
        for tunable in self.compile_tunables:
            defines[tunable.define or tunable.name] = str(tiling[tunable.name])
        return defines

    # -- static checks -----------------------------------------------------------------------
    @abstractmethod
    def buffers(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Buffer, ...]:
        """Every buffer one core holds at once for this tiling: each InitBuffer (one entry
        per queue slot) and the Matmul object's L1/L0 buffers, in allocation order."""

    def footprint(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> Footprint:
        """Bytes per memory: the sum of :meth:`buffers`."""
        totals = dict.fromkeys(MEMORIES, 0)
        for buffer in self.buffers(tiling, shape, dtype, target):
            totals[buffer.memory] += buffer.nbytes
        return Footprint(**totals)

    @abstractmethod
    def rules(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> list[str]:
        """Every validity rule (besides memory sizes) the tiling breaks, as readable reasons."""

    def _require_fields(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> None:
        # A Tiling's own dict compares its keys with the names in C, without iterating it.
        fields = tiling._index.keys() if type(tiling) is Tiling else frozenset(tiling)
        if fields == self._names:
            return
        names = self._tunable_names(shape, dtype, target)
        if fields != names:
            fields = frozenset(fields)
            missing, extra = sorted(names - fields), sorted(fields - names)
            raise InputError(
                f"{self.name}: tiling fields do not match the tunables"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(extra)}" if extra else "")
            )

    def valid(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> bool:
        """``check(...).valid``, sooner: the rules first (most carried tilings that fail break
        one), then the footprint, kept per the values it reads (:meth:`_sized_memo`): the
        runtime checks a carried tiling on every first-time answer, a default heuristic several
        candidates."""
        self._require_fields(tiling, shape, dtype, target)
        try:
            if self.rules(tiling, shape, dtype, target):
                return False
            return not self._sized_memo(dtype, target)(tiling, shape)[2]
        except ArithmeticError:
            return False

    def validator(self, dtype: str, target: TargetProfile) -> Callable[[Tiling, Shape], bool]:
        """:meth:`valid` for ``dtype`` on ``target``, its footprint memo found once, for
        tilings whose fields are known to be the tunables' (a table's carried tilings: their
        relative forms were checked when it loaded), which it does not check again."""
        rules, sized = self.rules, self._sized_memo(dtype, target)

        def valid(tiling: Tiling, shape: Shape) -> bool:
            try:
                return not rules(tiling, shape, dtype, target) and not sized(tiling, shape)[2]
            except ArithmeticError:
                return False

        return valid

    def check(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> Check:
        """Footprint against the target's limits plus :meth:`rules`."""
        self._require_fields(tiling, shape, dtype, target)
        limits = target.limits(mix=self.mix)
        try:
            reasons = self.rules(tiling, shape, dtype, target)
            footprint, sized, overflows = self._sized_memo(dtype, target)(tiling, shape)
        except ArithmeticError as exc:
            # Values far outside the tunables' domains (a zero step, a zero base: a hand-written
            # `tilewise check`, a tampered table) break the rules' own arithmetic: such a tiling
            # is invalid, not a crash.
            reason = f"tiling values outside every domain: {exc}"
            broken = {"rules": 1.0, **dict.fromkeys(MEMORIES, 0.0)}
            return Check(False, (reason,), Footprint(), limits, broken)
        constraints: dict[str, float] = {"rules": float(len(reasons)), **sized}
        reasons.extend(overflows)
        return Check(not reasons, tuple(reasons), footprint, limits, constraints)

    def _sized(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Footprint, dict[str, float], tuple[str, ...]]:
        """The footprint, each memory's constraint value (> 0: over its limit by that share)
        and the overflows as reasons."""
        footprint = self.footprint(tiling, shape, dtype, target)
        limits = target.limits(mix=self.mix)
        constraints: dict[str, float] = {}
        overflows = []
        for memory in MEMORIES:
            used, limit = getattr(footprint, memory), limits[memory]
            excess = used - limit
            constraints[memory] = excess / max(limit, 1)
            if excess > 0:
                overflows.append(f"{memory.upper()} overflow: needs {used} B, limit {limit} B")
        return footprint, constraints, tuple(overflows)

    def _sized_memo(self, dtype: str, target: TargetProfile) -> ReadMemo:
        """:meth:`_sized` for ``dtype`` on ``target``, kept per the values the footprint reads
        (:mod:`tilewise.kernels.ops._memo`): tilings carried to new shapes and a default
        heuristic's candidates repeat the few fields the buffers depend on."""
        return memo_of(self, dtype, target, lambda t, s: self._sized(t, s, dtype, target))  # type: ignore[arg-type]

    @abstractmethod
    def default_tiling(self, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
        """The hand-written heuristic every tuned result is compared with. Always valid."""

    def warm_defaults(self, dtype: str, target: TargetProfile) -> None:
        """Fill what :meth:`default_tiling` keeps for any shape (a tiling table calls this when
        it loads a group), so that a first-time shape pays only its own part; nothing to fill
        for most ops."""

    # -- other shapes ------------------------------------------------------------------------
    def carry_rules(self, dtype: str, target: TargetProfile) -> CarryRules:
        """The tunables' carry rules, resolved for ``dtype`` and ``target`` (cached)."""
        return carry_rules(self, dtype, target)

    def carry(
        self, tiling: Tiling, tuned: Shape, asked: Shape, dtype: str, target: TargetProfile
    ) -> Tiling | None:
        """``tiling``, tuned at ``tuned``, re-derived for ``asked`` by the carry rules: the
        same core split in pieces, the same blocks where each gets work, base blocks no larger
        than a core's block (see :class:`~tilewise.kernels.ops._values.Carry`). ``tiling``
        itself at the tuned shape; None when a value would not fit int32. Not checked: ask
        :meth:`valid`."""
        return carry_rules(self, dtype, target).carry(tiling, tuned, asked)

    def snap(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
        """Each value moved to the nearest value of its domain at ``shape`` (on a log2 scale,
        ties to the smaller): a carried tiling as a point of the search space."""
        out = {}
        for tunable in self.tunables(shape, dtype, target):
            value = tiling[tunable.name]
            out[tunable.name] = min(
                tunable.values, key=lambda v: (abs(math.log2((v + 1) / (value + 1))), v)
            )
        return Tiling(out)

    # -- running -------------------------------------------------------------------------------
    @abstractmethod
    def gm_args(self, shape: Shape, dtype: str) -> tuple[GmArg, ...]:
        """The kernel's GM arguments in call order (inputs, outputs, workspace)."""

    @abstractmethod
    def tiling_struct(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[StructField, ...]:
        """The tiling struct the kernel takes, in field order (all fields 4 bytes)."""

    @abstractmethod
    def block_dim(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> int:
        """How many blocks of the kernel run, each its ``GetBlockIdx()``: vector blocks for a
        kernel of vector and cube work (:attr:`mix`). The twin launches as many."""

    def launch_blocks(self, blocks: int, target: TargetProfile) -> int:
        """The ``blockDim`` an NPU launch of ``blocks`` (:meth:`block_dim`) takes on
        ``target``: a MIX kernel (``KERNEL_TYPE_MIX_AIC_1_2``) is launched on AI cores, each a
        cube core and its vector cores (two on a 910B, one on a 310P), whose vector blocks'
        indices run over ``[0, ratio * blockDim)``; where the count is not a multiple of the
        ratio, the last vector blocks have no tile and return at once."""
        ratio = target.vector_per_cube if self.mix else 1
        return -(-blocks // ratio)

    def pack_tiling(
        self,
        tiling: Tiling,
        shape: Shape,
        dtype: str,
        target: TargetProfile,
        parameters: Mapping[str, object] | None = None,
    ) -> bytes:
        """The tiling struct as the kernel reads it, with each of :attr:`parameters` in its
        field: its value in ``parameters``, else its default (:meth:`bind_parameters`)."""
        return self.pack_struct(self.tiling_struct(tiling, shape, dtype, target), parameters)

    def pack_struct(
        self, fields: tuple[StructField, ...], parameters: Mapping[str, object] | None = None
    ) -> bytes:
        """:meth:`pack_tiling` of the fields :meth:`tiling_struct` returned: a caller that
        keeps them packs other parameter values without building the struct again."""
        bound = self.bind_parameters(parameters or {}) if self.parameters else {}
        by_field = {
            name: value for p in self.parameters for name, value in p.fields(bound[p.name]).items()
        }
        values = [by_field.get(f.name, f.value) for f in fields]
        try:
            return struct.pack("<" + "".join(f.code for f in fields), *values)
        except struct.error:
            for field, value in zip(fields, values, strict=True):
                try:
                    struct.pack("<" + field.code, value)
                except struct.error:
                    kind = {"i": "int32", "I": "uint32", "f": "float"}[field.code]
                    raise InputError(
                        f"{self.name}: the tiling field {field.name} = {value} does not fit the "
                        f"kernel's {kind}: the shape is too large for this kernel"
                    ) from None
            raise

    @abstractmethod
    def make_inputs(
        self, shape: Shape, dtype: str, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        """Inputs by GM arg name, scaled so that outputs are of order one."""

    @abstractmethod
    def reference(
        self, inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str
    ) -> dict[str, np.ndarray]:
        """Outputs by GM arg name, computed with numpy. An op with :attr:`parameters` also
        takes each by keyword, at its default when not given."""

    def tolerance(self, dtype: str, shape: Shape) -> tuple[float, float]:
        """(rtol, atol) an output must meet."""
        return (1e-4, 1e-4) if dtype == "float32" else (1e-2, 1e-2)

    # -- analysis ------------------------------------------------------------------------------
    @abstractmethod
    def traffic(self, shape: Shape, dtype: str) -> Traffic: ...

    def block_work(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> BlockWork:
        """The work of the busiest block, for the Ascend cost model."""
        raise NotImplementedError(f"{self.name} has no cost model")
