"""Multi-head attention (notebook 05): split/merge, shapes, nn.MultiheadAttention
reference, errors."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.multi_head import MultiHeadAttention, merge_heads, split_heads

TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-4),
    torch.float64: dict(atol=1e-10, rtol=1e-8),
    torch.bfloat16: dict(atol=5e-2, rtol=5e-2),
}


def to_torch(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """nn.MultiheadAttention (batch_first) holding our module's weights."""
    bias = mha.q_proj.bias is not None
    ref = nn.MultiheadAttention(
        mha.d_model, mha.n_heads, bias=bias, batch_first=True
    ).to(mha.q_proj.weight.dtype)
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight])
        )
        ref.out_proj.weight.copy_(mha.out_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(
                torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias])
            )
            ref.out_proj.bias.copy_(mha.out_proj.bias)
    return ref.eval()


@settings(derandomize=True, deadline=None, max_examples=30)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(1, 4), st.integers(1, 5))
def test_split_then_merge_is_identity(B, T, H, D):
    x = torch.randn(B, T, H * D)
    heads = split_heads(x, H)
    assert heads.shape == (B, H, T, D)
    assert torch.equal(
        heads[:, -1, :, :], x[..., (H - 1) * D :]
    )  # the last head holds the last D features
    assert torch.equal(merge_heads(heads), x)


def test_split_heads_names_the_sizes():
    with pytest.raises(ValueError, match="C=10 is not divisible by n_heads=4"):
        split_heads(torch.randn(1, 2, 10), 4)


def test_d_model_not_divisible_by_n_heads():
    with pytest.raises(ValueError, match="d_model=30 is not divisible by n_heads=4"):
        MultiHeadAttention(30, 4)


def test_wrong_input_width_names_the_sizes():
    mha = MultiHeadAttention(16, 2)
    with pytest.raises(
        ValueError, match=r"key must be \(B, T, d_model=16\), got \(2, 3, 8\)"
    ):
        mha(torch.randn(2, 3, 16), torch.randn(2, 3, 8))


def test_mask_that_does_not_broadcast_names_the_shapes():
    mha = MultiHeadAttention(16, 2)
    bad = torch.ones(
        3, 5, dtype=torch.bool
    )  # a (B, T) padding mask without its singleton dimensions
    for need_weights in (True, False):
        with pytest.raises(
            ValueError, match=r"\(3, 5\) does not broadcast .*\(3, 2, 5, 5\)"
        ):
            mha(torch.randn(3, 5, 16), mask=bad, need_weights=need_weights)


def test_shapes_and_parameter_count():
    mha = MultiHeadAttention(32, 4)
    out, w = mha(torch.randn(2, 5, 32), torch.randn(2, 7, 32), need_weights=True)
    assert out.shape == (2, 5, 32) and w.shape == (2, 4, 5, 7)
    out, w = mha(torch.randn(2, 5, 32))
    assert out.shape == (2, 5, 32) and w is None
    assert sum(p.numel() for p in mha.parameters()) == 4 * 32 * 32 + 4 * 32
    assert (
        sum(p.numel() for p in MultiHeadAttention(32, 4, bias=False).parameters())
        == 4 * 32 * 32
    )


