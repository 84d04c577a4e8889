"""The sixteenth blind review's wrong answers (issue 34) that got a bare difference, a
raw error or a message that named another mistake: each is named now."""

import math

import torch
import torch.nn.functional as F
from exercise_helpers import fails, solution
from torch import nn

from transformer_lib import exercises as ex

# 04 · ALiBi: sqrt(T), the slopes ignored, a rounded penalty ---------------------------


def alibi(scale=None, own_slopes=False, rounded=False):
    def attend(q, k, v, slopes):
        H, T = q.size(1), q.size(-2)
        if own_slopes:  # the paper's slopes, not the ones given
            slopes = torch.tensor([2 ** (-8 * (h + 1) / H) for h in range(H)])
        pos = torch.arange(T, dtype=q.dtype)
        penalty = slopes[:, None, None].to(q.dtype) * (pos[:, None] - pos)
        penalty = penalty.long() if rounded else penalty
        s = q @ k.transpose(-2, -1) / (scale(q) if scale else math.sqrt(q.size(-1)))
        s = (s - penalty).masked_fill(torch.ones(T, T).triu(1).bool(), -math.inf)
        w = s.softmax(-1)
        return w @ v, w

    return attend


def test_04_alibi_slips_are_named():
    check = ex.check_alibi_attention
    fails(check, alibi(scale=lambda q: math.sqrt(q.size(-2))), r"divided by sqrt\(T\)")
    fails(check, alibi(own_slopes=True), r"the argument slopes is ignored")
    fails(check, alibi(rounded=True), r"rounded to whole numbers")


# 07 · norm2 on the attention's output, sub-layers made in forward ---------------------

Encoder = solution("07").MyEncoderLayer


class NormOnOutput(Encoder):
    def forward(self, x, mask=None):
        x = x + self.norm2(self.self_attn(self.norm1(x), mask=mask)[0])
        return x + self.ff(x)


