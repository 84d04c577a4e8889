"""The checkers of Part II's build-its (notebooks 07-11): an encoder layer, a decoder
layer and the shifted targets, one training step and the training loop, min-p sampling,
beam search and corpus BLEU. Written by hand."""

from __future__ import annotations

import copy
import math
import numbers
import re
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lib.exercises.framework import (
    ExerciseError,
    checker,
    compare,
    compare_input_grads,
    compare_module,
    first_line,
    is_close,
    jitter,
    load_weights,
    own_state,
    raised,
    tensor_output,
)

# 07 · an encoder layer ----------------------------------------------------------------


def _forward(layer: nn.Module, *args) -> Tensor:
    """layer(*args), with two slips of a layer built on MultiHeadAttention named: its
    (output, weights) pair used as if it were the output, a mask given as key."""
    try:
        return layer(*args)
    except ValueError as e:
        got = re.match(
            r"(key|value) must be \(B, T, d_model=\d+\), got \(([\d, ]*)\)", str(e)
        )
        if got is None or len(got[2].split(",")) == 3:
            raise
        place = ("second", "key") if got[1] == "key" else ("third", "value")
        raise ExerciseError(
            f"{raised(e)}: the mask went in as {place[1]}, the {place[0]} argument "
            "of forward(query, key=None, value=None, mask=None): pass it by name, "
            "self_attn(h, mask=mask), cross_attn(h, memory, memory, mask=mask)"
        ) from None
    except TypeError as e:
        if "'NoneType'" in str(e):
            raise ExerciseError(
                f"your layer raised TypeError ({first_line(e)}): the attention "
                "layers return a pair (output, weights), the weights None here: "
                "[1] is the weights; take the output, [0]"
            ) from None
        if "'tuple'" not in str(e):
            raise
        raise ExerciseError(
            f"your layer raised TypeError ({first_line(e)}): self_attn and "
            "cross_attn return a pair (output, weights); take the output, [0]"
        ) from None


@contextmanager
def _heads(ref: nn.Module, n: int):
    """Every MultiHeadAttention of `ref` split into n heads while inside (its
    projections unchanged: the same weights, cut into heads of another width)."""
    attns = [m for m in ref.modules() if hasattr(m, "n_heads") and hasattr(m, "q_proj")]
    old = [m.n_heads for m in attns]
    for m in attns:
        m.n_heads = n
    try:
        yield
    finally:
        for m, n_old in zip(attns, old):
            m.n_heads = n_old


def _name_heads(got: Tensor, ref: nn.Module, run: Callable) -> None:
    """Raise ExerciseError if `got` (of a layer built with d_model 16, n_heads 2) is
    run() with the attention split into 1 head of 16, or into 8 heads of 2 (n_heads
    and d_head swapped)."""
    for n, hint in (
        (
            1,
            "the attention has 1 head of width 16: MultiHeadAttention(d_model, "
            "n_heads) with n_heads as given, here 2 heads of 8",
        ),
        (
            8,
            "the attention has 8 heads of width 2: n_heads and d_head are swapped, "
            "MultiHeadAttention(d_model, d_model // n_heads); pass n_heads itself, "
            "MultiHeadAttention(d_model, n_heads), here 2 heads of 8",
        ),
    ):
        with _heads(ref, n):
            if is_close(got, run()):
                raise ExerciseError(hint)


def _compare_layer(call: str, got, want: Tensor, mine: nn.Module, ref: nn.Module):
    """compare_module, with a LayerNorm of another eps than the reference's named
    (its output is close, its gradients are not)."""
    try:
        compare_module(call, got, want, mine, ref)
    except ExerciseError:
        _name_eps(mine, ref)
        raise


def _name_eps(mine: nn.Module, ref: nn.Module) -> None:
    """Raise ExerciseError if a LayerNorm of `mine` has an eps no LayerNorm of `ref`
    has."""
    eps = {m.eps for m in ref.modules() if isinstance(m, nn.LayerNorm)}
    for key, m in mine.named_modules():
        if isinstance(m, nn.LayerNorm) and m.eps not in eps:
            raise ExerciseError(
                f"{key} is nn.LayerNorm(d_model, eps={m.eps:g}): keep the default "
                f"eps, {min(eps):g}, as the course's layer does (the gradients "
                "differ)"
            ) from None


def _load_layer(mine: nn.Module, ref: nn.Module, name: str) -> None:
    """load_weights, with a feed-forward network of another hidden width than d_ff
    named."""
    try:
        load_weights(mine, ref.state_dict(), name)
    except ExerciseError as e:
        ff = getattr(mine, "ff", None)
        parts = ff.modules() if isinstance(ff, nn.Module) else ()
        widths = [m.out_features for m in parts if isinstance(m, nn.Linear)]
        if "ff." in str(e) and widths and widths[0] != ref.ff.linear1.out_features:
            raise ExerciseError(
                f"the feed-forward network's hidden width is {widths[0]}, not d_ff="
                f"{ref.ff.linear1.out_features}: build it with the d_ff the "
                "constructor is given, PositionwiseFeedForward(d_model, d_ff)"
            ) from None
        raise


def _no_dropout(mine: nn.Module, run: Callable, got: Tensor) -> None:
    """In training mode the layer gives what it gives in eval mode: the docstring's
    parts have no dropout."""
    mine.train()
    with torch.no_grad():
        again = tensor_output(run(), type(mine).__name__)
    mine.eval()
    if not is_close(again, got.detach()):
        drops = [
            k for k, m in mine.named_modules() if isinstance(m, nn.Dropout) and m.p
        ]
        raise ExerciseError(
            "in training mode the output changed: dropout"
            + (f" ({', '.join(drops)})" if drops else "")
            + "? The docstring builds its parts with no dropout argument (0 by "
            "default): build them as it says, and add no nn.Dropout"
        )


@checker("encoder layer")
def check_encoder_layer(cls: type) -> str:
    """cls(d_model, n_heads, d_ff) with self_attn, ff, norm1, norm2; forward(x,
    mask=None) -> (B, T, C), pre-norm."""
    from transformer_lib.encoder import EncoderLayer

    torch.manual_seed(0)
    ref = jitter(EncoderLayer(16, 2, 32, dropout=0.0, norm_first=True)).eval()
    mine = cls(16, 2, 32)  # 2 heads of 8: sqrt(n_heads) and sqrt(d_head) differ
    _load_layer(mine, ref, "MyEncoderLayer")
    mine.double().eval()
    x = torch.randn(2, 5, 16).double()
    mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]], dtype=torch.bool)[:, None, None]
    got = tensor_output(_forward(mine, x, mask), "MyEncoderLayer")
    want = ref(x, mask)
    if not is_close(got, want):
        with torch.no_grad():
            ref.norm_first = False
            post = ref(x, mask)
            ref.norm_first = True
            n = ref.norm1(x)
            a = ref.self_attn(n, mask=mask)[0]  # the attention's write
            attended = x + a
            shared = x + ref.self_attn(ref.norm2(x), mask=mask)[0]
            hints = (
                (
                    post,
                    "this is post-norm, LN(x + sublayer(x)); build pre-norm, "
                    "x + sublayer(LN(x))",
                ),
                (ref(x), lambda: _mask_not_passed(mine, ref, x, mask)),
                (
                    a + ref.ff(ref.norm2(a)),
                    "the attention output is not added to its input (the residual)",
                ),
                (
                    ref.ff(ref.norm2(attended)),
                    "the feed-forward output is not added to its input (the residual)",
                ),
                (
                    ref.norm2(attended) + ref.ff(ref.norm2(attended)),
                    "the feed-forward's residual was added to norm2(h), not to h: "
                    "h + ff(norm2(h)); the norm is on the sublayer's input only",
                ),
                (
                    attended + ref.ff(ref.norm1(attended)),
                    "norm1 is used twice: the "
                    "feed-forward sublayer has its own LayerNorm, norm2",
                ),
                (
                    n + a + ref.ff(ref.norm2(n + a)),
                    "the residual starts from norm1(x), not x: "
                    "x + self_attn(norm1(x)); the LayerNorm is on the sublayer's input "
                    "only",
                ),
                (
                    attended + ref.ff(attended),
                    "the feed-forward sublayer's input was not normalised: "
                    "h + ff(norm2(h))",
                ),
                (
                    attended + torch.relu(ref.ff(ref.norm2(attended))),
                    "a ReLU was applied to the feed-forward's output: the network "
                    "has its ReLU inside, between its two layers; add ff(norm2(h)) "
                    "as it comes back",
                ),
                (
                    x + ref.ff(ref.norm2(attended)),
                    "the feed-forward's residual adds the layer's input x, not h = x "
                    "+ self_attn(norm1(x)): h + ff(norm2(h)), so the attention's "
                    "write stays in the stream",
                ),
                (
                    ref.norm2(
                        ref.norm1(attended) + ref.ff(ref.norm2(ref.norm1(attended)))
                    ),
                    "the sums were normalised too (norm(x + sublayer(norm(x))), a "
                    "'sandwich'): pre-norm normalises only each sublayer's input, "
                    "x + sublayer(norm(x))",
                ),
                (
                    (x + ref.norm2(a)) + ref.ff(x + ref.norm2(a)),
                    "norm2 was applied to the attention's output, and the "
                    "feed-forward read h unnormalised: norm2 belongs at the "
                    "feed-forward's input, h + ff(norm2(h))",
                ),
                (
                    shared + ref.ff(ref.norm2(shared)),
                    "norm1 and norm2 are one LayerNorm (self.norm2 = self.norm1?): "
                    "each sublayer has its own, with its own weights",
                ),
            )
            for variant, hint in hints + _encoder_hints(ref, x, mask):
                if is_close(got, variant):
                    raise ExerciseError(hint() if callable(hint) else hint)
            _scaled_branch(got, ref, x, mask)
            _name_heads(got, ref, lambda: ref(x, mask))
    _compare_layer("MyEncoderLayer(x, mask)", got, want, mine, ref)
    _no_dropout(mine, lambda: _forward(mine, x, mask), got)
    compare_input_grads(
        "MyEncoderLayer", lambda x: _forward(mine, x, mask), lambda x: ref(x, mask), x=x
    )
    own_state(
        "MyEncoderLayer",
        mine.eval(),
        lambda: cls(16, 4, 32),
        lambda: _forward(mine, x, mask),
    )
    return "equals EncoderLayer(norm_first=True) on (2, 5, 16) with padding; gradients"


def _scaled_branch(got, ref, x: Tensor, mask: Tensor) -> None:
    """An encoder layer right but for one sublayer's output scaled by a constant c
    before the residual adds it: x + c * sublayer(norm(x))."""
    if not (isinstance(got, Tensor) and got.shape == x.shape):
        return
    a = ref.self_attn(ref.norm1(x), mask=mask)[0]
    f = ref.ff(ref.norm2(x + a))
    c = (((got - x - a) * f).sum() / (f * f).sum()).item()  # got = x + a + c * f?
    wrong = [(c, "feed-forward", "h", x + a + c * f)]
    for s in (0.5, 2.0, 2**-0.5):  # the attention's output scaled, the rest as usual
        h = x + s * a
        wrong.append((s, "attention", "x", h + ref.ff(ref.norm2(h))))
    for c, which, base, output in wrong:
        if abs(c - 1) > 1e-6 and is_close(got, output):
            raise ExerciseError(
                f"the {which} sublayer's output was scaled by {c:.4g} before the "
                f"residual added it: add it whole, {base} + sublayer(norm({base}))"
            )


def _mask_not_passed(mine: nn.Module, ref: nn.Module, x: Tensor, mask: Tensor) -> str:
    """What an encoder layer whose output is the unmasked one did with the mask: the
    test's first row pads nothing, so its mask[:1] used for the batch is no mask at
    all; with the rows swapped it is seen."""
    swapped = mask.flip(0)  # row 0 padded now
    try:
        got = tensor_output(mine(x, swapped), "MyEncoderLayer")
    except (RuntimeError, ValueError):
        got = None
    if got is not None and is_close(got, ref(x, swapped[:1])):
        return (
            "the first sentence's mask (mask[:1], or mask[0]) was used for the whole "
            "batch: each sentence has its own padding; pass the mask (B, 1, 1, T) "
            "as given"
        )
    return "the mask was not passed to self-attention"


def _encoder_hints(ref, x: Tensor, mask: Tensor) -> tuple:
    """More wrong encoder layers, from the reference's own parts: (output, hint)."""
    n = ref.norm1(x)
    swapped = x + ref.self_attn(ref.norm2(x), mask=mask)[0]
    raw_kv = x + ref.self_attn(n, x, x, mask=mask)[0]
    normed = ref.norm2(n + ref.self_attn(n, mask=mask)[0])
    inverted = x + ref.self_attn(n, mask=~mask)[0]
    turned = x + ref.self_attn(n, mask=mask.transpose(-1, -2))[0]  # (B, 1, T, 1)
    want = ref(x, mask)
    ff_first = x + ref.ff(ref.norm2(x))  # the sublayers in the other order
    ff_first_by_place = x + ref.ff(ref.norm1(x))
    a = ref.self_attn(n, mask=mask)[0]
    return (
        (
            x + a + ref.ff(ref.norm2(a)),
            "the feed-forward sublayer read the attention's output, not the residual "
            "stream: h = x + self_attn(norm1(x)), then h + ff(norm2(h))",
        ),
        *(
            (
                norm(want),
                "a LayerNorm was applied to the layer's output: in pre-norm the "
                "output is the residual stream, h + ff(norm2(h)), left unnormalised",
            )
            for norm in (ref.norm1, ref.norm2, lambda t: F.layer_norm(t, (t.size(-1),)))
        ),
        (
            ff_first + ref.self_attn(ref.norm1(ff_first), mask=mask)[0],
            "the feed-forward sublayer ran first: self-attention comes first, then "
            "the feed-forward sublayer reads its result",
        ),
        (
            ff_first_by_place
            + ref.self_attn(ref.norm2(ff_first_by_place), mask=mask)[0],
            "the feed-forward sublayer ran first: self-attention comes first, then "
            "the feed-forward sublayer reads its result",
        ),
        (
            inverted + ref.ff(ref.norm2(inverted)),
            "the mask is inverted: True means 'may attend', so pass the mask as "
            "given, not ~mask",
        ),
        (
            turned + ref.ff(ref.norm2(turned)),
            "the mask was transposed, (B, 1, T, 1): it hid the padded queries' rows, "
            "not the padded keys; the padding mask (B, 1, 1, T) hides keys, pass it "
            "as given",
        ),
        (
            x + ref.self_attn(n, mask=mask)[0] + ref.ff(ref.norm2(x)),
            "the two sublayers run in parallel on x: the feed-forward one reads the "
            "attention's result, h = x + self_attn(norm1(x)), then h + ff(norm2(h))",
        ),
        (
            swapped + ref.ff(ref.norm1(swapped)),
            "norm1 and norm2 are swapped: norm1 goes before self-attention, norm2 "
            "before the feed-forward sublayer",
        ),
        (
            raw_kv + ref.ff(ref.norm2(raw_kv)),
            "the keys and values came from x, unnormalised: self-attention reads "
            "norm1(x) as query, keys and values, self_attn(norm1(x), mask=mask)",
        ),
        (
            normed + ref.ff(normed),
            "each residual starts from the normalised input: x + sublayer(norm(x)), "
            "the LayerNorm on the sublayer's input only",
        ),
    )


# 08 · a decoder layer, and the shifted targets ----------------------------------------


@checker("decoder layer")
def check_decoder_layer(cls: type) -> str:
    """cls(d_model, n_heads, d_ff) with self_attn, cross_attn, ff, norm1..3;
    forward(x, memory, tgt_mask=None, memory_mask=None) -> (B, T, C), pre-norm."""
    from transformer_lib.seq2seq import DecoderLayer

    torch.manual_seed(0)
    ref = jitter(DecoderLayer(16, 2, 32, dropout=0.0, norm_first=True)).eval()
    mine = cls(16, 2, 32)  # 2 heads of 8: n_heads and d_head differ
    _load_layer(mine, ref, "MyDecoderLayer")
    mine.double().eval()
    x, mem = torch.randn(2, 5, 16).double(), torch.randn(2, 7, 16).double()
    tgt_mask = torch.ones(5, 5, dtype=torch.bool).tril()
    mem_mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3], dtype=torch.bool)
    mem_mask = mem_mask[:, None, None]  # (B, 1, 1, T_src)
    try:
        got = tensor_output(
            _forward(mine, x, mem, tgt_mask, mem_mask), "MyDecoderLayer"
        )
    except ValueError as e:
        if "same length" in str(e):
            raise ExerciseError(
                f"ValueError ({first_line(e)}): cross-attention's keys and "
                "values are both memory: cross_attn(norm2(x), memory, memory, "
                "memory_mask)"
            ) from None
        if "does not broadcast" not in str(e):
            raise
        raise ExerciseError(_decoder_mask_error(mine, ref, x, e)) from None
    want = ref(x, mem, tgt_mask, mem_mask)
    if not is_close(got, want):
        _shared_parts(mine, ("norm1", "norm2", "norm3"), ("self_attn", "cross_attn"))
        with torch.no_grad():

            def sa(h):
                return ref.self_attn(ref.norm1(h), mask=tgt_mask)[0]

            def ca(h, kv=mem, m=mem_mask):
                n = ref.norm2(h)
                return ref.cross_attn(n, n if kv is None else kv, mask=m)[0]

            def ff(h):
                return h + ref.ff(ref.norm3(h))

            h = x + sa(x)
            ref.norm_first = False
            post = ref(x, mem, tgt_mask, mem_mask)
            ref.norm_first = True
            hints = (
                (
                    post,
                    "this is post-norm, LN(x + sublayer(x)); build pre-norm, "
                    "x + sublayer(LN(x))",
                ),
                (
                    ref(x, mem, None, mem_mask),
                    "self-attention ignored tgt_mask: position t saw later targets",
                ),
                (
                    ref(x, mem, tgt_mask, None),
                    "cross-attention ignored memory_mask: "
                    "padded source positions were attended",
                ),
                (
                    ff(h + ca(h, None, tgt_mask)),
                    "cross-attention read x: its keys and "
                    "values come from memory, the encoder's output",
                ),
                (
                    ff(h + ca(h, None, None)),
                    "cross-attention read x, with no mask: its keys and values "
                    "come from memory, the encoder's output, masked by memory_mask",
                ),
            )
            h3 = h + ca(h)
            swapped = x + ref.cross_attn(ref.norm1(x), mask=tgt_mask)[0]
            swapped = (
                swapped + ref.self_attn(ref.norm2(swapped), mem, mem, mask=mem_mask)[0]
            )
            hints += (
                (
                    ff(swapped),
                    "self_attn and cross_attn are swapped: self_attn reads "
                    "norm1(x) with tgt_mask, cross_attn reads memory with memory_mask",
                ),
                (ff(sa(x) + ca(sa(x))), "self-attention's output is not added to x"),
                (ff(ca(h)), "cross-attention's output is not added to its input"),
                (
                    ref.ff(ref.norm3(h3)),
                    "the feed-forward output is not added to its input (the residual)",
                ),
                (
                    ff(h + ca(h, ref.norm2(mem))),
                    "memory went through norm2 too: norm2 normalises x only; the keys "
                    "and values are memory as given",
                ),
                (
                    ff(h + ref.cross_attn(ref.norm2(x), mem, mask=mem_mask)[0]),
                    "cross-attention read norm2 of the layer's input x, from before "
                    "self-attention's residual: it reads norm2(h), h = x + "
                    "self_attn(norm1(x))",
                ),
                (
                    ff(ref.norm2(h) + ca(h)),
                    "cross-attention's residual starts from norm2(h), the normalised "
                    "input: h + cross_attn(norm2(h), memory, memory, memory_mask), "
                    "the LayerNorm on the sublayer's input only",
                ),
                (
                    _norms_swapped(ref, h, mem, mem_mask),
                    "norm2 and norm3 are swapped: norm2 goes before cross-attention, "
                    "norm3 before the feed-forward network",
                ),
            )
            raw = x + ref.self_attn(ref.norm1(x), x, x, mask=tgt_mask)[0]
            hints += _decoder_hints(ref, x, mem, tgt_mask, mem_mask)
            hints += (
                (
                    ff(x + ca(h)),
                    "cross-attention's residual starts from the layer's input x, not "
                    "from h = x + self_attn(norm1(x)): h + cross_attn(norm2(h), "
                    "memory, memory, memory_mask)",
                ),
                (
                    ff(raw + ca(raw)),
                    "self-attention's keys and values came from x, unnormalised: it "
                    "reads norm1(x) as query, keys and values, "
                    "self_attn(norm1(x), mask=tgt_mask)",
                ),
            )
            for variant, hint in hints:
                if is_close(got, variant):
                    raise ExerciseError(hint)
            h2 = x + ca(x)
            h2 = h2 + ref.self_attn(ref.norm1(h2), mask=tgt_mask)[0]
            n1 = ref.norm1(x)  # cross-attention first, with the first sublayer's norm
            h4 = x + ref.cross_attn(n1, mem, mem, mask=mem_mask)[0]
            h4 = h4 + ref.self_attn(ref.norm2(h4), mask=tgt_mask)[0]
            if is_close(got, ff(h2)) or is_close(got, ff(h4)):
                raise ExerciseError(
                    "cross-attention came first: self-attention, then cross-attention,"
                    " then the feed-forward network"
                )
            h5 = x + ref.self_attn(ref.norm2(x), mask=tgt_mask)[0]
            h5 = h5 + ref.cross_attn(ref.norm1(h5), mem, mem, mask=mem_mask)[0]
            if is_close(got, ff(h5)):
                raise ExerciseError(
                    "norm1 and norm2 are swapped: norm1 goes before self-attention, "
                    "norm2 before cross-attention"
                )
            h6 = x + ref.self_attn(ref.norm1(x), mask=~tgt_mask)[0]
            if is_close(got, ff(h6 + ca(h6, mem, ~mem_mask)), equal_nan=True):
                raise ExerciseError(
                    "both masks are inverted (~mask, PyTorch's own convention, where "
                    "True means 'hide'): here True means 'may attend', so pass "
                    "tgt_mask and memory_mask as given"
                )
            if is_close(got, ff(h6 + ca(h6)), equal_nan=True):
                raise ExerciseError(
                    "tgt_mask is inverted: True means 'may attend', so pass it as "
                    "given, not ~tgt_mask"
                )
            _name_heads(got, ref, lambda: ref(x, mem, tgt_mask, mem_mask))
    _compare_layer(
        "MyDecoderLayer(x, memory, tgt_mask, memory_mask)", got, want, mine, ref
    )
    _no_dropout(mine, lambda: _forward(mine, x, mem, tgt_mask, mem_mask), got)
    compare_input_grads(
        "MyDecoderLayer",
        lambda x, memory: _forward(mine, x, memory, tgt_mask, mem_mask),
        lambda x, memory: ref(x, memory, tgt_mask, mem_mask),
        x=x,
        memory=mem,
    )
    _no_memory_mask(mine, ref, x, mem, tgt_mask)
    _given_tgt_mask(mine, ref, x, mem, mem_mask)
    return (
        "equals DecoderLayer(norm_first=True): x (2, 5, 16), memory (2, 7, 16), "
        "causal, banded and padding masks; gradients"
    )


def _given_tgt_mask(mine, ref, x: Tensor, mem: Tensor, mem_mask: Tensor) -> None:
    """Another target mask than the plain triangle (a band: each position sees itself
    and the one before): the layer must use the mask it is given, not one it builds."""
    band = torch.ones(5, 5, dtype=torch.bool).tril().triu(-1)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.no_grad():
        got = tensor_output(mine(x, mem, band, mem_mask), "MyDecoderLayer")
        if is_close(got, ref(x, mem, band, mem_mask)):
            return
        if is_close(got, ref(x, mem, causal, mem_mask)):
            raise ExerciseError(
                "self-attention did not use the tgt_mask it was given: with a banded "
                "tgt_mask (each position sees itself and the one before) it attended "
                "with the plain causal mask; pass the mask you are given, "
                "self_attn(norm1(x), mask=tgt_mask)"
            )
        compare(
            "MyDecoderLayer with a banded tgt_mask", got, ref(x, mem, band, mem_mask)
        )


def _shared_parts(mine: nn.Module, *groups: tuple[str, ...]) -> None:
    """Raise ExerciseError if two parts of a group are one module (self.norm3 =
    self.norm2): each sublayer has its own, with its own weights."""
    for group in groups:
        parts = [(name, getattr(mine, name, None)) for name in group]
        for i, (a, one) in enumerate(parts):
            for b, other in parts[i + 1 :]:
                if isinstance(one, nn.Module) and one is other:
                    raise ExerciseError(
                        f"{a} and {b} are one module (self.{b} = self.{a}?): each "
                        "sublayer has its own, with its own weights; build "
                        f"{b} as a module of its own"
                    )


def _decoder_hints(ref, x: Tensor, mem: Tensor, tgt_mask: Tensor, mem_mask: Tensor):
    """More wrong decoder layers, from the reference's own parts: (output, hint)."""
    h = x + ref.self_attn(ref.norm1(x), mask=tgt_mask)[0]
    n = ref.norm2(h)
    h3 = h + ref.cross_attn(n, mem, mem, mask=mem_mask)[0]
    want = h3 + ref.ff(ref.norm3(h3))
    turned = x + ref.self_attn(ref.norm1(x), mask=tgt_mask.transpose(-1, -2))[0]
    turned = turned + ref.cross_attn(ref.norm2(turned), mem, mem, mask=mem_mask)[0]
    keys_only = h + ref.cross_attn(n, ref.norm2(mem), mem, mask=mem_mask)[0]
    values_only = h + ref.cross_attn(n, mem, ref.norm2(mem), mask=mem_mask)[0]
    n3 = ref.norm3(h3)
    # cross-attention post-norm, the other two pre-norm; its query h or norm2(h)
    posts = [
        ref.norm2(h + ref.cross_attn(q, mem, mem, mask=mem_mask)[0]) for q in (h, n)
    ]
    return (
        (
            n3 + ref.ff(n3),
            "the feed-forward residual starts from norm3(h2), the normalised stream: "
            "add ff(norm3(h2)) to h2 itself, h2 + ff(norm3(h2))",
        ),
        (
            _normed_residuals(ref, x, mem, tgt_mask, mem_mask),
            "each residual starts from the normalised input: x + sublayer(norm(x)), "
            "the LayerNorm on the sublayer's input only",
        ),
        *(
            (
                _ff_before_cross(ref, h, mem, mem_mask, norms),
                "the feed-forward network ran before cross-attention: self-attention,"
                " then cross-attention, then the feed-forward network",
            )
            for norms in ((ref.norm2, ref.norm3), (ref.norm3, ref.norm2))
        ),
        *(
            (
                post + ref.ff(ref.norm3(post)),
                "the cross-attention sublayer is post-norm, norm2(h + cross_attn(...)),"
                " the other two pre-norm: make it pre-norm too, h + "
                "cross_attn(norm2(h), memory, memory, memory_mask)",
            )
            for post in posts
        ),
        *(
            (
                h3 + ref.ff(ref.norm3(early)),
                f"the feed-forward sublayer read norm3({name}), from before "
                "cross-attention: it reads cross-attention's result, h2 = h + "
                "cross_attn(norm2(h), memory, memory, memory_mask), then h2 + "
                "ff(norm3(h2))",
            )
            for early, name in ((h, "h"), (x, "x"))
        ),
        *(
            (
                norm(want),
                "a LayerNorm was applied to the layer's output: in pre-norm the "
                "output is the residual stream, h + ff(norm3(h)), left unnormalised",
            )
            for norm in (
                ref.norm1,
                ref.norm2,
                ref.norm3,
                lambda t: F.layer_norm(t, (t.size(-1),)),
            )
        ),
        *(
            (
                wrong + ref.ff(ref.norm3(wrong)),
                f"cross-attention's {which} were norm2(memory): norm2 normalises the "
                "queries' input only; keys and values are both memory as given, "
                "cross_attn(norm2(h), memory, memory, memory_mask)",
            )
            for wrong, which in ((keys_only, "keys"), (values_only, "values"))
        ),
        (
            turned + ref.ff(ref.norm3(turned)),
            "self-attention's mask was transposed (triu(): position t saw itself and "
            "the later targets): use tgt_mask as given, True where a position may "
            "attend, the lower triangle (tril())",
        ),
    )


def _normed_residuals(ref, x: Tensor, mem: Tensor, tgt_mask: Tensor, mem_mask):
    """A decoder layer whose every residual starts from the normalised input,
    n + sublayer(n) with n = norm(x)."""
    n = ref.norm1(x)
    h = n + ref.self_attn(n, mask=tgt_mask)[0]
    n = ref.norm2(h)
    h = n + ref.cross_attn(n, mem, mem, mask=mem_mask)[0]
    n = ref.norm3(h)
    return n + ref.ff(n)


def _ff_before_cross(ref, h: Tensor, mem: Tensor, mem_mask: Tensor, norms) -> Tensor:
    """The layer's output after self-attention gave h, with the feed-forward sublayer
    before cross-attention; `norms` are the (cross-attention, feed-forward) norms."""
    cross_norm, ff_norm = norms
    h = h + ref.ff(ff_norm(h))
    return h + ref.cross_attn(cross_norm(h), mem, mem, mask=mem_mask)[0]


def _no_memory_mask(mine, ref, x: Tensor, mem: Tensor, tgt_mask: Tensor) -> None:
    """With memory_mask=None cross-attention attends to all of memory (7 long, x 5):
    tgt_mask is not a stand-in for it."""
    hint = (
        "with memory_mask=None, cross-attention must attend to all of memory: None "
        "means no mask there; tgt_mask belongs to self-attention only"
    )
    with torch.no_grad():
        try:
            got = tensor_output(mine(x, mem, tgt_mask, None), "MyDecoderLayer")
        except (ValueError, RuntimeError) as e:
            raise ExerciseError(
                f"MyDecoderLayer(x, memory, tgt_mask, None) raised "
                f"{type(e).__name__} ({first_line(e)}): {hint}"
            ) from None
        if not is_close(got, ref(x, mem, tgt_mask, None)):
            raise ExerciseError(f"MyDecoderLayer(x, memory, tgt_mask, None): {hint}")


def _norms_swapped(ref, h: Tensor, mem: Tensor, mem_mask: Tensor) -> Tensor:
    """The layer's output after self-attention gave h, with norm3 before cross-attention
    and norm2 before the feed-forward network."""
    h = h + ref.cross_attn(ref.norm3(h), mem, mem, mask=mem_mask)[0]
    return h + ref.ff(ref.norm2(h))


def _decoder_mask_error(mine, ref, x: Tensor, error: ValueError) -> str:
    """What a decoder layer that raised `error` (a mask of the wrong shape for its
    scores, with memory 7 long and x 5) got wrong, found again with a memory as long as
    x, where every mask fits every attention."""
    raised = f"ValueError ({first_line(error)})"
    mem = torch.randn(2, 5, 16, dtype=torch.float64)
    pad = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]], dtype=torch.bool)[:, None, None]
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.no_grad():
        try:
            got = tensor_output(mine(x, mem, causal, pad), "MyDecoderLayer")
        except ValueError:
            got = None
        h = x + ref.self_attn(ref.norm1(x), mask=causal)[0]
        n = ref.norm2(h)
        swapped = x + ref.self_attn(ref.norm1(x), mask=pad)[0]
        swapped = swapped + ref.cross_attn(ref.norm2(swapped), mem, mem, mask=causal)[0]
        for wrong, hint in (
            (
                h + ref.cross_attn(n, n, n, mask=pad)[0],
                "cross-attention's keys and values came from x: they come from "
                "memory, cross_attn(norm2(x), memory, memory, memory_mask)",
            ),
            (
                h + ref.cross_attn(mem, n, n, mask=pad)[0],
                "cross-attention's query came from memory: the query is norm2(x), the "
                "keys and values memory",
            ),
            (
                swapped,
                "the masks are swapped: tgt_mask (T, T) goes to self-attention, "
                "memory_mask (B, 1, 1, T_src) to cross-attention",
            ),
        ):
            if got is not None and is_close(got, wrong + ref.ff(ref.norm3(wrong))):
                return f"{raised}: {hint}"
    return (
        f"{raised}: self-attention takes x and tgt_mask (T, T); cross-attention takes "
        "norm2(x) as the query, memory as keys and values, and memory_mask "
        "(B, 1, 1, T_src)"
    )


@checker("shift targets")
def check_shift_targets(fn: Callable) -> str:
    """fn(seqs, bos, eos, pad) -> tgt_in (B, T), tgt_out (B, T): <bos> y and y <eos>,
    padded with pad."""
    seqs, bos, eos, pad = [[5, 6, 7], [8], [9, 10]], 1, 2, 3
    want_in, want_out = _shifted(seqs, bos, eos, pad)
    given = copy.deepcopy(seqs)  # the caller's lists, which fn must leave as they are
    try:
        got = fn(given, bos, eos, pad)
    except ValueError as e:
        if "expected sequence of length" not in str(e):
            raise
        raise ExerciseError(
            f"ValueError ({e}): the rows are of unequal lengths: <bos> (in tgt_in) "
            "and <eos> (in tgt_out) make each row one longer than its sequence, so "
            "pad every row to T = the longest length + 1"
        ) from None
    if not (isinstance(got, tuple) and len(got) == 2):
        raise ExerciseError("return a pair (tgt_in, tgt_out)")
    if given != seqs:
        raise ExerciseError(
            f"the caller's sequences changed, {seqs} became {given}: build new rows "
            "([bos] + y, y + [eos]) instead of appending to the lists given"
        )
    if all(isinstance(g, Tensor) for g in got):
        _shift_named(got, seqs, bos, eos, pad)
    if is_close(got[0], want_out) and is_close(got[1], want_in):
        raise ExerciseError(
            "tgt_in and tgt_out are swapped: the decoder reads <bos> y, and learns "
            "to predict y <eos>"
        )
    out = got[1]
    if isinstance(out, Tensor) and out.shape == want_out.shape:
        stray = ((out == bos) & (want_out != bos)).nonzero()
        if len(stray):
            b, t = stray[0].tolist()
            raise ExerciseError(
                f"tgt_out[{b}, {t}] is <bos> ({bos}), expected "
                f"{want_out[b, t].item()}: <bos> belongs to tgt_in only (a roll "
                "wraps it round to the end); build tgt_out as y + [eos], padded"
            )
    for name, g, w in (("tgt_in", got[0], want_in), ("tgt_out", got[1], want_out)):
        if isinstance(g, Tensor) and g.dim() == 2 and is_close(g.T, w):
            raise ExerciseError(
                f"{name} is {tuple(g.shape)}, (T, B), the transpose of the (B, T) "
                "expected: pad_sequence stacks along dim 0 unless given "
                "batch_first=True"
            )
    for name, g in (("tgt_in", got[0]), ("tgt_out", got[1])):
        if isinstance(g, Tensor) and tuple(g.shape) == (3, 3):
            raise ExerciseError(
                f"{name} has shape (3, 3), expected (3, 4): <bos> (in tgt_in) and "
                "<eos> (in tgt_out) make each row one longer than its sequence, so T "
                "is the longest length + 1"
            )
    _shift_order(got, want_in, want_out)
    with_eos = [[bos, *y, eos] + [pad] * (4 - len(y)) for y in seqs]  # (3, 5)
    if any(is_close(got[0], torch.tensor(with_eos)[:, :n]) for n in (4, 5)):
        raise ExerciseError(
            f"tgt_in holds <eos> ({eos}) after the sequence: it is <bos> y, with no "
            "<eos>; only tgt_out, y <eos>, ends with it"
        )
    if is_close(got[0], want_in) and isinstance(got[1], Tensor):
        for t, row in enumerate(got[1].tolist()):
            if row != want_out[t].tolist() and sorted(row) == sorted(want_out[t]):
                raise ExerciseError(
                    f"tgt_out row {t} is {row}, expected {want_out[t].tolist()}: "
                    "<eos> goes right after the sequence, the padding after <eos>"
                )
    for name, g, w in (("tgt_in", got[0], want_in), ("tgt_out", got[1], want_out)):
        left = torch.stack([torch.cat([r[r == pad], r[r != pad]]) for r in w])
        if is_close(g, left):
            raise ExerciseError(
                f"{name} is padded on the left ({g[1].tolist()}): put the padding "
                f"after the sequence, {w[1].tolist()}, so position t is token t of "
                "every row"
            )
    for name, g, w in (("tgt_in", got[0], want_in), ("tgt_out", got[1], want_out)):
        if isinstance(g, Tensor) and g.shape == w.shape and (g[w == pad] == eos).any():
            raise ExerciseError(
                f"{name} is padded with eos ({eos}): pad with pad ({pad})"
            )
    compare("tgt_in", got[0], want_in)
    compare("tgt_out", got[1], want_out)
    for name, g in (("tgt_in", got[0]), ("tgt_out", got[1])):
        if g.dtype != torch.long:
            raise ExerciseError(
                f"{name} is {g.dtype}, expected torch.long (int64): embeddings and "
                "cross_entropy take int64 ids; torch.tensor(rows) gives it"
            )
    _shift_longest_later(fn, bos, eos, pad)
    return (
        f"3 sequences of lengths 3, 1, 2, then 1, 3, 2 -> (3, 4) inputs and targets, "
        f"pad {pad}"
    )


def _shift_order(got: tuple, want_in: Tensor, want_out: Tensor) -> None:
    """Name rows returned in another order than the sequences (sorted by length)."""
    for name, g, w in (("tgt_in", got[0], want_in), ("tgt_out", got[1], want_out)):
        if not (isinstance(g, Tensor) and g.shape == w.shape) or is_close(g, w):
            continue
        rows, wanted = g.tolist(), w.tolist()
        if sorted(rows) == sorted(wanted):
            raise ExerciseError(
                f"{name}'s rows are in another order ({rows}, expected {wanted}): "
                "keep the batch order, row i is sequence i (its translation's source "
                "is row i of the batch)"
            )


def _shift_longest_later(fn: Callable, bos: int, eos: int, pad: int) -> None:
    """The same sequences with the longest second: T is the longest length + 1, not
    the first sequence's."""
    seqs = [[8], [5, 6, 7], [9, 10]]
    want_in, want_out = _shifted(seqs, bos, eos, pad)
    got = fn(copy.deepcopy(seqs), bos, eos, pad)
    for name, g, w in zip(("tgt_in", "tgt_out"), got, (want_in, want_out)):
        if isinstance(g, Tensor) and g.dim() == 2 and g.size(1) == 2:
            raise ExerciseError(
                f"with sequences of lengths 1, 3, 2, {name} has shape "
                f"{tuple(g.shape)}, expected (3, 4): T is the longest length + 1, "
                "max(len(y) for y in seqs) + 1, not the first sequence's"
            )
        compare(f"with sequences of lengths 1, 3, 2, {name}", g, w)


def _shifted(seqs: list, bos: int, eos: int, pad: int) -> tuple[Tensor, Tensor]:
    """The reference tgt_in = <bos> y and tgt_out = y <eos>, padded with pad."""
    T = max(map(len, seqs)) + 1
    rows_in = [[bos, *y] + [pad] * (T - 1 - len(y)) for y in seqs]
    rows_out = [[*y, eos] + [pad] * (T - 1 - len(y)) for y in seqs]
    return torch.tensor(rows_in), torch.tensor(rows_out)


def _shift_named(got: tuple, seqs: list, bos: int, eos: int, pad: int) -> None:
    """Name a pad hard-coded to 0, or a tgt_out without <eos>."""
    want_in, want_out = _shifted(seqs, bos, eos, pad)
    zero_in, zero_out = _shifted(seqs, bos, eos, 0)
    if is_close(got[0], zero_in) or is_close(got[1], zero_out):
        raise ExerciseError(
            f"padded with 0, but pad is {pad}: use the argument pad, not a hard-coded 0"
        )
    T = want_in.size(1)
    no_eos = torch.tensor([[*y] + [pad] * (T - len(y)) for y in seqs])
    if is_close(got[0], want_in) and is_close(got[1], no_eos):
        raise ExerciseError(
            f"tgt_out has no <eos> ({eos}): it is y <eos>, so that the model learns "
            "where a translation ends"
        )


# 09 · one training step, and the training loop ----------------------------------------


def train_step_reference(model, optimizer, src, tgt_in, tgt_out, pad_id, eps=0.1):
    """One update of the translator; returns the loss before it, as a float."""
    logits = model(src, tgt_in)  # (B, T, n_vocab)
    loss = F.cross_entropy(
        logits.flatten(0, 1),
        tgt_out.flatten(),
        ignore_index=pad_id,
        label_smoothing=eps,
    )
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


_PAD = 3  # the training step's pad id: not 0, so that a hard-coded 0 shows


def _translation_batches() -> list[tuple[Tensor, Tensor, Tensor]]:
    """Two small batches (src, tgt_in, tgt_out) for a vocabulary of 12, as the course
    makes them: tgt_in = <bos> y and tgt_out = y <eos> (bos 1, eos 2), padded with
    _PAD, so that both have their padding at the same places; token 0 is a real
    target here."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(2):
        src = torch.randint(4, 12, (3, 7), generator=g)  # not T long: model(tgt, src)
        y = torch.randint(4, 12, (3, 5), generator=g)
        src[0, 4:], y[0, 1], y[2, 0] = _PAD, 0, 0  # padding; 0 is real
        tgt_in = torch.full((3, 6), _PAD)
        tgt_out = torch.full((3, 6), _PAD)
        for row, n in enumerate((5, 3, 4)):  # the lengths of the three y
            tgt_in[row, : n + 1] = torch.cat([torch.tensor([1]), y[row, :n]])
            tgt_out[row, : n + 1] = torch.cat([y[row, :n], torch.tensor([2])])
        out.append((src, tgt_in, tgt_out))
    return out


@checker("training step")
def check_train_step(fn: Callable) -> str:
    """fn(model, optimizer, src, tgt_in, tgt_out, pad_id, label_smoothing) -> the loss
    (a float); the weights take one step."""
    from transformer_lib.seq2seq import Seq2SeqConfig, Transformer

    torch.manual_seed(0)
    config = Seq2SeqConfig.tiny(12, 12, src_pad_id=_PAD, tgt_pad_id=_PAD)
    model = Transformer(config).double()
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    stepped: list[bool] = []  # at each optimizer.step(): did any gradient reach it?
    opt.register_step_pre_hook(
        lambda o, args, kwargs: stepped.append(
            any(p.grad is not None and p.grad.any() for p in model.parameters())
        )
    )
    modes: list[bool] = []  # model.training at each forward pass
    model.register_forward_pre_hook(lambda m, args: modes.append(m.training))
    graded: list[bool] = []  # torch.is_grad_enabled() at each forward pass
    model.register_forward_pre_hook(
        lambda m, args: graded.append(torch.is_grad_enabled())
    )
    reached: list[int] = []  # one entry each time backward reaches a weight
    for p in model.parameters():  # stale gradients, as a loop's last step leaves
        p.grad = torch.full_like(p, 0.01)
        p.register_post_accumulate_grad_hook(lambda p: reached.append(1))
    for step, (src, tgt_in, tgt_out) in enumerate(_translation_batches(), 1):
        eps = (0.1, 0.2)[step - 1]  # two values, so that a hard-coded one shows
        with torch.no_grad():
            logits3 = ref(src, tgt_in)  # (B, T, n_vocab)
            logits = logits3.flatten(0, 1)
            summed = F.cross_entropy(  # the masked, smoothed losses, summed
                logits,
                tgt_out.flatten(),
                ignore_index=_PAD,
                label_smoothing=eps,
                reduction="sum",
            )
            real = (tgt_out != _PAD).double()  # (B, T)
            logp = logits.log_softmax(-1)  # (B*T, n_vocab)
            nll = -logp.gather(1, tgt_out.flatten()[:, None])[:, 0]
            others = -logp.sum(-1) - nll  # over the n_vocab - 1 wrong tokens
            spread = (1 - eps) * nll + eps / (logits.size(-1) - 1) * others
            spread = (spread * real.flatten()).sum() / real.sum()
            per_target = F.cross_entropy(
                logits3.transpose(1, 2), tgt_out, reduction="none", label_smoothing=eps
            )  # (B, T)
            pads = (tgt_out == _PAD).flatten()[:, None]  # (B*T, 1)
            from transformer_lib.translation_data import label_smoothed_cross_entropy

            variants = (
                (
                    label_smoothed_cross_entropy(logits3, tgt_out, _PAD, eps),
                    "label_smoothed_cross_entropy got pad_id as its smoothing and "
                    "label_smoothing as its ignore_index: its order is (logits, "
                    "target, smoothing, ignore_index); pass them by name",
                ),
                (
                    F.cross_entropy(
                        logits.softmax(-1),
                        tgt_out.flatten(),
                        ignore_index=_PAD,
                        label_smoothing=eps,
                    ),
                    "cross_entropy was given probabilities (a softmax first): it "
                    "applies log_softmax itself; pass the raw logits",
                ),
                (
                    F.cross_entropy(
                        logits.masked_fill(pads, 0.0),
                        tgt_out.flatten(),
                        label_smoothing=eps,
                    ),
                    "the logits at the <pad> targets were set to 0, which still "
                    "counts those positions (each costs log n_vocab): leave the "
                    "logits alone and pass ignore_index=pad_id",
                ),
                (
                    F.cross_entropy(
                        logits,
                        tgt_out.flatten(),
                        ignore_index=_PAD,
                        label_smoothing=0.1,
                    ),
                    f"label_smoothing is a hard-coded 0.1, but this step passes {eps}: "
                    "pass label_smoothing=label_smoothing",
                ),
                (
                    F.cross_entropy(
                        logits, tgt_out.flatten(), ignore_index=0, label_smoothing=eps
                    ),
                    f"ignore_index is a hard-coded 0, but pad_id is {_PAD}: pass "
                    "ignore_index=pad_id",
                ),
                (
                    F.cross_entropy(logits, tgt_out.flatten(), label_smoothing=eps),
                    "padded targets were counted: pass ignore_index=pad_id",
                ),
                (
                    F.cross_entropy(logits, tgt_out.flatten(), ignore_index=_PAD),
                    "this is plain cross-entropy: pass label_smoothing",
                ),
                (
                    F.cross_entropy(
                        ref(src, tgt_out).flatten(0, 1),
                        tgt_out.flatten(),
                        ignore_index=_PAD,
                        label_smoothing=eps,
                    ),
                    "the model read tgt_out: it reads tgt_in (<bos> y) and predicts "
                    "tgt_out",
                ),
                (
                    F.cross_entropy(
                        logits, tgt_in.flatten(), ignore_index=_PAD, label_smoothing=eps
                    ),
                    "the loss compared the predictions with tgt_in: the targets are "
                    "tgt_out, the next tokens (y <eos>)",
                ),
                (
                    F.cross_entropy(
                        logits3[:, :-1].flatten(0, 1),
                        tgt_out[:, 1:].flatten(),
                        ignore_index=_PAD,
                        label_smoothing=eps,
                    ),
                    "the targets were shifted once more (logits[:, :-1] against "
                    "tgt_out[:, 1:]): tgt_out is already shifted, so logits[:, t] "
                    "predicts tgt_out[:, t]",
                ),
                (
                    ((per_target * real).sum(1) / real.sum(1)).mean(),
                    "a mean of per-sentence means: a short sentence's targets weigh "
                    "more; take one mean over all the real targets of the batch",
                ),
                (
                    summed,
                    "the loss is summed over the targets: take their mean (the "
                    "default reduction)",
                ),
                (
                    spread,
                    "the smoothing was spread over the n_vocab - 1 wrong tokens: "
                    "label_smoothing spreads eps over all n_vocab tokens, the right "
                    "one included, as F.cross_entropy(label_smoothing=eps) does",
                ),
                (
                    summed / tgt_out.size(0),
                    "the summed loss was divided by the batch size (sentences): "
                    "divide by the number of real targets, the mean over them "
                    "(the default reduction, with ignore_index=pad_id)",
                ),
                (
                    (1 - eps) * (nll * real.flatten()).sum() / real.sum()
                    - eps * logp.mean(-1).mean(),
                    "the smoothing term was averaged over every position, <pad> "
                    "included: average it over the real targets only, as the NLL "
                    "term (label_smoothing=eps with ignore_index=pad_id does both)",
                ),
                (
                    summed / tgt_out.numel(),
                    "the masked losses were averaged over all the positions, <pad> "
                    "included: divide by the real targets only (ignore_index does "
                    "it with the mean reduction)",
                ),
            )
        before = [p.detach().clone() for p in model.parameters()]
        n_reached = len(reached)
        try:
            got = fn(model, opt, src, tgt_in, tgt_out, _PAD, eps)
        except RuntimeError as e:
            sizes = re.search(r"Expected target size \[\d+, (\d+)\]", str(e))
            if sizes is None:
                raise
            if int(sizes[1]) == config.tgt_vocab_size:  # (B, T, n_vocab) as it came
                raise ExerciseError(
                    "cross_entropy wants the classes on dim 1: flatten the logits to "
                    "(B*T, n_vocab) and the targets to (B*T,), or pass "
                    "logits.transpose(1, 2) (B, n_vocab, T)"
                ) from None
            raise ExerciseError(
                f"the logits have {sizes[1]} positions, tgt_out {tgt_out.shape[1]}: "
                "the model reads model(src, tgt_in), the source first"
            ) from None
        want = train_step_reference(ref, ref_opt, src, tgt_in, tgt_out, _PAD, eps)
        if not isinstance(got, float):
            raise ExerciseError(
                f"return the loss as a float (loss.item()), got {type(got).__name__}"
            )
        if not all(modes) or not model.training:
            raise ExerciseError(
                f"step {step}: the model {'ran' if not all(modes) else 'was left'} in "
                "eval mode (model.eval()?): the step runs the model in the mode it "
                "comes in, training mode (dropout on), as the docstring says; the "
                "loop sets it with model.train(), so leave the mode alone"
            )
        if not math.isclose(got, want, rel_tol=1e-6):  # float32 inside is fine
            with torch.no_grad():
                after = F.cross_entropy(
                    ref(src, tgt_in).flatten(0, 1),
                    tgt_out.flatten(),
                    ignore_index=_PAD,
                    label_smoothing=eps,
                )
            variants += (
                (
                    after,
                    "the loss of the model after optimizer.step(): return the loss "
                    "that was backpropagated, computed before the update, loss.item()",
                ),
                (
                    F.cross_entropy(
                        logits,
                        tgt_out.T.flatten(),
                        ignore_index=_PAD,
                        label_smoothing=eps,
                    ),
                    "the targets were flattened in another order than the logits "
                    "(tgt_out.T, or transposed): flatten both the same way, "
                    "logits.flatten(0, 1) (B*T, n_vocab) and tgt_out.flatten() (B*T,)",
                ),
            )
            for value, hint in variants:
                if math.isclose(got, value.item(), rel_tol=1e-6):
                    raise ExerciseError(f"step {step}: loss {got:.4f}, {hint}")
            if any(got == round(want, k) for k in range(5)):
                raise ExerciseError(
                    f"step {step}: loss {got:g}, expected {want:.6f}: the loss was "
                    "rounded; return loss.item() as it is (round only to print it)"
                )
            raise ExerciseError(f"step {step}: loss {got:.6f}, expected {want:.6f}")
        for (name, p), r, b in zip(model.named_parameters(), ref.parameters(), before):
            if torch.allclose(p, r, atol=1e-6):
                continue
            if step == 1 and torch.allclose(p, r - 0.5 * 0.01, atol=1e-6):
                raise ExerciseError(
                    f"step 1: the loss is right but {name} moved too far: the "
                    "gradients already in .grad (a previous step's) were added to; "
                    "call optimizer.zero_grad() first in the step, before "
                    "loss.backward()"
                )
            if torch.equal(p, b) and graded and not all(graded):
                raise ExerciseError(
                    f"step {step}: the weights did not change: the forward pass ran "
                    "under torch.no_grad(), so the loss has no graph back to them; "
                    "run the model with gradients on"
                )
            if torch.equal(p, b) and len(reached) == n_reached:
                raise ExerciseError(
                    f"step {step}: the loss reached no weight: the logits were cut "
                    "from the model's graph (.detach(), or a new tensor made from "
                    "them); compute the loss from model(src, tgt_in) as it returns"
                )
            if torch.equal(p, b) and len(stepped) == step and not stepped[-1]:
                raise ExerciseError(
                    f"step {step}: optimizer.step() found no gradients: call it right "
                    "after loss.backward(); zero_grad() goes before the backward pass, "
                    "not between it and the step"
                )
            if torch.equal(p, b):
                raise ExerciseError(
                    f"step {step}: the weights did not change: call optimizer.step() "
                    "after loss.backward()"
                )
            k = _step_factor(model, ref, before)
            if k is not None and k > 1:
                raise ExerciseError(
                    f"step {step}: every weight moved in the right direction but "
                    f"{k:.1f} times as far: the loss whose gradient was taken was "
                    "summed over the targets, not averaged (reduction='sum'); "
                    "backward() the mean loss, F.cross_entropy's default"
                )
            if k is not None:
                raise ExerciseError(
                    f"step {step}: every weight moved in the right direction but a "
                    "shorter way: the gradients were clipped (or scaled); this step "
                    "asks for none: zero_grad, backward, step"
                )
            if step == 2:
                raise ExerciseError(
                    f"step 2: the loss is right but {name} moved too far: step 1's "
                    "gradients were still there; call optimizer.zero_grad() first"
                )
            raise ExerciseError(f"step {step}: {name} differs from the reference")
    model.eval()  # the step keeps the mode it is given, eval mode too
    src, tgt_in, tgt_out = _translation_batches()[0]
    fn(model, opt, src, tgt_in, tgt_out, _PAD, 0.1)
    if modes[-1] or model.training:
        raise ExerciseError(
            "given a model in eval mode, the step switched it to training mode "
            "(model.train() inside the step): the step runs the model in the mode it "
            "comes in; the loop sets the mode, so leave it alone"
        )
    return "two steps of a tiny translator with padding: losses and weights match"


def _step_factor(model, ref, before: list) -> float | None:
    """The factor k, if every weight of model moved along the reference's update by
    the same k (below 1: the gradients clipped by their norm; far above 1: a summed
    loss), else None."""
    mine, want = [], []
    for p, r, b in zip(model.parameters(), ref.parameters(), before):
        mine.append((p - b).detach().flatten())
        want.append((r - b).detach().flatten())
    mine, want = torch.cat(mine), torch.cat(want)
    k = (mine @ want / (want @ want)).item()
    if k > 0 and abs(k - 1) > 1e-6 and torch.allclose(mine, k * want, atol=1e-9):
        return k
    return None


def _regression_step(log: list) -> Callable:
    """A real training step on a linear model that records the rate and the mode it
    ran at."""

    def step(model, optimizer, *batch) -> float:
        if len(batch) != 1:
            raise ExerciseError(
                f"train_step was called with {2 + len(batch)} arguments: it takes "
                "(model, optimizer, batch), the batch as one argument, as the "
                "docstring says; pass it whole, not unpacked (*batch)"
            )
        log.append(([g["lr"] for g in optimizer.param_groups], model.training))
        x, y = batch[0]
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


@checker("training loop")
def check_training_loop(fn: Callable) -> str:
    """fn(model, optimizer, batches, lr_at, train_step) -> the list of losses; lr_at(s)
    set before step s, the model in training mode, a ValueError on a non-finite loss."""
    torch.manual_seed(0)
    x = torch.randn(6, 16, 3)
    batches = [(x[i], x[i] @ torch.tensor([[1.0], [-2.0], [0.5]])) for i in range(6)]

    def lr_at(s: int) -> float:
        return 0.05 * (s + 1)  # warm-up: a different rate at every step

    model = nn.Sequential(nn.Linear(3, 1))
    model.eval()
    ref = copy.deepcopy(model)
    weight, bias = model[0].weight, model[0].bias  # two groups, as AdamW's decay split
    opt = torch.optim.SGD([{"params": [weight]}, {"params": [bias]}], lr=123.0)
    log: list = []
    steps = [0]  # optimizer.step() calls, the train_step's own included
    opt.register_step_post_hook(lambda *_: steps.__setitem__(0, steps[0] + 1))
    try:  # a generator, as a DataLoader is read: no len(), no indexing
        losses = fn(model, opt, (b for b in batches), lr_at, _regression_step(log))
    except RuntimeError as e:
        if "does not require grad" not in str(e):
            raise
        raise ExerciseError(
            f"RuntimeError ({first_line(e)}): train_step ran under torch.no_grad(), "
            "so its loss has no graph to backpropagate; leave gradients on in the "
            "training loop (no_grad is for evaluation)"
        ) from None
    except TypeError as e:
        if "must be Tensor, not float" in str(e):
            raise ExerciseError(
                f"TypeError ({first_line(e)}): train_step returns the loss as a float "
                "(loss.item()), and torch functions take tensors: test it with "
                "math.isfinite(loss)"
            ) from None
        if "len()" in str(e) or "subscriptable" in str(e):
            raise ExerciseError(
                f"batches was indexed or measured ({first_line(e)}): it is any "
                "iterable, a DataLoader or a generator, read once; loop over it, "
                "for s, batch in enumerate(batches)"
            ) from None
        raise
    if losses == [] and not log:
        raise ExerciseError(
            f"returned 0 losses for {len(batches)} batches, and train_step never ran: "
            "batches was used up before the loop (list(batches) or len(list(...)) "
            "reads a generator to its end); loop over it directly, once"
        )
    if not isinstance(losses, list) or len(losses) != len(batches):
        n = len(losses) if isinstance(losses, list) else type(losses).__name__
        raise ExerciseError(f"returned {n} losses for {len(batches)} batches")
    if not all(isinstance(loss, float) for loss in losses):
        kind = next(type(x).__name__ for x in losses if not isinstance(x, float))
        raise ExerciseError(
            f"the losses hold a {kind}: return a list of floats, list[float] as the "
            "docstring says, train_step's losses as it returns them"
        )
    if len(log) != len(batches):
        raise ExerciseError(
            f"train_step ran {len(log)} times for {len(batches)} batches"
        )
    if steps[0] > len(log):
        raise ExerciseError(
            f"optimizer.step() ran {steps[0]} times for {len(log)} batches: "
            "train_step already calls it; the loop only sets the rate and calls "
            "train_step"
        )
    if all(lrs == [lr_at(0)] * len(lrs) for lrs, _ in log):
        raise ExerciseError(
            f"every step ran at lr_at(0) = {lr_at(0):g}: the step index never "
            "advanced (or the rate was set once, before the loop); set lr_at(s) "
            "before each step, s from for s, batch in enumerate(batches)"
        )
    late = [lrs[0] for lrs, _ in log[1:]] == [lr_at(s) for s in range(len(log) - 1)]
    if log and log[0][0][0] == 123.0 and late:
        raise ExerciseError(
            "step s ran at lr_at(s - 1), and step 0 at the optimizer's own 123: the "
            "rate was set after train_step; set every param group's lr to lr_at(s) "
            "before the step"
        )
    for s, (lrs, training) in enumerate(log):
        lr = lrs[0]
        if lr == lr_at(s) and any(other != lr for other in lrs):
            raise ExerciseError(
                f"step {s}: param group 0 ran at lr_at({s}) but another group at "
                f"{next(x for x in lrs if x != lr)}: set the lr of every param group "
                "(for g in optimizer.param_groups), not only the first"
            )
        if not training:
            raise ExerciseError(
                f"step {s} ran in eval mode (dropout off): call model.train() first"
            )
        if math.isclose(lr, 123.0 * lr_at(s)):
            raise ExerciseError(
                f"step {s} ran at {lr:g} = 123 (the optimizer's lr) * lr_at({s}): "
                "lr_at gives the rate itself; set group['lr'] = lr_at(s), do not scale "
                "the base rate (as LambdaLR does)"
            )
        if lr == 123.0:
            raise ExerciseError(
                f"step {s} ran at 123, the optimizer's own lr: the schedule never "
                "reached the param groups; set group['lr'] = lr_at(s) before each step"
            )
        if s == 0 and [lrs[0] for lrs, _ in log] == [
            lr_at(t + 1) for t in range(len(log))
        ]:
            raise ExerciseError(
                "step s ran at lr_at(s + 1): the steps were counted from 1; the first "
                "step is s = 0, enumerate(batches), not enumerate(batches, 1)"
            )
        if lr != lr_at(s):
            seen = next((f"lr_at({t})" for t in (s - 1, s + 1) if lr == lr_at(t)), lr)
            raise ExerciseError(
                f"step {s} ran at {seen}, expected lr_at({s}) = {lr_at(s):g}: set "
                "every param group's lr before the step"
            )
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.0)
    want = []
    for s, batch in enumerate(batches):
        ref_opt.param_groups[0]["lr"] = lr_at(s)
        want.append(_regression_step([])(ref, ref_opt, batch))
    running = [sum(want[: s + 1]) / (s + 1) for s in range(len(want))]
    if is_close(torch.tensor(losses), torch.tensor(running)):
        raise ExerciseError(
            "the losses are a running mean (the mean of steps 0..s at step s): return "
            "each step's own loss, as train_step returns it"
        )
    compare("the losses", torch.tensor(losses), torch.tensor(want))

    for bad in (math.nan, math.inf):
        _check_stops_on(fn, batches, lr_at, bad)
    _check_stops_on_last(fn, batches, lr_at)
    _check_big_loss(fn, batches, lr_at)
    return (
        "6 steps of warm-up: rates, mode and losses match; a NaN or inf loss stops it"
    )


def _check_big_loss(fn: Callable, batches: list, lr_at: Callable) -> None:
    """A large but finite loss (1e30 at step 2) does not stop the loop."""
    calls: list = []

    def big_at_2(model, optimizer, batch) -> float:
        calls.append(1)
        return 1e30 if len(calls) == 3 else 1.0

    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))])
    try:
        losses = fn(nn.Linear(3, 1), opt, batches, lr_at, big_at_2)
    except ValueError as e:
        raise ExerciseError(
            f"a finite loss of 1e+30 at step 2 raised ValueError ({e}): only a NaN "
            "or inf loss stops the loop, whatever its size; test "
            "math.isfinite(loss), with no threshold"
        ) from None
    if list(losses) != [1.0, 1.0, 1e30] + [1.0] * (len(batches) - 3):
        raise ExerciseError(
            f"a loss of 1e+30 at step 2: returned {losses}, train_step's losses as "
            "it returned them"
        )


def _check_stops_on(fn: Callable, batches: list, lr_at: Callable, bad: float) -> None:
    """fn must raise a ValueError naming step 2 when that step's loss is `bad`."""
    calls: list = []

    def bad_at_2(model, optimizer, batch) -> float:
        calls.append(1)
        return bad if len(calls) == 3 else 1.0

    model = nn.Linear(3, 1)
    try:
        fn(
            model,
            torch.optim.SGD([nn.Parameter(torch.zeros(1))]),
            batches,
            lr_at,
            bad_at_2,
        )
    except ValueError as e:
        said = first_line(e)
        if len(calls) > 3:
            raise ExerciseError(
                f"the {bad} loss of step 2 was caught only after {len(calls)} steps "
                f"({said}): the steps after it ran on broken weights; test each loss "
                "as train_step returns it, and stop at once"
            ) from None
        if "2" not in str(e):
            shifted = str(2 + len(batches))  # after the first call's steps
            if shifted in re.findall(r"\d+", str(e)):
                raise ExerciseError(
                    f"the error named step {shifted}, expected 2 ({said}): the step "
                    "count went on from an earlier call (a global or class counter); "
                    "count this call's steps from 0, for s, batch in enumerate(batches)"
                ) from None
            raise ExerciseError(f"the error should name the step (2): {said}") from None
    except AssertionError as e:
        said = first_line(e)
        raise ExerciseError(
            f"a {bad} loss at step 2 raised AssertionError ({said}): raise ValueError "
            "naming the step, not assert (python -O drops asserts)"
        ) from None
    except (RuntimeError, ArithmeticError, TypeError) as e:
        said = first_line(e)
        raise ExerciseError(
            f"a {bad} loss at step 2 raised {type(e).__name__} ({said}): raise "
            "ValueError naming the step, as the docstring says (a caller catches that)"
        ) from None
    else:
        if math.isinf(bad):
            raise ExerciseError(
                "an inf loss at step 2 went unnoticed (a NaN one is caught): "
                "math.isnan misses inf; test math.isfinite(loss)"
            )
        raise ExerciseError(
            "a NaN loss at step 2 went unnoticed: raise ValueError naming the step"
        )


def _check_stops_on_last(fn: Callable, batches: list, lr_at: Callable) -> None:
    """A NaN loss at the last step must stop the loop too: a test that reads the
    previous step's loss (losses[-1] before appending) runs one step late and never
    sees the last one."""
    calls: list = []

    def nan_at_last(model, optimizer, batch) -> float:
        calls.append(1)
        return math.nan if len(calls) == len(batches) else 1.0

    try:
        fn(
            nn.Linear(3, 1),
            torch.optim.SGD([nn.Parameter(torch.zeros(1))]),
            batches,
            lr_at,
            nan_at_last,
        )
    except ValueError:
        return
    raise ExerciseError(
        f"a NaN loss at the last step ({len(batches) - 1}) went unnoticed, though "
        "one at step 2 was caught (a step late?): test each loss right after "
        "train_step returns it, before the next step"
    )


# 10 · min-p sampling, and beam search -------------------------------------------------


def _min_p_message(p: float, row: Tensor, drawn: Tensor, keep: Tensor) -> str | None:
    """What is wrong with the set of tokens `drawn` (bool (n_vocab,)) of one row of
    probabilities, where `keep` is the right set; None if it is right."""
    threshold = p * row.max().item()
    if drawn.sum() == 1 and keep.sum() > 1:
        return (
            f"min_p={p}: only token {int(drawn.nonzero())} was drawn: sample "
            "(torch.multinomial) among all the kept tokens, not the most likely"
        )
    if torch.equal(drawn, row >= p) and not torch.equal(drawn, keep):
        return (
            f"min_p={p}: kept the tokens of probability >= {p}: the threshold is "
            f"min_p times the top probability, {threshold:.3g} here"
        )
    for t in range(len(row)):
        if drawn[t] and not keep[t]:
            return (
                f"min_p={p}: drew token {t} (probability {row[t]:g}), below min_p "
                f"times the top probability, {threshold:.3g}"
            )
        if keep[t] and not drawn[t]:
            return (
                f"min_p={p}: token {t} (probability {row[t]:g}) was never drawn, yet "
                f"it is at least min_p times the top probability, {threshold:.3g}"
            )
    return None


def _min_p_top_p(fn: Callable) -> None:
    """On probabilities 0.3, 0.3, 0.2, 0.2 and min_p 0.45 min-p keeps all four; top-p
    with p = min_p keeps the first two, the argmax one: tell those apart."""
    probs = torch.tensor([0.3, 0.3, 0.2, 0.2])
    n = 2000
    got = fn(probs.log().repeat(n, 1), 0.45, torch.Generator().manual_seed(0))
    drawn = torch.bincount(torch.as_tensor(got).reshape(-1), minlength=4) > 0
    if drawn.tolist() == [True, True, False, False]:
        raise ExerciseError(
            "min_p=0.45, probabilities [0.3, 0.3, 0.2, 0.2]: drew tokens 0 and 1 "
            "only, the top-p set (the most likely until their sum reaches 0.45): "
            "min-p keeps every token whose probability is at least min_p times the "
            "top one, 0.135 here: all four"
        )


def _min_p_keepdim(p: float, error: Exception, shape: torch.Size) -> None:
    """Name the threshold computed without keepdim: min_p * p.max(-1).values is (B,),
    and compared with p (B, n_vocab) it lines up with the vocabulary, not the rows."""
    sizes = re.search(
        r"size of tensor a \((\d+)\) must match the size of tensor b "
        r"\((\d+)\)",
        str(error),
    )
    if sizes and {int(sizes[1]), int(sizes[2])} == set(shape):
        raise ExerciseError(
            f"min_p={p}: RuntimeError ({first_line(error)}): the row's top "
            f"probability, p.max(-1).values, has shape ({shape[0]},), which lines "
            "up with the vocabulary axis of p, not with its rows: keep the "
            "dimension, p.max(-1, keepdim=True).values (B, 1)"
        ) from None


def _min_p_on_logits(fn: Callable, p: float, logits: Tensor, error: Exception) -> None:
    """Raise ExerciseError if `error` is what a threshold on the logits gives: they are
    log-probabilities here, all negative, so none passes it; the same logits + 10 (the
    same softmax) then run."""
    try:
        fn(logits + 10, p, torch.Generator().manual_seed(0))
    except Exception:  # noqa: BLE001 - it fails with any logits: another mistake
        return
    raised = (str(error).strip().splitlines() or [type(error).__name__])[0]
    top = logits.max().item()
    raise ExerciseError(
        f"min_p={p}: RuntimeError ({raised}), but not with the logits + 10, which "
        "have the same softmax: was the threshold applied to the logits? They are "
        f"log-probabilities here, all below 0, so min_p times the top logit "
        f"({p * top:.3g}) is above every logit and no token is kept; softmax first, "
        "then keep the probabilities >= min_p times the top one"
    )


@checker("min-p sampling")
def check_min_p_sampling(fn: Callable) -> str:
    """fn(logits (B, n_vocab), min_p, generator) -> (B,) token ids drawn from the tokens
    whose probability is at least min_p times the top one, renormalised."""
    probs = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05], [0.05, 0.1, 0.6, 0.05, 0.2]])
    n = 4000
    for p in (0.45, 0.12, 0.28, 0.04):  # no threshold on a probability
        keep = probs >= p * probs.max(-1, keepdim=True).values  # (2, n_vocab)
        want = probs * keep / (probs * keep).sum(-1, keepdim=True)
        g = torch.Generator().manual_seed(0)
        logits = probs.log().repeat(n, 1)
        given = logits.clone()
        try:
            got = fn(logits, p, g)
        except NotImplementedError:
            raise
        except RuntimeError as e:
            _min_p_keepdim(p, e, logits.shape)
            _min_p_on_logits(fn, p, logits, e)
            if "sum of probabilities <= 0" in str(e):
                raise ExerciseError(
                    f"min_p={p}: RuntimeError ({first_line(e)}): no token was kept. "
                    "The threshold is on probabilities, p >= min_p * p_max; in log "
                    "space it is log p >= log(min_p) + max log p, not min_p times "
                    "the top log-prob (below 0, so that keeps nothing)"
                ) from None
            raise
        if not torch.equal(logits, given):
            raise ExerciseError(
                f"min_p={p}: the caller's logits were changed (an in-place "
                "masked_fill_ or similar): filter a copy, the caller may need them"
            )
        if not isinstance(got, Tensor) or tuple(got.shape) != (2 * n,):
            shape = tuple(got.shape) if isinstance(got, Tensor) else type(got)
            raise ExerciseError(
                f"min_p={p}: expected ({2 * n},) token ids, one per row, got {shape}"
                + (": squeeze the sample dimension" if shape == (2 * n, 1) else "")
            )
        got = got.reshape(n, 2)
        for row in range(2):
            freq = torch.bincount(got[:, row], minlength=5).double() / n
            message = _min_p_axis_message(p, probs, row, freq, want[row])
            if not message:
                message = _min_p_message(p, probs[row], freq > 0, keep[row])
                if message:
                    _min_p_own_top(fn)
                    _min_p_rows(fn, probs)
                if message and "was drawn: sample" in message:
                    _min_p_top_p(fn)
            if message:
                raise ExerciseError(message)
            for t in range(5):
                f, w = freq[t].item(), want[row, t].item()
                if abs(f - w) > 0.03:
                    raise ExerciseError(
                        f"min_p={p}: token {t} drawn {f:.0%} of the time, expected "
                        f"{w:.0%}: renormalise the kept probabilities"
                    )
    _min_p_own_top(fn)
    _min_p_tie(fn)
    _min_p_shifted(fn, probs)
    _min_p_generator(fn, probs.log())
    return (
        f"two distributions, min_p = 0.45, 0.12, 0.28, 0.04; {n} draws each; a tie "
        "(0.25 = 0.5 * 0.5) kept"
    )


def _min_p_axis_message(
    p: float, probs: Tensor, row: int, freq: Tensor, want: Tensor
) -> str | None:
    """Slips told apart by the frequencies they draw: the probabilities shifted by the
    threshold (where that is far from right, so that noise cannot pass for it), the
    softmax over the batch (each column normalised across the rows), a second softmax
    (too flat), uniform draws."""

    def min_p_of(q: Tensor) -> Tensor:  # the draws' distribution from probabilities q
        kept = q * (q >= p * q.max())
        return kept / kept.sum()

    def close(a: Tensor, b: Tensor) -> bool:
        return (a - b).abs().max().item() < 0.03

    shifted = (probs[row] - p * probs[row].max()).clamp(min=0)
    shifted = shifted / shifted.sum()
    zeroed_softmax = (probs[row] * min_p_of(probs[row]).gt(0)).softmax(-1)
    slips = (
        (
            shifted if (shifted - want).abs().max() > 0.06 else want,
            "the kept probabilities were shifted down by the threshold, p - min_p * "
            "p_max: keep them as they are (p where p >= the threshold, 0 elsewhere), "
            "then divide by their sum",
        ),
        (
            min_p_of((probs / probs.sum(0))[row]),
            "the softmax was taken over the batch (dim 0), so each token's column "
            "sums to 1: take it over the vocabulary, softmax(dim=-1)",
        ),
        (
            min_p_of(probs[row].softmax(-1)),
            "the draws follow softmax(softmax(logits)), a flatter distribution: fn "
            "gets logits; apply the softmax once",
        ),
        (
            min_p_of(probs[row]).gt(0)
            * probs[row].exp()
            / (min_p_of(probs[row]).gt(0) * probs[row].exp()).sum(),
            "the kept probabilities went through a second softmax, which flattens "
            "them: renormalise by dividing by their sum",
        ),
        (
            zeroed_softmax,
            "the dropped tokens' probabilities were set to 0 and a softmax taken "
            "again: exp(0) = 1 gives them weight back; divide the kept probabilities "
            "by their sum (or set the dropped logits to -inf before one softmax)",
        ),
        (
            probs[row].log().masked_fill(min_p_of(probs[row]) == 0, 0.0).softmax(-1),
            "the dropped tokens' logits were set to 0, not -inf: exp(0) = 1 still "
            "gives them weight (more than the kept ones, whose logits are below 0 "
            "here); masked_fill(~keep, float('-inf'))",
        ),
        (
            min_p_of(probs[row]).gt(0) / min_p_of(probs[row]).gt(0).sum(),
            "every kept token drawn about equally often: draw in proportion to the "
            "kept probabilities, not uniformly",
        ),
    )
    for dist, slip in slips:
        nearer = (freq - dist).abs().max() < (freq - want).abs().max()
        if close(freq, dist) and not close(want, dist) and nearer:
            return f"min_p={p}: {slip}"
    return None


def _min_p_tie(fn: Callable) -> None:
    """At min_p 0.5, probabilities [0.5, 0.25, 0.25] keep all three: 0.25 is exactly
    min_p times the top one, and 'at least' keeps it."""
    logits = torch.tensor([[0.5, 0.25, 0.25]]).log().repeat(400, 1)
    got = fn(logits, 0.5, torch.Generator().manual_seed(0))
    drawn = sorted(set(torch.as_tensor(got).flatten().tolist()))
    if drawn == [0]:
        raise ExerciseError(
            "min_p=0.5, probabilities [0.5, 0.25, 0.25]: only token 0 was drawn, but "
            "0.25 is exactly 0.5 * 0.5: keep p >= min_p * p_max (at least, not more "
            "than: >=, not >)"
        )


def _min_p_own_top(fn: Callable) -> None:
    """Three rows whose top probabilities differ (0.45, 0.8, 0.5), at min_p 0.3: the
    threshold taken from row 0's top, or from the batch's, keeps other tokens than
    each row's own (and than min_p itself, a threshold on the probability)."""
    probs = torch.tensor(
        [[0.45, 0.27, 0.18, 0.1], [0.8, 0.1, 0.06, 0.04], [0.5, 0.2, 0.16, 0.14]]
    )
    n, p = 2000, 0.3
    try:
        got = fn(probs.log().repeat(n, 1), p, torch.Generator().manual_seed(0))
        drawn = torch.as_tensor(got).reshape(n, 3)
    except Exception:  # noqa: BLE001 - another mistake: the first message stands
        return
    seen = torch.stack([torch.bincount(drawn[:, r], minlength=4) > 0 for r in range(3)])
    for top, hint in (
        (
            probs[:1].amax(-1, keepdim=True),
            "the threshold came from row 0's top probability for every row",
        ),
        (
            probs.max(),
            "the threshold came from the top probability of the whole batch "
            "(probs.max())",
        ),
    ):
        if torch.equal(seen, probs >= p * top):
            raise ExerciseError(
                f"min_p={p}, three rows with top probabilities 0.45, 0.8, 0.5: {hint}"
                ": each row uses its own, min_p * probs.amax(-1, keepdim=True)"
            )


def _min_p_rows(fn: Callable, probs: Tensor) -> None:
    """At min_p 0.04, where every token is kept, two slips show in row 1's draws: every
    row drawn from row 0's probabilities, and sorted positions taken for token ids."""
    n = 4000
    try:
        got = fn(probs.log().repeat(n, 1), 0.04, torch.Generator().manual_seed(0))
    except Exception:  # noqa: BLE001 - another mistake: the first message stands
        return
    freq = torch.bincount(torch.as_tensor(got).reshape(n, 2)[:, 1], minlength=5) / n
    order = probs[1].argsort(descending=True)
    if (freq - probs[0]).abs().max() < 0.03:
        raise ExerciseError(
            "min_p=0.04: row 1's draws follow row 0's probabilities: every row was "
            "drawn from one row's distribution; torch.multinomial(q, 1) on the whole "
            "(B, n_vocab) matrix draws one token per row, each from its own row"
        )
    if (freq - probs[1][order]).abs().max() < 0.03:
        raise ExerciseError(
            f"min_p=0.04: row 1's token 0 was drawn as often as its most likely token "
            f"({int(order[0])}) should be: the draws are positions in the sorted "
            "order; map them back to token ids, sorted_ids.gather(-1, drawn)"
        )


def _min_p_shifted(fn: Callable, probs: Tensor) -> None:
    """The logits + 100 have the same softmax, and must draw the same tokens: exp of a
    logit of 100 overflows float32 unless the row's max is subtracted first."""
    p = 0.12
    logits = (probs.log() + 100).repeat(200, 1)
    try:
        got = fn(logits, p, torch.Generator().manual_seed(0))
    except RuntimeError as e:
        raise ExerciseError(
            f"min_p={p}, the logits + 100 (the same softmax): RuntimeError "
            f"({first_line(e)}): exp(100) overflows float32 to inf; "
            "softmax(dim=-1) subtracts the row's max before exp, exp(logits) alone "
            "does not"
        ) from None
    drawn = torch.as_tensor(got).reshape(200, 2)
    for row in range(2):
        seen = torch.bincount(drawn[:, row], minlength=5) > 0
        keep = probs[row] >= p * probs[row].max()
        if not torch.equal(seen, keep):
            raise ExerciseError(
                f"min_p={p}, the logits + 100 (the same softmax): row {row} drew "
                f"tokens {seen.nonzero().flatten().tolist()}, expected "
                f"{keep.nonzero().flatten().tolist()}: take the softmax of the "
                "logits, softmax(dim=-1), which subtracts the row's max first"
            )


def _min_p_generator(fn: Callable, logits: Tensor) -> None:
    """Two calls with equally seeded generators, the global seed changed in between,
    must draw the same tokens."""
    logits = logits.repeat(50, 1)
    draws = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        draws.append(fn(logits.clone(), 0.04, torch.Generator().manual_seed(0)))
    if not torch.equal(draws[0], draws[1]):
        raise ExerciseError(
            "two calls with generators seeded alike drew different tokens: the "
            "argument generator is ignored; pass it on, torch.multinomial(probs, 1, "
            "generator=generator)"
        )
    other = fn(logits.clone(), 0.04, torch.Generator().manual_seed(1))
    if torch.equal(draws[0], other):
        raise ExerciseError(
            "generators seeded 0 and 1 drew the same 250 tokens: the argument "
            "generator is ignored (a generator of your own, seeded inside?); pass the "
            "caller's on, torch.multinomial(probs, 1, generator=generator)"
        )


_BEAM_TABLE = {
    (): [0.5, 0.4, 0.1],
    (0,): [0.4, 0.32, 0.28],
    (1,): [0.06, 0.9, 0.04],
    (0, 0): [0.0, 0.0, 1.0],
    (0, 1): [0.0, 0.0, 1.0],
    (1, 1): [0.0, 0.0, 1.0],
}


def _toy_step(prefix: tuple[int, ...]) -> Tensor:
    """Log-probabilities of tokens 0, 1 and 2 (= <eos>) after `prefix`: greedy picks 0,
    the best is 1 1."""
    return torch.tensor(_BEAM_TABLE.get(tuple(prefix), [0.12, 0.08, 0.8])).log()


def beam_search_reference(
    step: Callable,
    beam: int,
    max_len: int,
    eos: int = 2,
    product: bool = False,
    ascending: bool = False,
) -> tuple[list[int], float]:
    """The best finished sequence (eos included) and its log-probability, keeping `beam`
    prefixes per step; or two typical mistakes: log-probs multiplied (from 1), the
    prefixes sorted worst first."""
    alive, done = [((), 1.0 if product else 0.0)], []
    for _ in range(max_len):
        grown = [
            (p + (t,), s * lp if product else s + lp)
            for p, s in alive
            for t, lp in enumerate(step(p).tolist())
            if lp > -math.inf
        ]
        grown.sort(key=lambda c: c[1] if ascending else -c[1])
        alive = []
        for p, s in grown[:beam]:
            (done if p[-1] == eos else alive).append((p, s))
        if not alive:
            break
    best = max(done or alive, key=lambda c: c[1])  # a live one only if none finished
    return list(best[0]), best[1]


def _beam_score(score) -> float:
    """The log-probability a beam search returned, as a float: a float, an int or a
    0-d tensor; anything else is an ExerciseError that names its type."""
    if isinstance(score, Tensor) and score.numel() == 1:
        return score.item()
    if isinstance(score, numbers.Real):  # a float, an int, a NumPy float
        return float(score)
    raise ExerciseError(
        f"the log-probability returned is a {type(score).__name__}: return "
        "(tokens, logprob) with logprob a float (or a 0-d tensor), the score itself"
    )


@checker("beam search")
def check_beam_search(fn: Callable) -> str:
    """fn(step, beam, max_len, eos) -> (tokens, logprob) on a toy model where greedy and
    beam disagree."""
    for beam, want in ((1, [0, 0, 2]), (2, [1, 1, 2])):
        seen: set[tuple] = set()  # the prefixes step() was asked about

        def step(prefix, seen=seen):
            seen.add(tuple(int(t) for t in prefix))
            return _toy_step(prefix)

        got = fn(step, beam, 4, 2)
        tokens, score = list(got[0]), _beam_score(got[1])
        want_score = beam_search_reference(_toy_step, beam, 4)[1]
        if tokens + [2] == want:
            raise ExerciseError(
                f"beam={beam}: got tokens {tokens}, expected {want}: the <eos> was "
                "dropped; a finished sequence ends with it, as the docstring says"
            )
        if math.isnan(score):
            raise ExerciseError(
                f"beam={beam}: got tokens {tokens} with the log-prob NaN: step() "
                "returns log-probabilities already (numbers <= 0), whose log is NaN; "
                "add them as they are"
            )
        grown = sorted(p for p in seen if 2 in p)
        off = not math.isclose(score, want_score, rel_tol=1e-5, abs_tol=1e-9)
        if grown and (tokens != want or off):
            raise ExerciseError(
                f"beam={beam}: got tokens {tokens} (log-prob {score:.4f}), expected "
                f"{want} ({want_score:.4f}): a finished prefix kept growing, step() "
                f"was asked to extend {list(grown[0])}, past its <eos> (2); a prefix "
                "that ends with eos is finished: set it aside and stop extending it"
            )
        if tokens != want:
            greedy = " = greedy's answer: keep the beam best prefixes, not one"
            for wrong, hint in (
                (
                    dict(product=True),
                    "the log-probabilities were multiplied: a prefix's score is "
                    "their sum (the log of the product of the probabilities)",
                ),
                (
                    dict(ascending=True),
                    "the prefixes were sorted in ascending order, so the beam kept "
                    "the worst ones: sort by score, highest first",
                ),
            ):
                if tokens == beam_search_reference(_toy_step, beam, 4, **wrong)[0]:
                    raise ExerciseError(
                        f"beam={beam}: got tokens {tokens}, expected {want}: {hint}"
                    )
            if beam > 1 and tokens == [0, 0, 2] and (1, 1) in seen:
                greedy = (
                    f": {want} was reached (step() saw [1, 1]) but not returned: "
                    "return the finished sequence of the highest score, not the "
                    "last (or first) one to finish"
                )
            elif beam > 1 and tokens == [0, 0, 2] and (1,) in seen:
                greedy = (
                    ": the beam kept the candidates in the order they were made "
                    "(each prefix's best tokens, the first prefix's first): pool "
                    "every prefix's candidates, sort them by score, keep the best "
                    "`beam`"
                )
            raise ExerciseError(
                f"beam={beam}: got tokens {tokens}, expected {want} (log-prob "
                f"{want_score:.4f})"
                + (greedy if beam > 1 and tokens == [0, 0, 2] else "")
            )
        if math.isclose(score, math.exp(want_score), rel_tol=1e-5):
            raise ExerciseError(
                f"beam={beam}: tokens right, but {score:.4f} is the probability: "
                "return the log-probability, the sum of the log-probs "
                f"({want_score:.4f})"
            )
        probs = sum(
            _toy_step(tuple(want[:i]))[t].exp().item() for i, t in enumerate(want)
        )
        if math.isclose(score, probs, rel_tol=1e-5) or math.isclose(
            score, math.log(probs), rel_tol=1e-5
        ):
            raise ExerciseError(
                f"beam={beam}: tokens right, but {score:.4f} is (the log of) the sum "
                "of the tokens' "
                "probabilities: a prefix's score is the sum of their log-probs "
                f"({want_score:.4f}), the log of their product"
            )
        if math.isclose(score, want_score / len(want), rel_tol=1e-5):
            raise ExerciseError(
                f"beam={beam}: tokens right, but {score:.4f} is the log-prob divided "
                f"by the length ({len(want)}), a length-normalised score: return the "
                f"raw sum of the log-probs ({want_score:.4f}), as the docstring asks "
                "(no length penalty)"
            )
        last = _toy_step(tuple(want[:-1]))[want[-1]].item()  # the last token's only
        if math.isclose(score, last, rel_tol=1e-5, abs_tol=1e-9):
            raise ExerciseError(
                f"beam={beam}: tokens right, but log-prob {score:.4f} is the last "
                "token's alone: a prefix's score is the sum of the log-probs of all "
                f"its tokens ({want_score:.4f})"
            )
        if not math.isclose(score, want_score, rel_tol=1e-5):
            raise ExerciseError(
                f"beam={beam}: tokens right, but log-prob {score:.4f}, expected "
                f"{want_score:.4f}"
            )
    _check_beam_max_len(fn)
    for beam, want, why in (
        (
            1,
            [0, 0, 0, 2],
            "a finished prefix takes one of the beam places: with "
            "beam 1, [<eos>] (p = 0.3) loses its place to [0] (p = 0.7) at step 1",
        ),
        (
            2,
            [2],
            "rank by the total log-probability, with no length penalty: "
            "[<eos>] (p = 0.3) beats [0, 0, 0, <eos>] (p = 0.185); a mean per token "
            "prefers the longer one",
        ),
    ):
        got = fn(_length_step, beam, 4, 2)
        if list(got[0]) == want[:-1] and len(want) == 4:
            raise ExerciseError(
                f"beam={beam}, max_len=4: got {list(got[0])}, expected {want}: the "
                "search stopped one step short; run up to max_len steps, so that a "
                "sequence can finish at its last step"
            )
        if list(got[0]) != want:
            raise ExerciseError(
                f"beam={beam}, a toy where <eos> comes first with p = 0.3: got "
                f"tokens {list(got[0])}, expected {want}: {why}"
            )
    _check_beam_places(fn)
    _check_beam_late(fn)
    _check_beam_enough(fn)
    _check_beam_total(fn)
    _check_beam_unfinished(fn)
    return (
        "beam 1 = greedy [0, 0, <eos>] (p = 0.2), beam 2 finds [1, 1, <eos>] (p = 0.36)"
        "; no length penalty; a finished prefix takes a place on the step it finishes"
    )


def _late_step(prefix: tuple[int, ...]) -> Tensor:
    """A toy where [<eos>] finishes first (p = 0.3) but [0, <eos>] finishes later and
    better (p = 0.42); elsewhere <eos> is unlikely."""
    table = {(): [0.6, 0.1, 0.3], (0,): [0.2, 0.1, 0.7]}
    return torch.tensor(table.get(tuple(prefix), [0.55, 0.4, 0.05])).log()


def _check_beam_late(fn: Callable) -> None:
    """The search goes on after the first finished sequence."""
    got = list(fn(_late_step, 2, 4, 2)[0])
    if got == [2]:
        raise ExerciseError(
            "beam=2: returned [<eos>], the first sequence to finish (p = 0.3): go on "
            "while live prefixes remain; [0, <eos>] (p = 0.42) finishes later and wins"
        )
    if got != (want := beam_search_reference(_late_step, 2, 4)[0]):
        raise ExerciseError(f"beam=2, a late finish: got tokens {got}, expected {want}")


def _check_beam_enough(fn: Callable) -> None:
    """Two finished sequences, as many as the beam, do not end the search: [<eos>]
    (p = 0.35) and [0, <eos>] (p = 0.04) finish first, but the live [0, 0] (p = 0.36)
    finishes better, as [0, 0, <eos>]."""
    table = {(): [0.4, 0.25, 0.35], (0,): [0.9, 1e-6, 0.1], (0, 0): [1e-6, 1e-6, 1.0]}

    def step(prefix) -> Tensor:
        prefix = tuple(int(t) for t in prefix)
        return torch.tensor(table.get(prefix, [0.4, 0.3, 0.3])).log()

    got = list(fn(step, 2, 4, 2)[0])
    if got == [2]:
        raise ExerciseError(
            "beam=2: returned [<eos>] (p = 0.35): the search stopped once 2 "
            "sequences, as many as the beam, had finished ([<eos>] and [0, <eos>]), "
            "while [0, 0] (p = 0.36) was still growing; go on while live prefixes "
            "remain, up to max_len: [0, 0, <eos>] (p = 0.36) wins"
        )
    if got != [0, 0, 2]:
        raise ExerciseError(
            f"beam=2, two finished early and one better later: got tokens {got}, "
            "expected [0, 0, 2] (p = 0.36)"
        )


def _check_beam_total(fn: Callable) -> None:
    """Candidates ranked by their total log-probability, not the new token's: [1]
    (p = 0.3) has a very likely next token, 0 (0.8), but [1, 0] (p = 0.24) is worse
    than [0, 1] (p = 0.27), which leads to the best, [0, 1, <eos>] (p = 0.27)."""
    table = {
        (): [0.6, 0.3, 0.1],
        (0,): [0.5, 0.45, 0.05],
        (1,): [0.8, 0.1, 0.1],
        (0, 0): [0.5, 0.4, 0.1],
        (0, 1): [1e-6, 1e-6, 1.0],
        (1, 0): [1e-6, 1e-6, 1.0],
    }

    def step(prefix) -> Tensor:
        prefix = tuple(int(t) for t in prefix)
        return torch.tensor(table.get(prefix, [0.12, 0.08, 0.8])).log()

    got = list(fn(step, 2, 4, 2)[0])
    if got == [1, 0, 2]:
        raise ExerciseError(
            "beam=2: got [1, 0, <eos>] (p = 0.24), expected [0, 1, <eos>] (p = 0.27): "
            "the candidates were ranked by the new token's log-prob alone (0 after "
            "[1] has p = 0.8); rank each by its prefix's total, score + log p(token)"
        )
    if got != [0, 1, 2]:
        raise ExerciseError(
            f"beam=2, a likely token after a weak prefix: got tokens {got}, expected "
            "[0, 1, 2] (p = 0.27)"
        )


def _check_beam_unfinished(fn: Callable) -> None:
    """At max_len 2 the live [0, 0] (p = 0.45) outscores the finished [<eos>]
    (p = 0.3): the answer is the best finished sequence, not a live prefix."""
    table = {(): [0.5, 0.2, 0.3], (0,): [0.9, 0.04, 0.06]}

    def step(prefix) -> Tensor:
        prefix = tuple(int(t) for t in prefix)
        return torch.tensor(table.get(prefix, [0.12, 0.08, 0.8])).log()

    got = list(fn(step, 2, 2, 2)[0])
    if got == [0, 0]:
        raise ExerciseError(
            "beam=2, max_len=2: returned [0, 0] (p = 0.45), a prefix still live at "
            "max_len, which never finished: return the best finished sequence, "
            "[<eos>] (p = 0.3), as the docstring says; a live one only if none finished"
        )
    if got != [2]:
        raise ExerciseError(
            f"beam=2, max_len=2, a live prefix ahead at the end: got tokens {got}, "
            "expected [2] (p = 0.3), the best finished sequence"
        )


_PLACES_TABLE = {(): [0.55, 0.15, 0.3], (0,): [0.6, 0.35, 0.05]}


def _grown_without_cut(beam: int, max_len: int, eos: int) -> set:
    """The prefixes a search grows on _PLACES_TABLE when it keeps the `beam` best
    extensions of each prefix and never cuts the pooled candidates back to `beam`."""
    live, grown = [()], set()
    for _ in range(max_len):
        new = []
        for prefix in live:
            grown.add(prefix)
            row = _PLACES_TABLE.get(prefix, [0.12, 0.08, 0.8])
            best = sorted(range(len(row)), key=lambda t: -row[t])[:beam]
            new += [prefix + (t,) for t in best]
        live = [p for p in new if p[-1] != eos]
        if not live:
            break
    return grown


def _check_beam_places(fn: Callable) -> None:
    """The prefixes a beam of 2 grows: [<eos>] finishes at step 0 and takes a place
    from [1]; at step 1 it is set aside, so [0, 0] and [0, 1] both grow."""
    grown: set = set()

    def step(prefix) -> Tensor:
        prefix = tuple(int(t) for t in prefix)
        grown.add(prefix)
        return torch.tensor(_PLACES_TABLE.get(prefix, [0.12, 0.08, 0.8])).log()

    fn(step, 2, 4, 2)
    want = {(), (0,), (0, 0), (0, 1)}
    if grown == {()}:
        raise ExerciseError(
            "beam=2: the search stopped when [<eos>] finished at step 0, with [0] "
            "(p = 0.55) still growing: set a finished sequence aside and go on while "
            "live prefixes remain, up to max_len"
        )
    if (1,) in grown:
        raise ExerciseError(
            "beam=2: [1] (p = 0.15) was grown, but the finished [<eos>] (p = 0.3) had "
            "pushed it out of the beam at step 0: a prefix that ends with <eos> takes "
            "one of the beam places on the step it finishes"
        )
    if (0, 1) not in grown:
        raise ExerciseError(
            "beam=2: [0, 1] (p = 0.19) was never grown: the finished [<eos>] kept a "
            "place after step 0; it takes a place only on the step it finishes, then "
            "it is set aside with the finished ones and leaves the places to the "
            "growing prefixes"
        )
    if grown == _grown_without_cut(2, 4, 2):
        raise ExerciseError(
            f"beam=2: step() was called on {sorted(grown)}: the beam best "
            "extensions of each prefix were all kept, never cut back to 2; keep the "
            "`beam` best of all the step's candidates together (every prefix's "
            "extensions pooled), not the `beam` best of each prefix"
        )
    if grown != want:
        raise ExerciseError(
            f"beam=2: step() was called on the prefixes {sorted(grown)}, expected "
            f"{sorted(want)}: grow only the live prefixes of the beam"
        )


_MAX_LEN_TABLE = {(): [0.55, 0.0, 0.45], (0,): [0.3, 0.25, 0.45]}


def _check_beam_max_len(fn: Callable) -> None:
    """A beam of 2 with max_len 4 where [0, 0, 0, 0] is still alive at the end: step()
    sees prefixes of 0 to 3 tokens, no more, no fewer; [<eos>] (p = 0.45) finishes
    first and is the best, [0, <eos>] (p = 0.25) and [0, 0, 0, <eos>] (p = 0.04)
    later, and [0, <eos>] has the best mean per token."""
    lengths: set = set()

    def step(prefix) -> Tensor:
        prefix = tuple(int(t) for t in prefix)
        lengths.add(len(prefix))
        default = [0.3, 0.2, 0.5] if len(prefix) == 2 else [0.12, 0.08, 0.8]
        return torch.tensor(_MAX_LEN_TABLE.get(prefix, default)).log()

    try:
        got = list(fn(step, 2, 4, 2)[0])
    except Exception:
        if max(lengths, default=0) != 2:
            raise
        got = None
    if max(lengths, default=0) >= 4:
        raise ExerciseError(
            f"beam=2, max_len=4: step() was called on a prefix of {max(lengths)} "
            "tokens: the search ran more than max_len steps; it runs max_len steps at "
            "most, for _ in range(max_len), so no sequence is longer than max_len"
        )
    if max(lengths, default=0) == 2:
        raise ExerciseError(
            "beam=2, max_len=4: step() never saw a prefix of 3 tokens, though "
            "[0, 0, 0] was still alive: the search stopped one step short, after "
            "max_len - 1 steps; run max_len steps, for _ in range(max_len), so that a "
            "sequence can reach max_len tokens"
        )
    if got == [0, 0, 0, 2]:
        raise ExerciseError(
            "beam=2: returned [0, 0, 0, <eos>] (p = 0.04), the last sequence to "
            "finish: keep every finished sequence, and return the best of them all, "
            "here [<eos>] (p = 0.45), the first to finish"
        )
    if got == [0, 2]:
        raise ExerciseError(
            "beam=2: returned [0, <eos>] (p = 0.25), the best mean log-prob per token:"
            " rank by the total log-probability, with no length penalty: [<eos>] "
            "(p = 0.45) wins"
        )
    if got != [2]:
        raise ExerciseError(
            f"beam=2, max_len=4, a toy still growing at max_len: got tokens {got}, "
            "expected [2] (p = 0.45)"
        )


def _length_step(prefix: tuple[int, ...]) -> Tensor:
    """A toy where the shortest sentence, [<eos>], has the highest total probability."""
    table = {(): [0.7, 0.0, 0.3], (0,): [0.6, 0.0, 0.4], (0, 0): [0.55, 0.0, 0.45]}
    return torch.tensor(table.get(tuple(prefix), [0.12, 0.08, 0.8])).log()


# 11 · corpus BLEU ---------------------------------------------------------------------

# five corpora of Chinese sentences, a character a token: (hypothesis, references)
_BLEU_CORPORA = [
    [("我今天必须把书还给图书馆。", ["我今天必须把书还给图书馆。"])],  # a perfect match
    [  # short hypotheses, references of different lengths: the brevity penalty, r
        ("我喜欢猫和狗。", ["我很喜欢猫和狗。", "我喜欢猫也喜欢狗。"]),
        ("他在图书馆看书。", ["他在图书馆里看书呢。", "他正在图书馆看书。"]),
    ],
    [  # repeated characters: clipping
        ("我的的的书在桌子上。", ["我的书在桌子上面。"]),
        ("汤姆说他不想出去了了。", ["汤姆说他不想出去了。", "汤姆说他不愿意出去。"]),
    ],
    [  # sentences of unequal quality: corpus counts, not a mean of sentence scores
        ("每个人都知道汤姆的法语很好。", ["每个人都知道汤姆的法语很好。"]),
        ("昨天我打了网球第一次。", ["昨天我第一次打了网球。"]),
        ("你一天喝几杯咖啡呢？", ["你一天喝几杯咖啡？"]),
    ],
    [  # the closest reference is the longer one: r is not the shortest either
        ("我今天很高兴。", ["我高兴。", "我今天很高兴啊。"]),
        ("他明天去北京。", ["他明天要坐火车去北京看朋友。"]),
    ],
    [  # 的 twice, once in each reference: clipped to the most of one (1), not the sum
        ("我的的书在桌子上。", ["我的书在桌子上。", "他的书在桌子上。"]),
    ],
    [  # no 4-gram matches (p_4 = 0): BLEU 0 with no smoothing, never a log(0) error
        ("我们明天去学校。", ["明天我们去学校了。"]),
    ],
    [  # a reference one shorter and one longer (and a far longer): r is the shorter
        (
            "我喜欢小猫。",
            ["我喜欢猫。", "我很喜欢小猫。", "我真的非常非常喜欢这只小猫。"],
        ),
    ],
    [  # the same, the longer of the two closest listed first: the tie is not by order
        (
            "我喜欢小猫。",
            ["我真的非常非常喜欢这只小猫。", "我很喜欢小猫。", "我喜欢猫。"],
        ),
    ],
    [  # the closest reference is shorter, one longer too: r is not the next longer
        ("我们明天早上去学校。", ["我们明天早去学校。", "我们明天早上一起去学校吧。"]),
    ],
]


def _grams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def bleu_reference(
    corpus,
    clip=True,
    bp=True,
    longest=False,
    arithmetic=False,
    shortest=False,
    summed=False,
    tie_longer=False,
    orders=4,
    add_k=0,
    first=(),
    bp_always=False,
    ref_total=False,
    hyp_length=False,
    mean_r=False,
    short=False,
    longest_total=False,
    distinct=False,
    corpus_r=False,
    at_least=False,
    best_ref=False,
) -> float:
    """Corpus BLEU (0-100) of [(hypothesis, [references])] token lists, or one of its
    typical mistakes: counts not clipped, no brevity penalty, the longest or the
    shortest reference as r, an arithmetic mean of the precisions, counts clipped to
    the sum over the references, the longer of two closest references, only the first
    `orders` precisions, add_k added to every match and n-gram count; the first
    reference alone for what `first` names ("clip", "r"), the penalty applied even
    when c > r, the precision's denominator counted in the closest reference, r the
    mean reference length; the n-grams one short, range(len - n); the denominator the
    most n-grams of any reference; each distinct n-gram counted once; r the total
    length of the reference column closest to c; r the shortest reference at least as
    long as the hypothesis (the closest if none is); each order's matches clipped to
    the one reference that matches most."""
    match, total, c, r = [0] * 4, [0] * 4, 0, 0

    def grams(tokens: list[str], n: int) -> Counter:
        if short:
            return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n))
        return _grams(tokens, n)

    sign = -1 if tie_longer else 1
    for hyp, refs in corpus:
        c += len(hyp)
        closest = min(refs, key=lambda ref: (abs(len(ref) - len(hyp)), sign * len(ref)))
        lengths = list(map(len, refs))
        closest = refs[0] if "r" in first else closest
        r += max(lengths) if longest else min(lengths) if shortest else len(closest)
        r += sum(lengths) / len(lengths) - len(closest) if mean_r else 0
        longer = [n for n in lengths if n >= len(hyp)]
        r += min(longer) - len(closest) if at_least and longer else 0
        for n in range(1, 5):
            got, most = grams(hyp, n), Counter()
            got = Counter(set(got)) if distinct else got
            for ref in refs[:1] if "clip" in first else refs:  # the most any one has
                most = most + grams(ref, n) if summed else most | grams(ref, n)
            if not clip:  # every occurrence of an n-gram some reference has counts
                most = Counter({g: got[g] for g in most})
            match[n - 1] += sum((got & most).values())
            if best_ref:  # the best single reference's total instead
                match[n - 1] += max(sum((got & grams(x, n)).values()) for x in refs)
                match[n - 1] -= sum((got & most).values())
            total[n - 1] += sum((grams(closest, n) if ref_total else got).values())
            total[n - 1] += (len(hyp) - sum(got.values())) if hyp_length else 0
            if longest_total:
                total[n - 1] += max(sum(grams(x, n).values()) for x in refs) - sum(
                    got.values()
                )
    if corpus_r:  # one r for the corpus: the reference column whose total is closest
        columns = [sum(map(len, col)) for col in zip(*(refs for _, refs in corpus))]
        r = min(columns, key=lambda n: (abs(n - c), n))
    if min(match) == 0 and not add_k:
        return 0.0
    p = [(m + add_k) / (t + add_k) for m, t in zip(match, total)][:orders]
    mean = sum(p) / orders if arithmetic else math.exp(sum(map(math.log, p)) / orders)
    short = c < r or bp_always
    return 100 * (math.exp(1 - r / c) if bp and short else 1.0) * mean


def _bleu_empty(fn: Callable) -> None:
    """A corpus whose every hypothesis is empty (c = 0) scores 0: no n-gram matches."""
    refs = [[["the", "cat"]], [["a", "dog", "ran"]]]
    try:
        got = float(fn([[], []], refs))
    except ZeroDivisionError as e:
        raise ExerciseError(
            f"every hypothesis empty (c = 0): ZeroDivisionError ({e}): with no n-gram "
            "matched BLEU is 0; return 0.0 when a precision is 0, before the brevity "
            "penalty exp(1 - r / c) divides by c"
        ) from None
    if got != 0.0:
        raise ExerciseError(f"every hypothesis empty: BLEU {got:.4f}, expected 0.0")


def _bleu_short(fn: Callable) -> None:
    """A hypothesis of 2 tokens among longer ones has no 3- or 4-grams: 0, not -1."""
    corpus = [(list("好。"), [list("好。")])] + [
        (list(h), [list(r) for r in refs]) for h, refs in _BLEU_CORPORA[0]
    ]
    want, got = _sacrebleu(corpus), float(fn(*map(list, zip(*corpus))))
    if not math.isclose(got, want, abs_tol=1e-4):
        raise ExerciseError(
            f"a hypothesis of 2 tokens with a longer one: BLEU {got:.4f}, expected "
            f"{want:.4f}: a hypothesis of length L has max(L - n + 1, 0) n-grams, "
            "never a negative count (2 - 4 + 1 = -1 4-grams is 0)"
        )


def _bleu_untouched(fn: Callable) -> None:
    """fn leaves the caller's lists as they were (no sort or append in place)."""
    corpus = [(list(h), [list(r) for r in refs]) for h, refs in _BLEU_CORPORA[1]]
    hyps, refs = [h for h, _ in corpus], [r for _, r in corpus]
    before = copy.deepcopy((hyps, refs))
    fn(hyps, refs)
    if (hyps, refs) != before:
        raise ExerciseError(
            "the caller's hypotheses or references changed (sorted or extended in "
            "place?): BLEU only reads them; sort a copy, sorted(refs, key=len)"
        )


def _sacrebleu(corpus, smooth_method: str = "none") -> float:
    """sacrebleu.corpus_bleu of [(hypothesis, [references])] token lists, unsmoothed
    unless smooth_method says otherwise (a zero precision gives 0)."""
    import sacrebleu

    n = max(len(refs) for _, refs in corpus)
    streams = [
        [" ".join(refs[j]) if j < len(refs) else None for _, refs in corpus]
        for j in range(n)
    ]
    hyps = [" ".join(hyp) for hyp, _ in corpus]
    return sacrebleu.corpus_bleu(
        hyps, streams, tokenize="none", smooth_method=smooth_method
    ).score


_R_SLIPS = {
    "r came from each sentence's first reference: take the closest reference's "
    "length (the shorter one on a tie)": dict(first=("r",)),
    "r is the mean of each sentence's reference lengths: take the closest "
    "reference's length (the shorter one on a tie)": dict(mean_r=True),
    "r is the shortest reference at least as long as the hypothesis: take the closest "
    "reference, shorter or longer (the shorter one on a tie)": dict(at_least=True),
}


def _r_slip(fn: Callable) -> str | None:
    """The one way of taking r in _R_SLIPS that gives fn's BLEU on every corpus (they
    agree on some), if any."""
    left = dict(_R_SLIPS)
    for sentences in _BLEU_CORPORA:
        corpus = [(list(h), [list(r) for r in refs]) for h, refs in sentences]
        try:
            got = float(fn([h for h, _ in corpus], [refs for _, refs in corpus]))
        except Exception:
            continue
        for hint, slip in list(left.items()):
            if not math.isclose(got, bleu_reference(corpus, **slip), abs_tol=1e-4):
                del left[hint]
    return next(iter(left)) if len(left) == 1 else None


def _sentence_mean_precisions(corpus: list) -> float:
    """BLEU with each p_n the mean of the sentences' precisions (those with n-grams of
    that order), not the corpus's total matches over its total n-grams."""
    p = []
    for n in range(1, 5):
        per = []
        for hyp, refs in corpus:
            got, most = _grams(hyp, n), Counter()
            for ref in refs:
                most |= _grams(ref, n)
            if got:
                per.append(sum((got & most).values()) / sum(got.values()))
        p.append(sum(per) / len(per) if per else 0.0)
    if min(p) == 0:
        return 0.0
    c = sum(len(hyp) for hyp, _ in corpus)
    r = sum(
        len(min(refs, key=lambda ref: (abs(len(ref) - len(hyp)), len(ref))))
        for hyp, refs in corpus
    )
    bp = math.exp(1 - r / c) if c < r else 1.0
    return 100 * bp * math.exp(sum(map(math.log, p)) / 4)


def _bleu_own_references(fn: Callable) -> None:
    """Each sentence's n-grams are clipped against its own references: here each
    hypothesis has a word that only the other sentence's reference holds."""
    corpus = [
        (list("我今天很喜欢猫和狗"), [list("我今天很喜欢猫和鸟")]),
        (list("他明天很喜欢鸟和鱼"), [list("他明天很喜欢狗和鱼")]),
    ]
    want = _sacrebleu(corpus)
    got = float(fn([h for h, _ in corpus], [refs for _, refs in corpus]))
    if math.isclose(got, want, abs_tol=1e-4):
        return
    raise ExerciseError(
        f"a corpus where each hypothesis has a word (狗, 鸟) that only the other "
        f"sentence's reference holds: BLEU {got:.4f}, expected {want:.4f}"
        + (
            ": the n-grams were clipped against the references of the whole corpus; "
            "clip each sentence's n-grams against its own references, then sum"
            if got > want
            else ""
        )
    )


def _bleu_tuple_keys(fn: Callable) -> None:
    """N-grams are tuples of tokens: joined into strings, ('ab', 'c') and ('a', 'bc')
    would be one n-gram, 'abc'."""
    corpus = [(["ab", "c", "d", "e", "f"], [["a", "bc", "d", "e", "f"]])]
    want = _sacrebleu(corpus)  # no 4-gram in common: 0
    got = float(fn([h for h, _ in corpus], [refs for _, refs in corpus]))
    if not math.isclose(got, want, abs_tol=1e-4):
        raise ExerciseError(
            f"tokens ['ab', 'c', 'd', 'e', 'f'] against ['a', 'bc', 'd', 'e', 'f']: "
            f"BLEU {got:.4f}, expected {want:.4f}: were the n-grams keyed by a joined "
            "string? ('ab', 'c', ...) and ('a', 'bc', ...) both become 'abc...'; key "
            "them by the tuple of tokens, tuple(tokens[i:i + n])"
        )


def _bleu_words(fn: Callable) -> None:
    """Tokens of several characters (words, as sacreBLEU's zh tokenizer keeps Latin
    words and numbers whole): each token is one unit, never split into characters."""
    corpus = [
        (
            ["Tom", "在", "图书馆", "看", "书", "。"],
            [["Tom", "在", "图书馆", "里", "看", "书", "。"]],
        ),
        (
            ["我", "有", "2024", "本", "书", "。"],
            [["我", "有", "2024", "本", "书", "。"]],
        ),
    ]
    want = _sacrebleu(corpus)
    got = float(fn([h for h, _ in corpus], [refs for _, refs in corpus]))
    if math.isclose(got, want, abs_tol=1e-4):
        return
    chars = [(list("".join(h)), [list("".join(r)) for r in refs]) for h, refs in corpus]
    if math.isclose(got, _sacrebleu(chars), abs_tol=1e-4):
        raise ExerciseError(
            f"tokens of several characters ('图书馆', '2024'): BLEU {got:.4f}, "
            f"expected {want:.4f}: the tokens were joined and split into "
            "characters; count n-grams of the tokens as given, tuple(tokens[i:i + n])"
        )
    raise ExerciseError(
        f"tokens of several characters ('图书馆', '2024'): BLEU {got:.4f}, expected "
        f"{want:.4f}: each token of the lists is one unit"
    )


@checker("corpus BLEU")
def check_corpus_bleu(fn: Callable) -> str:
    """fn(hypotheses, references) -> corpus BLEU (0-100), equal to sacreBLEU's with no
    smoothing (smooth_method="none"): a zero precision gives 0."""
    for k, sentences in enumerate(_BLEU_CORPORA, 1):
        corpus = [(list(h), [list(r) for r in refs]) for h, refs in sentences]
        want = _sacrebleu(corpus)
        try:
            got = fn([h for h, _ in corpus], [refs for _, refs in corpus])
        except ValueError as e:
            if "domain" not in str(e):
                raise
            raise ExerciseError(
                f"corpus {k}: ValueError ({e}): no 4-gram matches, a precision of 0, "
                "and log(0) is undefined: with no smoothing BLEU is 0 then, return 0.0"
            ) from None
        if not isinstance(got, (int, float)) and not torch.is_tensor(got):
            raise ExerciseError(f"corpus {k}: expected a number, got {type(got)}")
        got = float(got)
        if math.isclose(got, want, abs_tol=1e-4):
            continue
        if want == 0.0 and 0 < got < 5:
            raise ExerciseError(
                f"corpus {k}: BLEU {got:.4f}, expected 0.0: one precision is 0 (no "
                "4-gram matches), and with no smoothing BLEU is then 0; a small "
                "epsilon in the log is smoothing"
            )
        if any(
            math.isclose(got, bleu_reference(corpus, **slip), abs_tol=1e-4)
            for slip in _R_SLIPS.values()
        ) and (slip := _r_slip(fn)):
            raise ExerciseError(f"corpus {k}: {got:.2f}, expected {want:.2f}: {slip}")
        mean = sum(bleu_reference([pair]) for pair in corpus) / len(corpus)
        c = sum(len(h) for h, _ in corpus)
        r = sum(
            len(min(refs, key=lambda ref: (abs(len(ref) - len(h)), len(ref))))
            for h, refs in corpus
        )
        penalty = 1.0 if c >= r else math.exp(1 - r / c)
        for mistake, value in (
            ("BLEU is on a 0-100 scale: multiply by 100", want / 100),
            (
                "counts clipped to their sum over the references: clip each n-gram "
                "to the most times any one reference has it (the max, not the sum)",
                bleu_reference(corpus, summed=True),
            ),
            (
                "counts not clipped: an n-gram matches at most as often as one "
                "reference has it",
                bleu_reference(corpus, clip=False),
            ),
            (
                "no brevity penalty: multiply by exp(1 - r / c) when c < r",
                bleu_reference(corpus, bp=False),
            ),
            (
                "of two references as close, the longer was taken for r: take the "
                "shorter one on a tie",
                bleu_reference(corpus, tie_longer=True),
            ),
            (
                "r is the longest reference: take each sentence's closest one",
                bleu_reference(corpus, longest=True),
            ),
            (
                "r is the shortest reference: take each sentence's closest one "
                "(the shorter one when two are as close)",
                bleu_reference(corpus, shortest=True),
            ),
            (
                "only each sentence's first reference was used: clip the counts "
                "against all its references, and take r from the closest of them",
                bleu_reference([(h, refs[:1]) for h, refs in corpus]),
            ),
            (
                "only unigram precision: BLEU takes the geometric mean of the "
                "precisions of n = 1..4",
                bleu_reference(corpus, orders=1),
            ),
            (
                "the precisions of n = 1..3 only: BLEU takes those of n = 1..4",
                bleu_reference(corpus, orders=3),
            ),
            (
                "the counts were clipped against the first reference only: clip each "
                "n-gram to the most times any one of the references has it",
                bleu_reference(corpus, first=("clip",)),
            ),
            (
                "the brevity penalty was applied although the hypotheses are longer "
                "than the references (c > r): it is 1 then, exp(1 - r / c) only when "
                "c < r",
                bleu_reference(corpus, bp_always=True),
            ),
            (
                "each precision was divided by the reference's n-grams: divide the "
                "clipped matches by the hypothesis's n-grams",
                bleu_reference(corpus, ref_total=True),
            ),
            (
                "every order's precision was divided by the hypothesis's length: a "
                "sentence of c tokens has c - n + 1 n-grams",
                bleu_reference(corpus, hyp_length=True),
            ),
            (
                "add-one smoothing, (matches + 1) / (n-grams + 1): BLEU here has no "
                "smoothing; a zero precision gives 0",
                bleu_reference(corpus, add_k=1),
            ),
            (
                "sacreBLEU's default smoothing (exp): BLEU here has none; a zero "
                "precision gives 0",
                _sacrebleu(corpus, "exp"),
            ),
            (
                "an arithmetic mean of the precisions: BLEU takes the geometric one, "
                "exp(mean log p_n)",
                bleu_reference(corpus, arithmetic=True),
            ),
            (
                "each precision p_n was averaged over the sentences: sum the clipped "
                "matches and the n-grams over the corpus, then divide, p_n = sum "
                "matches / sum n-grams",
                _sentence_mean_precisions(corpus),
            ),
            (
                "a mean of sentence scores: sum the matches, n-grams and lengths over "
                "the corpus first",
                mean,
            ),
            (
                "every n-gram of the hypothesis was counted as a match (precisions "
                "of 1): count those a reference has, clipped to the most times one "
                "reference has them",
                100 * penalty,
            ),
            (
                "the brevity penalty is inverted, exp(1 - c / r), above 1: it is "
                "exp(1 - r / c) when c < r",
                bleu_reference(corpus, bp=False) * math.exp(1 - c / r),
            ),
            (
                "each sentence's n-grams are one short, range(len(tokens) - n): a "
                "sentence of L tokens has L - n + 1 n-grams, range(len(tokens) - n "
                "+ 1)",
                bleu_reference(corpus, short=True),
            ),
            (
                "each precision was divided by the references' n-grams: divide the "
                "clipped matches by the hypothesis's own n-grams",
                bleu_reference(corpus, longest_total=True),
            ),
            (
                "each distinct n-gram of a hypothesis counted once: count every "
                "occurrence, Counter(n-grams), and clip it to the references",
                bleu_reference(corpus, distinct=True),
            ),
            (
                "each order's matches were clipped to the one reference that matches "
                "most (its total): clip n-gram by n-gram, each to the most times any "
                "one reference has it, max over the references' Counters",
                bleu_reference(corpus, best_ref=True),
            ),
            (
                "r was chosen once for the corpus, the reference set whose total "
                "length is closest to c: choose it per sentence, the closest "
                "reference's length (the shorter on a tie), and sum those",
                bleu_reference(corpus, corpus_r=True),
            ),
        ):
            if math.isclose(got, value, abs_tol=1e-4):
                raise ExerciseError(
                    f"corpus {k}: {got:.2f}, expected {want:.2f}: {mistake}"
                )
        if any(got == round(want, d) for d in range(4)):
            raise ExerciseError(
                f"corpus {k}: BLEU {got:g}, expected {want:.4f}: the score was "
                "rounded; return it as it is (round only to print it)"
            )
        raise ExerciseError(f"corpus {k}: BLEU {got:.4f}, expected {want:.4f}")
    _bleu_empty(fn)
    _bleu_short(fn)
    _bleu_untouched(fn)
    _bleu_words(fn)
    _bleu_own_references(fn)
    _bleu_tuple_keys(fn)
    return (
        f"{len(_BLEU_CORPORA)} corpora equal sacrebleu.corpus_bleu, unsmoothed: "
        "clipping (to one reference's count), brevity, closest r (the shorter on a "
        "tie), a zero 4-gram precision gives 0; tokens of several characters"
    )
