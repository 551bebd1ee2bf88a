"""layernorm_gelu's baselines for ``tilewise bench kernels``: unfused numpy (LayerNorm, Gelu),
on one thread and on two halves of the rows, and torch's layer_norm and gelu."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tilewise.kernels.ops._base import Baseline, Split, TorchCase
from tilewise.kernels.ops._inplace import gelu_tanh_
from tilewise.kernels.ops.layernorm_gelu.spec import EPS
from tilewise.types import Shape


def numpy_baseline(shape: Shape, inputs: Mapping[str, np.ndarray], split: Split) -> Baseline:
    f32 = np.float32
    rr, hh = shape["R"], shape["H"]
    x = inputs["x"].reshape(rr, hh)
    gamma, beta = inputs["gamma"], inputs["beta"]
    y, t = np.empty((rr, hh), f32), np.empty((rr, hh), f32)
    mean, var = np.empty((rr, 1), f32), np.empty((rr, 1), f32)

    def ln(p: slice) -> None:
        xs, ys, ts, ms, vs = x[p], y[p], t[p], mean[p], var[p]
        np.mean(xs, axis=1, keepdims=True, out=ms)  # LayerNorm ...
        np.subtract(xs, ms, out=ys)
        np.multiply(ys, ys, out=ts)
        np.mean(ts, axis=1, keepdims=True, out=vs)
        vs += f32(EPS)
        np.sqrt(vs, out=vs)
        np.divide(ys, vs, out=ys)
        ys *= gamma
        ys += beta  # ... then Gelu
        gelu_tanh_(ys, ts)

    return (lambda: ln(slice(0, rr))), split(ln, rr)


def torch_baseline(shape: Shape, tensors: Mapping[str, Any]) -> TorchCase:
    import torch.nn.functional as F

    rr, hh = shape["R"], shape["H"]

    def f(x: Any, gamma: Any, beta: Any) -> Any:
        return F.gelu(F.layer_norm(x, (hh,), gamma, beta, EPS), approximate="tanh")

    return f, (tensors["x"].view(rr, hh), tensors["gamma"], tensors["beta"])