class MadeInForward(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.sizes = d_model, n_heads, d_ff
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        layer = Encoder(*self.sizes)  # new random weights at every call
        return layer(x, mask)


def test_07_encoder_slips_are_named():
    fails(ex.check_encoder_layer, NormOnOutput, r"norm2 was applied to the attention")
    fails(ex.check_encoder_layer, MadeInForward, r"no sub-module .*created in forward")


# 08 · both masks inverted, pad_sequence without batch_first ---------------------------


class BothInverted(solution("08").MyDecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return super().forward(x, memory, ~tgt_mask, ~memory_mask)


def time_first(seqs, bos, eos, pad):
    tgt_in, tgt_out = solution("08").my_shift_targets(seqs, bos, eos, pad)
    return tgt_in.T, tgt_out.T


def test_08_inverted_masks_and_time_first_are_named():
    fails(ex.check_decoder_layer, BothInverted, r"both masks are inverted")
    fails(ex.check_shift_targets, time_first, r"\(T, B\), the transpose")


# 09 · a summed loss, zeroed pad logits, an extra step, a loop under no_grad -----------


def summed(model, optimizer, src, tgt_in, tgt_out, pad_id, label_smoothing):
    loss = F.cross_entropy(
        model(src, tgt_in).flatten(0, 1),
        tgt_out.flatten(),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
        reduction="sum",
    )
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return (loss / (tgt_out != pad_id).sum()).item()


def zeroed_pads(model, optimizer, src, tgt_in, tgt_out, pad_id, label_smoothing):
    logits = model(src, tgt_in)
    logits = logits.masked_fill((tgt_out == pad_id)[..., None], 0.0)
    loss = F.cross_entropy(
        logits.flatten(0, 1), tgt_out.flatten(), label_smoothing=label_smoothing
    )
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def extra_step(model, optimizer, batches, lr_at, train_step):
    model.train()
    losses = []
    for s, batch in enumerate(batches):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(s)
        losses.append(train_step(model, optimizer, batch))
        optimizer.step()  # train_step stepped already
    return losses


def under_no_grad(model, optimizer, batches, lr_at, train_step):
    with torch.no_grad():
        return solution("09").my_train(model, optimizer, batches, lr_at, train_step)


def test_09_step_and_loop_slips_are_named():
    fails(ex.check_train_step, summed, r"times as far: .*summed")
    fails(
        ex.check_train_step, zeroed_pads, r"logits at the <pad> targets were set to 0"
    )
    fails(ex.check_training_loop, extra_step, r"optimizer.step\(\) ran 12 times")
    fails(ex.check_training_loop, under_no_grad, r"ran under torch.no_grad\(\)")


# 10 · min-p and beam search -----------------------------------------------------------


def zero_not_inf(logits, min_p, generator=None):
    p = logits.softmax(-1)
    keep = p >= min_p * p.amax(-1, keepdim=True)
    probs = logits.masked_fill(~keep, 0.0).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def scaled_in_log_space(logits, min_p, generator=None):
    lp = logits.log_softmax(-1)
    keep = lp >= min_p * lp.amax(-1, keepdim=True)
    return torch.multinomial(lp.exp() * keep, 1, generator=generator).squeeze(-1)


def keeps_growing(step, beam, max_len, eos):
    live = [((), 0.0)]
    for _ in range(max_len):  # finished prefixes are extended too
        grown = [
            (p + (t,), s + float(lp))
            for p, s in live
            for t, lp in enumerate(torch.as_tensor(step(p)).tolist())
        ]
        live = sorted(grown, key=lambda c: -c[1])[:beam]
    tokens, score = live[0]
    return list(tokens[: tokens.index(eos) + 1]), score


def log_of_logprobs(step, beam, max_len, eos):
    def probs(prefix):
        return torch.as_tensor(step(prefix), dtype=torch.float64).log()

    return solution("10").my_beam_search(probs, beam, max_len, eos)


def test_10_sampling_and_search_slips_are_named():
    fails(ex.check_min_p_sampling, zero_not_inf, r"logits were set to 0, not -inf")
    fails(ex.check_min_p_sampling, scaled_in_log_space, r"no token was kept")
    fails(ex.check_beam_search, keeps_growing, r"a finished prefix kept growing")
    fails(ex.check_beam_search, log_of_logprobs, r"log-prob NaN")


# 11 · each precision averaged over the sentences --------------------------------------


def sentence_precisions(hypotheses, references):
    from collections import Counter

    def grams(toks, n):
        return Counter(tuple(toks[i : i + n]) for i in range(len(toks) - n + 1))

    p = []
    for n in range(1, 5):
        per = []
        for h, refs in zip(hypotheses, references):
            most = Counter()
            for r in refs:
                most |= grams(r, n)
            if grams(h, n):
                per.append(
                    sum((grams(h, n) & most).values()) / sum(grams(h, n).values())
                )
        p.append(sum(per) / len(per))
    if min(p) == 0:
        return 0.0
    c = sum(map(len, hypotheses))
    r = sum(
        len(min(refs, key=lambda x: (abs(len(x) - len(h)), len(x))))
        for h, refs in zip(hypotheses, references)
    )
    bp = math.exp(1 - r / c) if c < r else 1.0
    return 100 * bp * math.exp(sum(map(math.log, p)) / 4)


def test_11_sentence_precisions_are_named():
    fails(ex.check_corpus_bleu, sentence_precisions, r"averaged over the sentences")


# 12 · a cache that keeps the last 128 tokens ------------------------------------------


class Sliding(solution("12").MyKVCache):
    def update(self, k, v):
        keys, values = super().update(k, v)
        return keys[:, :, -128:], values[:, :, -128:]


def test_12_a_sliding_cache_is_named():
    fails(ex.check_kv_cache, Sliding, r"dropped the oldest tokens")


# 13 · the pairs at least k apart, an integer result -----------------------------------


def at_least_k(table):
    u = F.normalize(table, dim=1)
    s, n = u @ u.T, len(table)
    gap = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # no abs
    return torch.stack([s[gap >= k].mean() for k in range(n)])


def integer_result(table):
    out = torch.zeros_like(torch.arange(len(table)))
    for k, value in enumerate(solution("13").my_cosine_by_distance(table)):
        out[k] = value
    return out


def test_13_distance_slips_are_named():
    fails(ex.check_cosine_by_distance, at_least_k, r"gap >= k")
    fails(ex.check_cosine_by_distance, integer_result, r"int64, whole numbers")


# 14 · tiled attention: the wrong transpose, max's pair, D sliced, no last axis --------


def tiled(transpose=None, pair=False, slice_d=False, squeezed=False):
    def attend(q, k, v, block):
        m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
        ell = torch.zeros_like(m)
        out = q.new_zeros(q.shape[:-1] + (v.size(-1),))
        for s in range(0, k.size(-2), block):
            kb = k[..., s : s + block] if slice_d else k[..., s : s + block, :]
            vb = v[..., s : s + block, :]
            kt = transpose(kb) if transpose else kb.transpose(-2, -1)
            scores = q @ kt / math.sqrt(q.size(-1))
            top = (
                scores.max(-1, keepdim=True) if pair else scores.amax(-1, keepdim=True)
            )
            m_new = torch.maximum(m, top)
            c = (m - m_new).exp()
            p = (scores - m_new).exp()
            ell = ell * c + p.sum(-1, keepdim=True)
            out = (c[..., 0] if squeezed else c) * out + p @ vb
            m = m_new
        return out / ell

    return attend


def test_14_tiled_slips_are_named():
    check = ex.check_tiled_attention
    fails(
        check, tiled(transpose=lambda t: t.transpose(1, 2)), r"transposed on the wrong"
    )
    fails(check, tiled(pair=True), r"returns a pair \(values, indices\)")
    fails(check, tiled(slice_d=True), r"slices the last axis \(D\)")
    fails(check, tiled(squeezed=True), r"needs a last axis of 1")


# 15 · grouped attention masked or normalised another way ------------------------------


def grouped(weights=None, by_time=False):
    def attend(q, k, v):
        B, H, T, D = q.shape
        g = H // k.size(1)
        if by_time:
            k, v = (t.repeat_interleave(g, dim=2).reshape(B, H, T, D) for t in (k, v))
        else:
            k, v = (t.repeat_interleave(g, dim=1) for t in (k, v))
        s = q @ k.transpose(-2, -1) / math.sqrt(D)
        keep = torch.ones(T, T, dtype=torch.bool).tril()
        w = weights(s, keep) if weights else s.masked_fill(~keep, -math.inf).softmax(-1)
        return w @ v

    return attend


def test_15_grouped_slips_are_named():
    check = ex.check_grouped_attention
    over_queries = grouped(lambda s, k: s.masked_fill(~k, -math.inf).softmax(-2))
    fails(check, over_queries, r"softmax ran over the queries")
    fails(check, grouped(lambda s, k: (s + k.double()).softmax(-1)), r"0/1 float mask")
    fails(check, grouped(lambda s, k: (s * k).softmax(-1)), r"multiplied by 0")
    fails(check, grouped(by_time=True), r"repeated along time \(dim 2\), then reshaped")


# 16 · 2 // 3, nn.Linear's default bias ------------------------------------------------

GeGLU = solution("16").MyGeGLU


class FloorDivided(GeGLU):
    def __init__(self, d_model, multiple_of=64):
        super().__init__(d_model, multiple_of)
        d_ff = 2 // 3 * 4 * d_model  # 0
        self.gate, self.up = (
            nn.Linear(d_model, d_ff, False),
            nn.Linear(d_model, d_ff, False),
        )
        self.proj = nn.Linear(d_ff, d_model, bias=False)


class WithBiases(GeGLU):
    def __init__(self, d_model, multiple_of=64):
        super().__init__(d_model, multiple_of)
        d_ff = self.gate.out_features
        self.gate, self.up = nn.Linear(d_model, d_ff), nn.Linear(d_model, d_ff)
        self.proj = nn.Linear(d_ff, d_model)


def test_16_width_and_bias_slips_are_named():
    fails(ex.check_geglu, FloorDivided, r"2 // 3 is 0 in Python")
    fails(ex.check_geglu, WithBiases, r"nn.Linear has a bias by default")


# 17 · lists kept between calls --------------------------------------------------------


def kept_lists(pairs, inputs=[], targets=[]):  # noqa: B006 - the slip itself
    x, y, mask = solution("17").pack_pairs(pairs)
    inputs += x
    targets += y
    return inputs, targets, mask


def test_17_lists_kept_between_calls_are_named():
    fails(ex.check_pack_pairs, kept_lists, r"twice gave other inputs the second time")


# 18 · a generator read twice ----------------------------------------------------------


def generator_twice(model):
    found = ((n, m) for n, m in list(model.named_modules()) if hasattr(m, "lora_A"))
    for _, layer in found:
        if not layer.merged:
            layer.merge()
    names = []
    for name, layer in found:  # empty: the generator was read to its end above
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, layer.base)
        names.append(name)
    return names


def test_18_a_generator_read_twice_is_named():
    fails(ex.check_merge_and_unload, generator_twice, r"a generator is empty once read")


# 19 · log1p(exp(-z)) ------------------------------------------------------------------


def log1p_exp(pc, pr, rc, rr, n, beta, alpha):
    z = beta * ((pc - rc) - (pr - rr))
    return (torch.log1p(torch.exp(-z)) - alpha * pc / n).mean()


def test_19_log1p_exp_is_named():
    fails(ex.check_dpo_nll_loss, log1p_exp, r"log1p\(exp\(-z\)\) both break")
