"""Solution of notebook 18's build-it (checked by tests/test_exercises.py)."""

from transformer_lib.lora import LoRALinear


def lora_attention_only(model, rank, alpha=1.0):
    """Freeze the GPT `model`, then wrap each block's attention projections `qkv`
    (W_Q, W_K, W_V in one) and `proj` (W_O) in a LoRALinear; returns their names."""
    model.requires_grad_(False)  # first: the LoRA's A and B, made after, stay trainable
    names = []
    for i, block in enumerate(model.blocks):
        block.attn.qkv = LoRALinear(block.attn.qkv, rank, alpha)
        block.attn.proj = LoRALinear(block.attn.proj, rank, alpha)  # not block.mlp.proj
        names += [f"blocks.{i}.attn.qkv", f"blocks.{i}.attn.proj"]
    return names
