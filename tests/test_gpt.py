"""transformer_lib.gpt: norms and GELU against PyTorch, causality, both attention paths,
the KV cache, sampling."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.gpt import (
    GPT,
    GPTConfig,
    KVCache,
    RMSNorm,
    gelu,
    generate,
)
from transformer_lib.sampling import sample_next

FAST = settings(derandomize=True, deadline=None, max_examples=25)
DTYPES = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float64: dict(atol=1e-10, rtol=1e-10),
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
}


def tiny_model(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig.tiny(**overrides)).eval()


@FAST
@given(
    st.integers(1, 3),
    st.integers(1, 9),
    st.integers(1, 48),
    st.sampled_from(list(DTYPES)),
)
def test_rmsnorm_matches_torch(b, t, c, dtype):
    x = torch.randn(b, t, c, dtype=dtype)
    ours, ref = RMSNorm(c).to(dtype), torch.nn.RMSNorm(c, eps=1e-6).to(dtype)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ref.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), ref(x), **DTYPES[dtype])


@FAST
@given(
    st.integers(1, 64), st.sampled_from(("none", "tanh")), st.sampled_from(list(DTYPES))
)
def test_gelu_matches_torch(n, approximate, dtype):
    x = torch.randn(n, dtype=dtype) * 4
    torch.testing.assert_close(
        gelu(x, approximate), F.gelu(x, approximate=approximate), **DTYPES[dtype]
    )


def test_bad_config_and_gelu_mode_are_named():
    with pytest.raises(ValueError, match="n_heads=4 must divide d_model=30"):
        GPTConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="norm must be one of"):
        GPTConfig(norm="batch")
    with pytest.raises(ValueError, match="approximate must be"):
        gelu(torch.zeros(1), "sigmoid")
    with pytest.raises(ValueError, match="dropout"):
        GPTConfig(dropout=1.0)


def test_config_round_trip_and_presets():
    for preset in (GPTConfig.tiny, GPTConfig.cpu, GPTConfig.gpu):
        config = preset()
        assert GPTConfig(**config.to_dict()) == config
        assert (
            config.d_ff == 4 * config.d_model
            and config.d_head * config.n_heads == config.d_model
        )


def test_shapes_loss_and_weight_tying():
    model = tiny_model()
    ids, targets = torch.randint(0, 65, (2, 3, 20))
    logits, loss = model(ids, targets)
    assert logits.shape == (3, 20, 65) and loss.shape == ()
    assert model.lm_head.weight is model.tok_emb.weight
    assert model.num_params(non_embedding=False) == sum(
        p.numel() for p in set(model.parameters())
    )
    # an untrained model is close to uniform: loss near ln(65)
    assert abs(loss.item() - torch.log(torch.tensor(65.0)).item()) < 0.2


def test_too_long_input_is_refused():
    with pytest.raises(ValueError, match="33 tokens is longer than context_len=32"):
        tiny_model()(torch.zeros(1, 33, dtype=torch.long))


def test_causal_future_tokens_do_not_change_the_past():
    model = tiny_model()
    ids = torch.randint(0, 65, (2, 16))
    changed = ids.clone()
    changed[:, 9:] = torch.randint(0, 65, (2, 7))
    torch.testing.assert_close(model(ids)[0][:, :9], model(changed)[0][:, :9])
    assert not torch.allclose(model(ids)[0][:, 9:], model(changed)[0][:, 9:])


@FAST
@given(
    st.integers(1, 3),
    st.integers(1, 32),
    st.sampled_from([1, 2, 4]),
    st.sampled_from(["rms", "layer"]),
)
def test_fused_and_explicit_attention_agree(b, t, n_heads, norm):
    fused = tiny_model(n_heads=n_heads, norm=norm)
    explicit = GPT(
        GPTConfig.tiny(n_heads=n_heads, norm=norm, attn_impl="explicit")
    ).eval()
    explicit.load_state_dict(fused.state_dict())
    ids = torch.randint(0, 65, (b, t))
    torch.testing.assert_close(fused(ids)[0], explicit(ids)[0], atol=1e-5, rtol=1e-5)


def test_attention_weights_are_causal_distributions():
    model = tiny_model()
    model(torch.randint(0, 65, (2, 12)), need_weights=True)
    assert len(model.last_weights) == 2
    for w in model.last_weights:
        assert w.shape == (2, 2, 12, 12)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 12))
        assert (w.triu(diagonal=1) == 0).all()


@FAST
@given(st.lists(st.integers(1, 8), min_size=1, max_size=4))
def test_kv_cache_chunks_match_one_full_pass(chunks):
    model = tiny_model()
    ids = torch.randint(0, 65, (2, sum(chunks)))
    cache, outs, start = KVCache(model.config, 2), [], 0
    for n in chunks:
        outs.append(model(ids[:, start : start + n], cache=cache)[0])
        start += n
    assert cache.length == sum(chunks)
    torch.testing.assert_close(
        torch.cat(outs, dim=1), model(ids)[0], atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_greedy_generation_same_with_and_without_cache(impl):
    torch.manual_seed(1)
    model = GPT(GPTConfig.tiny(attn_impl=impl)).eval()
    prompt = torch.randint(0, 65, (2, 5))
    with_cache = generate(
        model, prompt, 60, temperature=0, use_cache=True
    )  # 65 > context_len=32
    without = generate(model, prompt, 60, temperature=0, use_cache=False)
    assert with_cache.shape == (2, 65)
    assert torch.equal(with_cache, without)


def test_generate_refuses_empty_prompt_and_unknown_ids():
    model = tiny_model()
    with pytest.raises(ValueError, match=r"need ids \(B, T >= 1\)"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 3)
    with pytest.raises(
        ValueError, match=r"token id 70 is outside the vocabulary \[0, 65\)"
    ):
        generate(model, torch.tensor([[3, 70]]), 3)


def test_sampling_filters():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5]])
    assert sample_next(logits, temperature=0).item() == 1
    g = torch.Generator().manual_seed(0)
    assert {
        sample_next(logits, 1.0, top_k=1, generator=g).item() for _ in range(20)
    } == {1}
    assert {
        sample_next(logits, 1.0, top_p=0.1, generator=g).item() for _ in range(20)
    } == {1}
    two = {sample_next(logits, 1.0, top_k=2, generator=g).item() for _ in range(200)}
    assert two == {1, 2}
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
        sample_next(logits, temperature=-1)


def test_library_guards_name_what_is_wrong():
    """Bad input to the models gives a ValueError that says what was wrong, not an error
    deep inside."""
    from transformer_lib.multi_head import MultiHeadAttention

    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="same length T_k .* got 5 and 6"):
        mha(x, x, torch.randn(2, 6, 8))
    with pytest.raises(ValueError, match="same batch size B, got 2, 3 and 3"):
        mha(x, torch.randn(3, 5, 8))
    model = GPT(GPTConfig.tiny())
    with pytest.raises(
        ValueError, match=r"token id 65 is outside the vocabulary \[0, 65\)"
    ):
        model(torch.tensor([[0, 65]]))
    with pytest.raises(ValueError, match="token id -1 is outside the vocabulary"):
        model(torch.tensor([[-1, 3]]))
    with pytest.raises(TypeError, match="token ids must be an integer tensor"):
        model(torch.tensor([[0.0, 3.0]]))
    cache = KVCache(model.config, batch_size=2)
    with pytest.raises(ValueError, match="this cache holds a batch of 2, got 1"):
        model(torch.tensor([[1, 2]]), cache=cache)
    with pytest.raises(ValueError, match="max_new_tokens >= 0; got \\(1, 1\\), -1"):
        generate(model, torch.tensor([[1]]), -1)
    assert generate(model, torch.tensor([[1, 2]]), 0).shape == (1, 2)
    with pytest.raises(ValueError, match="top_p must lie in"):
        generate(model, torch.tensor([[1]]), 3, top_p=1.5)
