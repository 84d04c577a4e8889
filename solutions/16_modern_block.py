"""Solutions of notebook 16's build-its (checked by tests/test_exercises.py)."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class MyGeGLU(nn.Module):
    """A gated MLP with a GELU gate: proj(gelu(gate(x)) * up(x)), three matrices, no
    biases, of hidden width 2/3 of 4 * d_model rounded up to a multiple of 64."""

    def __init__(self, d_model: int, multiple_of: int = 64):
        super().__init__()
        d_ff = multiple_of * math.ceil(8 * d_model / 3 / multiple_of)  # 40 -> 128
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.proj(F.gelu(self.gate(x)) * self.up(x))  # (B, T, C)


def my_newton_schulz(G: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """About U V^T of G (d_out, d_in), by Muon's Newton-Schulz iteration."""
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = G.size(0) > G.size(1)
    X = G.T if tall else G  # the smaller Gram matrix X X^T
    X = X / X.norm()  # singular values in (0, 1]
    for _ in range(steps):
        A = X @ X.T  # (d, d), d the smaller side
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if tall else X
