"""Notebooks 15 and 16's parts against references: RoPE against the complex-number
form, GQA against PyTorch's attention, SwiGLU against its formula, Newton-Schulz against
its polynomial and PyTorch's, tiled attention against F.scaled_dot_product_attention
(the build-it's checker is tested in test_exercises.py)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from transformer_lib.gpt import GPT, GPTConfig, KVCache, generate
from transformer_lib.modern import (
    GroupedQueryAttention,
    ModernConfig,
    ModernGPT,
    Rotary,
    SwiGLU,
    repeat_kv,
)
from transformer_lib.multi_head import merge_heads, split_heads
from transformer_lib.muon import Muon, MuonAdamW, newton_schulz
from transformer_lib.tiled_attention import tiled_attention

NS_COEFFICIENTS = (3.4445, -4.775, 2.0315)


def rope_complex(x: torch.Tensor, start: int = 0, base: float = 10000.0):
    """RoPE as LLaMA's reference writes it: pairs as complex numbers times e^(i m t)."""
    *lead, T, D = x.shape
    pairs = torch.view_as_complex(x.double().reshape(*lead, T, D // 2, 2))
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = torch.outer(torch.arange(start, start + T, dtype=torch.float64), theta)
    turned = pairs * torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(turned).flatten(-2).to(x.dtype)


@pytest.mark.parametrize("start", [0, 5, 50])
@pytest.mark.parametrize("d_head", [2, 8, 32])
def test_rope_equals_the_complex_form(start, d_head):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, d_head)  # (B, H, T, D)
    assert_close(Rotary(d_head, 64)(x, start), rope_complex(x, start))


def test_rope_scores_depend_on_the_offset_only():
    torch.manual_seed(0)
    rope, N, D = Rotary(16, 64), 40, 16
    q, k = torch.randn(D), torch.randn(D)
    S = rope(q.expand(1, 1, N, D))[0, 0] @ rope(k.expand(1, 1, N, D))[0, 0].T
    for offset in range(-N + 1, N):
        diagonal = S.diagonal(offset)
        assert_close(diagonal, diagonal[:1].expand_as(diagonal))
    assert not torch.allclose(S[3, 1], S[1, 3])  # the signed offset matters


def test_rope_keeps_the_norm_and_leaves_position_zero_alone():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 9, 8)
    y = Rotary(8, 16)(x)
    assert_close(y.norm(dim=-1), x.norm(dim=-1))
    assert_close(y[:, :, 0], x[:, :, 0])


def test_repeat_kv_groups_the_heads():
    kv = torch.arange(3.0).view(1, 3, 1, 1)
    assert repeat_kv(kv, 2).flatten().tolist() == [0, 0, 1, 1, 2, 2]
    assert repeat_kv(kv, 1) is kv


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("qk_norm, positions", [(False, "learned"), (True, "rope")])
def test_gqa_equals_pytorch(n_kv_heads, qk_norm, positions):
    torch.manual_seed(0)
    config = ModernConfig.tiny(
        n_heads=4, n_kv_heads=n_kv_heads, qk_norm=qk_norm, positions=positions
    )
    attn = GroupedQueryAttention(config).eval()
    x = torch.randn(2, 11, config.d_model)
    q = attn.q_norm(split_heads(attn.q(x), 4))
    k, v = (split_heads(t, n_kv_heads) for t in attn.kv(x).chunk(2, dim=-1))
    k = attn.k_norm(k)
    if attn.rope is not None:
        q, k = attn.rope(q), attn.rope(k)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    y, _ = attn(x)
    assert_close(y, attn.proj(merge_heads(want)))
    y_explicit, weights = attn(x, need_weights=True)  # the explicit softmax path
    assert_close(y_explicit, y)
    assert weights.shape == (2, 4, 11, 11)


def test_gqa_cache_holds_kv_heads_and_gives_the_same_tokens():
    torch.manual_seed(0)
    model = ModernGPT(
        ModernConfig.tiny(n_kv_heads=1, qk_norm=True, positions="rope")
    ).eval()
    prompt = torch.randint(0, 65, (2, 4))
    cached = generate(model, prompt, 40, temperature=0, use_cache=True)  # past N=32
    assert torch.equal(
        cached, generate(model, prompt, 40, temperature=0, use_cache=False)
    )
    assert sum(p.numel() for p in model.blocks[0].attn.kv.parameters()) == 32 * 2 * 16


def test_rope_model_cached_logits_equal_one_full_pass():
    torch.manual_seed(0)
    config = ModernConfig.tiny(positions="rope")
    model = ModernGPT(config).eval()
    ids = torch.randint(0, 65, (2, 20))
    with torch.no_grad():
        full, _ = model(ids)
        cache = KVCache(config, 2)
        steps = torch.cat(
            [model(ids[:, t : t + 1], cache=cache)[0] for t in range(20)], 1
        )
    assert_close(steps, full, atol=1e-5, rtol=1e-4)


def test_swiglu_equals_its_formula_and_matches_the_gelu_size():
    torch.manual_seed(0)
    mlp = SwiGLU(16, 40)
    x = torch.randn(3, 5, 16)
    W1, W3, W2 = mlp.gate.weight, mlp.up.weight, mlp.proj.weight
    assert_close(mlp(x), (F.silu(x @ W1.T) * (x @ W3.T)) @ W2.T)
    gelu = sum(p.numel() for p in GPT(GPTConfig.cpu()).blocks[0].mlp.parameters())
    swiglu = ModernGPT(ModernConfig.cpu(mlp="swiglu")).blocks[0].mlp
    assert isinstance(swiglu, SwiGLU)
    n = sum(p.numel() for p in swiglu.parameters())
    assert abs(n - gelu) / gelu < 0.02


