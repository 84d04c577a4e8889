"""The twelfth blind review's wrong answers (issue 34). First: a component whose
input is detached computes the right output and the right parameter gradients, so the
checkers now compare the gradient with respect to each input too."""

import math

import torch
import torch.nn.functional as F
from exercise_helpers import fails, passes, solution
from torch import nn

from transformer_lib import exercises as ex

# a detached input: 05, 07, 08, 12, 16 -------------------------------------------------


def detached_mha(which):
    """notebook 05's answer with one of query, key, value detached."""
    Right = solution("05").MyMultiHeadAttention

    class Wrong(Right):
        def forward(self, query, key=None, value=None, mask=None):
            key = query if key is None else key
            value = key if value is None else value
            parts = {"query": query, "key": key, "value": value}
            parts[which] = parts[which].detach()
            return super().forward(**parts, mask=mask)

    return Wrong


def test_05_a_detached_query_key_or_value_is_named():
    for which in ("query", "key", "value"):
        fails(
            ex.check_multi_head_attention,
            detached_mha(which),
            rf"no gradient flows back to its input {which}",
        )


def test_07_a_detached_residual_is_named():
    Right = solution("07").MyEncoderLayer

    class Wrong(Right):
        def forward(self, x, mask=None):
            x = x.detach() + self.self_attn(self.norm1(x), mask=mask)[0]
            return x + self.ff(self.norm2(x))

    fails(ex.check_encoder_layer, Wrong, r"input x is not: is x detached on one")


def test_08_a_detached_residual_or_memory_is_named():
    Right = solution("08").MyDecoderLayer

    class Residual(Right):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = x.detach() + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
            h = self.norm2(x)
            x = x + self.cross_attn(h, memory, memory, mask=memory_mask)[0]
            return x + self.ff(self.norm3(x))

    class Memory(Right):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            return super().forward(x, memory.detach(), tgt_mask, memory_mask)

    fails(ex.check_decoder_layer, Residual, r"input x is not")
    fails(ex.check_decoder_layer, Memory, r"no gradient flows back to its input memory")


def test_12_a_detached_residual_is_named():
    Right = solution("12").MyBlock

    class Wrong(Right):
        def forward(self, x):
            x = x.detach() + self.attn(self.norm1(x))
            h = F.gelu(self.fc(self.norm2(x)), approximate="tanh")
            return x + self.fc_out(h)

    fails(ex.check_gpt_block, Wrong, r"input x is not")


def test_16_a_detached_gate_input_is_named():
    Right = solution("16").MyGeGLU

    class Wrong(Right):
        def forward(self, x):
            return self.proj(F.gelu(self.gate(x.detach())) * self.up(x))

    fails(ex.check_geglu, Wrong, r"input x is not")


def test_the_solutions_still_pass():
    passes(ex.check_multi_head_attention, solution("05").MyMultiHeadAttention)
    passes(ex.check_encoder_layer, solution("07").MyEncoderLayer)
    passes(ex.check_decoder_layer, solution("08").MyDecoderLayer)
    passes(ex.check_gpt_block, solution("12").MyBlock)
    passes(ex.check_geglu, solution("16").MyGeGLU)


# 09 · the training loop ---------------------------------------------------------------


def test_09_a_nan_caught_only_after_the_loop_is_named():
    def late(model, optimizer, batches, lr_at, train_step):
        model.train()
        losses = []
        for s, batch in enumerate(batches):
            for g in optimizer.param_groups:
                g["lr"] = lr_at(s)
            losses.append(train_step(model, optimizer, batch))
        for s, loss in enumerate(losses):
            if not math.isfinite(loss):
                raise ValueError(f"the loss is {loss} at step {s}")
        return losses

    fails(ex.check_training_loop, late, r"caught only after 6 steps")


def test_09_indexing_the_batches_is_named():
    def indexed(model, optimizer, batches, lr_at, train_step):
        model.train()
        losses = []
        for s in range(len(batches)):
            for g in optimizer.param_groups:
                g["lr"] = lr_at(s)
            loss = train_step(model, optimizer, batches[s])
            if not math.isfinite(loss):
                raise ValueError(f"the loss is {loss} at step {s}")
            losses.append(loss)
        return losses

    fails(ex.check_training_loop, indexed, r"batches was indexed or measured")


