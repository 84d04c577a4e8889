"""The eleventh blind review's wrong answers, part B (issue 34): 05 multi-head
attention, 07 encoder layer, 08 decoder layer, 12 block and KV cache, 13, 14 tiled
attention, 15 grouped-query attention. Each checker names the mistake, in one line;
the answers the review found right still pass."""

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from exercise_helpers import fails, passes, solution
from torch import nn

from transformer_lib import exercises as ex

ROOT = Path(__file__).resolve().parent.parent


# 05 · multi-head attention ------------------------------------------------------------


def mha(fill=-math.inf, inverted=False, after=None, transposed=False, scale=None):
    """notebook 05's answer with its masking and scaling done another way."""
    Right = solution("05").MyMultiHeadAttention
    from transformer_lib.multi_head import merge_heads, split_heads

    class Wrong(Right):
        def forward(self, query, key=None, value=None, mask=None):
            key = query if key is None else key
            value = key if value is None else value
            q = split_heads(self.q_proj(query), self.n_heads)
            k = split_heads(self.k_proj(key), self.n_heads)
            v = split_heads(self.v_proj(value), self.n_heads)
            d = q.size(-1) if scale is None else scale(q, k)
            scores = q @ k.transpose(-2, -1) / math.sqrt(d)
            if mask is not None:
                if transposed and mask.size(-1) == mask.size(-2):
                    mask = mask.transpose(-1, -2)
                scores = scores.masked_fill(mask if inverted else ~mask, fill)
            w = scores.softmax(-1)
            return self.out_proj(merge_heads((after or (lambda t: t))(w) @ v))

    return Wrong


def test_05_inverted_mask_with_a_finite_fill_is_named():
    fails(ex.check_multi_head_attention, mha(-1e9, inverted=True), "mask is inverted")


def test_05_inverted_mask_with_nan_to_num_is_named():
    wrong = mha(inverted=True, after=lambda w: w.nan_to_num(0.0))
    fails(ex.check_multi_head_attention, wrong, "mask is inverted")


def test_05_transposed_causal_mask_is_named():
    fails(ex.check_multi_head_attention, mha(transposed=True), "mask is transposed")


def test_05_scaled_by_the_number_of_keys_is_named():
    wrong = mha(scale=lambda q, k: k.size(-2))
    fails(ex.check_multi_head_attention, wrong, r"sqrt\(5\), the number of keys")


def test_05_right_answers_with_minus_1e9_or_nan_to_num_pass():
    passes(ex.check_multi_head_attention, mha(-1e9))
    passes(ex.check_multi_head_attention, mha(after=lambda w: w.nan_to_num(0.0)))


# 07 · encoder layer -------------------------------------------------------------------


def encoder(mask_of):
    """notebook 07's answer with the mask passed as mask_of(mask)."""
    Right = solution("07").MyEncoderLayer

    class Wrong(Right):
        def forward(self, x, mask=None):
            return super().forward(x, None if mask is None else mask_of(mask))

    return Wrong


def test_07_transposed_mask_is_named():
    wrong = encoder(lambda m: m.transpose(-1, -2))
    fails(ex.check_encoder_layer, wrong, r"mask was transposed, \(B, 1, T, 1\)")


def test_07_first_row_of_the_mask_for_the_batch_is_named():
    fails(ex.check_encoder_layer, encoder(lambda m: m[:1]), r"first sentence's mask")
    fails(ex.check_encoder_layer, encoder(lambda m: m[0]), r"first sentence's mask")


def test_07_mask_not_passed_is_still_named():
    fails(ex.check_encoder_layer, encoder(lambda m: None), "mask was not passed")


# 08 · decoder layer -------------------------------------------------------------------


def decoder(forward=None, share=None):
    """notebook 08's answer with another forward, or two parts made one module
    (share = (kept, replaced))."""
    Right = solution("08").MyDecoderLayer

    class Wrong(Right):
        def __init__(self, *args):
            super().__init__(*args)
            if share:
                setattr(self, share[1], getattr(self, share[0]))

    if forward:
        Wrong.forward = forward
    return Wrong


def test_08_ff_reading_norm3_from_before_cross_attention_is_named():
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        h = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
        h2 = h + self.cross_attn(self.norm2(h), memory, memory, mask=memory_mask)[0]
        return h2 + self.ff(self.norm3(h))

    fails(ex.check_decoder_layer, decoder(forward), r"read norm3\(h\), from before")


def test_08_norm3_is_norm2_is_named():
    wrong = decoder(share=("norm2", "norm3"))
    fails(ex.check_decoder_layer, wrong, "norm2 and norm3 are one module")


def test_08_cross_attn_is_self_attn_is_named():
    wrong = decoder(share=("self_attn", "cross_attn"))
    fails(ex.check_decoder_layer, wrong, "self_attn and cross_attn are one module")


def test_08_layernorm_on_the_output_is_named():
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
        x = x + self.cross_attn(self.norm2(x), memory, memory, mask=memory_mask)[0]
        return self.norm3(x + self.ff(self.norm3(x)))

    fails(ex.check_decoder_layer, decoder(forward), "LayerNorm was applied to the")


def test_08_keys_from_norm2_of_memory_are_named():
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
        n = self.norm2(x)
        x = x + self.cross_attn(n, self.norm2(memory), memory, mask=memory_mask)[0]
        return x + self.ff(self.norm3(x))

    fails(ex.check_decoder_layer, decoder(forward), r"keys were norm2\(memory\)")


