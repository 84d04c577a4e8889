"""Solution of notebook 02's build-it (checked by tests/test_exercises.py)."""

import math

import torch
from torch import nn


class MyTokenEmbedding(nn.Module):
    """Token ids (B, T) -> vectors (B, T, C): a learned (n_vocab, C) table, looked up
    and scaled by sqrt(d_model)."""

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.d_model = d_model
        # std 1/sqrt(C), so the scaled vectors start with unit variance
        self.weight = nn.Parameter(torch.randn(vocab_size, d_model) * d_model**-0.5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids] * math.sqrt(self.d_model)  # (B, T, C)
