"""A LLaMA-style decoder block with its MLP run by tilewise, checked against plain PyTorch.

    python examples/llama_block.py

Two copies of one block (RMSNorm, causal self-attention, RMSNorm, SwiGLU MLP, residuals):
one with a plain PyTorch MLP, one with ``tilewise.torch.LlamaMLP``, which loads the plain
block's state dict unchanged. At 1, 16 and 128 tokens it runs both, prints the tiling each
tilewise call used (from ``last_choice``) and the largest difference, and fails if that is
over swiglu_mlp's float32 tolerance. The tilings come from an empty table (every shape gets
its default tiling), so no database is needed; built kernels go to the settings' cache_dir
(``TILEWISE_CACHE_DIR``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import tilewise.torch
from tilewise.kernels.ops import get_op
from tilewise.launch import Choice
from tilewise.runtime import TilingTable

HIDDEN, INTERMEDIATE, HEADS = 64, 172, 4
TOKENS = (1, 16, 128)


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class PlainMLP(nn.Module):
    """Hugging Face's LlamaMLP with SiLU, in plain PyTorch: the reference."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class Attention(nn.Module):
    """Causal multi-head self-attention in plain PyTorch (no rotary embedding: positions do
    not matter to what this example checks, the MLP)."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            nn.Linear(hidden, hidden, bias=False) for _ in range(4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, hidden = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, tokens, self.heads, hidden // self.heads).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.o_proj(mixed.transpose(1, 2).reshape(batch, tokens, hidden))
        return out


class Block(nn.Module):
    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN)
        self.self_attn = Attention(HIDDEN, HEADS)
        self.post_attention_layernorm = RMSNorm(HIDDEN)
        self.mlp = mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x))
        out: torch.Tensor = h + self.mlp(self.post_attention_layernorm(h))
        return out


def describe(choice: Choice | None) -> str:
    assert choice is not None, "no tilewise call ran"
    tiling = ", ".join(f"{k}={v}" for k, v in sorted(choice.tiling.items()))
    return f"{choice.op} {choice.dtype} {choice.shape} source={choice.source} [{tiling}]"


def main() -> None:
    ops = tilewise.torch.use_table(TilingTable([]))  # throw-away: every shape's default tiling
    torch.manual_seed(0)
    plain = Block(PlainMLP(HIDDEN, INTERMEDIATE)).eval()
    fused = Block(tilewise.torch.LlamaMLP(HIDDEN, INTERMEDIATE)).eval()
    fused.load_state_dict(plain.state_dict())  # same parameter names: loads unchanged

    calls: list[str] = []  # the tiling of each tilewise call, read right after it ran
    fused.mlp.register_forward_hook(lambda *_: calls.append(describe(ops.last_choice)))
    spec = get_op("swiglu_mlp")
    rtol, atol = spec.tolerance("float32", spec.example_shapes()[0])
    for tokens in TOKENS:
        x = torch.randn(1, tokens, HIDDEN)
        calls.clear()
        with torch.no_grad():
            want, got = plain(x), fused(x)
        for call in calls:
            print(f"tokens={tokens}: tilewise call {call}")
        error = (got - want).abs().max().item()
        print(f"tokens={tokens}: max |tilewise - torch| = {error:.3g}")
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    print(f"ok: {len(TOKENS)} token counts within rtol={rtol}, atol={atol}")


if __name__ == "__main__":
    main()
