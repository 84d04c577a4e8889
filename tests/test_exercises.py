"""Every exercise checker passes a right solution and fails a deliberately wrong one
with a precise message."""

import hashlib
import math
import re

import pytest
import torch
import torch.nn.functional as F

from transformer_lib import exercises as ex
from transformer_lib.masks import causal_mask, padding_mask
from transformer_lib.multi_head import merge_heads, split_heads
from transformer_lib.sampling import filter_logits
from transformer_lib.tokenization import merge


def fails(check, fn, message):
    """The checker raises ExerciseError whose text contains `message` (a regex)."""
    with pytest.raises(ex.ExerciseError, match=message):
        check(fn)


def sha256_file(path, chunk=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def test_sha256():
    assert ex.check_sha256(sha256_file)
    fails(
        ex.check_sha256,
        lambda p: hashlib.sha256(p.read_bytes()).digest(),
        "expected a str, got bytes",
    )
    fails(
        ex.check_sha256,
        lambda p: hashlib.sha256(p.read_bytes()[: 2**20]).hexdigest(),
        "of a 3145735-byte file",
    )


def test_merge():
    assert ex.check_merge(merge)

    def drops_last(
        ids, pair, new_id
    ):  # a common slip: the loop stops one token early and loses the last one
        out, i = [], 0
        while i < len(ids) - 1:
            if (ids[i], ids[i + 1]) == pair:
                out, i = out + [new_id], i + 2
            else:
                out, i = out + [ids[i]], i + 1
        return out

    fails(
        ex.check_merge,
        drops_last,
        re.escape("merge([1, 1, 1], (1, 1), 9) returned [9], expected [9, 1]"),
    )


def test_embedding_lookup():
    assert ex.check_embedding_lookup(
        lambda ids, w: F.one_hot(ids, w.shape[0]).float() @ w * math.sqrt(w.shape[1])
    )
    fails(
        ex.check_embedding_lookup,
        lambda ids, w: w[ids],
        r"entries differ from the reference: at \[0, 0, 0\]",
    )
    fails(
        ex.check_embedding_lookup,
        lambda ids, w: w[ids.flatten()],
        r"shape \(10, 8\), expected \(2, 5, 8\)",
    )


def test_rope():
    assert ex.check_rope(ex.rope_reference)

    def halves(
        x,
        # rotates the first half against the second half: a real convention, but not
        # this one
    ):
        T, C = x.shape[-2:]
        ang = torch.arange(T, dtype=x.dtype)[:, None] * 10000 ** (
            -torch.arange(0, C, 2, dtype=x.dtype) / C
        )
        x1, x2 = x[..., : C // 2], x[..., C // 2 :]
        return torch.cat(
            [x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1
        )

    fails(ex.check_rope, halves, r"apply_rope: \d+ of 112 entries differ")


def test_attention():
    assert ex.check_attention(
        lambda q, k, v, mask=None: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask
        )
    )

    def unscaled(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1)
        return (s if mask is None else s.masked_fill(~mask, -math.inf)).softmax(-1) @ v

    fails(ex.check_attention, unscaled, "attention without a mask: .* entries differ")

    def mask_ignored(q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v)

    fails(ex.check_attention, mask_ignored, "attention with a mask: .* entries differ")


def test_split_and_merge_heads():
    assert ex.check_split_heads(split_heads) and ex.check_merge_heads(merge_heads)
    fails(
        ex.check_split_heads,
        lambda x, h: x.view(x.shape[0], h, x.shape[1], -1),
        "split_heads.*entries differ",
    )
    fails(
        ex.check_split_heads,
        lambda x, h: x.view(*x.shape[:2], h, -1),
        r"shape \(2, 3, 4, 2\), expected \(2, 4, 3, 2\)",
    )
    fails(
        ex.check_merge_heads,
        lambda x: x.reshape(x.shape[0], x.shape[2], -1),
        "merge_heads.*entries differ",
    )


def test_masks():
    assert ex.check_causal_mask(causal_mask) and ex.check_padding_mask(padding_mask)
    fails(
        ex.check_causal_mask,
        lambda T: torch.ones(T, T).tril(),
        "dtype torch.float32, expected torch.bool",
    )
    fails(
        ex.check_causal_mask,
        lambda T: torch.ones(T, T, dtype=torch.bool).triu(),
        r"causal_mask\(4\): 12 of 16 entries",
    )
    fails(
        ex.check_padding_mask,
        lambda ids, pad: ids != pad,
        r"shape \(3, 5\), expected \(3, 1, 1, 5\)",
    )


def test_post_norm_layer():
    def post(layer, x, mask):
        x = layer.norm1(x + layer.self_attn(x, mask=mask)[0])
        return layer.norm2(x + layer.ff(x))

    assert ex.check_post_norm_layer(post)

    def pre(layer, x, mask):
        x = x + layer.self_attn(layer.norm1(x), mask=mask)[0]
        return x + layer.ff(layer.norm2(x))

    fails(ex.check_post_norm_layer, pre, "this is the pre-norm order")

    def no_mask(layer, x, mask):
        return post(layer, x, None)

    fails(ex.check_post_norm_layer, no_mask, "post-norm layer: .* entries differ")


def shift(seqs, bos, eos, pad):
    T = max(map(len, seqs)) + 1
    rows = [
        ([bos] + s + [pad] * (T - 1 - len(s)), s + [eos] + [pad] * (T - 1 - len(s)))
        for s in seqs
    ]
    return torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])


