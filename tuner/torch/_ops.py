"""``torch.ops.tilewise.<op>``: every op of :func:`tilewise.kernels.ops.list_ops` as a
``torch.library`` custom op, with a fake implementation for tracing.

The schema comes from the spec: its inputs in GM order as tensors, its :attr:`~OpSpec.attributes`
as keyword-only ints and its :attr:`~OpSpec.parameters` as keyword-only floats (ints for an
integer parameter: a seed) with their defaults, one tensor or a tuple of them out. One
implementation serves every device
and dispatches on the tensors' device type: CPU tensors go to :meth:`tilewise.launch.Ops.call`
as numpy arrays sharing their memory (a tensor that is not contiguous is copied to one that is)
and the arrays the launch wrote come back as tensors; NPU tensors (torch_npu) go to the Ascend
kernels on their device (see :mod:`._npu`). The fake implementation computes the outputs'
shapes from :attr:`OpSpec.layout`, so that ``torch.compile`` and ``torch.export`` trace through
the ops without running them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch
from torch._library.custom_ops import CustomOpDef

from tilewise.errors import InputError
from tilewise.kernels.ops import OpSpec, list_ops
from tilewise.torch._npu import run_on_npu
from tilewise.torch._rows import ROW_DIMS, Size, fold, unfold
from tilewise.torch._shared import NPU, current_ops
from tilewise.types import Shape

#: The kernels' dtypes as torch names them.
DTYPES: Mapping[torch.dtype, str] = {torch.float32: "float32", torch.float16: "float16"}
#: The library namespace: ``torch.ops.tilewise``.
NAMESPACE = "tilewise"

Result = torch.Tensor | tuple[torch.Tensor, ...]
#: The device types the kernels run on: the twin's and the NPU's.
DEVICE_TYPES = ("cpu", NPU)


@functools.cache
def _names(spec: OpSpec, role: str) -> tuple[str, ...]:
    """The op's GM arguments of ``role`` in GM order (asked on every call)."""
    return tuple(name for name, r in spec.roles.items() if r == role)


def schema(spec: OpSpec) -> str:
    """The op's schema, e.g. ``(Tensor x, Tensor w, Tensor bias, *, int stride, int pad,
    float negative_slope=0.1) -> Tensor``."""
    arguments = [f"Tensor {name}" for name in _names(spec, "in")]
    keywords = [f"int {name}" for name in spec.attributes]
    keywords += [
        f"int {p.name}={int(p.default)}" if p.integer else f"float {p.name}={float(p.default)!r}"
        for p in spec.parameters
    ]
    if keywords:
        arguments += ["*", *keywords]
    outputs = len(_names(spec, "out"))
    returns = "Tensor" if outputs == 1 else f"({', '.join(['Tensor'] * outputs)})"
    return f"({', '.join(arguments)}) -> {returns}"


def _bind(
    spec: OpSpec, tensors: Sequence[torch.Tensor], devices: tuple[str, ...] = DEVICE_TYPES
) -> dict[str, torch.Tensor]:
    """The inputs by GM name, checked: on one device the kernels run on (the CPU, or an NPU;
    the shapes alone may be on any of ``devices``), one supported dtype for all.

    Raises:
        InputError: naming the first tensor that breaks a rule.
    """
    named = dict(zip(_names(spec, "in"), tensors, strict=True))
    supported = _dtypes(spec)
    # As a model calls: every tensor on the first one's device, of its dtype, both supported.
    lead = tensors[0]
    device, dtype = lead.device, lead.dtype
    if (
        device.type in devices
        and dtype in supported
        and all(t.device == device and t.dtype == dtype for t in tensors)
    ):
        return named
    first = ""
    for name, tensor in named.items():
        if tensor.device.type not in devices:
            raise InputError(
                f"{spec.name}: {name} is on {tensor.device}; the kernels run on CPU tensors "
                "(the cpu-twin) and NPU tensors (torch_npu, an Ascend target)"
            )
        if tensor.dtype not in supported:
            raise InputError(
                f"{spec.name}: {name} has dtype {tensor.dtype}; supported: "
                f"{', '.join(map(str, supported))}"
            )
        if not first:
            first = name
        elif tensor.device != named[first].device:
            raise InputError(
                f"{spec.name}: {name} is on {tensor.device}, but {first} is on "
                f"{named[first].device}: every tensor of a call is on the same device"
            )
        elif tensor.dtype != named[first].dtype:
            raise InputError(
                f"{spec.name}: {name} has dtype {tensor.dtype}, but {first} has "
                f"{named[first].dtype}: every tensor of a call has the same dtype"
            )
    return named


