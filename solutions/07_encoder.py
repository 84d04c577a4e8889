"""Solution of notebook 07's build-it (checked by tests/test_exercises.py)."""

from torch import nn

from transformer_lib.encoder import PositionwiseFeedForward
from transformer_lib.multi_head import MultiHeadAttention


class MyEncoderLayer(nn.Module):
    """A pre-norm encoder layer: x + self_attn(LN(x)), then x + ff(LN(x))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = PositionwiseFeedForward(d_model, d_ff)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        h = self.norm1(x)
        x = x + self.self_attn(h, mask=mask)[0]  # (B, T, C)
        return x + self.ff(self.norm2(x))  # (B, T, C)
