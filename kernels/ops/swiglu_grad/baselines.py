"""swiglu_grad's baselines for ``tilewise bench kernels``: unfused numpy (Sigmoid, Mul, the silu
backward, Mul), on one thread and on two halves of the rows, and torch's ops as autograd runs
them for F.silu(g) * u.

The torch case calls the ops autograd's backward calls (mul, silu, aten's silu_backward) rather
than autograd itself: the benchmark runs torch under inference mode, where no graph is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tilewise.kernels.ops._base import Baseline, Split, TorchCase
from tilewise.types import Shape


def numpy_baseline(shape: Shape, inputs: Mapping[str, np.ndarray], split: Split) -> Baseline:
    tt, i = shape["T"], shape["I"]
    dout, g, u = (inputs[k].reshape(tt, i) for k in ("dout", "g", "u"))
    one = np.float32(1.0)
    s, dg, du = (np.empty((tt, i), np.float32) for _ in range(3))

    def grad(p: slice) -> None:
        np.negative(g[p], out=s[p])  # Sigmoid: 1 / (1 + exp(-g))
        np.exp(s[p], out=s[p])
        s[p] += one
        np.reciprocal(s[p], out=s[p])
        np.multiply(g[p], s[p], out=du[p])  # silu(g)
        np.subtract(g[p], du[p], out=dg[p])  # silu backward: s * (1 + g - silu(g))
        dg[p] += one
        dg[p] *= s[p]
        dg[p] *= u[p]  # Mul: dout * u, folded into dg
        dg[p] *= dout[p]
        du[p] *= dout[p]  # Mul: dout * silu(g)

    return (lambda: grad(slice(0, tt))), split(grad, tt)


def torch_baseline(shape: Shape, tensors: Mapping[str, Any]) -> TorchCase:
    import torch
    import torch.nn.functional as F

    def f(dout: Any, g: Any, u: Any) -> Any:
        return torch.ops.aten.silu_backward(dout * u, g), dout * F.silu(g)

    return f, (tensors["dout"], tensors["g"], tensors["u"])
