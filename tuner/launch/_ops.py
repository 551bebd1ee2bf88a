"""The tuned kernels as Python functions of numpy arrays: :class:`Ops` and :class:`Choice`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilewise.errors import BackendError, InputError
from tilewise.kernels.backends._cpu_twin import CpuTwinBackend
from tilewise.kernels.ops import OPS, OpSpec, get_op
from tilewise.kernels.ops._base import MEMORIES, NUMPY_DTYPES, StructField
from tilewise.kernels.targets import get_target
from tilewise.launch._host import CoreLimits, Host, Variant, shared_host
from tilewise.runtime import Source, TilingTable
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling

_log = logging.getLogger(__name__)

TARGET = "cpu-twin"
#: Plans (tiling checked, struct packed, variant loaded) kept per Ops: the most recent ones.
PLAN_CACHE = 4096
#: What an op returns (and takes as ``out``): its output, or a tuple of its outputs.
Result = np.ndarray | tuple[np.ndarray, ...]
#: The dtype name of each numpy dtype a kernel takes (native byte order only).
_DTYPES = {np.dtype(t): name for name, t in NUMPY_DTYPES.items()}


@dataclass(frozen=True)
class Choice:
    """What one call ran: the op, the dtype and shape read from its arrays, the tiling, and
    where the tiling came from (the table's ``exact``/``nearest`` entry, or ``default``)."""

    op: str
    dtype: str
    shape: Shape
    tiling: Tiling
    source: Source


@dataclass(frozen=True)
class _Plan:
    """Everything a launch of one (op, dtype, shape, tiling) needs besides the arrays."""

    choice: Choice
    outputs: dict[str, tuple[int, ...]]  # each output's GM argument name and numpy shape
    variant: Variant
    fields: tuple[StructField, ...]  # the tiling struct, parameters at their defaults
    packed: bytes  # ... and packed
    block_dim: int
    limits: CoreLimits
    workspace: dict[int, int]  # GM position -> bytes


class Ops:
    """Every op of :func:`tilewise.kernels.ops.list_ops` as a method on numpy arrays.

    ``ops.<op>(*inputs, out=None, **attributes)`` takes the op's inputs in GM order (or by
    name), checks them, reads the shape from their numpy shapes (``OpSpec.layout``; dims no
    array holds, such as a convolution's ``stride`` and ``pad``, by keyword), asks the table
    for the tiling (target ``cpu-twin``), builds the variant once (the cpu-twin backend's
    cached build, shared with the tuner) and launches it in this process. The op's
    ``OpSpec.parameters`` (a convolution's ``negative_slope``) are keywords too, at their
    defaults when not given; they are no part of the shape, so the tiling is the same for
    every value. The output is
    written into ``out`` when given (checked like the inputs), else into a new array; an op
    with several outputs (``swiglu_grad``: dg, du) returns them as a tuple in GM order and
    takes ``out`` as such a tuple.

    Thread-safe: launches of every :class:`Ops` in the process are serialised by one lock (the
    host's thread pool runs one launch at a time, on every core); :attr:`last_choice` is per
    thread.
    """

    def __init__(self, table: TilingTable, *, settings: Settings | None = None) -> None:
        self.table = table
        self._backend = CpuTwinBackend(settings)
        self._target = get_target(TARGET)
        self._host: Host | None = None
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._variants: dict[tuple[str, tuple[tuple[str, str], ...]], Variant] = {}
        self._lock = threading.Lock()  # the caches above; held while a variant builds
        self._local = threading.local()

    @property
    def last_choice(self) -> Choice | None:
        """The :class:`Choice` of this thread's last successful call (None before one)."""
        choice: Choice | None = getattr(self._local, "choice", None)
        return choice

    def __getattr__(self, name: str) -> Callable[..., Result]:
        if name not in OPS:
            raise AttributeError(f"{type(self).__name__!r} has no op {name!r}")
        spec = get_op(name)

        def op(*arrays: Any, out: Result | None = None, **named: Any) -> Result:
            return self.call(name, *arrays, out=out, **named)

        op.__name__ = op.__qualname__ = name
        op.__doc__ = (
            f"{spec.summary}\n\nInputs: {', '.join(_inputs(spec))}."
            + (f" Attributes: {', '.join(spec.attributes)}." if spec.attributes else "")
            + "".join(f" {p.name}={p.default}: {p.doc}." for p in spec.parameters)
        )
        self.__dict__[name] = op  # found without __getattr__ from now on
        return op

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *OPS})

    def call(self, op: str, *arrays: Any, out: Result | None = None, **named: Any) -> Result:
        """``ops.<op>(...)``: run ``op`` on ``arrays``; see the class docstring.

        Raises:
            InputError: an unknown op, or an argument that breaks a rule (named in the message).
            BackendError: the variant cannot be built, or the kernel reported an error.
        """
        spec = get_op(op)
        inputs, attributes, parameters = _bind(spec, arrays, named)
        dtype = _check_inputs(spec, inputs)
        plan = self._plan(spec, dtype, inputs, attributes)
        packed = spec.pack_struct(plan.fields, parameters) if parameters else plan.packed
        outputs = _outputs(spec, plan.outputs, out, dtype, inputs)
        bound = {**inputs, **outputs}
        gm = [
            None if role == "workspace" else bound[name].ctypes.data
            for name, role in spec.roles.items()
        ]
        self._shared_host().launch(
            plan.variant, gm, plan.workspace, packed, plan.block_dim, plan.limits
        )
        self._local.choice = plan.choice
        results = tuple(outputs.values())
        return results[0] if len(results) == 1 else results

    def _shared_host(self) -> Host:
        if self._host is None:
            self._host = shared_host(self._backend)
        return self._host

    def _plan(
        self,
        spec: OpSpec,
        dtype: str,
        inputs: Mapping[str, np.ndarray],
        attributes: Mapping[str, Any],
    ) -> _Plan:
        """The plan of a call, kept per op, dtype, input shapes and attributes: a table never
        changes, so a call of a shape seen before skips reading the shape and the lookup."""
        shapes = {name: array.shape for name, array in inputs.items()}
        key = (spec.name, dtype, *shapes.values(), *sorted(attributes.items()))
        try:
            plan = self._plans.get(key)
        except TypeError:  # an attribute that is no integer: shape_of names it below
            plan = None
        if plan is not None:
            return plan
        shape = spec.shape_of(shapes, attributes)
        answer = self.table.lookup(spec.name, target=TARGET, dtype=dtype, shape=shape)
        with self._lock:
            plan = self._make_plan(spec, dtype, shape, answer.tiling, answer.source)
            while len(self._plans) >= PLAN_CACHE:
                del self._plans[next(iter(self._plans))]
            self._plans[key] = plan
        return plan

    def _make_plan(
        self, spec: OpSpec, dtype: str, shape: Shape, tiling: Tiling, source: Source
    ) -> _Plan:
        target = self._target
        if not spec.valid(tiling, shape, dtype, target):
            # Only tilings that pass the op's checks for this shape run in this process (an
            # untested one could write past a buffer here, not in the tuner's runner).
            _log.warning(
                "%s %s %s: the table's %s tiling fails the op's checks; using the default",
                spec.name,
                dtype,
                dict(shape),
                source,
            )
            tiling, source = spec.default_tiling(shape, dtype, target), "default"
        variant = self._variant(spec, spec.compile_key(tiling, dtype))
        fields = spec.tiling_struct(tiling, shape, dtype, target)
        limits = target.limits(mix=spec.mix)
        args = spec.gm_args(shape, dtype)
        shapes = spec.array_shapes(shape)
        return _Plan(
            choice=Choice(spec.name, dtype, shape, tiling, source),
            outputs={a.name: shapes[a.name] for a in args if a.role == "out"},
            variant=variant,
            fields=fields,
            packed=spec.pack_struct(fields),
            block_dim=spec.block_dim(tiling, shape, dtype, target),
            # Unchecked, as the tuner's timed launches: the tiling passed the checks above.
            limits=CoreLimits(*(limits[m] for m in MEMORIES), 0),
            workspace={i: a.nbytes for i, a in enumerate(args) if a.role == "workspace"},
        )

    def _variant(self, spec: OpSpec, defines: dict[str, str]) -> Variant:
        key = (spec.name, tuple(sorted(defines.items())))
        found = self._variants.get(key)
        if found is None:
            build = self._backend.build(spec, defines)
            if not build.ok or build.artifact is None:
                raise BackendError(
                    f"{spec.name} {defines}: the variant does not build: {build.error}"
                )
            found = self._variants[key] = self._shared_host().variant(build.artifact)
        return found


