"""transformer_lib.positional: the sinusoidal table against a loop over the paper's
formula, the modules, errors."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_positional_encoding,
)


def pe_loop(d_model: int, context_len: int) -> torch.Tensor:
    """The paper's formula entry by entry, in float64: PE(pos, 2i) = sin, PE(pos, 2i+1)
    = cos of pos / 10000^(2i/C)."""
    pe = torch.zeros(context_len, d_model, dtype=torch.float64)
    for pos in range(context_len):
        for j in range(d_model):
            angle = pos / 10000 ** (2 * (j // 2) / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


@settings(derandomize=True, deadline=None, max_examples=30)
@given(N=st.integers(1, 80), C=st.integers(1, 48))
def test_table_equals_the_loop(N, C):
    pe = sinusoidal_positional_encoding(C, N)
    assert pe.shape == (N, C) and pe.dtype == torch.float32
    torch.testing.assert_close(pe, pe_loop(C, N).float(), atol=1e-5, rtol=0)


def test_known_values():
    pe = sinusoidal_positional_encoding(4, 3)
    torch.testing.assert_close(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    torch.testing.assert_close(
        pe[1], torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)])
    )


def test_dot_product_depends_only_on_distance():
    pe = sinusoidal_positional_encoding(32, 300).double()
    dots = pe @ pe.T
    for k in (1, 9, 120):
        diagonal = torch.diagonal(dots, offset=k)
        torch.testing.assert_close(
            diagonal, diagonal[:1].expand_as(diagonal), atol=1e-4, rtol=0
        )


@settings(derandomize=True, deadline=None, max_examples=30)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 16),
    C=st.integers(1, 32),
    extra=st.integers(0, 8),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_sinusoidal_module_adds_the_table(B, T, C, extra, dtype):
    module = SinusoidalPositionalEncoding(C, T + extra)
    x = torch.randn(B, T, C, dtype=dtype)
    out = module(x)
    assert out.shape == (B, T, C) and out.dtype == dtype
    torch.testing.assert_close(
        out, x + pe_loop(C, T + extra)[:T].to(dtype), atol=1e-5, rtol=0
    )


@settings(derandomize=True, deadline=None, max_examples=30)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 16),
    C=st.integers(1, 32),
    extra=st.integers(0, 8),
)
def test_learned_module_equals_embedding_at_arange(B, T, C, extra):
    module = LearnedPositionalEmbedding(C, T + extra)
    x = torch.randn(B, T, C)
    torch.testing.assert_close(module(x), x + module.embedding(torch.arange(T)))


@pytest.mark.parametrize(
    "make",
    [
        lambda: SinusoidalPositionalEncoding(8, 10),
        lambda: LearnedPositionalEmbedding(8, 10),
    ],
)
def test_too_long_and_wrong_width_are_named(make):
    module = make()
    with pytest.raises(ValueError, match="sequence length 11 .*exceeds context_len 10"):
        module(torch.zeros(2, 11, 8))
    with pytest.raises(
        ValueError,
        match="sequence length 4 \\(from position 7\\) exceeds context_len 10",
    ):
        module(torch.zeros(2, 4, 8), offset=7)
    with pytest.raises(
        ValueError, match=r"expected x of shape \(B, T, 8\), got \(2, 5, 6\)"
    ):
        module(torch.zeros(2, 5, 6))
    assert module(torch.zeros(2, 10, 8)).shape == (
        2,
        10,
        8,
    )  # exactly context_len is fine


@pytest.mark.parametrize(
    "make",
    [
        lambda: SinusoidalPositionalEncoding(8, 20),
        lambda: LearnedPositionalEmbedding(8, 20),
    ],
)
def test_offset_continues_the_sequence(make):
    module = make()
    x = torch.randn(2, 12, 8)
    torch.testing.assert_close(module(x[:, 5:], offset=5), module(x)[:, 5:])


def test_dropout_and_buffers():
    module = SinusoidalPositionalEncoding(16, 32, dropout=0.5)
    assert module.state_dict() == {}  # the table is recomputed, not saved
    assert list(module.parameters()) == []
    x = torch.ones(4, 32, 16)
    module.train()
    assert (module(x) == 0).any()  # some entries dropped
    module.eval()
    torch.testing.assert_close(module(x), x + sinusoidal_positional_encoding(16, 32))
    learned = LearnedPositionalEmbedding(16, 32)
    assert sum(p.numel() for p in learned.parameters()) == 32 * 16
    assert learned(x).requires_grad
