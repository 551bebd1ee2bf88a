"""linear_add_gelu's baselines for ``tilewise bench kernels``: unfused numpy (MatMul, Add,
Gelu) and one torch call per original operator."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tilewise.kernels.ops._base import Baseline, Split, TorchCase
from tilewise.kernels.ops._inplace import gelu_tanh_
from tilewise.types import Shape


def numpy_baseline(shape: Shape, inputs: Mapping[str, np.ndarray], split: Split) -> Baseline:
    m, n, k = shape["M"], shape["N"], shape["K"]
    x, w, b = inputs["x"].reshape(m, k), inputs["w"].reshape(k, n), inputs["bias"]
    c, t = np.empty((m, n), np.float32), np.empty((m, n), np.float32)

    def lag() -> None:
        np.matmul(x, w, out=c)  # MatMul
        np.add(c, b, out=c)  # Add
        gelu_tanh_(c, t)  # Gelu

    return lag, None


def torch_baseline(shape: Shape, tensors: Mapping[str, Any]) -> TorchCase:
    import torch
    import torch.nn.functional as F

    m, n, k = shape["M"], shape["N"], shape["K"]

    def f(x: Any, w: Any, b: Any) -> Any:
        return F.gelu(torch.matmul(x, w) + b, approximate="tanh")

    return f, (tensors["x"].view(m, k), tensors["w"].view(k, n), tensors["bias"])
