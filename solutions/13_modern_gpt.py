"""Solutions of notebook 13's build-its (checked by tests/test_exercises.py)."""

import torch.nn.functional as F
from torch import nn


def my_grouped_attention(q, k, v):
    """q (B, H, T, D), k, v (B, H_kv, T, D) -> causal attention (B, H, T, D); query head
    h reads key/value head h // (H / H_kv)."""
    g = q.size(1) // k.size(1)  # query heads per key/value head
    # (B, H, T, D): 0, 0, 1, 1 (interleave), not 0, 1, 0, 1 (repeat)
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class MySwiGLU(nn.Module):
    """LLaMA's gated MLP: proj(silu(gate(x)) * up(x)), three matrices, no biases."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.proj(F.silu(self.gate(x)) * self.up(x))  # (B, T, C)
