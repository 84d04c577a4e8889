"""The fifteenth and sixteenth blind reviews' wrong answers (issue 34): those that
passed (state kept on the class or between calls, a detached or in-place result, a
mask or a generator ignored, a scale floored) and those whose message named another
mistake."""

import copy
import hashlib
import math

import torch
import torch.nn.functional as F
from exercise_helpers import fails, passes, solution
from torch import nn

from transformer_lib import exercises as ex
from transformer_lib.tokenization import CHUNK_PATTERN

# 00 · the digest cut short ------------------------------------------------------------


def test_00_a_cut_digest_is_named():
    def cut(path, chunk=1 << 20):
        return solution("00").sha256_file(path, chunk)[:32]

    fails(ex.check_sha256, cut, r"cut to 32 hex characters")
    assert hashlib.sha256(b"").hexdigest()  # the module is used by the checker too


# 01 · state between calls, the caller's merges ----------------------------------------

encode = solution("01").my_bpe_encode
_CACHE: dict = {}


def chunk_cache(text, merges):
    out = []
    for chunk in CHUNK_PATTERN.findall(text):
        if chunk not in _CACHE:  # keyed by the chunk alone: stale for other merges
            _CACHE[chunk] = encode(chunk, merges)
        out += _CACHE[chunk]
    return out


def popped(text, merges):
    out = encode(text, merges)
    merges.clear()  # the caller's list, emptied
    return out


def test_01_a_cache_across_merges_and_an_emptied_list_fail():
    _CACHE.clear()
    fails(
        ex.check_bpe_encode, chunk_cache, r"merges\[:3\]\) gave the ids of the earlier"
    )
    fails(ex.check_bpe_encode, popped, r"changed the merges list it was given")


# 02 · the tied table: a buffer, on the class, cast ------------------------------------

Tied = solution("02").MyTiedOutput


