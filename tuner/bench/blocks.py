"""The blocks ``tilewise bench models`` times: each a module built on the tilewise ops (one or
more variants) and the plain PyTorch module it stands in for, with the same weights and one
input.

* ``llama_mlp`` — Hugging Face's LlamaMLP with SiLU (``down(silu(gate(x)) * up(x))``, no bias)
  on ``[1, tokens, hidden]``. ``tilewise``: :class:`tilewise.torch.LlamaMLP`, gate and up as one
  ``swiglu_mlp`` call, down a plain ``nn.Linear``; ``tilewise_unfused``: ``fused=False``, gate
  and up as ``nn.Linear``, then the ``swiglu`` kernel. Its parts are timed too (the row's
  ``parts_us``): the ``swiglu_mlp`` call, ``down_proj`` alone and, under ``torch.compile``,
  the gate and up projections with the SiLU and product (what ``swiglu_mlp`` replaces).
* ``conv_bn_relu`` — ``nn.Sequential(Conv2d (no bias), BatchNorm2d (eval), ReLU)`` on NCHW,
  the convolution of a ResNet stage. ``tilewise``: :func:`tilewise.torch.fuse_conv_bn_act`
  (the BatchNorm folded into the convolution, run by ``conv_bias_leakyrelu`` with slope 0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

import tilewise.torch

#: The LLaMA MLP's sizes: hidden 768 and LLaMA's intermediate rule (2/3 · 4 · hidden, rounded
#: to a multiple of 256: 2048, 2.67×), small enough for a run of a few minutes on two cores.
HIDDEN, INTERMEDIATE = 768, 2048
TOKENS = (1, 16, 128, 512, 2048)
#: The convolution: a ResNet-18 stage-1 3×3 convolution at batch 8 (the shape of the kernels
#: benchmark's conv_bias_leakyrelu row).
CONV: Mapping[str, int] = {
    "N": 8,
    "C": 64,
    "H": 56,
    "W": 56,
    "K": 64,
    "R": 3,
    "stride": 1,
    "pad": 1,
}


class PlainLlamaMLP(nn.Module):
    """Hugging Face's LlamaMLP with ``hidden_act="silu"``, in plain PyTorch: the reference."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class GateUp(nn.Module):
    """``silu(gate(x)) * up(x)`` of a :class:`PlainLlamaMLP`: what ``swiglu_mlp`` computes."""

    def __init__(self, mlp: PlainLlamaMLP) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = F.silu(self.mlp.gate_proj(x)) * self.mlp.up_proj(x)
        return out


Call = Callable[[], object]


@dataclass(frozen=True)
class Block:
    """One row of the benchmark: ``reference`` (plain PyTorch, eval mode; timed eager and under
    ``torch.compile``) and the ``tilewise`` modules (by contender name; ``"tilewise"`` is the
    row's headline) on ``x``. ``parts`` are calls timed beside them to say where the time goes;
    a name starting with ``compile_`` is compiled before it is timed."""

    name: str
    config: Mapping[str, int]
    reference: nn.Module
    x: torch.Tensor
    tilewise: Mapping[str, nn.Module]
    parts: Mapping[str, Callable[[torch.Tensor], object]] = field(default_factory=dict)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def llama_mlp_blocks(
    *,
    hidden: int = HIDDEN,
    intermediate: int = INTERMEDIATE,
    tokens: tuple[int, ...] = TOKENS,
    seed: int = 0,
) -> list[Block]:
    """One block per token count, all over the same modules (one set of weights)."""
    torch.manual_seed(seed)
    reference = PlainLlamaMLP(hidden, intermediate).eval()
    fused = tilewise.torch.LlamaMLP(hidden, intermediate).eval()
    unfused = tilewise.torch.LlamaMLP(hidden, intermediate, fused=False).eval()
    for module in (fused, unfused):
        module.load_state_dict(reference.state_dict())  # Hugging Face's names: unchanged
    gate, up = fused.gate_proj.weight.t(), fused.up_proj.weight.t()  # [H, I], contiguous
    gate_up = GateUp(reference)

    def swiglu_mlp(x: torch.Tensor) -> object:
        return torch.ops.tilewise.swiglu_mlp(x, gate, up)

    blocks = []
    for count in tokens:
        h = torch.randn(1, count, intermediate, generator=_generator(seed + 1))

        def down_proj(_: torch.Tensor, h: torch.Tensor = h) -> object:
            return fused.down_proj(h)

        blocks.append(
            Block(
                name="llama_mlp",
                config={"tokens": count, "hidden": hidden, "intermediate": intermediate},
                reference=reference,
                x=torch.randn(1, count, hidden, generator=_generator(seed + count)),
                tilewise={"tilewise": fused, "tilewise_unfused": unfused},
                parts={
                    "swiglu_mlp": swiglu_mlp,
                    "down_proj": down_proj,
                    "compile_gate_up": gate_up,
                },
            )
        )
    return blocks


def conv_bn_relu_block(shape: Mapping[str, int] = CONV, *, seed: int = 0) -> Block:
    """The Conv+BN+ReLU block, with BatchNorm statistics and affine parameters away from their
    initial values (so that folding them is exercised)."""
    torch.manual_seed(seed)
    c, k, r = shape["C"], shape["K"], shape["R"]
    conv = nn.Conv2d(c, k, r, stride=shape["stride"], padding=shape["pad"], bias=False)
    bn = nn.BatchNorm2d(k)
    bn.running_mean = torch.randn(k) * 0.1
    bn.running_var = torch.rand(k) + 0.5
    with torch.no_grad():
        bn.weight.copy_(torch.rand(k) + 0.5)
        bn.bias.copy_(torch.randn(k) * 0.1)
    reference = nn.Sequential(conv, bn, nn.ReLU()).eval()
    x = torch.randn(shape["N"], c, shape["H"], shape["W"], generator=_generator(seed + 1))
    fused = tilewise.torch.fuse_conv_bn_act(conv, bn, nn.ReLU()).eval()
    return Block("conv_bn_relu", dict(shape), reference, x, {"tilewise": fused})
