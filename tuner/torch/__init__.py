"""The tuned kernels as PyTorch operators, run in this process on CPU (and NPU) tensors::

    import torch
    import tilewise.torch  # registers torch.ops.tilewise.<op> for every op

    tilewise.torch.use_table("tilings.json")  # optional: the settings' database by default
    y = torch.ops.tilewise.linear_add_gelu(x, w, b)   # x [..., K]: leading dims fold into M
    y.sum().backward()                                 # autograd through the torch formulas

Each call goes through one shared :class:`tilewise.launch.Ops` (see :func:`use_table`): the
tiling of the shape from the table, the kernel launched in process on the tensors' memory.
Float32 and float16 CPU tensors run on the cpu-twin; NPU tensors (torch_npu) run the Ascend
kernels of the target given to ``use_table(source, target="ascend910b2")`` on their device, in
device memory (tested against a fake CANN toolkit only: no NPU tensor has existed here). A
tensor that breaks a rule raises :class:`tilewise.InputError` naming it before anything runs.
Ops that work row by row take leading batch dims (:data:`ROW_DIMS`). Every op has a fake
implementation (``torch.compile`` with ``fullgraph=True``, ``torch.export``) and the
differentiable ones a backward: swiglu's is the fused ``swiglu_grad`` kernel, the others are
their reference formulas in torch.

Modules built on the ops, loadable from the state dicts of their plain PyTorch equivalents:
:class:`LlamaMLP` (Hugging Face's parameter names) and :class:`LinearGelu` (nn.Linear's); and
:func:`fuse_conv_bn_act`, which folds an eval-mode ``Conv2d, BatchNorm2d, (Leaky)ReLU`` into one
:class:`ConvBnAct` (``conv_bias_leakyrelu``); and :class:`ScaleReluDropout`, a dropout after a
scaled ReLU that draws a new mask per training call.

PyTorch is the ``torch`` extra: ``import tilewise`` does not import it, this module does.
"""

from __future__ import annotations

from tilewise.torch import _grads
from tilewise.torch._conv import ConvBnAct, fuse_conv_bn_act
from tilewise.torch._dropout import ScaleReluDropout
from tilewise.torch._linear import LinearGelu
from tilewise.torch._mlp import LlamaMLP
from tilewise.torch._ops import OPERATORS
from tilewise.torch._rows import ROW_DIMS
from tilewise.torch._shared import current_ops, use_table

_grads.register(OPERATORS)

__all__ = [
    "OPERATORS",
    "ROW_DIMS",
    "ConvBnAct",
    "LinearGelu",
    "LlamaMLP",
    "ScaleReluDropout",
    "current_ops",
    "fuse_conv_bn_act",
    "use_table",
]
