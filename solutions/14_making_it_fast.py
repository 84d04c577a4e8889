"""Solution of notebook 14's build-it (checked by tests/test_exercises.py)."""

import math

import torch


def my_tiled_attention(q, k, v, block):
    """softmax(q k^T / sqrt(D)) v over key blocks of `block`, with an online softmax:
    a running maximum m and a running sum ell per query."""
    m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)  # (..., T_q, 1)
    ell = torch.zeros_like(m)  # sum of exp(score - m) so far
    out = q.new_zeros(q.shape[:-1] + (v.size(-1),))  # (..., T_q, D_v), unnormalised
    for s in range(0, k.size(-2), block):
        kb, vb = k[..., s : s + block, :], v[..., s : s + block, :]
        scores = q @ kb.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., T_q, b)
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        rescale = (m - m_new).exp()  # the old sums were taken against the old max
        p = (scores - m_new).exp()
        ell = ell * rescale + p.sum(-1, keepdim=True)
        out = out * rescale + p @ vb
        m = m_new
    return out / ell
