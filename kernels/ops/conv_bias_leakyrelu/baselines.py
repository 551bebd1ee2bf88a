"""conv_bias_leakyrelu's baselines for ``tilewise bench kernels``: unfused numpy (pad and
im2col, MatMul, Add, LeakyRelu) and torch's conv2d, add and leaky_relu."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tilewise.kernels.ops._base import Baseline, Split, TorchCase
from tilewise.kernels.ops.conv_bias_leakyrelu.spec import ALPHA, out_size
from tilewise.types import Shape


def numpy_baseline(shape: Shape, inputs: Mapping[str, np.ndarray], split: Split) -> Baseline:
    f32 = np.float32
    nn, cc, hh, ww, kk = (shape[d] for d in ("N", "C", "H", "W", "K"))
    r, s_, st, pad = shape["R"], shape["S"], shape["stride"], shape["pad"]
    oh, ow = out_size(shape)
    x4 = inputs["x"].reshape(nn, cc, hh, ww)
    wmat = inputs["w"].reshape(kk, cc * r * s_)
    bias = inputs["bias"].reshape(1, kk, 1)
    xp = np.zeros((nn, cc, hh + 2 * pad, ww + 2 * pad), f32)
    col = np.empty((nn, cc, r, s_, oh, ow), f32)
    win = np.lib.stride_tricks.sliding_window_view(xp, (r, s_), axis=(2, 3))[
        :, :, ::st, ::st
    ].transpose(0, 1, 4, 5, 2, 3)
    col2 = col.reshape(nn, cc * r * s_, oh * ow)
    out, t = np.empty((nn, kk, oh * ow), f32), np.empty((nn, kk, oh * ow), f32)
    interior = xp[:, :, pad : pad + hh, pad : pad + ww]
    alpha = f32(ALPHA)

    def conv() -> None:
        np.copyto(interior, x4)  # Im2col: pad ...
        np.copyto(col, win)  # ... and gather
        np.matmul(wmat, col2, out=out)  # MatMul
        np.add(out, bias, out=out)  # Add bias
        np.multiply(out, alpha, out=t)  # LeakyRelu (alpha < 1)
        np.maximum(out, t, out=out)

    return conv, None


def torch_baseline(shape: Shape, tensors: Mapping[str, Any]) -> TorchCase:
    import torch.nn.functional as F

    nn, cc, hh, ww, kk = (shape[d] for d in ("N", "C", "H", "W", "K"))
    r, s_, st, pad = shape["R"], shape["S"], shape["stride"], shape["pad"]

    def f(x: Any, w: Any, b: Any) -> Any:
        return F.leaky_relu(F.conv2d(x, w, stride=st, padding=pad) + b, ALPHA)

    return f, (
        tensors["x"].view(nn, cc, hh, ww),
        tensors["w"].view(kk, cc, r, s_),
        tensors["bias"].view(1, kk, 1, 1),
    )
