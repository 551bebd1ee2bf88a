"""scale_relu_dropout's baselines for ``tilewise bench kernels``: unfused numpy (Muls, Relu,
DropOutGenMask, DropOutDoMask), on one thread and on two halves, and torch's mul, relu and
dropout."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tilewise.kernels.ops._base import Baseline, Split, TorchCase
from tilewise.kernels.ops.scale_relu_dropout.spec import DROP_P, SCALE
from tilewise.types import Shape


def numpy_baseline(shape: Shape, inputs: Mapping[str, np.ndarray], split: Split) -> Baseline:
    f32 = np.float32
    n = shape["N"]
    x = inputs["x"]
    y, r01 = np.empty(n, f32), np.empty(n, f32)
    keep = np.empty(n, np.bool_)
    rngs = [np.random.default_rng(i) for i in range(2)]

    def srd(p: slice) -> None:
        rng = rngs[0 if p.start == 0 else 1]
        np.multiply(x[p], f32(SCALE), out=y[p])  # Muls
        np.maximum(y[p], f32(0.0), out=y[p])  # Relu
        rng.random(dtype=f32, out=r01[p])  # DropOutGenMask: uniform bits ...
        np.greater_equal(r01[p], f32(DROP_P), out=keep[p])  # ... to a byte mask
        np.multiply(y[p], keep[p], out=y[p])  # DropOutDoMask: mask ...
        y[p] *= f32(1.0 / (1.0 - DROP_P))  # ... and 1/(1-p)

    return (lambda: srd(slice(0, n))), split(srd, n)


def torch_baseline(shape: Shape, tensors: Mapping[str, Any]) -> TorchCase:
    import torch.nn.functional as F

    def f(x: Any) -> Any:
        return F.dropout(F.relu(x * SCALE), p=DROP_P, training=True)

    return f, (tensors["x"],)
