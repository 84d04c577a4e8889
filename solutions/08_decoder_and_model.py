"""Solutions of notebook 08's build-its (checked by tests/test_exercises.py)."""

import torch
from torch import nn

from transformer_lib.encoder import PositionwiseFeedForward
from transformer_lib.multi_head import MultiHeadAttention


class MyDecoderLayer(nn.Module):
    """A pre-norm decoder layer: masked self-attention, cross-attention to the encoder's
    output, feed-forward; each x + sublayer(LN(x))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = PositionwiseFeedForward(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        h = self.norm1(x)
        x = x + self.self_attn(h, mask=tgt_mask)[0]  # sees targets <= t
        h = self.norm2(x)
        # queries from the decoder, keys and values from the encoder
        x = x + self.cross_attn(h, memory, memory, mask=memory_mask)[0]
        return x + self.ff(self.norm3(x))  # (B, T, C)


def my_shift_targets(seqs, bos, eos, pad):
    """Target sequences -> tgt_in = <bos> y and tgt_out = y <eos>, both (B, T), padded
    with pad."""
    T = max(map(len, seqs)) + 1
    tgt_in = [[bos] + s + [pad] * (T - 1 - len(s)) for s in seqs]
    tgt_out = [s + [eos] + [pad] * (T - 1 - len(s)) for s in seqs]
    return torch.tensor(tgt_in), torch.tensor(tgt_out)
