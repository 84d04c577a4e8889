"""The eleventh blind review's wrong answers (issue 34, part A): each checker names
the mistake in one line, never passes it, and never hangs."""

from pathlib import Path

import torch
from exercise_helpers import fails, solution

from transformer_lib import exercises as ex

ROOT = Path(__file__).resolve().parent.parent


# 08 · my_shift_targets ----------------------------------------------------------------


def test_shift_targets_t_from_the_first_row_and_rows_reordered():
    right = solution("08").my_shift_targets

    def first_row_t(seqs, bos, eos, pad):  # passed while the longest came first
        T = len(seqs[0]) + 1
        rows_in = [([bos, *y] + [pad] * T)[:T] for y in seqs]
        rows_out = [([*y, eos] + [pad] * T)[:T] for y in seqs]
        return torch.tensor(rows_in), torch.tensor(rows_out)

    def sorted_rows(seqs, bos, eos, pad):
        return right(sorted(seqs, key=len, reverse=True), bos, eos, pad)

    fails(ex.check_shift_targets, first_row_t, r"T is the longest length \+ 1")
    fails(ex.check_shift_targets, sorted_rows, "rows are in another order.*batch order")


# 00 · sha256_file ---------------------------------------------------------------------


def test_sha256_str_sentinel_in_binary_mode_is_stopped_not_waited_for():
    import hashlib

    def str_sentinel(path, chunk=2**20):
        h, reads = hashlib.sha256(), 0
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(chunk), ""):  # b'' never equals ''
                reads += 1
                if reads > 10**5:  # so that a checker that waits fails, not hangs
                    raise RuntimeError("the checker let the loop run on")
                h.update(block)
        return h.hexdigest()

    fails(ex.check_sha256, str_sentinel, r"never equals the str '': stop on b''")


# 19 · my_dpo_nll_loss -----------------------------------------------------------------


def dpo_nll(margin_beta=None, nll=None, cast=None, edit=False):
    """The DPO + NLL loss with one slip: margin_beta(beta, alpha) the margin's factor,
    nll(pc, n) the per-pair NLL, cast the result's dtype, edit: pc /= n in place."""
    import torch.nn.functional as F

    def loss(pc, pr, rc, rr, n, beta, alpha):
        if edit:
            pc /= n
            pc_sum, per_token = pc * n, pc
        else:
            pc_sum, per_token = pc, pc / n
        m = (pc_sum - rc) - (pr - rr)
        dpo = -F.logsigmoid((margin_beta or (lambda b, a: b))(beta, alpha) * m)
        if nll is not None:
            out = dpo.mean() + alpha * nll(pc_sum, n)
        else:
            weight = alpha if margin_beta is None else beta
            out = (dpo - weight * per_token).mean()
        return out if cast is None else out.to(cast)

    return loss


def test_dpo_nll_in_place_edit_float32_and_three_bare_variants():
    check = ex.check_dpo_nll_loss
    assert ex.outcome(check, dpo_nll())[0] == "pass"
    fails(check, dpo_nll(edit=True), "policy_chosen was changed in place")
    fails(check, dpo_nll(cast=torch.float32), "the loss is torch.float32.*keep")
    fails(check, dpo_nll(margin_beta=lambda b, a: a), "beta and alpha are swapped")
    fails(
        check,
        dpo_nll(nll=lambda pc, n: -(pc / n).sum()),
        "NLL term is summed over the batch",
    )
    fails(
        check,
        dpo_nll(nll=lambda pc, n: -(pc / (n - 1)).mean()),
        "divided by chosen_tokens - 1",
    )


# 09 · my_train ------------------------------------------------------------------------


def loop(unpack=False, fixed_step=False):
    """A training loop with one slip: the batch unpacked into train_step, or the step
    index never advanced."""
    import math

    def train(model, optimizer, batches, lr_at, train_step):
        model.train()
        losses = []
        for s, batch in enumerate(batches):
            for g in optimizer.param_groups:
                g["lr"] = lr_at(0 if fixed_step else s)
            loss = train_step(model, optimizer, *batch) if unpack else None
            if not unpack:
                loss = train_step(model, optimizer, batch)
            if not math.isfinite(loss):
                raise ValueError(f"loss {loss} at step {s}")
            losses.append(loss)
        return losses

    return train


def test_training_loop_unpacked_batch_and_step_index_that_never_advanced():
    check = ex.check_training_loop
    assert ex.outcome(check, loop())[0] == "pass"
    fails(check, loop(unpack=True), r"batch as one argument.*not unpacked \(\*batch\)")
    fails(check, loop(fixed_step=True), "lr_at.0. .*step index never advanced")


# 10 · my_sample_min_p -----------------------------------------------------------------


def min_p(keepdim=True, shift=False):
    """Min-p sampling with one slip: the top probability taken without keepdim, or the
    kept probabilities shifted down by the threshold."""

    def sample(logits, min_p, generator=None):
        p = logits.softmax(-1)
        top = p.max(-1, keepdim=True).values if keepdim else p.max(-1).values
        t = min_p * top
        q = (p - t).clamp(min=0) if shift else torch.where(p >= t, p, 0.0)
        return torch.multinomial(q, 1, generator=generator).squeeze(-1)

    return sample


