"""swiglu_mlp's baselines for ``tilewise bench kernels``: unfused numpy (two MatMuls, Silu,
Mul) and one torch call per original operator."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tilewise.kernels.ops._base import Baseline, Split, TorchCase
from tilewise.kernels.ops._inplace import silu_into
from tilewise.types import Shape


def numpy_baseline(shape: Shape, inputs: Mapping[str, np.ndarray], split: Split) -> Baseline:
    tt, h, i = shape["T"], shape["H"], shape["I"]
    x, wg, wu = inputs["x"].reshape(tt, h), inputs["wg"].reshape(h, i), inputs["wu"].reshape(h, i)
    g, u, s = (np.empty((tt, i), np.float32) for _ in range(3))

    def mlp() -> None:
        np.matmul(x, wg, out=g)
        np.matmul(x, wu, out=u)
        silu_into(g, s)
        np.multiply(s, u, out=s)

    return mlp, None


def torch_baseline(shape: Shape, tensors: Mapping[str, Any]) -> TorchCase:
    import torch
    import torch.nn.functional as F

    tt, h, i = shape["T"], shape["H"], shape["I"]

    def f(x: Any, wg: Any, wu: Any) -> Any:
        return F.silu(torch.matmul(x, wg)) * torch.matmul(x, wu)

    return f, (tensors["x"].view(tt, h), tensors["wg"].view(h, i), tensors["wu"].view(h, i))
