"""Solution of notebook 04's build-it (checked by tests/test_exercises.py)."""

import math

import torch


def my_attention_with_mask(q, k, v, allowed):
    """q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v), allowed bool (T_q, T_k)
    or (..., T_q, T_k), True = may see -> (output (..., T_q, d_v), weights (..., T_q,
    T_k))."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., T_q, T_k)
    scores = scores.masked_fill(~allowed, float("-inf"))  # a blocked key: e^-inf = 0
    weights = torch.softmax(scores, dim=-1)  # over the keys: each row sums to 1
    return weights @ v, weights
