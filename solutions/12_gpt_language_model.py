"""Solutions of notebook 12's build-its (checked by tests/test_exercises.py)."""

import torch
import torch.nn.functional as F
from torch import nn


class MyBlock(nn.Module):
    """A pre-norm GPT block: x + attn(norm1(x)), then x + mlp(norm2(x)); causal
    multi-head self-attention and a GELU MLP of width 4 * d_model."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)  # W_Q, W_K, W_V side by side
        self.proj = nn.Linear(d_model, d_model)  # W_O
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_out = nn.Linear(4 * d_model, d_model)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # 3 x (B, T, C)
        q, k, v = (
            t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
            for t in (q, k, v)
        )  # (B, H, T, D)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # t sees <= t
        return self.proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        h = F.gelu(self.fc(self.norm2(x)), approximate="tanh")  # (B, T, 4C)
        return x + self.fc_out(h)  # (B, T, C)


class MyKVCache:
    """The keys and values of one attention layer for the tokens seen so far."""

    def __init__(self):
        self.keys = self.values = None
        self.length = 0

    def update(self, k, v):
        """Append k, v (B, H, T, D) after the stored ones; return all of them so far,
        (B, H, length + T, D) each."""
        if self.keys is None:
            self.keys, self.values = k, v
        else:  # along dim 2, time
            self.keys = torch.cat([self.keys, k], dim=2)
            self.values = torch.cat([self.values, v], dim=2)
        self.length += k.size(2)
        return self.keys, self.values
