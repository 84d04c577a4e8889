"""LoRALinear and add_lora (notebook 18), checked against peft on the same weights."""

import copy

import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

from transformer_lib.gpt import GPT, GPTConfig
from transformer_lib.lora import LoRALinear, add_lora, lora_layers, trainable_parameters


def random_lora(model: nn.Module, seed: int = 0) -> None:
    """Give every B a random value, so that the update is not zero."""
    gen = torch.Generator().manual_seed(seed)
    for layer in lora_layers(model):
        with torch.no_grad():
            layer.lora_B.copy_(torch.randn(layer.lora_B.shape, generator=gen))


def test_starts_as_the_base_layer_and_merges_back_and_forth():
    torch.manual_seed(0)
    base = nn.Linear(8, 5)
    x = torch.randn(3, 8)
    want = base(x)
    layer = LoRALinear(copy.deepcopy(base), rank=2, alpha=4)
    assert_close(layer(x), want)  # B = 0
    random_lora(layer)
    before = layer(x)
    delta = 2.0 * layer.lora_B @ layer.lora_A  # alpha / r = 2
    assert_close(before, x @ (base.weight + delta).T + base.bias)
    layer.merge()
    assert_close(layer(x), before, atol=1e-5, rtol=1e-5)
    layer.unmerge()
    assert_close(layer.base.weight, base.weight, atol=1e-6, rtol=1e-6)
    with pytest.raises(RuntimeError, match="not merged"):
        layer.unmerge()
    layer.merge()
    with pytest.raises(RuntimeError, match="already merged"):
        layer.merge()
    with pytest.raises(ValueError, match="rank must be >= 1"):
        LoRALinear(base, rank=0)


def test_add_lora_freezes_the_model_and_counts_only_a_and_b():
    model = GPT(GPTConfig.tiny(vocab_size=30))  # C = 32, F = 128, 2 layers
    wrapped = add_lora(model, rank=4)
    assert len(wrapped) == 2 * 4  # qkv, attn.proj, fc, mlp.proj in each block
    per_block = 4 * (32 + 96) + 4 * (32 + 32) + 4 * (32 + 128) + 4 * (128 + 32)
    assert trainable_parameters(model) == 2 * per_block
    assert not model.tok_emb.weight.requires_grad
    with pytest.raises(ValueError, match="no nn.Linear"):
        add_lora(nn.Sequential(nn.ReLU()), rank=2)


def test_equals_peft_before_and_after_merging():
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    ours = GPT(GPTConfig.tiny(vocab_size=30)).eval()
    theirs = copy.deepcopy(ours)
    add_lora(ours, rank=4, alpha=8)
    random_lora(ours)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["qkv", "proj", "fc"])
    theirs = peft.get_peft_model(theirs, config)
    named = dict(ours.named_modules())
    for name, module in theirs.base_model.model.named_modules():
        if hasattr(module, "lora_A") and isinstance(module.lora_A, nn.ModuleDict):
            with torch.no_grad():
                module.lora_A["default"].weight.copy_(named[name].lora_A)
                module.lora_B["default"].weight.copy_(named[name].lora_B)
    assert trainable_parameters(ours) == theirs.get_nb_trainable_parameters()[0]
    ids = torch.randint(0, 30, (2, 12))
    assert_close(ours(ids)[0], theirs(ids)[0], atol=1e-5, rtol=1e-5)
    for layer in lora_layers(ours):
        layer.merge()
    merged = theirs.merge_and_unload()
    assert_close(ours(ids)[0], merged(ids)[0], atol=1e-5, rtol=1e-5)