@functools.cache
def _dtypes(spec: OpSpec) -> tuple[torch.dtype, ...]:
    """The torch dtypes of the op's kernels."""
    return tuple(t for t, name in DTYPES.items() if name in spec.dtypes)


def _output_shapes(
    spec: OpSpec, shapes: Mapping[str, tuple[Size, ...]], attributes: Mapping[str, int]
) -> dict[str, tuple[Size, ...]]:
    """The kernel shape of each output, from the (folded) input shapes.

    Concrete shapes go through :meth:`OpSpec.shape_of`, which rejects what the kernel would
    (an InputError naming the argument). Symbolic ones (tracing with dynamic shapes) cannot
    be checked without fixing them to numbers: only their ranks are, and the sizes are mapped
    through the layout; the launch checks them when the op runs.
    """
    outputs = _names(spec, "out")
    if all(isinstance(size, int) for shape in shapes.values() for size in shape):
        concrete = {name: tuple(int(s) for s in shape) for name, shape in shapes.items()}
        every = spec.array_shapes(spec.shape_of(concrete, attributes))
        return {name: every[name] for name in outputs}
    sizes: dict[str, Size] = dict(attributes)
    for name, shape in shapes.items():
        dims = spec.layout[name]
        if len(shape) != len(dims):
            raise InputError(
                f"{spec.name}: {name} must have {len(dims)} dimensions ({', '.join(dims)}), "
                f"got {len(shape)}"
            )
        sizes.update(zip(dims, shape, strict=True))
    # extents only does arithmetic on the sizes, which symbolic sizes support.
    extents = spec.extents(cast(Shape, sizes))
    return {name: tuple(extents[d] for d in spec.layout[name]) for name in outputs}


#: Where an op's outputs can be known without running it: its devices, and meta tensors (a
#: model built on the meta device, shapes only).
SHAPE_DEVICE_TYPES = (*DEVICE_TYPES, "meta")


def _fake(spec: OpSpec, tensors: Sequence[torch.Tensor], keywords: Mapping[str, Any]) -> Result:
    named = _bind(spec, tensors, SHAPE_DEVICE_TYPES)
    folded, lead = fold(spec, {name: tuple(t.shape) for name, t in named.items()})
    return _empty_outputs(spec, named, folded, lead, keywords)


def _no_rows(lead: tuple[Size, ...]) -> bool:
    """Whether the leading batch dims hold no row (only concrete sizes are looked at: a
    symbolic one is not fixed to a number)."""
    return any(isinstance(size, int) and size == 0 for size in lead)


def _empty_outputs(
    spec: OpSpec,
    named: Mapping[str, torch.Tensor],
    folded: Mapping[str, tuple[Size, ...]],
    lead: tuple[Size, ...],
    keywords: Mapping[str, Any],
) -> Result:
    """New, unwritten outputs of the call's shapes. Where the batch dims hold no row, the
    shapes of a one-row call with the batch dims back: PyTorch's own ops answer an empty batch
    with empty outputs, and a kernel takes no empty dim (the other dims are checked as in any
    call)."""
    if _no_rows(lead):
        row = ROW_DIMS[spec.name]
        folded = {
            name: (1, *shape[1:]) if spec.layout[name][0] == row else shape
            for name, shape in folded.items()
        }
    # The parameters change no output shape; the launch checks them.
    attributes = {name: keywords[name] for name in spec.attributes}
    like = next(iter(named.values()))
    outputs = tuple(
        like.new_empty(unfold(spec, name, shape, lead))
        for name, shape in _output_shapes(spec, folded, attributes).items()
    )
    return outputs[0] if len(outputs) == 1 else outputs