def test_09_the_solution_passes_with_a_generator():
    passes(ex.check_training_loop, solution("09").my_train)


# 10 · beam search ---------------------------------------------------------------------


def test_10_stopping_when_beam_sequences_finished_is_named():
    def enough(step, beam, max_len, eos):
        alive, done = [((), 0.0)], []
        for _ in range(max_len):
            grown = sorted(
                ((p + (t,), s + lp) for p, s in alive for t, lp in enumerate(step(p))),
                key=lambda c: -c[1],
            )
            alive = []
            for p, s in grown[:beam]:
                (done if p[-1] == eos else alive).append((p, s))
            if not alive or len(done) >= beam:
                break
        tokens, score = max(done or alive, key=lambda c: c[1])
        return list(tokens), float(score)

    fails(
        ex.check_beam_search, enough, r"stopped once 2 sequences, as many as the beam"
    )
    passes(ex.check_beam_search, solution("10").my_beam_search)


# 16 · GeGLU's width -------------------------------------------------------------------


def test_16_a_width_floored_before_rounding_up_passes():
    """LLaMA's own code floors 8 * d_model / 3 before rounding up: with a multiple_of
    that is a multiple of 8 the two rules never differ, and the course's 64 is."""
    Right = solution("16").MyGeGLU

    class Wrong(Right):
        def __init__(self, d_model, multiple_of=64):
            super().__init__(d_model, multiple_of)
            d_ff = multiple_of * math.ceil(int(8 * d_model / 3) / multiple_of)
            self.gate = nn.Linear(d_model, d_ff, bias=False)
            self.up = nn.Linear(d_model, d_ff, bias=False)
            self.proj = nn.Linear(d_ff, d_model, bias=False)

    passes(ex.check_geglu, Wrong)


# 13 · similarity by distance ----------------------------------------------------------


def test_13_a_float32_result_for_a_float64_table_is_named():
    def float32(table):
        unit = F.normalize(table, dim=1)
        cosines = unit @ unit.T
        out = torch.zeros(len(table))
        for k in range(len(table)):
            out[k] = cosines.diagonal(k).mean()
        return out

    fails(ex.check_cosine_by_distance, float32, r"float64 table gave float32")
    passes(ex.check_cosine_by_distance, solution("13").my_cosine_by_distance)


# the thirteenth review ----------------------------------------------------------------


def test_10_a_beam_ranked_by_the_new_tokens_log_prob_is_named():
    def by_token(step, beam, max_len, eos):
        alive, done = [((), 0.0)], []
        for _ in range(max_len):
            grown = sorted(
                (
                    (p + (t,), s + lp, lp)
                    for p, s in alive
                    for t, lp in enumerate(step(p).tolist())
                ),
                key=lambda c: -c[2],  # the new token's log-prob alone
            )
            alive = []
            for p, s, _ in grown[:beam]:
                (done if p[-1] == eos else alive).append((p, s))
            if not alive:
                break
        tokens, score = max(done or alive, key=lambda c: c[1])
        return list(tokens), float(score)

    fails(ex.check_beam_search, by_token, r"ranked by the new token's log-prob alone")


def min_p(top_of=None, zero_then_softmax=False):
    """notebook 10's min-p sampler with the threshold's top probability taken by
    top_of(probs), or the dropped tokens zeroed and a softmax taken again."""

    def sample(logits, min_p, generator):
        probs = logits.softmax(-1)  # (B, n_vocab)
        top = probs.amax(-1, keepdim=True) if top_of is None else top_of(probs)
        keep = probs >= min_p * top
        if zero_then_softmax:
            q = (probs * keep).softmax(-1)
        else:
            q = probs * keep
            q = q / q.sum(-1, keepdim=True)
        return torch.multinomial(q, 1, generator=generator).squeeze(-1)

    return sample


def test_10_min_p_threshold_from_row_0_or_the_batch_is_named():
    fails(ex.check_min_p_sampling, min_p(lambda p: p[:1].amax()), r"from row 0's top")
    fails(ex.check_min_p_sampling, min_p(lambda p: p.max()), r"of the whole batch")
    passes(ex.check_min_p_sampling, min_p())


def test_10_min_p_softmax_of_the_zeroed_probabilities_is_named():
    fails(
        ex.check_min_p_sampling,
        min_p(zero_then_softmax=True),
        r"set to 0 and a softmax taken again",
    )