def test_min_p_without_keepdim_and_shifted_by_the_threshold():
    check = ex.check_min_p_sampling
    assert ex.outcome(check, min_p())[0] == "pass"
    fails(check, min_p(keepdim=False), r"keep the dimension, p.max\(-1, keepdim=True\)")
    fails(check, min_p(shift=True), "shifted down by the threshold")


# 09 · my_train_step -------------------------------------------------------------------


def step_loss(loss_of):
    """A training step whose loss is loss_of(logits (B, T, V), tgt_in, tgt_out, pad_id,
    eps)."""

    def step(model, optimizer, src, tgt_in, tgt_out, pad_id, label_smoothing):
        logits = model(src, tgt_in)
        loss = loss_of(logits, tgt_in, tgt_out, pad_id, label_smoothing)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def test_train_step_sum_over_batch_size_smoothing_over_padding_and_tgt_in_mask():
    import torch.nn.functional as F

    check = ex.check_train_step

    def summed_over_b(logits, tgt_in, tgt_out, pad, eps):
        loss = F.cross_entropy(
            logits.flatten(0, 1),
            tgt_out.flatten(),
            ignore_index=pad,
            label_smoothing=eps,
            reduction="sum",
        )
        return loss / logits.size(0)

    def smoothing_over_pad(logits, tgt_in, tgt_out, pad, eps):
        logp, real = logits.log_softmax(-1), tgt_out != pad
        nll = -logp.gather(-1, tgt_out[..., None])[..., 0]
        return (1 - eps) * nll[real].mean() + eps * -logp.mean(-1).mean()

    def mask_from_tgt_in(logits, tgt_in, tgt_out, pad, eps):  # right on course data
        per = F.cross_entropy(
            logits.transpose(1, 2), tgt_out, label_smoothing=eps, reduction="none"
        )
        return per[tgt_in != pad].mean()

    fails(check, step_loss(summed_over_b), "divided by the batch size")
    fails(
        check, step_loss(smoothing_over_pad), "smoothing term was averaged over every"
    )
    assert ex.outcome(check, step_loss(mask_from_tgt_in))[0] == "pass"


# 11 · my_corpus_bleu ------------------------------------------------------------------


def bleu(best_ref=False, at_least=False):
    """Corpus BLEU with one slip: each order's matches clipped to the single reference
    that matches most, or r the shortest reference at least as long as the
    hypothesis."""
    import math
    from collections import Counter

    def grams(tokens, n):
        return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))

    def corpus_bleu(hyps, refs):
        match, total, c, r = [0] * 4, [0] * 4, 0, 0
        for hyp, rs in zip(hyps, refs):
            c += len(hyp)
            longer = [len(x) for x in rs if len(x) >= len(hyp)]
            closest = min((abs(len(x) - len(hyp)), len(x)) for x in rs)[1]
            r += min(longer) if at_least and longer else closest
            for n in range(1, 5):
                got = grams(hyp, n)
                if best_ref:
                    match[n - 1] += max(sum((got & grams(x, n)).values()) for x in rs)
                else:
                    most = Counter()
                    for x in rs:
                        most |= grams(x, n)
                    match[n - 1] += sum((got & most).values())
                total[n - 1] += sum(got.values())
        if min(match) == 0:
            return 0.0
        log_p = sum(math.log(m / t) for m, t in zip(match, total)) / 4
        return 100 * (1.0 if c >= r else math.exp(1 - r / c)) * math.exp(log_p)

    return corpus_bleu


def test_bleu_best_single_reference_and_shortest_reference_not_shorter():
    check = ex.check_corpus_bleu
    assert ex.outcome(check, bleu())[0] == "pass"
    fails(check, bleu(best_ref=True), "clipped to the one reference that matches most")
    fails(check, bleu(at_least=True), "shortest reference at least as long as the hyp")


# 03 · my_apply_rope -------------------------------------------------------------------


def rope_along(axis: int):
    """RoPE with the positions counted along x.size(axis)."""

    def apply_rope(x, base=10000.0):
        C = x.size(-1)
        w = torch.promote_types(x.dtype, torch.float32)  # the angles' dtype
        i = torch.arange(C // 2, dtype=w)
        angle = torch.arange(x.size(axis), dtype=w)[:, None] * base ** (-2 * i / C)
        a, b = x[..., 0::2], x[..., 1::2]
        c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        return torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2)

    return apply_rope


def test_rope_positions_along_the_batch_or_the_channels():
    assert ex.outcome(ex.check_rope, rope_along(1))[0] == "pass"
    fails(ex.check_rope, rope_along(0), r"counted along x.size\(0\), the batch")
    fails(ex.check_rope, rope_along(-1), r"counted along x.size\(-1\), the channels")
