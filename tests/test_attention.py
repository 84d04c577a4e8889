"""Scaled dot-product attention (notebook 04): shapes, PyTorch reference, empty rows,
errors."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.attention import (
    fast_scaled_dot_product_attention,
    scaled_dot_product_attention,
)

TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-4),
    torch.float64: dict(atol=1e-10, rtol=1e-8),
    torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
}


def random_mask(gen, shape, allow_empty_rows=False):
    """A random bool mask (True = may attend); unless allowed, every query row keeps key
    0."""
    mask = torch.rand(shape, generator=gen) < 0.6
    if not allow_empty_rows:
        mask[..., 0] = True
    return mask


@st.composite
def attention_inputs(draw, dtypes=(torch.float32, torch.float64)):
    B, H, T_q, T_k, D, D_v = (draw(st.integers(1, 5)) for _ in range(6))
    dtype = draw(st.sampled_from(dtypes))
    mask_shape = draw(
        st.sampled_from(
            [None, (B, H, T_q, T_k), (B, 1, T_q, T_k), (B, 1, 1, T_k), (T_q, T_k)]
        )
    )
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    q = torch.randn(B, H, T_q, D, generator=gen).to(dtype)
    k = torch.randn(B, H, T_k, D, generator=gen).to(dtype)
    v = torch.randn(B, H, T_k, D_v, generator=gen).to(dtype)
    mask = None if mask_shape is None else random_mask(gen, mask_shape)
    return q, k, v, mask


def test_shapes_with_any_leading_dimensions():
    q, k, v = torch.randn(3, 5, 8), torch.randn(3, 7, 8), torch.randn(3, 7, 4)
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.shape == (3, 5, 4) and w.shape == (3, 5, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 5))
    assert fast_scaled_dot_product_attention(q, k, v).shape == (3, 5, 4)
    out, w = scaled_dot_product_attention(q[0], k[0], v[0])  # no batch dimension at all
    assert out.shape == (5, 4) and w.shape == (5, 7)


def test_hand_example():
    q = torch.tensor([[2.0, 0.0]])
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    v = torch.eye(3)
    out, w = scaled_dot_product_attention(q, k, v)
    e = torch.exp(torch.tensor(2 / 2**0.5))
    torch.testing.assert_close(
        w, torch.stack([e, torch.tensor(1.0), torch.tensor(1.0)])[None] / (e + 2)
    )
    torch.testing.assert_close(out, w)


@settings(derandomize=True, deadline=None, max_examples=50)
@given(attention_inputs())
def test_matches_pytorch_sdpa(inputs):
    q, k, v, mask = inputs
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, expected, **TOL[q.dtype])
    torch.testing.assert_close(
        fast_scaled_dot_product_attention(q, k, v, mask), expected, **TOL[q.dtype]
    )
    torch.testing.assert_close(
        w.sum(-1), torch.ones(w.shape[:-1], dtype=q.dtype), **TOL[q.dtype]
    )
    if mask is not None:
        assert (w[~mask.expand_as(w)] == 0).all()


@settings(derandomize=True, deadline=None, max_examples=20)
@given(attention_inputs(dtypes=(torch.bfloat16,)))
def test_bfloat16_close_to_float64(inputs):
    q, k, v, mask = inputs
    expected = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=mask
    )
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), expected, **TOL[torch.bfloat16])
    torch.testing.assert_close(
        fast_scaled_dot_product_attention(q, k, v, mask).double(),
        expected,
        **TOL[torch.bfloat16],
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("path", ["explicit", "fast"])
def test_fully_masked_rows_are_zero_and_gradients_finite(dtype, path):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 3, 4, 8, generator=gen).to(dtype).requires_grad_()
        for _ in range(3)
    )
    mask = random_mask(gen, (2, 1, 4, 4))
    mask[0, 0, 1] = False  # query 1 of batch 0 may see no key
    mask[1, 0, :, :] = False  # batch 1: every query is empty
    if path == "explicit":
        out, w = scaled_dot_product_attention(q, k, v, mask)
        assert (w[0, :, 1] == 0).all() and (w[1] == 0).all()
    else:
        out = fast_scaled_dot_product_attention(q, k, v, mask)
    (out.float() ** 2).sum().backward()
    assert torch.isfinite(out).all()
    assert (out[0, :, 1] == 0).all() and (out[1] == 0).all()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[1] == 0).all()  # nothing flows back from an empty row
    # the other rows are as without the empty ones
    keep = mask[0, 0, [0, 2, 3]]
    expected = F.scaled_dot_product_attention(
        q[0, :, [0, 2, 3]].double(), k[0].double(), v[0].double(), attn_mask=keep
    )
    torch.testing.assert_close(out[0, :, [0, 2, 3]].double(), expected, **TOL[dtype])


def test_explicit_and_fast_paths_agree_with_empty_rows():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(3, 2, 6, 4, generator=gen, dtype=torch.float64) for _ in range(3)
    )
    mask = random_mask(gen, (3, 2, 6, 6), allow_empty_rows=True)
    mask[0, 0, 0] = False
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, mask)[0],
        fast_scaled_dot_product_attention(q, k, v, mask),
    )


@pytest.mark.parametrize(
    "fn", [scaled_dot_product_attention, fast_scaled_dot_product_attention]
)
def test_mask_that_does_not_broadcast_names_the_shapes(fn):
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 8)
    with pytest.raises(
        ValueError, match=r"mask of shape \(5, 5\) does not broadcast .*\(2, 5, 7\)"
    ):
        fn(q, k, v, torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(
        ValueError, match=r"mask of shape \(3, 1, 5, 7\)"
    ):  # would grow the batch
        fn(q, k, v, torch.ones(3, 1, 5, 7, dtype=torch.bool))


def test_non_bool_mask_is_refused():
    q = torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match="bool.*float32"):
        scaled_dot_product_attention(q, q, q, torch.ones(3, 3))


def test_dropout_applies_to_output_not_returned_weights():
    torch.manual_seed(0)
    q = torch.randn(2, 6, 4)
    out, w = scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    assert (out == 0).all()  # every weight dropped
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 6))
    out_half, _ = scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert not torch.allclose(out_half, scaled_dot_product_attention(q, q, q)[0])
