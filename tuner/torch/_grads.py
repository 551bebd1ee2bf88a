"""The backward of each differentiable op, registered with ``register_autograd``.

swiglu's is the fused ``swiglu_grad`` kernel, and swiglu_mlp's elementwise part too; the others
are the derivatives of the ops' reference formulas written with aten ops, which every tracer
(autograd, ``torch.compile``, ``torch.export``) follows. swiglu_grad has none: nothing here
needs its second derivative.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch._library.custom_ops import CustomOpDef

from tilewise.kernels.ops.scale_relu_dropout.spec import scale_keep

Tensor = torch.Tensor
Grads = tuple[Tensor | None, ...]


def _save(ctx: Any, inputs: tuple[Tensor, ...], output: Any) -> None:
    outputs = output if isinstance(output, tuple) else (output,)
    ctx.save_for_backward(*inputs, *outputs)


def _save_with_attributes(
    ctx: Any, inputs: tuple[Tensor, ...], keyword_only_inputs: Mapping[str, Any], output: Any
) -> None:
    _save(ctx, inputs, output)
    ctx.attributes = dict(keyword_only_inputs)


def _gelu_tanh_grad(dout: Tensor, z: Tensor) -> Tensor:
    grad: Tensor = torch.ops.aten.gelu_backward(dout, z, approximate="tanh")
    return grad


def _rows(t: Tensor) -> Tensor:
    """The leading dims folded into one, as the kernel sees them."""
    return t.reshape(-1, t.shape[-1])


def swiglu_backward(ctx: Any, dout: Tensor) -> Grads:
    g, u, _ = ctx.saved_tensors
    dg, du = torch.ops.tilewise.swiglu_grad(dout, g, u)
    return dg, du


def linear_add_gelu_backward(ctx: Any, dout: Tensor) -> Grads:
    x, w, b, _ = ctx.saved_tensors
    dz = _gelu_tanh_grad(dout, x @ w + b)
    return dz @ w.t(), _rows(x).t() @ _rows(dz), _rows(dz).sum(0)


def swiglu_mlp_backward(ctx: Any, dout: Tensor) -> Grads:
    x, wg, wu, _ = ctx.saved_tensors
    dg, du = torch.ops.tilewise.swiglu_grad(dout, x @ wg, x @ wu)
    rows = _rows(x).t()
    return dg @ wg.t() + du @ wu.t(), rows @ _rows(dg), rows @ _rows(du)


def layernorm_gelu_backward(ctx: Any, dout: Tensor) -> Grads:
    x, gamma, beta, _ = ctx.saved_tensors
    eps = float(np.float32(ctx.attributes["eps"]))  # as the kernel's float field holds it
    z, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], gamma, beta, eps)
    dx, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(
        _gelu_tanh_grad(dout, z), x, [x.shape[-1]], mean, rstd, gamma, beta, [True] * 3
    )
    return dx, dgamma, dbeta


def conv_bias_leakyrelu_backward(ctx: Any, dout: Tensor) -> Grads:
    x, w, bias, out = ctx.saved_tensors
    stride, pad = ctx.attributes["stride"], ctx.attributes["pad"]
    slope = ctx.attributes["negative_slope"]
    if slope >= 0:
        # Such a LeakyReLU keeps the sign, so the output tells which side of 0 the
        # convolution was on (and a ReLU's 0 is its own side, with no gradient, as torch's).
        z = out
    else:
        # A negative slope maps both sides above 0: only the convolution itself tells them apart.
        z = torch.ops.aten.convolution(
            x, w, bias, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1
        )
    dz = torch.where(z > 0, dout, dout * slope)
    dx, dw, db = torch.ops.aten.convolution_backward(
        dz, x, w, [bias.shape[0]], [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, [True] * 3
    )
    return dx, dw, db


def scale_relu_dropout_backward(ctx: Any, dout: Tensor) -> Grads:
    _, y = ctx.saved_tensors
    # y > 0 exactly where the element was kept and x·scale > 0: there y = x·scale/(1 - p).
    dtype = "float32" if dout.dtype == torch.float32 else "float16"
    factor = float(scale_keep(dtype, ctx.attributes["scale"], ctx.attributes["p"]))
    return (torch.where(y > 0, dout * factor, torch.zeros_like(dout)),)


#: Each differentiable op's backward and what it saves in the forward.
BACKWARDS: Mapping[str, tuple[Callable[..., Grads], Callable[..., None]]] = {
    "conv_bias_leakyrelu": (conv_bias_leakyrelu_backward, _save_with_attributes),
    "layernorm_gelu": (layernorm_gelu_backward, _save_with_attributes),
    "linear_add_gelu": (linear_add_gelu_backward, _save),
    "scale_relu_dropout": (scale_relu_dropout_backward, _save_with_attributes),
    "swiglu": (swiglu_backward, _save),
    "swiglu_mlp": (swiglu_mlp_backward, _save),
}


def register(operators: Mapping[str, CustomOpDef]) -> None:
    """Register :data:`BACKWARDS` on the ops of ``operators``."""
    for name, (backward, setup) in BACKWARDS.items():
        operators[name].register_autograd(backward, setup_context=setup)
