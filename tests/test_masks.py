"""Masks (notebook 06): padding and causal masks, their combination, PyTorch reference,
causality."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.attention import (
    fast_scaled_dot_product_attention,
    scaled_dot_product_attention,
)
from transformer_lib.masks import causal_mask, padding_mask
from transformer_lib.multi_head import MultiHeadAttention

PAD = 0
TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-4),
    torch.float64: dict(atol=1e-10, rtol=1e-8),
    torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
}


def test_padding_mask_shape_and_values():
    ids = torch.tensor([[5, 6, 7], [8, PAD, PAD]])
    mask = padding_mask(ids, PAD)
    assert mask.shape == (2, 1, 1, 3) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, True], [True, False, False]]


def test_padding_mask_needs_batch_of_ids():
    with pytest.raises(ValueError, match=r"ids must be \(B, T\), got shape \(4,\)"):
        padding_mask(torch.tensor([1, 2, 3, 0]), PAD)


def test_causal_mask():
    mask = causal_mask(4)
    assert mask.shape == (4, 4) and mask.dtype == torch.bool
    assert mask.tolist() == [[j <= i for j in range(4)] for i in range(4)]
    assert causal_mask(3, device="cpu").device.type == "cpu"


def test_combination_broadcasts():
    ids = torch.tensor([[5, 6, 7, PAD]])
    combined = padding_mask(ids, PAD) & causal_mask(4)
    assert combined.shape == (1, 1, 4, 4)
    assert combined[0, 0].int().tolist() == [
        [1, 0, 0, 0],
        [1, 1, 0, 0],
        [1, 1, 1, 0],
        [1, 1, 1, 0],
    ]


@settings(derandomize=True, deadline=None, max_examples=40)
@given(
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 8),
    st.integers(1, 6),
    st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
    st.integers(0, 2**31 - 1),
)
def test_masks_match_pytorch_attn_mask_and_is_causal(B, H, T, D, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(B, H, T, D, generator=gen, dtype=torch.float64) for _ in range(3)
    )
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    ids = torch.where(torch.arange(T) < lengths[:, None], 1, PAD)  # right padding
    pad, causal = padding_mask(ids, PAD), causal_mask(T)
    low = [t.to(dtype) for t in (q, k, v)]
    references = [
        (causal, F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        (pad, F.scaled_dot_product_attention(q, k, v, attn_mask=pad)),
        (pad & causal, F.scaled_dot_product_attention(q, k, v, attn_mask=pad & causal)),
    ]
    for mask, expected in references:
        out, w = scaled_dot_product_attention(*low, mask)
        torch.testing.assert_close(out.double(), expected, **TOL[dtype])
        torch.testing.assert_close(
            fast_scaled_dot_product_attention(*low, mask).double(),
            expected,
            **TOL[dtype],
        )
        assert (w[~mask.expand_as(w)] == 0).all()


@pytest.mark.parametrize("need_weights", [True, False])
def test_changing_token_t_plus_1_never_changes_outputs_up_to_t(need_weights):
    torch.manual_seed(0)
    T = 8
    mha = MultiHeadAttention(16, 4).eval()
    ids = torch.tensor([[3, 4, 5, 6, 7, 8, PAD, PAD]])
    mask = padding_mask(ids, PAD) & causal_mask(T)
    x = torch.randn(1, T, 16)
    with torch.no_grad():
        base, _ = mha(x, mask=mask, need_weights=need_weights)
        for t in range(T - 1):
            x2 = x.clone()
            x2[0, t + 1] = torch.randn(16)
            out, _ = mha(x2, mask=mask, need_weights=need_weights)
            assert torch.equal(out[0, : t + 1], base[0, : t + 1]), (
                f"output moved at a position <= {t}"
            )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("need_weights", [True, False])
def test_left_padding_with_causal_mask_has_empty_rows_but_no_nan(dtype, need_weights):
    torch.manual_seed(0)
    ids = torch.tensor(
        [[PAD, PAD, 4, 5], [2, 3, 4, 5]]
    )  # left padding: rows 0-1 of batch 0 see nothing
    mask = padding_mask(ids, PAD) & causal_mask(4)
    assert not mask[0, 0, :2].any()
    mha = MultiHeadAttention(8, 2).to(dtype)
    x = torch.randn(2, 4, 8, dtype=dtype, requires_grad=True)
    out, _ = mha(x, mask=mask, need_weights=need_weights)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


def test_padding_mask_without_singleton_dimensions_is_caught():
    ids = torch.tensor([[1, 2, 3], [1, PAD, PAD]])
    q = torch.randn(2, 2, 3, 4)  # (B, H, T, D)
    with pytest.raises(
        ValueError, match=r"mask of shape \(2, 3\) does not broadcast .*\(2, 2, 3, 3\)"
    ):
        scaled_dot_product_attention(
            q, q, q, ids != PAD
        )  # (B, T): would align B with the queries
