"""In-place numpy activations for the ops' unfused baselines (``baselines.py`` of each op):
preallocated buffers, one ufunc call per step, as a numpy user would write them for speed."""

from __future__ import annotations

import numpy as np

S2PI = np.float32(np.sqrt(2.0 / np.pi))


def gelu_tanh_(x: np.ndarray, t: np.ndarray) -> None:
    """In place on x, t a scratch of x's shape: 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))."""
    np.multiply(x, x, out=t)
    t *= x
    t *= np.float32(0.044715)
    t += x
    t *= S2PI
    np.tanh(t, out=t)
    t += np.float32(1.0)
    t *= np.float32(0.5)
    x *= t


def silu_into(g: np.ndarray, s: np.ndarray) -> None:
    """s = g / (1 + exp(-g))."""
    np.negative(g, out=s)
    np.exp(s, out=s)
    s += np.float32(1.0)
    np.divide(g, s, out=s)
