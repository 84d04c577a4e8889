"""The seventeenth blind review's wrong answers (issue 34): the ones that passed (RoPE
angles in bfloat16, a mask kept between calls, BLEU clipped across sentences or keyed
by joined strings, a NaN at the last step, a biased Linear on a bias-free GPT) and
those that got a bare difference, a raw error or another mistake's name."""

import hashlib
import math

import torch
import torch.nn.functional as F
from exercise_helpers import fails, solution
from torch import nn

from transformer_lib import exercises as ex
from transformer_lib.tokenization import CHUNK_PATTERN, merge

# 00 · the size's name reused, another 64-hex digest -----------------------------------


def walrus_shadows(path, chunk=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk):  # the size is now the data
            h.update(chunk)
    return h.hexdigest()


def blake(path, chunk=1 << 20):
    h = hashlib.blake2s()
    with open(path, "rb") as f:
        while data := f.read(chunk):
            h.update(data)
    return h.hexdigest()


def test_00_shadowed_size_and_blake2s_are_named():
    fails(ex.check_sha256, walrus_shadows, r"give the data its own name")
    fails(ex.check_sha256, blake, r"the file's blake2s, not its sha256")


# 01 · unknown pairs ranked first, two tokens left, chunks out of order, the last -----


def bpe(default=None, stop=1, chunks=None, last_only=False):
    def encode(text, merges):
        ranks = {tuple(p): 256 + k for k, p in enumerate(merges)}
        out = []
        parts = CHUNK_PATTERN.findall(text)
        for chunk in chunks(parts) if chunks else parts:
            ids = list(chunk.encode())
            while len(ids) > stop:
                miss = float("inf") if default is None else default
                pair = min(zip(ids, ids[1:]), key=lambda p: ranks.get(p, miss))
                if pair not in ranks:
                    break
                ids = merge(ids, pair, ranks[pair])
            if not last_only:
                out += ids
        return ids if last_only else out

    return encode


def test_01_encoding_slips_are_named():
    check = ex.check_bpe_encode
    fails(check, bpe(default=0), r"made no merge at all")
    fails(check, bpe(stop=2), r"stops when a chunk is two tokens long")
    fails(
        check, bpe(chunks=lambda p: sorted(set(p))), r"the right ids in another order"
    )
    fails(check, bpe(last_only=True), r"returned only the last chunk's ids")


# 02 · an argmax, cosines, logits without a gradient -----------------------------------

Tied = solution("02").MyTiedOutput


class Argmax(Tied):
    def forward(self, h):
        return super().forward(h).argmax(-1)


class Cosines(Tied):
    def forward(self, h):
        return F.normalize(h, dim=-1) @ F.normalize(self.embedding.weight, dim=-1).T


class NoGrad(Tied):
    def forward(self, h):
        with torch.no_grad():
            return super().forward(h)


def test_02_output_slips_are_named():
    fails(ex.check_tied_output, Argmax, r"an argmax \(or a max\)\?")
    fails(ex.check_tied_output, Cosines, r"the logits are the cosines")
    fails(ex.check_tied_output, NoGrad, r"the logits carry no gradient")


# 03 · a cos/sin cache keyed by T ------------------------------------------------------

_ANGLES: dict = {}


def cached_rope(x, base=10000.0):
    T, C = x.shape[-2:]
    if T not in _ANGLES:  # keyed by T alone: stale for another base
        freq = base ** (-torch.arange(0, C, 2, dtype=torch.float32) / C)
        _ANGLES[T] = torch.arange(T, dtype=torch.float32)[:, None] * freq
    angle = _ANGLES[T]
    c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)


def test_03_a_cache_keyed_by_t_is_named():
    _ANGLES.clear()
    fails(ex.check_rope, cached_rope, r"a cos/sin cache keyed by T alone")


# 06 · float64 results, detached weights -----------------------------------------------

alibi = solution("06").my_alibi_attention


def test_04_dtype_and_detached_weights_are_named():
    def in_float64(q, k, v, slopes):
        return alibi(q.double(), k.double(), v.double(), slopes.double())

    def detached(q, k, v, slopes):
        out, w = alibi(q, k, v, slopes)
        return out, w.detach()

    fails(ex.check_alibi_attention, in_float64, r"float32 q, k, v gave a torch.float64")
    fails(ex.check_alibi_attention, detached, r"weights returned carry no gradient")


# 05 · one Linear twice, always causal, out_proj early, the width as the head count ---

MHA = solution("05").MyMultiHeadAttention


class OneLinear(MHA):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.k_proj = self.q_proj


class AlwaysCausal(MHA):
    def forward(self, query, key=None, value=None, mask=None):
        T = query.size(1)
        if mask is None and key is None:
            mask = torch.ones(T, T, dtype=torch.bool).tril()
        return super().forward(query, key, value, mask)


def test_05_layer_slips_are_named():
    fails(ex.check_multi_head_attention, OneLinear, r"one nn.Linear under two names")
    fails(ex.check_multi_head_attention, AlwaysCausal, r"a causal mask was applied")