def test_shift_targets():
    assert ex.check_shift_targets(shift)
    fails(
        ex.check_shift_targets,
        lambda *a: shift(*a)[::-1],
        r"tgt_in: .* at \[0, 0\] got 5, expected 1",
    )
    fails(ex.check_shift_targets, lambda *a: shift(*a)[0], "return a pair")


def test_label_smoothing():
    def smoothed(logits, targets, eps, pad_id):
        logp = logits.log_softmax(-1)
        keep = targets != pad_id
        nll = -logp.gather(-1, targets[:, None])[:, 0]
        loss = (1 - eps) * nll - eps * logp.mean(-1)
        return loss[keep].mean()

    assert ex.check_label_smoothing(smoothed)
    fails(
        ex.check_label_smoothing,
        lambda logits, t, e, p: F.cross_entropy(logits, t, label_smoothing=e),
        "padding targets were counted",
    )
    fails(
        ex.check_label_smoothing,
        lambda logits, t, e, p: F.cross_entropy(logits, t, ignore_index=p),
        r"eps=0.1: got",
    )


def test_top_p():
    assert ex.check_top_p(lambda logits, p: filter_logits(logits, top_p=p))

    def strict(
        logits, p
    ):  # keeps tokens while the mass so far is below p: drops the one that reaches it
        s, order = logits.sort(-1, descending=True)
        drop = s.softmax(-1).cumsum(-1) > p
        return logits.masked_fill(drop.scatter(-1, order, drop), -math.inf)

    fails(ex.check_top_p, strict, r"top_p\(p=0.5\): .* got -inf, expected")


def test_beam_search():
    assert ex.check_beam_search(
        lambda step, beam, max_len, eos: ex.beam_search_reference(
            step, beam, max_len, eos
        )
    )

    def greedy(step, beam, max_len, eos):
        tokens, score = [], 0.0
        for _ in range(max_len):
            lp = step(tuple(tokens))
            tokens.append(int(lp.argmax()))
            score += float(lp.max())
            if tokens[-1] == eos:
                break
        return tokens, score

    fails(
        ex.check_beam_search,
        greedy,
        r"beam=2: got tokens \[0, 0, 2\], expected \[1, 1, 2\]",
    )


def test_get_batch():
    from transformer_lib.lm_train import get_batch

    assert ex.check_get_batch(get_batch)

    def same_as_x(ids, B, T, g):
        x, _ = get_batch(ids, B, T, g)
        return x, x.clone()

    fails(ex.check_get_batch, same_as_x, "y .*entries differ")

    def one_start(ids, B, T, g):
        x = ids[:T].repeat(B, 1)
        return x, x + 1

    fails(ex.check_get_batch, one_start, "every row starts at the same place")


def tiled(q, k, v, block):
    out = torch.zeros_like(q[..., : v.shape[-1]])
    m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
    denom = torch.zeros_like(m)
    for s in range(0, k.shape[-2], block):
        scores = q @ k[..., s : s + block, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        p = (scores - m_new).exp()
        rescale = (m - m_new).exp()
        denom = denom * rescale + p.sum(-1, keepdim=True)
        out = out * rescale + p @ v[..., s : s + block, :]
        m = m_new
    return out / denom


def test_tiled_attention():
    assert ex.check_tiled_attention(tiled)

    def per_block_softmax(
        q, k, v, block
    ):  # normalises each block on its own and averages the blocks
        outs = [
            F.scaled_dot_product_attention(
                q, k[..., s : s + block, :], v[..., s : s + block, :]
            )
            for s in range(0, k.shape[-2], block)
        ]
        return torch.stack(outs).mean(0)

    fails(
        ex.check_tiled_attention,
        per_block_softmax,
        "tiled attention, block=1: .* entries differ",
    )
