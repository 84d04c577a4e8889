"""Solutions of notebook 16's build-its (checked by tests/test_exercises.py)."""

import math

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
