"""The device-sensitive parts of the library, on the device that `get_device` picks
($TRANSFORMER_DEVICE, else cuda, then mps, then cpu), each against the same computation
on the CPU: the models, attention with and without its weights, masks in fp16 and bf16,
the KV cache against no cache, decoding, and `torch.compile`. On a CPU-only machine the
device is the CPU and each test checks itself; `tools/gpu_check.py` runs this file with
TRANSFORMER_DEVICE=cuda on a GPU."""

import os

import pytest
import torch

from transformer_lib.attention import (
    fast_scaled_dot_product_attention,
    scaled_dot_product_attention,
)
from transformer_lib.decoding import beam_search, greedy_decode
from transformer_lib.gpt import GPT, GPTConfig, generate
from transformer_lib.masks import causal_mask, padding_mask
from transformer_lib.modern import ModernConfig, ModernGPT
from transformer_lib.runtime import get_device
from transformer_lib.seq2seq import Seq2SeqConfig, Transformer

DEVICE = get_device()
CPU = torch.device("cpu")
# fp32 on a GPU sums in another order (and SDPA picks other kernels): close, not equal
TOL = dict(atol=2e-4, rtol=2e-4)
HALF_TOL = {torch.float16: 1e-2, torch.bfloat16: 6e-2}


def test_the_device_is_the_one_asked_for():
    asked = os.environ.get("TRANSFORMER_DEVICE")
    assert DEVICE == (torch.device(asked) if asked else DEVICE)
    torch.ones(1, device=DEVICE)  # usable, not only named


def _pair(make):
    """The same freshly seeded model on the CPU and on the device, in eval mode."""
    torch.manual_seed(0)
    cpu = make().eval()
    there = make().to(DEVICE).eval()
    there.load_state_dict(cpu.state_dict())
    return cpu, there


GPTS = {
    "gpt": lambda: GPT(GPTConfig.tiny()),
    "gpt explicit": lambda: GPT(GPTConfig.tiny(attn_impl="explicit")),
    "modern": lambda: ModernGPT(
        ModernConfig.tiny(positions="rope", mlp="swiglu", n_kv_heads=1, qk_norm=True)
    ),
}


@pytest.mark.parametrize("name", sorted(GPTS))
def test_gpt_models_give_the_cpus_loss_and_gradients(name):
    cpu, there = _pair(GPTS[name])
    x = torch.randint(0, cpu.config.vocab_size, (3, cpu.config.context_len))
    y = torch.roll(x, -1, dims=1)
    (logits, loss), (logits_d, loss_d) = cpu(x, y), there(x.to(DEVICE), y.to(DEVICE))
    torch.testing.assert_close(logits_d.cpu(), logits, **TOL)
    loss.backward()
    loss_d.backward()
    for (n, p), p_d in zip(cpu.named_parameters(), there.parameters()):
        torch.testing.assert_close(p_d.grad.cpu(), p.grad, atol=1e-3, rtol=1e-3, msg=n)


def _masks(B=2, T=6):
    """Causal and padding together, with one sequence all padding: a row with no key."""
    ids = torch.tensor([[5, 6, 7, 0, 0, 0], [0] * T])[:B]
    return causal_mask(T) & padding_mask(ids, 0)  # (B, 1, T, T)


def test_attention_with_and_without_weights_agree_with_the_cpu():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 8) for _ in range(3))
    mask = _masks()
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    on = [t.to(DEVICE) for t in (q, k, v, mask)]
    out_d, weights_d = scaled_dot_product_attention(*on)
    fused_d = fast_scaled_dot_product_attention(*on)
    torch.testing.assert_close(out_d.cpu(), out, **TOL)
    torch.testing.assert_close(weights_d.cpu(), weights, **TOL)
    torch.testing.assert_close(fused_d.cpu(), out, **TOL)
    assert (weights_d[1] == 0).all()  # the all-padding sequence attends to nothing


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_masks_in_half_precision_give_no_nan(dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 8) for _ in range(3))
    mask = _masks()
    reference, _ = scaled_dot_product_attention(q, k, v, mask)
    half = [t.to(DEVICE, dtype) for t in (q, k, v)]
    for out in (
        scaled_dot_product_attention(*half, mask.to(DEVICE))[0],
        fast_scaled_dot_product_attention(*half, mask.to(DEVICE)),
    ):
        assert out.dtype == dtype and not out.isnan().any()
        tol = HALF_TOL[dtype]
        torch.testing.assert_close(out.float().cpu(), reference, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_a_gpt_under_autocast_trains_without_nan(dtype):
    if DEVICE.type == "cpu" and dtype == torch.float16:
        pytest.skip("fp16 autocast is a GPU format")
    torch.manual_seed(0)
    model = GPT(GPTConfig.tiny()).to(DEVICE)
    x = torch.randint(0, 65, (4, 32), device=DEVICE)
    with torch.autocast(DEVICE.type, dtype=dtype):
        _, loss = model(x, torch.roll(x, -1, 1))
    loss.backward()
    assert torch.isfinite(loss) and all(
        torch.isfinite(p.grad).all() for p in model.parameters()
    )


@pytest.mark.parametrize("name", ["gpt", "modern"])
def test_kv_cache_gives_the_tokens_of_no_cache(name):
    _, model = _pair(GPTS[name])
    prompt = torch.randint(0, 65, (2, 5), device=DEVICE)
    n = model.config.context_len + 8  # past the context: the window slides
    cached = generate(model, prompt, n, 0, use_cache=True)
    uncached = generate(model, prompt, n, 0, use_cache=False)
    assert cached.device.type == DEVICE.type and torch.equal(cached, uncached)


def test_the_translator_decodes_as_on_the_cpu():
    cpu, there = _pair(lambda: Transformer(Seq2SeqConfig.tiny(30, 30)))
    src = torch.randint(3, 30, (3, 7))
    src[0, 5:] = 0  # padding
    greedy = greedy_decode(cpu, src, 1, 2, max_len=12)
    assert greedy_decode(there, src.to(DEVICE), 1, 2, max_len=12) == greedy
    beams = beam_search(there, src.to(DEVICE), 1, 2, beam_size=3, max_len=12)
    assert len(beams) == 3 and all(isinstance(t, int) for b in beams for t in b)


@pytest.mark.skipif(
    DEVICE.type != "cuda" and os.environ.get("TEST_COMPILE") != "1",
    reason="torch.compile on a CPU takes minutes (TEST_COMPILE=1 runs it)",
)
def test_torch_compile_gives_the_eager_loss():
    _, model = _pair(GPTS["gpt"])
    x = torch.randint(0, 65, (2, 32), device=DEVICE)
    y = torch.roll(x, -1, 1)
    compiled = torch.compile(model)
    torch.testing.assert_close(compiled(x, y)[1], model(x, y)[1], **TOL)
