"""Encoder: the feed-forward network, the layer against nn.TransformerEncoderLayer,
padding, pre/post-norm."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.encoder import Encoder, EncoderLayer, PositionwiseFeedForward
from transformer_lib.masks import padding_mask
from transformer_lib.torch_reference import load_torch_encoder_layer


def test_feed_forward_is_position_wise():
    ff = PositionwiseFeedForward(8, 32)
    x = torch.randn(2, 5, 8)
    perm = torch.randperm(5)
    assert ff(x).shape == (2, 5, 8)
    torch.testing.assert_close(ff(x)[:, perm], ff(x[:, perm]))


@settings(derandomize=True, deadline=None, max_examples=25)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 9),
    H=st.sampled_from([1, 2, 4]),
    D=st.sampled_from([2, 8]),
    norm_first=st.booleans(),
    n_pad=st.integers(0, 3),
    seed=st.integers(0, 1000),
)
def test_layer_matches_pytorch(B, T, H, D, norm_first, n_pad, seed):
    torch.manual_seed(seed)
    C = H * D
    ref = nn.TransformerEncoderLayer(
        C, H, 3 * C, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    ours = load_torch_encoder_layer(
        EncoderLayer(C, H, 3 * C, dropout=0.0, norm_first=norm_first), ref
    ).eval()
    ids = torch.ones(B, T, dtype=torch.long)
    ids[0, T - min(n_pad, T - 1) :] = (
        0  # pad the end of the first sequence, keeping one real token
    )
    x = torch.randn(B, T, C)
    real = ids != 0
    expected = ref(x, src_key_padding_mask=~real)
    torch.testing.assert_close(
        ours(x, padding_mask(ids, 0))[real], expected[real], atol=1e-5, rtol=1e-4
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_does_not_change_real_positions(norm_first):
    torch.manual_seed(0)
    enc = Encoder(2, 16, 2, 32, dropout=0.0, norm_first=norm_first).eval()
    x = torch.randn(1, 6, 16)
    ids = torch.tensor([[4, 5, 6, 0, 0, 0]])
    torch.testing.assert_close(enc(x, padding_mask(ids, 0))[:, :3], enc(x[:, :3]))


def test_pre_norm_stack_ends_with_layernorm_and_post_norm_does_not():
    assert isinstance(Encoder(2, 16, 2, 32, norm_first=True).norm, nn.LayerNorm)
    assert isinstance(Encoder(2, 16, 2, 32, norm_first=False).norm, nn.Identity)


def test_bad_head_count_is_refused():
    with pytest.raises(ValueError, match="d_model=10.*n_heads=4"):
        EncoderLayer(10, 4, 20)
