"""Our GPT (notebook 12) against Hugging Face's GPT-2: with GPT-2's weights loaded by
transformer_lib.gpt2_weights, the logits must be GPT-2's (small random GPT2Configs,
nothing downloaded)."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformer_lib.gpt import GPT, generate  # noqa: E402
from transformer_lib.gpt2_weights import (  # noqa: E402
    gpt_config_from_hf,
    gpt_from_hf_gpt2,
    hf_gpt2_name,
)


def random_gpt2(seed: int = 0, **config) -> "transformers.GPT2LMHeadModel":
    """A small GPT2LMHeadModel in eval mode, every weight nudged at random (HF starts
    biases at 0 and LayerNorm gains at 1, which would hide a bias or gain copied to the
    wrong place)."""
    torch.manual_seed(seed)
    config = {
        **dict(
            vocab_size=97,
            n_positions=24,
            n_embd=32,
            n_layer=2,
            n_head=4,
            bos_token_id=96,
            eos_token_id=96,
        ),
        **config,
    }
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def logits_of(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = model(ids)
    return (
        out.logits if hasattr(out, "logits") else out[0]
    )  # HF returns an object, ours (logits, loss)


# Ours and HF's are float32 programs adding the same terms in other orders, with kernels
# that differ between CPUs (1e-6 apart on one, 6e-5 on another); a misplaced weight is
# off by about 1.
TOL = dict(rtol=1e-4, atol=1e-4)

IDS = torch.randint(
    0, 97, (3, 24), generator=torch.Generator().manual_seed(1)
)  # (B, T)


@pytest.mark.parametrize(
    "config",
    [
        {},  # GPT-2's own choices: tanh GELU, tied output layer, d_ff = 4 * d_model
        {"n_inner": 48, "activation_function": "gelu"},  # another width, exact GELU
        {
            "tie_word_embeddings": False,
            "layer_norm_epsilon": 1e-2,
        },  # a separate output layer, another eps
    ],
    ids=["gpt2", "n_inner_exact_gelu", "untied_eps"],
)
@pytest.mark.parametrize("attn_impl", ["sdpa", "explicit"])
def test_logits_equal_hf_gpt2(config, attn_impl):
    hf = random_gpt2(**config)
    ours = gpt_from_hf_gpt2(hf, gpt_config_from_hf(hf.config, attn_impl=attn_impl))
    assert isinstance(ours, GPT) and not ours.training
    assert ours.num_params(non_embedding=False) == sum(
        p.numel() for p in hf.parameters()
    )
    torch.testing.assert_close(logits_of(ours, IDS), logits_of(hf, IDS), **TOL)
    torch.testing.assert_close(
        logits_of(ours, IDS[:, :5]), logits_of(hf, IDS[:, :5]), **TOL
    )  # shorter than context


def test_a_state_dict_loads_too():
    hf = random_gpt2(seed=3)
    ours = gpt_from_hf_gpt2(hf.state_dict(), gpt_config_from_hf(hf.config))
    torch.testing.assert_close(logits_of(ours, IDS), logits_of(hf, IDS), **TOL)


def test_greedy_generation_equals_hf():
    hf = random_gpt2(seed=4)
    ours = gpt_from_hf_gpt2(hf)
    prompt = IDS[:1, :4]
    expected = hf.generate(
        prompt, max_new_tokens=12, do_sample=False, pad_token_id=96, eos_token_id=None
    )
    assert torch.equal(generate(ours, prompt, 12, temperature=0), expected)


def test_a_missing_transposition_is_caught():
    """A loader that forgot to transpose the square c_proj (C x C) would load without a
    shape error; the logits must give it away."""
    hf = random_gpt2(seed=5)
    sd = {
        k: v.t() if k.endswith("attn.c_proj.weight") else v
        for k, v in hf.state_dict().items()
    }
    wrong = gpt_from_hf_gpt2(
        sd, gpt_config_from_hf(hf.config)
    )  # the loader transposes it back: not at all
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        torch.testing.assert_close(logits_of(wrong, IDS), logits_of(hf, IDS), **TOL)


def test_names_and_refusals():
    assert hf_gpt2_name("blocks.3.attn.qkv.weight") == "h.3.attn.c_attn.weight"
    assert hf_gpt2_name("blocks.0.mlp.proj.bias") == "h.0.mlp.c_proj.bias"
    assert (
        hf_gpt2_name("lm_head.weight") == "wte.weight"
        and hf_gpt2_name("lm_head.weight", tied=False) == "lm_head.weight"
    )
    config = gpt_config_from_hf(transformers.GPT2Config())  # the 124M model's sizes
    assert (
        config.vocab_size,
        config.context_len,
        config.n_layers,
        config.n_heads,
        config.d_model,
        config.d_ff,
    ) == (50257, 1024, 12, 12, 768, 3072)
    assert (config.norm, config.bias, config.gelu_approximate, config.tie_weights) == (
        "layer",
        True,
        "tanh",
        True,
    )
    with pytest.raises(
        ValueError, match="no GELU of ours matches activation_function='relu'"
    ):
        gpt_config_from_hf(transformers.GPT2Config(activation_function="relu"))
    with pytest.raises(ValueError, match="plain attention"):
        gpt_config_from_hf(
            transformers.GPT2Config(scale_attn_by_inverse_layer_idx=True)
        )
    hf = random_gpt2()
    sd = {
        **hf.state_dict(),
        "transformer.h.0.crossattention.c_attn.weight": torch.zeros(1),
    }
    with pytest.raises(ValueError, match="no place in our GPT"):
        gpt_from_hf_gpt2(sd, gpt_config_from_hf(hf.config))