def test_07_the_feed_forward_residual_from_the_normed_stream_is_named():
    Right = solution("07").MyEncoderLayer

    class Wrong(Right):
        def forward(self, x, mask=None):
            x = x + self.self_attn(self.norm1(x), mask=mask)[0]
            h = self.norm2(x)
            return h + self.ff(h)

    fails(ex.check_encoder_layer, Wrong, r"residual was added to norm2\(h\), not to h")


def test_08_self_and_cross_attention_swapped_is_named():
    Right = solution("08").MyDecoderLayer

    class Wrong(Right):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = x + self.cross_attn(self.norm1(x), mask=tgt_mask)[0]
            h = self.norm2(x)
            x = x + self.self_attn(h, memory, memory, mask=memory_mask)[0]
            return x + self.ff(self.norm3(x))

    fails(ex.check_decoder_layer, Wrong, r"self_attn and cross_attn are swapped")


def test_09_the_rate_set_after_the_step_is_named():
    def after(model, optimizer, batches, lr_at, train_step):
        model.train()
        losses = []
        for s, batch in enumerate(batches):
            loss = train_step(model, optimizer, batch)
            for g in optimizer.param_groups:
                g["lr"] = lr_at(s)
            if not math.isfinite(loss):
                raise ValueError(f"the loss is {loss} at step {s}")
            losses.append(loss)
        return losses

    fails(ex.check_training_loop, after, r"the rate was set after train_step")


def test_04_alibi_masked_after_the_softmax_is_named():
    def after(q, k, v, slopes):
        T = q.size(-2)
        pos = torch.arange(T, dtype=q.dtype)
        bias = -slopes[:, None, None] * (pos[:, None] - pos[None, :])
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + bias
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        weights = torch.softmax(scores, dim=-1).masked_fill(~causal, 0.0)
        return weights @ v, weights

    fails(ex.check_alibi_attention, after, r"masked after the softmax")


def test_12_a_cache_kept_on_the_class_is_named_on_a_rerun():
    import torch as t

    class Shared:
        keys = None
        values = None

        @property
        def length(self):
            return 0 if Shared.keys is None else Shared.keys.size(-2)

        def update(self, k, v):
            if Shared.keys is None:
                Shared.keys, Shared.values = k, v
            else:
                Shared.keys = t.cat([Shared.keys, k], dim=-2)
                Shared.values = t.cat([Shared.values, v], dim=-2)
            return Shared.keys, Shared.values

    Shared().update(t.zeros(2, 3, 5, 8), t.zeros(2, 3, 5, 8))  # an earlier run
    fails(ex.check_kv_cache, Shared, r"is the state kept on the class")


def test_17_the_prompt_masked_one_too_many_or_too_few_is_named():
    Right = solution("17").pack_pairs

    def masking(extra):
        def pack(pairs):
            inputs, targets, mask = Right(pairs)
            targets, start = list(targets), 0
            for ids, n_prompt in pairs:
                n = len(ids) - 1
                y = list(ids[1:])
                k = n_prompt - 1 + extra
                y[:k] = [-100] * k
                targets[start : start + n] = y
                start += n
            return inputs, targets, mask

        return pack

    fails(ex.check_pack_pairs, masking(1), r"one target too many masked")
    fails(ex.check_pack_pairs, masking(-1), r"one target too few masked")


def rope(dtype_of_angles=None, cast=None):
    """notebook 03's RoPE with its angles made in another dtype, or its result cast."""

    def apply(x, base=10000.0):
        B, T, C = x.shape
        dtype = dtype_of_angles or torch.promote_types(x.dtype, torch.float32)
        w = base ** (-2 * torch.arange(C // 2, dtype=dtype) / C)
        angle = torch.arange(T, dtype=dtype)[:, None] * w  # (T, C/2)
        c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).flatten(-2)
        return out if cast is None else out.to(cast)

    return apply


def test_03_rope_in_float32_for_a_float64_input_is_named():
    # angles in float32 for a float64 x are the usual way (LLaMA, the library's own
    # modern.py): accepted since the fifteenth review
    passes(ex.check_rope, rope(dtype_of_angles=torch.float32))
    fails(ex.check_rope, rope(cast=torch.float32), r"float64 x gave a float32 result")
    passes(ex.check_rope, rope())
    passes(ex.check_rope, solution("15").my_apply_rope)
