"""ScaleReluDropout: ``nn.Dropout(p)(relu(x * scale))`` in one kernel, a new mask per call."""

from __future__ import annotations

import torch
from torch import nn

from tilewise.kernels.ops import get_op
from tilewise.kernels.ops.scale_relu_dropout.spec import DROP_P, SCALE

#: Seeds are the kernel's uint32.
_SEEDS = 2**32


class ScaleReluDropout(nn.Module):
    """``relu(x * scale)``, its elements dropped with probability ``p`` and the rest scaled by
    ``1 / (1 - p)`` in training, through ``torch.ops.tilewise.scale_relu_dropout``.

    The kernel's mask is a hash of (seed, element index), so a seed gives the same mask every
    time: in training each call draws a new seed from torch's default generator
    (``torch.manual_seed`` makes a run repeatable), or takes the one given
    (``forward(x, seed=...)``, as a compiled graph without data-dependent scalars needs). In
    eval mode nothing is dropped and nothing rescaled, as nn.Dropout does: ``relu(x * scale)``
    in torch, since the kernel at p = 0 still drops the rare element whose hash rounds to the
    threshold (about 3 in 10^8).
    """

    def __init__(self, scale: float = SCALE, p: float = DROP_P) -> None:
        super().__init__()
        bound = get_op("scale_relu_dropout").bind_parameters({"scale": scale, "p": p})
        self.scale, self.p = bound["scale"], bound["p"]

    def forward(self, x: torch.Tensor, seed: int | None = None) -> torch.Tensor:
        if not self.training:
            return torch.relu(x * self.scale)
        if seed is None:
            seed = int(torch.randint(_SEEDS, ()))
        out: torch.Tensor = torch.ops.tilewise.scale_relu_dropout(
            x, scale=self.scale, p=self.p, seed=seed
        )
        return out

    def extra_repr(self) -> str:
        return f"scale={self.scale}, p={self.p}"
