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


def test_16_a_width_floored_before_rounding_up_is_named():
    Right = solution("16").MyGeGLU

    class Wrong(Right):
        def __init__(self, d_model, multiple_of=64):
            super().__init__(d_model, multiple_of)
            d_ff = multiple_of * math.ceil(int(8 * d_model / 3) / multiple_of)
            self.gate = nn.Linear(d_model, d_ff, bias=False)
            self.up = nn.Linear(d_model, d_ff, bias=False)
            self.proj = nn.Linear(d_ff, d_model, bias=False)

    fails(ex.check_geglu, Wrong, r"was floored to 10 .* before rounding up")


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