class TableBuffer(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.embedding = [embedding]  # not a sub-module
        self.register_buffer("W", embedding.weight)

    def forward(self, h):
        return h @ self.embedding[0].weight.T


class TableOnClass(nn.Module):
    table: list = []

    def __init__(self, embedding):
        super().__init__()
        type(self).table = [embedding]

    def forward(self, h):
        return h @ type(self).table[0].weight.T


class CastToFloat(Tied):
    def forward(self, h):
        return h.float() @ self.embedding.weight.float().T


class DividedByRoot(Tied):
    def forward(self, h):
        return super().forward(h) / math.sqrt(h.size(-1))


def test_02_buffer_class_cast_and_division_are_named():
    check = ex.check_tied_output
    fails(check, TableBuffer, r"registered as a buffer \(W\)")
    fails(check, TableOnClass, r"the embedding was stored on the class")
    fails(check, CastToFloat, r"the logits are torch.float32 for torch.float64")
    fails(check, DividedByRoot, r"divided by sqrt\(d_model\), attention's scale")


# 03 · RoPE: no gradient, bfloat16 angles ----------------------------------------------

rope = solution("15").my_apply_rope


def rope_detached(x, base=10000.0):
    return rope(x, base).detach()


def rope_in_dtype(x, base=10000.0):
    B, T, C = x.shape
    freq = base ** (-torch.arange(0, C, 2, dtype=x.dtype) / C)
    angle = torch.arange(T, dtype=x.dtype)[:, None] * freq  # rounded in bfloat16
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack(
        [x1 * angle.cos() - x2 * angle.sin(), x1 * angle.sin() + x2 * angle.cos()], -1
    )
    return out.flatten(-2)


def test_03_a_detached_rope_and_bfloat16_angles_fail():
    fails(ex.check_rope, rope_detached, r"carries no gradient back to x")
    fails(ex.check_rope, rope_in_dtype, r"computed in bfloat16")
    passes(ex.check_rope, rope)


# 04 · ALiBi: an in-place edit after the softmax, a reversed mask ----------------------


def alibi_inplace(q, k, v, slopes):
    T = q.size(-2)
    pos = torch.arange(T, dtype=q.dtype)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    s = s - slopes[:, None, None] * (pos[:, None] - pos)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    w = s.masked_fill(~causal, -math.inf).softmax(-1)
    w.masked_fill_(~causal, 0.0)  # "to be sure": softmax saved w for backward
    return w @ v, w


def alibi_reversed(q, k, v, slopes):
    T = q.size(-2)
    pos = torch.arange(T, dtype=q.dtype)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    s = s - slopes[:, None, None] * (pos[:, None] - pos).abs()
    w = s.masked_fill(torch.ones(T, T, dtype=torch.bool).tril(), -math.inf).softmax(-1)
    return w @ v, w


def test_04_inplace_after_softmax_and_a_reversed_mask_are_named():
    fails(ex.check_alibi_attention, alibi_inplace, r"backward pass failed: .*in place")
    fails(ex.check_alibi_attention, alibi_reversed, r"the mask is reversed")


# 05 and 07 · state on the class -------------------------------------------------------

MHA = solution("05").MyMultiHeadAttention


class HeadsOnClass(MHA):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        type(self).heads = n_heads

    def forward(self, query, key=None, value=None, mask=None):
        self.n_heads = type(self).heads
        return super().forward(query, key, value, mask)


Encoder = solution("07").MyEncoderLayer
_NORMS: dict = {}


class NormsInADict(Encoder):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__(d_model, n_heads, d_ff)
        if d_model not in _NORMS:
            _NORMS[d_model] = (nn.LayerNorm(d_model), nn.LayerNorm(d_model))
        self.norm1, self.norm2 = _NORMS[d_model]


def test_05_07_state_on_the_class_fails():
    fails(
        ex.check_multi_head_attention, HeadsOnClass, r"changed its output once a second"
    )
    _NORMS.clear()
    fails(
        ex.check_encoder_layer, NormsInADict, r"two MyEncoderLayers share norm1.weight"
    )


# 06 · the sliding window: OR, reversed padding, in place, T from the batch -----------


def band(T, window):
    ones = torch.ones(T, T, dtype=torch.bool)
    return ones.tril() & ones.triu(1 - window)


def window_or(ids, pad_id, window):
    return band(ids.size(1), window)[None, None] + (ids != pad_id)[:, None, None, :]


def window_pad_reversed(ids, pad_id, window):
    return band(ids.size(1), window)[None, None] & (ids == pad_id)[:, None, None, :]


def window_inplace(ids, pad_id, window):
    T = ids.size(1)
    return band(T, window)[None, None] & ids.ne_(pad_id).bool()[:, None, None, :]


def window_batch_axis(ids, pad_id, window):
    return band(ids.size(0), window)[None, None] & (ids != pad_id)[:, None, None, :]


def test_06_window_slips_are_named():
    check = ex.check_sliding_window_mask
    fails(check, window_or, r"combined with \+ \(or \|\)")
    fails(check, window_pad_reversed, r"only the <pad> keys may be seen")
    fails(check, window_inplace, r"changed the ids it was given")
    fails(check, window_batch_axis, r"is the band \(B, B\)")


# 08 · a decoder layer that builds its own causal mask ---------------------------------


class OwnCausal(solution("08").MyDecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        T = x.size(1)
        own = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        return super().forward(x, memory, own, memory_mask)


def test_08_a_layer_that_ignores_tgt_mask_fails():
    fails(ex.check_decoder_layer, OwnCausal, r"did not use the tgt_mask it was given")


# 10 · min-p with a generator of its own -----------------------------------------------


def own_generator(logits, min_p, generator=None):
    return solution("10").my_sample_min_p(
        logits, min_p, torch.Generator().manual_seed(0)
    )


def test_10_a_generator_of_its_own_fails():
    fails(ex.check_min_p_sampling, own_generator, r"seeded 0 and 1 drew the same")


# 11 · tokens joined and split into characters -----------------------------------------


def joined(hypotheses, references):
    return solution("11").my_corpus_bleu(
        [list("".join(h)) for h in hypotheses],
        [[list("".join(r)) for r in refs] for refs in references],
    )


def test_11_tokens_split_into_characters_fail():
    fails(ex.check_corpus_bleu, joined, r"joined and split into characters")


# 12 · the GPT block: in place, dropout, order, a reversed mask, a small fixed mask ----

Block = solution("12").MyBlock


class InPlace(Block):
    def forward(self, x):
        x += self.attn(self.norm1(x))
        x += self.fc_out(F.gelu(self.fc(self.norm2(x)), approximate="tanh"))
        return x


class DropoutOn(Block):
    def forward(self, x):
        return F.dropout(super().forward(x), 0.1)


class MlpFirst(Block):
    def forward(self, x):
        x = x + self.fc_out(F.gelu(self.fc(self.norm2(x)), approximate="tanh"))
        return x + self.attn(self.norm1(x))


class Reversed(Block):
    def attn(self, x):
        B, T, C = x.shape
        H, D = self.n_heads, C // self.n_heads
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        s = q @ k.transpose(-2, -1) / math.sqrt(D)
        tril = torch.ones(T, T, dtype=torch.bool).tril()
        y = s.masked_fill(tril, -math.inf).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class FixedMask(Reversed):
    def attn(self, x):
        B, T, C = x.shape
        H, D = self.n_heads, C // self.n_heads
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        s = q @ k.transpose(-2, -1) / math.sqrt(D)
        keep = torch.ones(8, 8, dtype=torch.bool).tril()[:T, :T]  # 8 positions at most
        y = s.masked_fill(~keep, -math.inf).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


def test_12_block_slips_are_named():
    check = ex.check_gpt_block
    fails(check, InPlace, r"changed its input x in place")
    fails(check, DropoutOn, r"two calls on the same x in eval mode")
    fails(check, MlpFirst, r"the MLP runs before the attention")
    fails(check, Reversed, r"the mask is the wrong way round")
    fails(check, FixedMask, r"MyBlock on 40 tokens")


# 18 · merge_and_unload: alpha // r, a copy, the top level only ------------------------

unload = solution("18").merge_and_unload


def floored(model):
    for layer in (m for m in model.modules() if type(m).__name__ == "LoRALinear"):
        layer.scaling = layer.alpha // layer.rank
    return unload(model)


def on_a_copy(model):
    return unload(copy.deepcopy(model))


def top_level(model):
    names = []
    for name, child in list(model.named_children()):
        if type(child).__name__ == "LoRALinear":
            names.append(name)
    return names


def test_18_floor_copy_and_top_level_are_named():
    check = ex.check_merge_and_unload
    fails(check, floored, r"alpha // r = 2 was floored")
    fails(check, on_a_copy, r"done on a copy")
    fails(check, top_level, r"named_children\(\) sees the top level only")
