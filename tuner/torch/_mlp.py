"""LlamaMLP: the LLaMA feed-forward block with its gate and up projections in one kernel."""

from __future__ import annotations

import torch
from torch import nn

from tilewise.errors import InputError
from tilewise.torch._weights import as_kernel_major


class LlamaMLP(nn.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))``, Hugging Face's LlamaMLP with SiLU.

    The parameters are named and shaped as in Hugging Face's ``LlamaMLP`` (``gate_proj``,
    ``up_proj`` and ``down_proj``, each an ``nn.Linear`` with ``weight`` [out, in]), so a
    state dict of either loads into the other unchanged.

    ``fused=True`` (the default) runs both projections and the SwiGLU as one
    ``torch.ops.tilewise.swiglu_mlp`` call, which takes the weights as [hidden, intermediate]:
    gate_proj's and up_proj's weights are stored so that their transposes are contiguous
    (:mod:`._weights`), so the kernel reads them without a copy per call (a weight assigned
    with another layout works, at the cost of one copy of it per call). That call bypasses
    the two Linear modules' forward, and has no bias: ``fused=True`` takes ``bias=False``
    only. ``fused=False`` runs the two Linear modules, then ``torch.ops.tilewise.swiglu``.
    down_proj is a plain ``nn.Linear`` either way.
    """

    def __init__(
        self,
        hidden: int,
        intermediate: int,
        *,
        fused: bool = True,
        bias: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        if fused and bias:
            raise InputError("LlamaMLP: the fused swiglu_mlp kernel adds no bias; pass fused=False")
        super().__init__()
        self.hidden_size, self.intermediate_size, self.fused = hidden, intermediate, fused
        self.gate_proj = as_kernel_major(nn.Linear(hidden, intermediate, bias=bias, dtype=dtype))
        self.up_proj = as_kernel_major(nn.Linear(hidden, intermediate, bias=bias, dtype=dtype))
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 1:  # one token without a batch dim, as nn.Linear takes it
            one: torch.Tensor = self(x.unsqueeze(0))
            return one.squeeze(0)
        h: torch.Tensor
        if self.fused:
            gate, up = self.gate_proj.weight.t(), self.up_proj.weight.t()
            h = torch.ops.tilewise.swiglu_mlp(x, gate, up)
        else:
            h = torch.ops.tilewise.swiglu(self.gate_proj(x), self.up_proj(x))
        out: torch.Tensor = self.down_proj(h)
        return out

    def extra_repr(self) -> str:
        return f"fused={self.fused}"
