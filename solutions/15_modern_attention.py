"""Solutions of notebook 15's build-its (checked by tests/test_exercises.py)."""

import torch
import torch.nn.functional as F


def my_apply_rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """x (B, T, C) -> each pair (x[2i], x[2i+1]) of token t rotated by the angle
    t * base^(-2i/C)."""
    T, C = x.shape[-2:]
    dtype = torch.promote_types(x.dtype, torch.float32)  # bfloat16 would round t > 256
    pos = torch.arange(T, dtype=dtype)[:, None]  # (T, 1)
    angle = pos * base ** (-torch.arange(0, C, 2, dtype=dtype) / C)  # (T, C/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, T, C/2): the pairs' two halves
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return out.flatten(-2)  # (B, T, C): each pair back in its place


def my_grouped_attention(q, k, v):
    """q (B, H, T, D), k, v (B, H_kv, T, D) -> causal attention (B, H, T, D); query head
    h reads key/value head h // (H / H_kv)."""
    g = q.size(1) // k.size(1)  # query heads per key/value head
    # (B, H, T, D): 0, 0, 1, 1 (interleave), not 0, 1, 0, 1 (repeat)
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
