"""Solution of notebook 05's build-it (checked by tests/test_exercises.py)."""

import math

from torch import nn

from transformer_lib.multi_head import merge_heads, split_heads


class MyMultiHeadAttention(nn.Module):
    """H attentions of width D = d_model / H on projections of the inputs, concatenated
    and mixed by out_proj."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        # 1) project and split into heads
        q = split_heads(self.q_proj(query), self.n_heads)  # (B, H, T_q, D)
        k = split_heads(self.k_proj(key), self.n_heads)  # (B, H, T_k, D)
        v = split_heads(self.v_proj(value), self.n_heads)  # (B, H, T_k, D)
        # 2) attend in every head, scaled by the head's width
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (B, H, T_q, T_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        y = scores.softmax(-1) @ v  # (B, H, T_q, D)
        # 3) concatenate the heads and mix them
        return self.out_proj(merge_heads(y))  # (B, T_q, C)