#: An implementation of the ops for one device type: (spec, checked inputs, keywords: the
#: attributes and parameters).
Runner = Callable[[OpSpec, Mapping[str, torch.Tensor], Mapping[str, Any]], Result]


def _run(spec: OpSpec, tensors: Sequence[torch.Tensor], keywords: Mapping[str, Any]) -> Result:
    named = _bind(spec, tensors)
    return runner(next(iter(named.values())).device.type)(spec, named, keywords)


def runner(device_type: str) -> Runner:
    """The implementation for tensors of ``device_type`` (one :func:`_bind` accepts): the twin
    through :func:`current_ops` for ``cpu``; for ``npu`` the Ascend kernels through the
    NPU tensors' Ops (``use_table(..., target=<an Ascend target>)``).

    Raises:
        InputError: NPU tensors before such a use_table.
    """
    if device_type != NPU:
        return _run_on_cpu
    ops = current_ops(NPU)

    def on_npu(
        spec: OpSpec, named: Mapping[str, torch.Tensor], keywords: Mapping[str, Any]
    ) -> Result:
        dtype = DTYPES[next(iter(named.values())).dtype]
        return run_on_npu(spec, named, keywords, dtype=dtype, ops=ops)

    return on_npu


def _run_on_cpu(
    spec: OpSpec, named: Mapping[str, torch.Tensor], keywords: Mapping[str, Any]
) -> Result:
    folded, lead = fold(spec, {name: tuple(t.shape) for name, t in named.items()})
    if _no_rows(lead):
        return _empty_outputs(spec, named, folded, lead, keywords)
    result = current_ops().call(
        spec.name, *map(_array, named.values(), folded.values()), **keywords
    )
    written = result if isinstance(result, tuple) else (result,)
    outputs = []
    for name, array in zip(_names(spec, "out"), written, strict=True):
        tensor = torch.from_numpy(array)
        shape = unfold(spec, name, array.shape, lead) if lead else array.shape
        outputs.append(tensor if shape == array.shape else tensor.reshape(shape))
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _array(tensor: torch.Tensor, shape: tuple[int, ...]) -> Any:
    """``tensor`` as a numpy array of ``shape`` sharing its memory, copied only where it is
    not contiguous. Each step is a call into torch, so a step with nothing to do is left out
    (a model's decode step makes several such calls per layer): detach only what requires grad
    (``.numpy()`` refuses it), reshape only what has another shape."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    if tensor.shape != shape:
        tensor = tensor.reshape(shape)
    array = tensor.contiguous().numpy()
    # A view at an odd byte offset (torch.frombuffer) is contiguous but not aligned.
    return array if array.flags.aligned else tensor.clone().numpy()


def _define(spec: OpSpec) -> CustomOpDef:
    def run(*tensors: torch.Tensor, **keywords: Any) -> Result:
        return _run(spec, tensors, keywords)

    def fake(*tensors: torch.Tensor, **keywords: Any) -> Result:
        return _fake(spec, tensors, keywords)

    run.__name__ = run.__qualname__ = spec.name
    run.__doc__ = spec.summary
    # No device_types: every device reaches run, which dispatches on the device type (CPU,
    # NPU) and names a tensor on any other.
    op = torch.library.custom_op(
        f"{NAMESPACE}::{spec.name}", run, mutates_args=(), schema=schema(spec)
    )
    op.register_fake(fake)
    return op


#: Each op's custom op, by name; importing this module registers them.
OPERATORS: dict[str, CustomOpDef] = {spec.name: _define(spec) for spec in list_ops()}
