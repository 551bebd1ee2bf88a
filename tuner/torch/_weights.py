"""Linear weights stored the way the kernels read them.

``nn.Linear`` holds its weight as ``[out, in]``; the matmul kernels take ``[in, out]``
row-major (``OpSpec.layout``: linear_add_gelu's ``w`` is ``[K, N]``, swiglu_mlp's ``wg`` and
``wu`` ``[H, I]``), and an op copies a tensor that is not contiguous before every launch. So
the modules keep each such weight as the ``[out, in]`` transposed view of an ``[in, out]``
contiguous storage: the state dict sees nn.Linear's shape, ``weight.t()`` is the kernel's
array without a copy, and autograd, optimizers (in place) and ``.to(dtype)`` (which preserves
strides) keep both.
"""

from __future__ import annotations

import torch
from torch import nn


def kernel_major(weight: torch.Tensor) -> nn.Parameter:
    """``weight`` ([out, in]) as a parameter of the same shape and values whose transpose
    ([in, out]) is contiguous."""
    return nn.Parameter(weight.detach().t().contiguous().t(), requires_grad=weight.requires_grad)


def as_kernel_major(linear: nn.Linear) -> nn.Linear:
    """``linear`` with its weight re-stored by :func:`kernel_major`; returns it."""
    linear.weight = kernel_major(linear.weight)
    return linear
