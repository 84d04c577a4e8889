"""Solutions of notebook 06's build-its (checked by tests/test_exercises.py)."""

import math

import torch


def my_sliding_window_mask(ids, pad_id, window):
    """ids (B, T) -> (B, 1, T, T) bool, True = may attend: query t sees the non-<pad>
    keys t - window + 1 .. t."""
    T = ids.size(1)
    pos = torch.arange(T)
    back = pos[:, None] - pos[None, :]  # (T, T): t - s, how far back key s is
    window_mask = (back >= 0) & (back < window)  # s <= t, and at most window - 1 back
    keys = (ids != pad_id)[:, None, None, :]  # (B, 1, 1, T): real keys
    return window_mask & keys  # (B, 1, T, T) by broadcasting


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
