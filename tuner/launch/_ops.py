"""The tuned kernels as Python functions of numpy arrays: :class:`Ops` and :class:`Choice`."""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilewise.errors import InputError, close_matches
from tilewise.forks import renew_in_child
from tilewise.kernels.ops import OPS, OpSpec, get_op
from tilewise.kernels.ops._base import NUMPY_DTYPES, StructField
from tilewise.launch._device import Device, Launch, open_device
from tilewise.runtime import Source, TilingTable
from tilewise.settings import Settings, get_settings
from tilewise.types import Shape, Tiling

_log = logging.getLogger(__name__)

#: The target of an Ops unless told otherwise.
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
    fields: tuple[StructField, ...]  # the tiling struct, parameters at their defaults
    launch: Launch  # with those fields packed


class Ops:
    """Every op of :func:`tilewise.kernels.ops.list_ops` as a method on numpy arrays.

    ``ops.<op>(*inputs, out=None, **attributes)`` takes the op's inputs in GM order (or by
    name), checks them, reads the shape from their numpy shapes (``OpSpec.layout``; dims no
    array holds, such as a convolution's ``stride`` and ``pad``, by keyword), asks the table
    for the tiling of :attr:`target`, builds the variant once (the target's backend's cached
    build, shared with the tuner) and launches it from this process: on the cpu-twin in
    place on the arrays, on an Ascend target through ACL on device ``device``, the arrays
    copied to the device and the outputs back. The op's ``OpSpec.parameters`` (a
    convolution's ``negative_slope``) are keywords too, at their defaults when not given; they
    are no part of the shape, so the tiling is the same for every value. The output is
    written into ``out`` when given (checked like the inputs), else into a new array; an op
    with several outputs (``swiglu_grad``: dg, du) returns them as a tuple in GM order and
    takes ``out`` as such a tuple.

    Thread-safe: launches of every :class:`Ops` in the process are serialised by one lock per
    device kind (the twin's thread pool runs one launch at a time, on every core);
    :attr:`last_choice` is per thread.

    Raises (at construction) InputError for an unknown target, BackendError when the target's
    toolkit is missing (an Ascend target without CANN: the message names ASCEND_HOME_PATH and
    set_env.sh) or the host has no NPU.
    """

    def __init__(
        self,
        table: TilingTable,
        *,
        settings: Settings | None = None,
        target: str = TARGET,
        device: int = 0,
    ) -> None:
        self._setup(table, open_device(target, settings=settings or get_settings(), device=device))

    @classmethod
    def with_device(cls, table: TilingTable, device: Device) -> Ops:
        """The Ops of ``table`` on a Device opened already (see :func:`load_ops`)."""
        ops = cls.__new__(cls)
        ops._setup(table, device)
        return ops

    def _setup(self, table: TilingTable, device: Device) -> None:
        self.table = table
        self._device = device
        #: The target whose tilings (and checks) the calls use, e.g. ``cpu-twin``.
        self.target: str = device.target.name
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._lock = threading.Lock()  # the plan cache; held while a variant builds
        renew_in_child(self, "_lock")
        self._local = threading.local()

    @property
    def last_choice(self) -> Choice | None:
        """The :class:`Choice` of this thread's last successful call (None before one)."""
        choice: Choice | None = getattr(self._local, "choice", None)
        return choice

    def __getattr__(self, name: str) -> Callable[..., Result]:
        if name not in OPS:
            meant = close_matches(name, OPS) if not name.startswith("_") else []
            hint = f" (did you mean {' or '.join(meant)}?)" if meant else ""
            raise AttributeError(f"{type(self).__name__!r} has no op {name!r}{hint}")
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
        shapes = {name: array.shape for name, array in inputs.items()}
        plan = self._plan(spec, dtype, shapes, attributes)
        packed = spec.pack_struct(plan.fields, parameters) if parameters else None
        outputs = _outputs(spec, plan.outputs, out, dtype, inputs)
        bound = {**inputs, **outputs}
        plan.launch(
            [None if role == "workspace" else _address(bound[name])
             for name, role in spec.roles.items()],
            packed=packed,
        )  # fmt: skip
        self._local.choice = plan.choice
        results = tuple(outputs.values())
        return results[0] if len(results) == 1 else results

    def output_shapes(
        self,
        op: str,
        dtype: str,
        shapes: Mapping[str, tuple[int, ...]],
        keywords: Mapping[str, Any],
    ) -> dict[str, tuple[int, ...]]:
        """The shape of each output (by GM name) of ``op`` on inputs of ``shapes`` (by GM
        name) with ``keywords`` (attributes and parameters, as ``ops.<op>`` takes them), for a
        caller that allocates the outputs itself before :meth:`launch`.

        Raises:
            InputError: the shapes or keywords break a rule of the op.
        """
        spec = get_op(op)
        attributes, _ = _keywords(spec, keywords)
        return dict(self._plan(spec, dtype, shapes, attributes).outputs)

    def launch(
        self,
        op: str,
        dtype: str,
        shapes: Mapping[str, tuple[int, ...]],
        keywords: Mapping[str, Any],
        addresses: Mapping[str, int],
        *,
        device_memory: bool = False,
        stream: int | None = None,
        device: int | None = None,
    ) -> Choice:
        """Run ``op`` on memory its caller owns: ``addresses`` of every input and output (by
        GM name; C-contiguous buffers of ``dtype`` whose shapes are ``shapes`` and
        :meth:`output_shapes`), unchecked beyond the shapes, with ``keywords`` (attributes and
        parameters). This is what the torch ops run on
        NPU tensors: ``device_memory`` (device addresses), ``stream`` (a raw ACL stream) and
        ``device`` (the device id) are as :class:`~tilewise.launch._device.Launch` takes them.
        Returns the :class:`Choice`, also this thread's :attr:`last_choice`.

        Raises:
            InputError: a bad dtype or shape, or a missing address.
            BackendError: the variant cannot be built, or the kernel reported an error.
        """
        spec = get_op(op)
        if dtype not in spec.dtypes:
            raise InputError(f"{spec.name}: dtype {dtype}; supported: {', '.join(spec.dtypes)}")
        attributes, parameters = _keywords(spec, keywords)
        plan = self._plan(spec, dtype, shapes, attributes)
        missing = [n for n, r in spec.roles.items() if r != "workspace" and n not in addresses]
        if missing:
            raise InputError(f"{spec.name}: no address for {', '.join(missing)}")
        plan.launch(
            [None if r == "workspace" else addresses[n] for n, r in spec.roles.items()],
            packed=spec.pack_struct(plan.fields, parameters) if parameters else None,
            device_memory=device_memory,
            stream=stream,
            device=device,
        )
        self._local.choice = plan.choice
        return plan.choice

    def _plan(
        self,
        spec: OpSpec,
        dtype: str,
        shapes: Mapping[str, tuple[int, ...]],
        attributes: Mapping[str, Any],
    ) -> _Plan:
        """The plan of a call, kept per op, dtype, input shapes and attributes: a table never
        changes, so a call of a shape seen before skips reading the shape and, when the table
        has the shape, the lookup."""
        names = _inputs(spec)
        try:
            dims = [shapes[name] for name in names]
        except KeyError:
            missing = ", ".join(n for n in names if n not in shapes)
            raise InputError(f"{spec.name}: no shape for the input {missing}") from None
        # The inputs in GM order, however the caller ordered them, and each attribute's type:
        # a key equal to a checked call's must mean the same call (stride=1.0 == 1 in Python).
        key: tuple[Any, ...] = (spec.name, dtype, *dims)
        if attributes:
            key = (*key, *sorted((k, type(v), v) for k, v in attributes.items()))
        try:
            plan, keep = self._plans.get(key), True
        except TypeError:  # unhashable (a list for a shape): checked below, not kept
            plan, keep = None, False
        if plan is not None:
            if plan.choice.source != "exact":
                # Asked again: counted in the table's misses, as every ask of a shape it has no
                # exact entry for (a cached answer: a dict lookup).
                self.table.lookup(
                    spec.name, target=self.target, dtype=dtype, shape=plan.choice.shape
                )
            return plan
        shape = spec.shape_of(shapes, attributes)
        answer = self.table.lookup(spec.name, target=self.target, dtype=dtype, shape=shape)
        with self._lock:
            plan = self._make_plan(spec, dtype, shape, answer.tiling, answer.source)
            if keep:
                while len(self._plans) >= PLAN_CACHE:
                    del self._plans[next(iter(self._plans))]
                self._plans[key] = plan
        return plan

    def _make_plan(
        self, spec: OpSpec, dtype: str, shape: Shape, tiling: Tiling, source: Source
    ) -> _Plan:
        target = self._device.target
        # Only tilings that pass the op's checks for this shape run in this process (an untested
        # one could write past a buffer here, not in the tuner's runner).
        if source != "default" and not spec.valid(tiling, shape, dtype, target):
            _log.warning(
                "%s %s %s: the table's %s tiling fails the op's checks; using the default",
                spec.name,
                dtype,
                dict(shape),
                source,
            )
            tiling, source = spec.default_tiling(shape, dtype, target), "default"
        if source == "default" and not spec.valid(tiling, shape, dtype, target):
            reasons = spec.check(tiling, shape, dtype, target).reasons
            named = ",".join(f"{d}={v}" for d, v in shape.items())
            raise InputError(
                f"{spec.name} {dtype} {named}: the op's default tiling fails its checks at this "
                f"shape ({'; '.join(reasons)}) and the table has no tiling that passes them: "
                f"not launched; `tilewise tune {spec.name} --shape {named} --dtype {dtype}` "
                "searches for one that fits, if any does"
            )
        args = spec.gm_args(shape, dtype)
        shapes = spec.array_shapes(shape)
        fields = spec.tiling_struct(tiling, shape, dtype, target)
        return _Plan(
            choice=Choice(spec.name, dtype, shape, tiling, source),
            outputs={a.name: shapes[a.name] for a in args if a.role == "out"},
            fields=fields,
            launch=self._device.prepare(
                spec,
                spec.compile_key(tiling, dtype),
                args=args,
                packed=spec.pack_struct(fields),
                block_dim=spec.block_dim(tiling, shape, dtype, target),
            ),
        )


_INPUTS: dict[str, tuple[str, ...]] = {}


def _inputs(spec: OpSpec) -> tuple[str, ...]:
    """The op's input names in GM order."""
    names = _INPUTS.get(spec.name)
    if names is None:
        names = _INPUTS[spec.name] = tuple(n for n, role in spec.roles.items() if role == "in")
    return names


def _bind(
    spec: OpSpec, arrays: tuple[Any, ...], named: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(inputs by name, attributes, parameters) from a call's positional and keyword
    arguments (see :func:`_keywords`)."""
    names = _inputs(spec)
    if len(arrays) > len(names):
        raise InputError(
            f"{spec.name}: takes {len(names)} arrays ({', '.join(names)}), got {len(arrays)}"
        )
    inputs = dict(zip(names, arrays, strict=False))
    keywords: dict[str, Any] = {}
    for key, value in named.items():
        if key in inputs:
            raise InputError(f"{spec.name}: {key} given twice (by position and by name)")
        (inputs if key in names else keywords)[key] = value
    missing = [n for n in names if n not in inputs]
    if missing:
        # A keyword the op does not take is most likely the missing input misspelt.
        takes = {*spec.attributes, *(p.name for p in spec.parameters)}
        stray = [k for k in keywords if k not in takes]
        also = f" (got unknown keyword {', '.join(stray)})" if stray else ""
        raise InputError(f"{spec.name}: missing input {', '.join(missing)}{also}")
    return inputs, *_keywords(spec, keywords)


def _keywords(spec: OpSpec, keywords: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(attributes, parameters) from a call's keywords that are no inputs: a keyword that is
    no parameter is taken for an attribute (``OpSpec.shape_of`` names the unknown ones); the
    parameters are checked and completed with their defaults (``OpSpec.bind_parameters``)
    when any is given, else empty (the prepared struct holds the defaults)."""
    attributes: dict[str, Any] = {}
    parameters: dict[str, Any] = {}
    for key, value in keywords.items():
        is_parameter = any(p.name == key for p in spec.parameters)
        (parameters if is_parameter else attributes)[key] = value
    return attributes, spec.bind_parameters(parameters) if parameters else {}


def _address(array: np.ndarray) -> int:
    """The address of ``array``'s data: by ctypes' ``from_buffer`` (a quarter of what
    ``array.ctypes.data`` costs, asked for every array of every call), else by ``.ctypes`` for
    a buffer ctypes does not take (read-only or empty)."""
    try:
        # An ndarray exports the buffer protocol; numpy's stubs do not declare it.
        return ctypes.addressof(ctypes.c_char.from_buffer(array))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return int(array.ctypes.data)


def _check_array(spec: OpSpec, name: str, value: Any) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise InputError(f"{spec.name}: {name} must be a numpy array, got {type(value).__name__}")
    if not (value.flags.c_contiguous and value.flags.aligned):
        # np.ascontiguousarray returns an unaligned contiguous array as it is: require both.
        raise InputError(
            f"{spec.name}: {name} must be C-contiguous and aligned "
            "(np.require(a, requirements='CA') gives such a copy)"
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
    given = tuple(out) if isinstance(out, tuple | list) else (out,)
    if len(given) != len(shapes):
        raise InputError(
            f"{spec.name}: out must be {'a tuple of ' if len(shapes) > 1 else ''}"
            f"{len(shapes)} array{'s' if len(shapes) > 1 else ''} ({', '.join(shapes)}), "
            f"got {len(given)}"
        )
    arrays = dict(zip(shapes, given, strict=True))
    for i, (name, array) in enumerate(arrays.items()):
        # Two outputs must not overlap either.
        others = {f"the input {n}": v for n, v in inputs.items()}
        others.update((f"out ({n})", v) for n, v in list(arrays.items())[:i])
        _check_out(spec, name, array, shapes[name], dtype, others)
    return arrays


def _check_out(
    spec: OpSpec,
    name: str,
    out: Any,
    shape: tuple[int, ...],
    dtype: str,
    others: Mapping[str, np.ndarray],
) -> None:
    """``out`` as the output ``name``: its dtype, shape, writability, and no overlap with
    ``others`` (the inputs and the outputs checked before, by how a message names them)."""
    array = _check_array(spec, f"out ({name})", out)
    if array.dtype != np.dtype(NUMPY_DTYPES[dtype]) or array.shape != shape:
        raise InputError(
            f"{spec.name}: out ({name}) must be a {dtype} array of shape {shape}, got "
            f"{array.dtype} {array.shape}"
        )
    if not array.flags.writeable:
        raise InputError(f"{spec.name}: out ({name}) is read-only")
    for other, value in others.items():
        if np.may_share_memory(array, value):
            raise InputError(f"{spec.name}: out ({name}) overlaps {other}")
