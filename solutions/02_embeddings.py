"""Solution of notebook 02's build-it (checked by tests/test_exercises.py)."""

import torch
from torch import nn


class MyTiedOutput(nn.Module):
    """The output layer tied to `embedding`: h (B, T, C) -> logits (B, T, n_vocab) =
    h @ W^T with W = embedding.weight, shared, so it has no parameters of its own."""

    def __init__(self, embedding: nn.Module):
        super().__init__()
        self.embedding = embedding  # a reference to the module: its weight is shared

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.embedding.weight.T  # (B, T, C) @ (C, V) -> (B, T, V)