# 06 · a mask kept between calls, & before <, and between tensors ----------------------

_BANDS: dict = {}


def cached_band(ids, pad_id, window):
    B, T = ids.shape
    if (T, window) not in _BANDS:
        ones = torch.ones(T, T, dtype=torch.bool)
        _BANDS[T, window] = (ones.tril() & ones.triu(1 - window)).expand(B, 1, T, T)
        _BANDS[T, window] = _BANDS[T, window].clone()
    band = _BANDS[T, window]
    band &= (ids != pad_id)[:, None, None, :]  # in place, on the kept tensor
    return band


def precedence(ids, pad_id, window):
    T = ids.size(1)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (ids != pad_id)[:, None, None, :] & (j <= i) & (i - j) < window


def python_and(ids, pad_id, window):
    T = ids.size(1)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (ids != pad_id)[:, None, None, :] & ((j <= i) and (j > i - window))


def test_06_mask_slips_are_named():
    _BANDS.clear()
    check = ex.check_sliding_window_mask
    fails(check, cached_band, r"kept between calls was edited in place")
    fails(check, precedence, r"& binds tighter than <")
    fails(check, python_and, r"`and`, `or` and `not` ask a whole tensor")


# 07 · a ReLU after the feed-forward, the second residual from x, sandwich norms ------

Encoder = solution("07").MyEncoderLayer


class ReluAfter(Encoder):
    def forward(self, x, mask=None):
        x = x + self.self_attn(self.norm1(x), mask=mask)[0]
        return x + torch.relu(self.ff(self.norm2(x)))


class FromInput(Encoder):
    def forward(self, x, mask=None):
        h = x + self.self_attn(self.norm1(x), mask=mask)[0]
        return x + self.ff(self.norm2(h))


class Sandwich(Encoder):
    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(self.norm1(x), mask=mask)[0])
        return self.norm2(x + self.ff(self.norm2(x)))


def test_07_residual_slips_are_named():
    fails(ex.check_encoder_layer, ReluAfter, r"a ReLU was applied")
    fails(ex.check_encoder_layer, FromInput, r"adds the layer's input x")
    fails(ex.check_encoder_layer, Sandwich, r"a 'sandwich'")


# 09 · the loop: a NaN at the last step, torch.isfinite on a float ---------------------


def late_check(model, optimizer, batches, lr_at, train_step):
    model.train()
    losses = []
    for s, batch in enumerate(batches):
        if losses and not math.isfinite(losses[-1]):  # the previous step's loss
            raise ValueError(f"step {s - 1}: loss {losses[-1]}")
        for group in optimizer.param_groups:
            group["lr"] = lr_at(s)
        losses.append(train_step(model, optimizer, batch))
    return losses


def torch_isfinite(model, optimizer, batches, lr_at, train_step):
    model.train()
    losses = []
    for s, batch in enumerate(batches):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(s)
        loss = train_step(model, optimizer, batch)
        if not torch.isfinite(loss):
            raise ValueError(f"step {s}")
        losses.append(loss)
    return losses


def test_09_loop_slips_are_named():
    fails(ex.check_training_loop, late_check, r"a NaN loss at the last step")
    fails(ex.check_training_loop, torch_isfinite, r"test it with math.isfinite")


# 11 · clipped across the corpus, n-grams keyed by joined strings ----------------------


def bleu(grams, pooled=False):
    from collections import Counter

    def score(hypotheses, references):
        match, total, c, r = [0] * 4, [0] * 4, 0, 0
        for h, refs in zip(hypotheses, references):
            c += len(h)
            r += len(min(refs, key=lambda x: (abs(len(x) - len(h)), len(x))))
        for n in range(1, 5):
            if pooled:  # one Counter for the corpus
                got = sum((grams(h, n) for h in hypotheses), Counter())
                most = Counter()
                for refs in references:  # each sentence's references, pooled
                    one = Counter()
                    for x in refs:
                        one |= grams(x, n)
                    most += one
                match[n - 1] = sum((got & most).values())
                total[n - 1] = sum(got.values())
                continue
            for h, refs in zip(hypotheses, references):
                most = Counter()
                for x in refs:
                    most |= grams(x, n)
                match[n - 1] += sum((grams(h, n) & most).values())
                total[n - 1] += sum(grams(h, n).values())
        if min(match) == 0:
            return 0.0
        bp = math.exp(1 - r / c) if c < r else 1.0
        return (
            100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(match, total)) / 4)
        )

    return score


def tuples(toks, n):
    from collections import Counter

    return Counter(tuple(toks[i : i + n]) for i in range(len(toks) - n + 1))


def joined(toks, n):
    from collections import Counter

    return Counter("".join(toks[i : i + n]) for i in range(len(toks) - n + 1))