@st.composite
def mha_case(draw, dtypes=(torch.float32, torch.float64)):
    H, D, B, T_q = (
        draw(st.integers(1, 4)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 3)),
        draw(st.integers(1, 6)),
    )
    cross = draw(st.booleans())
    T_k = draw(st.integers(1, 6)) if cross else T_q
    return dict(
        H=H,
        C=H * D,
        B=B,
        T_q=T_q,
        T_k=T_k,
        cross=cross,
        bias=draw(st.booleans()),
        dtype=draw(st.sampled_from(dtypes)),
        mask=draw(st.sampled_from(["none", "padding", "causal", "random"])),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def build(case):
    """Our module, its nn.MultiheadAttention twin, inputs, our mask and the equivalent
    torch kwargs."""
    gen = torch.Generator().manual_seed(case["seed"])
    torch.manual_seed(case["seed"])
    B, H, T_q, T_k, dtype = (
        case["B"],
        case["H"],
        case["T_q"],
        case["T_k"],
        case["dtype"],
    )
    mha = MultiHeadAttention(case["C"], H, bias=case["bias"]).to(dtype).eval()
    ref = to_torch(mha)
    query = torch.randn(B, T_q, case["C"], generator=gen).to(dtype)
    kv = (
        torch.randn(B, T_k, case["C"], generator=gen).to(dtype)
        if case["cross"]
        else query
    )
    if case["mask"] == "padding":
        lengths = torch.randint(1, T_k + 1, (B,), generator=gen)
        mask = (torch.arange(T_k) < lengths[:, None])[
            :, None, None, :
        ]  # (B, 1, 1, T_k)
        kwargs = {"key_padding_mask": ~mask[:, 0, 0, :]}  # torch: True = masked out
    elif case["mask"] == "causal":
        mask = torch.ones(
            T_q, T_k, dtype=torch.bool
        ).tril()  # (T_q, T_k); row 0 keeps key 0
        kwargs = {"attn_mask": ~mask}
    elif case["mask"] == "random":
        mask = torch.rand(B, H, T_q, T_k, generator=gen) < 0.5
        mask[..., 0] = True
        kwargs = {"attn_mask": ~mask.reshape(B * H, T_q, T_k)}
    else:
        mask, kwargs = None, {}
    return mha, ref, query, kv, mask, kwargs


@settings(derandomize=True, deadline=None, max_examples=50)
@given(mha_case())
def test_matches_nn_multihead_attention(case):
    mha, ref, query, kv, mask, kwargs = build(case)
    with torch.no_grad():
        expected, expected_w = ref(query, kv, kv, **kwargs, average_attn_weights=False)
        out, w = mha(query, kv, mask=mask, need_weights=True)
        fast, _ = mha(query, kv, mask=mask)
    tol = TOL[case["dtype"]]
    torch.testing.assert_close(out, expected, **tol)
    torch.testing.assert_close(w, expected_w, **tol)
    torch.testing.assert_close(fast, expected, **tol)


@settings(derandomize=True, deadline=None, max_examples=15)
@given(mha_case(dtypes=(torch.bfloat16,)))
def test_bfloat16_close_to_float64_reference(case):
    mha, _, query, kv, mask, kwargs = build(case)
    ref = to_torch(mha.double())
    mha = mha.to(torch.bfloat16)
    with torch.no_grad():
        expected, _ = ref(query.double(), kv.double(), kv.double(), **kwargs)
        for need_weights in (True, False):
            out, _ = mha(query, kv, mask=mask, need_weights=need_weights)
            assert out.dtype == torch.bfloat16
            torch.testing.assert_close(out.double(), expected, **TOL[torch.bfloat16])


@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_rows_finite_forward_and_backward(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4)
    x = torch.randn(2, 5, 16, requires_grad=True)
    real = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    mask = (
        real[:, None, None, :] & real[:, None, :, None]
    )  # (B, 1, T, T): padded queries see nothing
    out, _ = mha(x, mask=mask, need_weights=need_weights)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())
    # an empty row's attention is zero, so its output is just the output projection's
    # bias
    torch.testing.assert_close(out[0, 3], mha.out_proj.bias.detach())


def test_causality_on_both_paths():
    torch.manual_seed(0)
    T = 7
    mha = MultiHeadAttention(16, 4).eval()
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = torch.randn(1, T, 16)
    for need_weights in (True, False):
        base, _ = mha(x, mask=mask, need_weights=need_weights)
        for t in range(T - 1):
            x2 = x.clone()
            x2[0, t + 1] += 1.0  # change token t+1
            out, _ = mha(x2, mask=mask, need_weights=need_weights)
            torch.testing.assert_close(
                out[0, : t + 1], base[0, : t + 1], atol=0, rtol=0
            )
            assert not torch.allclose(out[0, t + 1], base[0, t + 1])


def test_dropout_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, dropout=0.5)
    x = torch.randn(2, 6, 16)
    mha.eval()
    torch.testing.assert_close(mha(x)[0], mha(x)[0])
    mha.train()
    assert not torch.allclose(mha(x)[0], mha(x)[0])
