"""Solution of notebook 04's build-it (checked by tests/test_exercises.py)."""

import math

import torch


def my_alibi_attention(q, k, v, slopes):
    """Causal attention, q k (B, H, T, D), v (B, H, T, D_v), slopes (H,) -> (output
    (B, H, T, D_v), weights (B, H, T, T)); score (i, j) of head h less slopes[h] * (i -
    j)."""
    T = q.size(-2)
    pos = torch.arange(T, dtype=q.dtype)
    distance = pos[:, None] - pos[None, :]  # (T, T): i - j, how far back key j is
    bias = -slopes[:, None, None] * distance  # (H, T, T): a slope per head
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + bias  # (B, H, T, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # key j <= query i
    weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    return weights @ v, weights
