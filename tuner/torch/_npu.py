"""The torch ops on NPU tensors (torch_npu): the Ascend kernels run on the tensors' device memory.

The tensors' shapes are folded as on the CPU (see :mod:`._rows`), the outputs allocated on the
inputs' device, and :meth:`tilewise.launch.Ops.launch` hands the kernel the tensors' device
addresses (no copy; an input that is not contiguous is first made so on the device). The launch
is synchronous: the device is synchronised first (torch_npu may still hold queued work that
produces the inputs), and the launch waits for its kernel on a stream of the calling thread.

Tested against the fake CANN toolkit only, with CPU tensors standing for device memory (the fake
ACL's device memory is host memory): without torch_npu no tensor is on an NPU here, so the
dispatch to this module is tested by device type, never with an NPU tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from tilewise.kernels.ops import OpSpec
from tilewise.launch import Ops
from tilewise.torch._rows import fold, unfold

Result = torch.Tensor | tuple[torch.Tensor, ...]


def synchronize(device: torch.device) -> None:
    """Wait for the work PyTorch queued on ``device``: ``torch.npu.synchronize`` (torch_npu)
    for an NPU; for CPU tensors standing for device memory (tests) ``torch.cpu``'s, a no-op."""
    backend = getattr(torch, device.type, None)
    if backend is not None and hasattr(backend, "synchronize"):
        backend.synchronize(device)


def run_on_npu(
    spec: OpSpec,
    named: Mapping[str, torch.Tensor],
    keywords: Mapping[str, Any],
    *,
    dtype: str,
    ops: Ops,
) -> Result:
    """Run ``spec`` on the inputs ``named`` (checked: one device, one dtype) with ``keywords``
    (attributes and parameters) through ``ops`` (an Ascend target's), on their device; the
    outputs are new tensors there.

    Raises:
        InputError: shapes or keywords the op does not take.
        BackendError: the variant does not build, or ACL or the kernel reported an error.
    """
    folded, lead = fold(spec, {name: tuple(t.shape) for name, t in named.items()})
    inputs = {name: t.detach().reshape(folded[name]).contiguous() for name, t in named.items()}
    shapes = {name: tuple(t.shape) for name, t in inputs.items()}
    like = next(iter(inputs.values()))
    outputs = {
        name: like.new_empty(shape)
        for name, shape in ops.output_shapes(spec.name, dtype, shapes, keywords).items()
    }
    synchronize(like.device)
    ops.launch(
        spec.name,
        dtype,
        shapes,
        keywords,
        {name: t.data_ptr() for name, t in (*inputs.items(), *outputs.items())},
        device_memory=True,
        device=like.device.index,
    )
    results = tuple(
        t.reshape(unfold(spec, name, tuple(t.shape), lead)) for name, t in outputs.items()
    )
    return results[0] if len(results) == 1 else results