def test_newton_schulz_applies_its_polynomial_to_the_singular_values():
    torch.manual_seed(0)
    U, _ = torch.linalg.qr(torch.randn(48, 24, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(24, 24, dtype=torch.float64))
    sigma = torch.logspace(0, -2, 24, dtype=torch.float64)
    G = U @ torch.diag(sigma) @ V.T
    phi = sigma / G.norm()
    a, b, c = NS_COEFFICIENTS
    for _ in range(5):
        phi = a * phi + b * phi**3 + c * phi**5
    want = U @ torch.diag(phi) @ V.T
    assert_close(newton_schulz(G), want, atol=1e-6, rtol=1e-5)  # tall
    assert_close(newton_schulz(G.T), want.T, atol=1e-6, rtol=1e-5)  # wide


def test_newton_schulz_equals_pytorchs():
    muon = pytest.importorskip("torch.optim._muon")
    if not hasattr(muon, "_zeropower_via_newtonschulz"):
        pytest.skip("PyTorch's private Newton-Schulz function moved")
    torch.manual_seed(0)
    for shape in [(64, 32), (32, 64), (40, 40)]:
        G = torch.randn(shape)
        theirs = muon._zeropower_via_newtonschulz(G, NS_COEFFICIENTS, 5, 1e-7).float()
        assert (newton_schulz(G) - theirs).norm() / theirs.norm() < 0.03
        assert torch.equal(newton_schulz(G, dtype=torch.bfloat16), theirs)


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch.optim.Muon: 2.9+")
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_in_bf16_equals_torchs_muon(nesterov):
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(40, 24, generator=g), torch.randn(24, 72, generator=g)]
    ours = [torch.nn.Parameter(w.clone()) for w in weights]
    theirs = [torch.nn.Parameter(w.clone()) for w in weights]
    kw = dict(lr=0.03, weight_decay=0.05, momentum=0.9, nesterov=nesterov)
    opts = (
        Muon(ours, dtype=torch.bfloat16, **kw),
        torch.optim.Muon(theirs, adjust_lr_fn="match_rms_adamw", **kw),
    )
    for _ in range(4):
        grads = [torch.randn(w.shape, generator=g) for w in weights]
        for params, opt in zip((ours, theirs), opts):
            for p, grad in zip(params, grads):
                p.grad = grad.clone()
            opt.step()
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    # a state saved by torch's Muon (checkpoints made before the course had its own)
    Muon(ours, lr=0.03).load_state_dict(opts[1].state_dict())


@pytest.mark.parametrize("native", [True, False])
def test_muon_iterates_in_bf16_only_where_native(monkeypatch, native):
    import transformer_lib.muon as muon

    monkeypatch.setattr(muon, "bf16_supported", lambda device: native)
    p = torch.nn.Parameter(torch.randn(8, 4))
    assert Muon([p], lr=0.1).dtype == (torch.bfloat16 if native else torch.float32)
    assert Muon([p], lr=0.1, dtype=torch.float32).dtype == torch.float32
    model = GPT(GPTConfig.tiny())
    assert MuonAdamW(model, lr=1e-3).muon.dtype == Muon([p], lr=0.1).dtype


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch.optim.Muon: 2.9+")
def test_one_muon_step_by_hand():
    torch.manual_seed(0)
    W, G = torch.randn(48, 24), torch.randn(48, 24)
    p = torch.nn.Parameter(W.clone())
    p.grad = G.clone()
    torch.optim.Muon(
        [p], lr=0.02, nesterov=False, weight_decay=0.0, adjust_lr_fn="match_rms_adamw"
    ).step()
    want = W - 0.2 * math.sqrt(48) * 0.02 * newton_schulz(G)
    assert_close(p.detach(), want, atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("tie_weights", [True, False])
def test_muon_adamw_splits_every_parameter_once(tie_weights):
    model = ModernGPT(
        ModernConfig.tiny(tie_weights=tie_weights, mlp="swiglu", n_kv_heads=1)
    )
    opt = MuonAdamW(model, lr=1e-3)
    muon = [p for g in opt.muon.param_groups for p in g["params"]]
    adamw = [p for g in opt.adamw.param_groups for p in g["params"]]
    ids = {id(p) for p in muon} | {id(p) for p in adamw}
    assert len(ids) == len(muon) + len(adamw) == len(list(model.parameters()))
    assert all(p.dim() == 2 for p in muon)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(names[id(p)].startswith("blocks.") for p in muon)
    x = torch.randint(0, 65, (4, 32))
    _, loss = model(x, x)
    loss.backward()
    opt.step()  # runs, with both optimizers


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    "T, block_size", [(1, 4), (13, 1), (50, 7), (50, 16), (64, 64)]
)
def test_tiled_attention_equals_sdpa(causal, T, block_size):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, T, 8, dtype=torch.float64) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert_close(tiled_attention(q, k, v, block_size, causal), want)


def test_tiled_attention_cross_lengths_and_errors():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 3)
    assert_close(
        tiled_attention(q, k, v, 4, causal=False),
        F.scaled_dot_product_attention(q, k, v),
    )
    with pytest.raises(ValueError, match="T_q == T_k"):
        tiled_attention(q, k, v, 4, causal=True)
