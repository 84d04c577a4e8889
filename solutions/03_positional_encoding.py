"""Solutions of notebook 03's build-its (checked by tests/test_exercises.py)."""

import torch


def my_sinusoidal_positions(d_model: int, context_len: int) -> torch.Tensor:
    """PE (N, C): PE[pos, 2i] = sin(pos w_i), PE[pos, 2i+1] = cos(pos w_i), with w_i =
    10000^(-2i/C)."""
    pos = torch.arange(context_len, dtype=torch.float32)[:, None]  # (N, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (ceil(C/2),)
    angles = pos * 10000.0 ** (-two_i / d_model)  # (N, ceil(C/2))
    pe = torch.zeros(context_len, d_model)
    pe[:, 0::2] = angles.sin()
    pe[:, 1::2] = angles[:, : d_model // 2].cos()  # an odd C has one cosine fewer
    return pe


def my_apply_rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """x (B, T, C) -> each pair (x[2i], x[2i+1]) of token t rotated by the angle
    t * base^(-2i/C)."""
    T, C = x.shape[-2:]
    pos = torch.arange(T, dtype=x.dtype)[:, None]  # (T, 1)
    angle = pos * base ** (-torch.arange(0, C, 2, dtype=x.dtype) / C)  # (T, C/2)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, T, C/2): the pairs' two halves
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return out.flatten(-2)  # (B, T, C): each pair back in its place