def test_11_bleu_passes_are_now_named():
    fails(ex.check_corpus_bleu, bleu(tuples, pooled=True), r"references of the whole")
    fails(ex.check_corpus_bleu, bleu(joined), r"keyed by a joined string")


# 14 · tiled attention: the scale on the output, a stuck running max -------------------


def tiled(scale_out=False, stuck=False):
    def attend(q, k, v, block):
        m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
        ell = torch.zeros_like(m)
        out = q.new_zeros(q.shape[:-1] + (v.size(-1),))
        root = 1.0 if scale_out else math.sqrt(q.size(-1))
        for s in range(0, k.size(-2), block):
            kb, vb = k[..., s : s + block, :], v[..., s : s + block, :]
            scores = q @ kb.transpose(-2, -1) / root
            m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
            c, p = (m - m_new).exp(), (scores - m_new).exp()
            ell, out = ell * c + p.sum(-1, keepdim=True), out * c + p @ vb
            m = m if stuck else m_new
        out = out / ell
        return out / math.sqrt(q.size(-1)) if scale_out else out

    return attend


def test_14_scale_and_stuck_max_are_named():
    fails(ex.check_tiled_attention, tiled(scale_out=True), r"the output was divided")
    fails(ex.check_tiled_attention, tiled(stuck=True), r"the running max never moved")


# 15, 16 · zero repeats, no super().__init__() -----------------------------------------


def zero_repeats(q, k, v):
    n = k.size(1) // q.size(1)  # 0
    k, v = k.repeat_interleave(n, dim=1), v.repeat_interleave(n, dim=1)
    out = torch.zeros_like(q)
    return (
        out
        if k.numel() == 0
        else F.scaled_dot_product_attention(q, k, v, is_causal=True)
    )


class NoSuper(nn.Module):
    def __init__(self, d_model, multiple_of=64):
        self.gate = nn.Linear(d_model, 64, bias=False)


def test_15_16_zero_repeats_and_no_super_are_named():
    fails(ex.check_grouped_attention, zero_repeats, r"every output is 0")
    fails(ex.check_geglu, NoSuper, r"call super\(\).__init__\(\) first")


# 17 · each pair with pair 1's n_prompt, <eos> masked, a (1, T, T) mask ----------------

pack = solution("17").pack_pairs


def test_17_packing_slips_are_named():
    def same_n(pairs):
        n = pairs[0][1]
        return pack([(ids, n) for ids, _ in pairs])

    def eos_masked(pairs):
        x, y, mask = pack(pairs)
        ends = torch.tensor([len(ids) - 1 for ids, _ in pairs]).cumsum(0) - 1
        for e in ends.tolist():
            y[e] = -100
        return x, y, mask

    def leading_axis(pairs):
        x, y, mask = pack(pairs)
        return x, y, mask[None]

    fails(ex.check_pack_pairs, same_n, r"masked with pair 1's n_prompt")
    fails(ex.check_pack_pairs, eos_masked, r"<eos>, was masked too")
    fails(ex.check_pack_pairs, leading_axis, r"with an extra leading axis")


# 18 · a new Linear with nn.Linear's default bias --------------------------------------


def biased_linear(model):
    names = []
    for name, m in list(model.named_modules()):
        if type(m).__name__ != "LoRALinear":
            continue
        base = m.base
        new = nn.Linear(base.in_features, base.out_features, dtype=base.weight.dtype)
        with torch.no_grad():
            new.weight.copy_(base.weight + (0 if m.merged else m.delta_weight()))
            if base.bias is not None:
                new.bias.copy_(base.bias)
            else:
                new.bias.zero_()  # a bias the base never had
        new.requires_grad_(False)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, new)
        names.append(name)
    return names


def test_18_a_bias_on_a_bias_free_gpt_fails():
    fails(ex.check_merge_and_unload, biased_linear, r"on a GPT without biases")


# 10, 12 · the eighteenth review: a beam never cut back, a length counted per call -----


def no_global_cut(step, beam, max_len, eos):
    live, done = [((), 0.0)], []
    for _ in range(max_len):
        grown = []
        for prefix, score in live:  # the beam best of each prefix, all kept
            logp = torch.as_tensor(step(prefix)).tolist()
            best = sorted(range(len(logp)), key=lambda t: -logp[t])[:beam]
            grown += [(prefix + (t,), score + logp[t]) for t in best]
        done += [c for c in grown if c[0][-1] == eos]
        live = [c for c in grown if c[0][-1] != eos]
        if not live:
            break
    tokens, score = max(done or live, key=lambda c: c[1])
    return list(tokens), score


class CountsCalls(solution("12").MyKVCache):
    def update(self, k, v):
        keys, values = super().update(k, v)
        self.length = getattr(self, "calls", 0) + 1
        self.calls = self.length
        return keys, values


def test_10_12_no_global_cut_and_a_length_per_call_are_named():
    fails(ex.check_beam_search, no_global_cut, r"never cut back to 2")
    fails(ex.check_kv_cache, CountsCalls, r"not 1 per call")
