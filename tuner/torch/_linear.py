"""LinearGelu: ``nn.Linear`` followed by ``nn.GELU(approximate="tanh")`` in one kernel."""

from __future__ import annotations

import torch
from torch import nn

from tilewise.torch._weights import kernel_major


class LinearGelu(nn.Module):
    """``gelu_tanh(x @ weight.T + bias)`` through ``torch.ops.tilewise.linear_add_gelu``.

    The parameters are nn.Linear's, named, shaped and initialised as it does: ``weight``
    [out_features, in_features] and ``bias`` [out_features]. A state dict of
    ``nn.Sequential(nn.Linear(i, o), nn.GELU(approximate="tanh"))`` loads after dropping the
    Linear's index from its keys (``0.weight`` -> ``weight``, ``0.bias`` -> ``bias``), and
    this module's loads back by adding it::

        fused.load_state_dict({k.removeprefix("0."): v for k, v in seq.state_dict().items()})

    ``weight`` is stored so that ``weight.t()`` is contiguous (:mod:`._weights`): the kernel
    reads it without a copy per call. A weight assigned with another layout (a new
    Parameter, ``load_state_dict(..., assign=True)``) gives the same results at the cost of
    one copy of it per call. Without a bias the op gets zeros: it always adds one.
    """

    bias: nn.Parameter | None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        linear = nn.Linear(in_features, out_features, bias=bias, dtype=dtype)  # its init
        self.weight = kernel_major(linear.weight)
        self.register_parameter("bias", linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 1:  # one row without a batch dim, as nn.Linear takes it
            one: torch.Tensor = self(x.unsqueeze(0))
            return one.squeeze(0)
        bias = self.weight.new_zeros(self.out_features) if self.bias is None else self.bias
        out: torch.Tensor = torch.ops.tilewise.linear_add_gelu(x, self.weight.t(), bias)
        return out

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )
