"""The twelfth blind review's wrong answers (issue 34). First: a component whose
input is detached computes the right output and the right parameter gradients, so the
checkers now compare the gradient with respect to each input too."""

import torch.nn.functional as F
from exercise_helpers import fails, passes, solution

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
