"""transformer_lib.embeddings: TokenEmbedding against nn.Embedding and one-hot products,
and bad ids."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.embeddings import TokenEmbedding


def test_shape_and_scale():
    emb = TokenEmbedding(50, 16)
    ids = torch.randint(0, 50, (3, 7))  # (B, T)
    x = emb(ids)
    assert x.shape == (3, 7, 16)
    torch.testing.assert_close(x, emb.embedding(ids) * 4.0)
    unscaled = TokenEmbedding(50, 16, scale=False)
    torch.testing.assert_close(unscaled(ids), unscaled.weight[ids])


@settings(derandomize=True, deadline=None, max_examples=30)
@given(
    V=st.integers(1, 300),
    C=st.integers(1, 96),
    B=st.integers(1, 4),
    T=st.integers(0, 20),
    scale=st.booleans(),
    dtype=st.sampled_from([torch.int64, torch.int32]),
)
def test_equals_pytorch_references(V, C, B, T, scale, dtype):
    torch.manual_seed(V * 1000 + C)
    emb = TokenEmbedding(V, C, scale=scale)
    ids = torch.randint(0, V, (B, T), dtype=dtype)
    reference = nn.Embedding(V, C)
    with torch.no_grad():
        reference.weight.copy_(emb.weight)
    factor = math.sqrt(C) if scale else 1.0
    torch.testing.assert_close(emb(ids), reference(ids.long()) * factor)
    torch.testing.assert_close(
        emb(ids), F.one_hot(ids.long(), V).float() @ emb.weight * factor
    )


def test_unit_variance_output_either_way():
    for scale in (True, False):
        torch.manual_seed(0)
        emb = TokenEmbedding(1000, 256, scale=scale)
        assert abs(emb(torch.arange(1000)).std().item() - 1.0) < 0.02


@pytest.mark.parametrize("bad", [10, 11, -1])
def test_ids_outside_the_vocabulary_are_named(bad):
    emb = TokenEmbedding(10, 4)
    ids = torch.tensor([[0, 3, bad, 2]])
    with pytest.raises(
        ValueError,
        match=rf"token id {bad} is outside the vocabulary \[0, 10\) \(vocab_size=10\)",
    ):
        emb(ids)


def test_float_ids_are_refused():
    with pytest.raises(TypeError, match="integer tensor, got torch.float32"):
        TokenEmbedding(10, 4)(torch.zeros(1, 3))


def test_weight_tying_shares_one_parameter():
    emb = TokenEmbedding(20, 8)
    head = nn.Linear(8, 20, bias=False)
    head.weight = emb.weight
    model = nn.ModuleDict({"emb": emb, "head": head})
    assert sum(p.numel() for p in model.parameters()) == 20 * 8
    ids = torch.tensor([[1, 2, 3]])
    head(emb(ids)).sum().backward()
    assert emb.weight.grad is not None and emb.weight.grad.abs().sum() > 0


def test_gradient_reaches_only_used_rows():
    emb = TokenEmbedding(6, 3, scale=False)
    emb(torch.tensor([[1, 1, 4]])).sum().backward()
    expected = torch.zeros(6, 3)
    expected[1], expected[4] = 2.0, 1.0
    torch.testing.assert_close(emb.weight.grad, expected)
