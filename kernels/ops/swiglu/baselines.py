"""swiglu's baselines for ``tilewise bench kernels``: unfused numpy (Silu, Mul), on one thread
and on two halves of the rows, and torch's silu and mul."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tilewise.kernels.ops._base import Baseline, Split, TorchCase
from tilewise.kernels.ops._inplace import silu_into
from tilewise.types import Shape


def numpy_baseline(shape: Shape, inputs: Mapping[str, np.ndarray], split: Split) -> Baseline:
    tt, i = shape["T"], shape["I"]
    g, u = inputs["g"].reshape(tt, i), inputs["u"].reshape(tt, i)
    s = np.empty((tt, i), np.float32)

    def sw(p: slice) -> None:
        silu_into(g[p], s[p])  # Silu
        np.multiply(s[p], u[p], out=s[p])  # Mul

    return (lambda: sw(slice(0, tt))), split(sw, tt)


def torch_baseline(shape: Shape, tensors: Mapping[str, Any]) -> TorchCase:
    import torch.nn.functional as F

    def f(g: Any, u: Any) -> Any:
        return F.silu(g) * u

    return f, (tensors["g"], tensors["u"])
