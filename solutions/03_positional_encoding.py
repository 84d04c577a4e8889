"""Solution of notebook 03's build-it (checked by tests/test_exercises.py)."""

import torch


def my_shift_encoding(x: torch.Tensor, k: int) -> torch.Tensor:
    """x (..., C) -> each pair (x[2i], x[2i+1]), a sine and a cosine, turned by the
    angle k * w_i, w_i = 10000^(-2i/C): R_k x, without the (C, C) matrix."""
    C = x.shape[-1]
    dtype = torch.promote_types(x.dtype, torch.float32)
    angle = k * 10000 ** (-torch.arange(0, C, 2, dtype=dtype) / C)  # (C/2,): k * w_i
    c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]  # (..., C/2): each pair's sine and cosine
    turned = torch.stack([a * c + b * s, -a * s + b * c], dim=-1)  # (..., C/2, 2)
    return turned.flatten(-2)  # (..., C): each pair back in its place
