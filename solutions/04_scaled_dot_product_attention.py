"""Solution of notebook 04's build-it (checked by tests/test_exercises.py)."""

import math

import torch


def my_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d_k)) v -> (output (..., T_q, D_v), weights (..., T_q,
    T_k)); mask True = may attend; a query that may see no key gets zero weights."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., T_q, T_k)
    empty = None
    if mask is not None:
        empty = ~mask.any(dim=-1, keepdim=True)  # queries that may see no key
        # masked scores -inf before the softmax; an empty row attends everywhere...
        scores = scores.masked_fill(~(mask | empty), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if empty is not None:
        weights = weights.masked_fill(empty, 0.0)  # ...then gets weight 0
    return weights @ v, weights