def _inputs(spec: OpSpec) -> list[str]:
    return [name for name, role in spec.roles.items() if role == "in"]


def _bind(
    spec: OpSpec, arrays: tuple[Any, ...], named: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(inputs by name, attributes, parameters) from a call's positional and keyword
    arguments; a keyword that is neither an input nor a parameter is taken for an attribute
    (``OpSpec.shape_of`` names the unknown ones)."""
    names = _inputs(spec)
    if len(arrays) > len(names):
        raise InputError(
            f"{spec.name}: takes {len(names)} arrays ({', '.join(names)}), got {len(arrays)}"
        )
    inputs = dict(zip(names, arrays, strict=False))
    attributes: dict[str, Any] = {}
    parameters: dict[str, Any] = {}
    for key, value in named.items():
        if key in inputs:
            raise InputError(f"{spec.name}: {key} given twice (by position and by name)")
        if key in names:
            inputs[key] = value
        elif any(p.name == key for p in spec.parameters):
            parameters[key] = value
        else:
            attributes[key] = value
    missing = [n for n in names if n not in inputs]
    if missing:
        raise InputError(f"{spec.name}: missing input {', '.join(missing)}")
    return inputs, attributes, spec.bind_parameters(parameters) if parameters else {}


def _check_array(spec: OpSpec, name: str, value: Any) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise InputError(f"{spec.name}: {name} must be a numpy array, got {type(value).__name__}")
    if not (value.flags.c_contiguous and value.flags.aligned):
        raise InputError(
            f"{spec.name}: {name} must be C-contiguous and aligned (np.ascontiguousarray)"
        )
    return value


def _check_inputs(spec: OpSpec, inputs: Mapping[str, Any]) -> str:
    """The dtype of the call: that of the first input, which every input must have."""
    dtype = ""
    for name, value in inputs.items():
        array = _check_array(spec, name, value)
        if not dtype:
            dtype = _DTYPES.get(array.dtype, "")
            if dtype not in spec.dtypes:
                raise InputError(
                    f"{spec.name}: {name} has dtype {array.dtype}; supported: "
                    f"{', '.join(spec.dtypes)} in native byte order"
                )
        elif array.dtype != np.dtype(NUMPY_DTYPES[dtype]):
            first = next(iter(inputs))
            raise InputError(
                f"{spec.name}: {name} has dtype {array.dtype}, but {first} has {dtype}: "
                "every array of a call has the same dtype"
            )
    return dtype


def _outputs(
    spec: OpSpec,
    shapes: Mapping[str, tuple[int, ...]],
    out: Result | None,
    dtype: str,
    inputs: Mapping[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """Each output's array by GM name: ``out``'s, checked, or new ones."""
    if out is None:
        return {name: np.empty(shape, NUMPY_DTYPES[dtype]) for name, shape in shapes.items()}
    given = out if isinstance(out, tuple) else (out,)
    if len(given) != len(shapes):
        raise InputError(
            f"{spec.name}: out must be {'a tuple of ' if len(shapes) > 1 else ''}"
            f"{len(shapes)} array{'s' if len(shapes) > 1 else ''} ({', '.join(shapes)}), "
            f"got {len(given)}"
        )
    arrays = dict(zip(shapes, given, strict=True))
    for i, (name, array) in enumerate(arrays.items()):
        # Another output counts as an input here: two outputs must not overlap either.
        others = {**inputs, **dict(list(arrays.items())[:i])}
        _check_out(spec, name, array, shapes[name], dtype, others)
    return arrays


def _check_out(
    spec: OpSpec,
    name: str,
    out: Any,
    shape: tuple[int, ...],
    dtype: str,
    inputs: Mapping[str, np.ndarray],
) -> None:
    array = _check_array(spec, f"out ({name})", out)
    if array.dtype != np.dtype(NUMPY_DTYPES[dtype]) or array.shape != shape:
        raise InputError(
            f"{spec.name}: out ({name}) must be a {dtype} array of shape {shape}, got "
            f"{array.dtype} {array.shape}"
        )
    if not array.flags.writeable:
        raise InputError(f"{spec.name}: out ({name}) is read-only")
    for other, value in inputs.items():
        if np.may_share_memory(array, value):
            raise InputError(f"{spec.name}: out ({name}) overlaps the input {other}")