def test_08_own_triu_mask_is_named():
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        T = x.size(1)
        own = torch.ones(T, T, dtype=torch.bool).triu()
        x = x + self.self_attn(self.norm1(x), mask=own)[0]
        x = x + self.cross_attn(self.norm2(x), memory, memory, mask=memory_mask)[0]
        return x + self.ff(self.norm3(x))

    fails(ex.check_decoder_layer, decoder(forward), "mask was transposed")


# 12 · GPT block and KV cache ----------------------------------------------------------


def block(eps=1e-5, merge=None, act=None):
    """notebook 12's MyBlock with another LayerNorm eps, head merge or activation."""
    Right = solution("12").MyBlock

    class Wrong(Right):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.norm1 = nn.LayerNorm(d_model, eps=eps)
            self.norm2 = nn.LayerNorm(d_model, eps=eps)

        def attn(self, x):
            if merge is None:
                return super().attn(x)
            B, T, C = x.shape
            q, k, v = (
                t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
                for t in self.qkv(x).chunk(3, dim=-1)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(merge(y).reshape(B, T, C))

        def forward(self, x):
            if act is None:
                return super().forward(x)
            x = x + self.attn(self.norm1(x))
            return x + self.fc_out(act(self.fc(self.norm2(x))))

    return Wrong


def test_12_layernorm_eps_is_named():
    fails(ex.check_gpt_block, block(eps=1e-6), r"norm1 is nn.LayerNorm\(d_model, eps=")


def test_12_heads_merged_as_b_t_d_h_are_named():
    wrong = block(merge=lambda y: y.permute(0, 2, 3, 1))
    fails(ex.check_gpt_block, wrong, r"merged as \(B, T, D, H\)")


def test_12_silu_mlp_is_named():
    fails(ex.check_gpt_block, block(act=F.silu), "the MLP uses SiLU")


def test_12_kv_cache_tensor_truthiness_is_named():
    class Wrong:
        def __init__(self):
            self.k = self.v = None
            self.length = 0

        def update(self, k, v):
            if not self.k:
                self.k, self.v = k, v
            else:
                self.k, self.v = torch.cat([self.k, k], 2), torch.cat([self.v, v], 2)
            self.length += k.size(2)
            return self.k, self.v

    fails(ex.check_kv_cache, Wrong, r"`if not self.k`.*self.k is None")


def test_12_kv_cache_storage_of_a_fixed_shape_is_named():
    class Wrong:
        def __init__(self):
            self.k, self.v = torch.zeros(2, 3, 0, 8), torch.zeros(2, 3, 0, 8)
            self.length = 0

        def update(self, k, v):
            self.k, self.v = torch.cat([self.k, k], 2), torch.cat([self.v, v], 2)
            self.length += k.size(2)
            return self.k, self.v

    fails(ex.check_kv_cache, Wrong, r"storage made at a fixed shape")


# 13 · similarity by distance ----------------------------------------------------------


def test_13_both_diagonals_summed_are_named():
    def wrong(table):
        u = F.normalize(table, dim=-1)
        m, n = u @ u.T, len(table)
        return torch.stack(
            [(m.diagonal(k).sum() + m.diagonal(-k).sum()) / (n - k) for k in range(n)]
        )

    fails(ex.check_cosine_by_distance, wrong, "each pair was counted twice")


# 14 · tiled attention -----------------------------------------------------------------


def tiled(top=None, late=False):
    """An online softmax whose block maximum is top(scores) (shared by rows), or
    whose out is rescaled after the block's share is added."""

    def fn(q, k, v, block):
        m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
        ell = torch.zeros_like(m)
        out = q.new_zeros(q.shape[:-1] + (v.size(-1),))
        for s in range(0, k.size(-2), block):
            kb, vb = k[..., s : s + block, :], v[..., s : s + block, :]
            scores = q @ kb.transpose(-2, -1) / math.sqrt(q.size(-1))
            best = top(scores) if top else scores.amax(-1, keepdim=True)
            m_new = torch.maximum(m, best)
            a, p = (m - m_new).exp(), (scores - m_new).exp()
            ell = ell * a + p.sum(-1, keepdim=True)
            out = (out + p @ vb) * a if late else out * a + p @ vb
            m = m_new
        return out / ell

    return fn


def test_14_one_max_for_all_rows_is_named():
    wrong = tiled(top=lambda s: s.max())
    fails(ex.check_tiled_attention, wrong, r"one maximum was shared by every query row")


def test_14_one_max_per_head_is_named():
    wrong = tiled(top=lambda s: s.amax((-2, -1), keepdim=True))
    fails(ex.check_tiled_attention, wrong, r"shared by each head's query rows")


def test_14_rescaled_after_adding_is_named():
    fails(ex.check_tiled_attention, tiled(late=True), r"out was rescaled after")


def test_14_the_online_softmax_still_passes():
    passes(ex.check_tiled_attention, tiled())


# 15 · grouped-query attention ---------------------------------------------------------


def test_15_group_folded_into_time_is_named():
    def wrong(q, k, v):
        B, H, T, D = q.shape
        g = H // k.size(1)
        y = F.scaled_dot_product_attention(
            q.reshape(B, k.size(1), g * T, D), k, v, is_causal=True
        )
        return y.view(B, H, T, D)

    fails(ex.check_grouped_attention, wrong, "folded into the time axis")
