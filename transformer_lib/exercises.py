"""The checkers of the build-it exercises, and the learner's record.

Written by hand, not exported from a notebook: grading is not what any notebook teaches.
Each notebook ends with build-its: a stub cell (the signature, the docstring and
`raise NotImplementedError`) that the learner fills in, then a checker call such as
`check_multi_head_attention(MyMultiHeadAttention)`. A checker compares the learner's
code with the library's reference on shapes, values, masks, gradients and edge cases and
prints one line:

    ✓ multi-head attention passes: ...          right
    ✗ multi-head attention: scores divided ...   wrong, and what is wrong
    · multi-head attention: not implemented yet  the stub, untouched

It returns None and never raises for a wrong answer (so "Run all" goes on); an error in
the learner's own code propagates with its traceback. Checkers draw their random inputs
inside `torch.random.fork_rng`, so the notebook's random stream is left as it was.

    python -m transformer_lib check 05     # which build-its of notebook 05 pass
    python -m transformer_lib check        # all notebooks

reads the learner's saved notebook, runs its cells tagged `build-it`, and checks each;
in a running notebook (Colab), `record("05", globals())` does the same with the kernel's
definitions.
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

TODO = "not implemented yet: fill in the cell above, then run this one again"


class ExerciseError(AssertionError):
    """What is wrong with an exercise's solution, in words."""


def _fmt(idx: list[int]) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def compare(
    name: str, got, want: Tensor, atol: float = 1e-5, rtol: float = 1e-4, show: int = 2
) -> None:
    """Raise ExerciseError naming the first differing entries if `got` is not (close to)
    `want`: its type, shape, dtype (for masks) or values."""
    if not isinstance(got, Tensor):
        raise ExerciseError(
            f"{name}: expected a torch.Tensor, got {type(got).__name__}"
        )
    if tuple(got.shape) != tuple(want.shape):
        raise ExerciseError(
            f"{name}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        )
    if want.dtype == torch.bool and got.dtype != torch.bool:
        raise ExerciseError(
            f"{name}: dtype {got.dtype}, expected torch.bool (True = may attend)"
        )
    if want.dtype == torch.bool or not want.is_floating_point():
        bad = got != want
    else:
        g, w = got.detach().double(), want.detach().double()
        bad = ~torch.isclose(g, w, rtol=rtol, atol=atol)
        bad &= ~(torch.isinf(g) & torch.isinf(w) & (g.sign() == w.sign()))
    if bad.any():
        shown = "; ".join(
            f"at {_fmt(i)} got {got[tuple(i)].item():.6g}, expected "
            f"{want[tuple(i)].item():.6g}"
            for i in bad.nonzero()[:show].tolist()
        )
        raise ExerciseError(
            f"{name}: {int(bad.sum())} of {bad.numel()} entries differ from the "
            f"reference: {shown}"
        )


def _close(got, want: Tensor, atol: float = 1e-6) -> bool:
    """Whether `got` is a tensor of want's shape and values (to recognise a mistake)."""
    return (
        isinstance(got, Tensor)
        and got.shape == want.shape
        and torch.allclose(got.detach().double(), want.detach().double(), atol=atol)
    )


def _first(got):
    """The output of a module that returns (output, weights) or the output alone."""
    return got[0] if isinstance(got, tuple) else got


def _load(mine: nn.Module, state: dict, name: str) -> None:
    """Copy the reference's weights into the learner's module, or say which names
    differ."""
    if not isinstance(mine, nn.Module):
        raise ExerciseError(f"{name}: expected an nn.Module, got {type(mine).__name__}")
    have = mine.state_dict()
    missing = [k for k in state if k not in have]
    extra = [k for k in have if k not in state]
    if missing or extra:
        raise ExerciseError(
            f"{name}: its parameters should be named as the docstring says; missing "
            f"{missing or 'none'}, unexpected {extra or 'none'}"
        )
    for k, v in state.items():
        if have[k].shape != v.shape:
            raise ExerciseError(
                f"{name}: {k} has shape {tuple(have[k].shape)}, expected "
                f"{tuple(v.shape)}"
            )
    mine.load_state_dict(state)


def _compare_grads(mine: nn.Module, ref: nn.Module, name: str, rename=None) -> None:
    """After backward on both: each parameter's gradient equals the reference's."""
    ref_params = dict(ref.named_parameters())
    for key, p in mine.named_parameters():
        r = ref_params[rename(key) if rename else key]
        if p.grad is None:
            raise ExerciseError(
                f"{name}: no gradient reached {key}: is it used in forward, and not "
                "detached?"
            )
        compare(f"{name}, the gradient of {key}", p.grad, r.grad, atol=1e-8)


def _jitter(module: nn.Module) -> nn.Module:
    """The module in float64 with noise on every weight, so that no two LayerNorms are
    alike (at initialisation they all are 1 and 0)."""
    module = module.double()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module


# the checkers: a verifier each, wrapped -----------------------------------------------


def outcome(check: Callable, fn) -> tuple[str, str]:
    """Run a checker's verification on `fn`: ("pass", what was checked), ("todo",
    TODO) for the stub, or ("fail", what is wrong)."""
    try:
        with torch.random.fork_rng(devices=[]):
            return "pass", check.verify(fn)
    except NotImplementedError:
        return "todo", TODO
    except ExerciseError as e:
        return "fail", str(e)


_MARK = {"pass": "\u2713", "fail": "\u2717", "todo": "\u00b7"}


def _line(title: str, status: str, text: str) -> str:
    joint = " passes: " if status == "pass" else ": "
    return f"{_MARK[status]} {title}{joint}{text}"


def _checker(title: str) -> Callable:
    """Turn verify(fn) -> str (raising ExerciseError) into check(fn) -> None that
    prints one line."""

    def wrap(verify: Callable[..., str]) -> Callable[..., None]:
        @functools.wraps(verify)
        def check(fn) -> None:
            print(_line(title, *outcome(check, fn)))

        check.verify, check.title = verify, title
        return check

    return wrap


# 00 · a file's checksum ---------------------------------------------------------------


@_checker("sha256_file")
def check_sha256(fn: Callable[[Path], str]) -> str:
    """fn(path) -> the file's sha256 as 64 lowercase hex characters, read in chunks."""
    sizes = (0, 1, 3 * 2**20 + 7)  # empty, one byte, more than any sensible chunk
    g = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            path = Path(d) / f"file_{n}.bin"
            data = torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
            path.write_bytes(bytes(data.tolist()))
            got, want = fn(path), hashlib.sha256(path.read_bytes()).hexdigest()
            if not isinstance(got, str):
                raise ExerciseError(
                    f"a {n}-byte file: expected a str, got {type(got).__name__} "
                    "(hexdigest(), not digest())"
                )
            if got != want:
                raise ExerciseError(f"a {n}-byte file: got {got!r}, expected {want!r}")
    return f"files of {', '.join(map(str, sizes))} bytes"


# 01 · the BPE merge loop --------------------------------------------------------------


def bpe_merges_reference(ids: list[int], n_merges: int) -> list[tuple[int, int]]:
    """The merge loop on one sequence of byte ids: count the pairs, merge the most
    frequent (on a tie the smallest) into id 256 + i, until n_merges or no pair."""
    from transformer_lib.tokenization import merge, most_frequent_pair, pair_counts

    ids, merges = list(ids), []
    while len(merges) < n_merges and len(ids) > 1:
        pair = most_frequent_pair(pair_counts(ids))
        ids = merge(ids, pair, 256 + len(merges))
        merges.append(pair)
    return merges


_BPE_CASES = [
    (b"aaabdaaabac", 3),  # Wikipedia's example
    (b"cdabcdab", 2),  # cd, da and ab tie: the smallest pair, (97, 98), wins
    (b"ab", 5),  # one pair, then nothing left to merge
    (b"", 3),
    (b"to be, or not to be: that is the question", 12),
]


def _bpe_hint(ids: list[int], want: list, got: list, i: int) -> str:
    """Why merge i differs: a tie broken the other way, a pair merged twice, ..."""
    from transformer_lib.tokenization import merge, pair_counts

    for j, pair in enumerate(want[:i]):
        ids = merge(ids, pair, 256 + j)
    counts = pair_counts(ids)
    if got[i] in want[:i]:
        return (
            f"; {got[i]} was merged already: replace it by its new id in the sequence "
            "before counting again"
        )
    if counts.get(got[i], 0) == counts[want[i]]:
        return (
            f"; both occur {counts[want[i]]} times: on a tie take the smallest pair "
            "(min), as most_frequent_pair does"
        )
    return f"; {want[i]} occurs {counts[want[i]]} times, {got[i]} {counts[got[i]]}"


@_checker("BPE merge loop")
def check_bpe_merges(fn: Callable[[list, int], list]) -> str:
    """fn(ids, n_merges) -> the merges [(a, b), ...] learned on byte ids `ids`, merge i
    making id 256 + i."""
    for text, n in _BPE_CASES:
        ids = list(text)
        want = bpe_merges_reference(ids, n)
        got = [tuple(p) for p in fn(list(ids), n)]
        if got == want:
            continue
        call = f"my_bpe_merges(list({text!r}), {n})"
        if got[: len(want)] == want:
            raise ExerciseError(
                f"{call} returned {len(got)} merges, expected {len(want)}: stop when "
                "the sequence has no pair left"
            )
        if want[: len(got)] == got:
            raise ExerciseError(
                f"{call} stopped after {len(got)} merges, expected {len(want)}"
            )
        i = next(j for j, (a, b) in enumerate(zip(got, want)) if a != b)
        raise ExerciseError(
            f"{call}: merge {i} is {got[i]}, expected {want[i]}"
            + _bpe_hint(ids, want, got, i)
        )
    return f"{len(_BPE_CASES)} texts, ties and running out of pairs included"


# 02 · the token embedding -------------------------------------------------------------


@_checker("token embedding")
def check_token_embedding(cls: type) -> str:
    """cls(vocab_size, d_model): a (n_vocab, C) parameter `weight`, std 1/sqrt(C) at the
    start; (B, T) ids -> weight[ids] * sqrt(C)."""
    torch.manual_seed(0)
    n_vocab, C = 500, 64
    emb = cls(n_vocab, C)
    w = getattr(emb, "weight", None)
    if not isinstance(w, nn.Parameter):
        raise ExerciseError(
            f"MyTokenEmbedding needs a parameter `weight` (nn.Parameter), got "
            f"{type(w).__name__}: a plain tensor is not trained"
        )
    if tuple(w.shape) != (n_vocab, C):
        raise ExerciseError(
            f"weight has shape {tuple(w.shape)}, expected ({n_vocab}, {C})"
        )
    std = w.detach().std().item()
    if not 0.9 < std * math.sqrt(C) < 1.1:
        raise ExerciseError(
            f"the table starts with std {std:.3f}, expected 1/sqrt(d_model) = "
            f"{C**-0.5:.3f}"
        )
    ids = torch.tensor([[5, 1, 7, 5], [0, 499, 5, 2]])
    out = emb(ids)
    if _close(out, w[ids]):
        raise ExerciseError(
            f"the vectors are not scaled: multiply by sqrt(d_model) = {C**0.5:g}"
        )
    compare("MyTokenEmbedding(ids)", out, w[ids] * math.sqrt(C))
    if not out.requires_grad:
        raise ExerciseError("no gradient reached weight: is the output made from it?")
    out.sum().backward()
    want = torch.zeros(n_vocab, C)
    want.index_add_(0, ids.flatten(), torch.full((ids.numel(), C), math.sqrt(C)))
    if w.grad is None:
        raise ExerciseError("no gradient reached weight: is the output made from it?")
    compare("the gradient of weight (id 5 is used 3 times)", w.grad, want)
    return (
        f"(2, 4) ids -> (2, 4, {C}), scaled by sqrt({C}); std {std:.3f} at the start; "
        "gradients only on the rows used"
    )


# 03 · positions -----------------------------------------------------------------------


@_checker("sinusoidal positions")
def check_sinusoidal_positions(fn: Callable[[int, int], Tensor]) -> str:
    """fn(context_len, d_model) -> PE (N, C): PE[pos, 2i] = sin(pos w_i), PE[pos, 2i+1]
    = cos(pos w_i), w_i = 10000^(-2i/C)."""
    from transformer_lib.positional import sinusoidal_positional_encoding

    for N, C in ((6, 8), (5, 7)):
        got, want = fn(N, C), sinusoidal_positional_encoding(N, C)
        name = f"my_sinusoidal_positions({N}, {C})"
        if _close(got, want, atol=1e-5):
            continue
        pos = torch.arange(N, dtype=torch.float32)
        if isinstance(got, Tensor) and got.shape == want.shape:
            if _close(got[:, 0], pos.cos()):
                raise ExerciseError(
                    f"{name}: column 0 holds cos(pos); even columns hold the sines, "
                    "odd columns the cosines"
                )
            if _close(got[:, 2], (pos * 10000 ** (-1 / C)).sin(), atol=1e-5):
                raise ExerciseError(
                    f"{name}: column 2 has frequency 10000^(-1/C): the exponent is "
                    "-2i/C, with 2i the column of the sine"
                )
        compare(name, got, want)
    return "equals the paper's table for (6, 8) and an odd width, (5, 7)"


def rope_reference(x: Tensor, base: float = 10000.0) -> Tensor:
    """x (B, T, C) -> each pair (x[2i], x[2i+1]) of token t rotated by the angle t *
    base**(-2i/C)."""
    T, C = x.shape[-2:]
    angle = torch.arange(T, dtype=x.dtype)[:, None] * base ** (
        -torch.arange(0, C, 2, dtype=x.dtype) / C
    )  # (T, C/2)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, T, C/2) each
    rotated = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return rotated.flatten(-2)  # (B, T, C)


@_checker("RoPE")
def check_rope(fn: Callable[[Tensor], Tensor]) -> str:
    """fn(x (B, T, C)) -> RoPE-rotated x; also checks that scores then depend only on
    the offset."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 8, generator=g, dtype=torch.float64)
    got = fn(x)
    if isinstance(got, Tensor) and got.shape == x.shape:
        halves = torch.cat([x[..., :4], x[..., 4:]], -1)
        swapped = rope_reference(halves[..., [0, 4, 1, 5, 2, 6, 3, 7]])
        if _close(got, swapped[..., [0, 2, 4, 6, 1, 3, 5, 7]], atol=1e-9):
            raise ExerciseError(
                "my_apply_rope rotates the first half against the second half (a "
                "real convention, not this one): rotate neighbours x[2i], x[2i+1]"
            )
    compare("my_apply_rope", got, rope_reference(x), atol=1e-9)
    q = torch.randn(8, generator=g, dtype=torch.float64).expand(1, 7, 8)
    scores = fn(q)[0] @ fn(q)[0].T  # (T, T): the same query at every position
    for k in range(1, 7):
        diag = scores.diagonal(k)
        if not torch.allclose(diag, diag[:1].expand_as(diag)):
            raise ExerciseError(f"scores at offset {k} vary with position")
    return "equals the reference on (2, 7, 8); scores depend only on the offset"


# 04 · attention with a mask -----------------------------------------------------------


def _weights_hint(q: Tensor, k: Tensor, v: Tensor, w: Tensor) -> str | None:
    """Recognise a wrongly scaled softmax of q k^T."""
    s = q @ k.transpose(-2, -1)
    for scale, what in (
        (1.0, "without the 1/sqrt(d_k) scale"),
        (q.size(-1), "divided by d_k, not sqrt(d_k)"),
        (math.sqrt(v.size(-1)), f"divided by sqrt({v.size(-1)}), v's width, not d_k's"),
    ):
        if _close(w, (s / scale).softmax(-1)):
            return f"the weights are the softmax of q k^T {what}"
    if _close(w, (s / math.sqrt(q.size(-1))).softmax(-2)):
        return "each column sums to 1: take the softmax over the keys (dim=-1)"
    return None


@_checker("attention with a mask")
def check_attention(fn: Callable[..., tuple[Tensor, Tensor]]) -> str:
    """fn(q, k, v, mask=None) -> (out (..., T_q, D_v), weights (..., T_q, T_k)); mask
    True = may attend; a query that may see no key gets zero weights."""
    from transformer_lib.attention import scaled_dot_product_attention as sdpa

    g = torch.Generator().manual_seed(0)
    shapes = ((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 4))
    q, k, v = (torch.randn(s, generator=g, dtype=torch.float64) for s in shapes)
    mask = torch.ones(5, 6, dtype=torch.bool).tril(1)
    mask[2] = False  # query 2 may see no key
    for m, name in ((None, "without a mask"), (mask, "with a mask")):
        got = fn(q, k, v) if m is None else fn(q, k, v, m)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise ExerciseError("return a pair (output, weights)")
        out, w = got
        want_out, want_w = sdpa(q, k, v, m)
        if m is not None and isinstance(w, Tensor) and w.shape == want_w.shape:
            if w[..., 2, :].isnan().any():
                raise ExerciseError(
                    "query 2 may see no key and its weights are NaN: give such a row "
                    "zero weights (and so a zero output)"
                )
            sums = w.sum(-1)[0, 0]  # (T_q,)
            for r in (0, 1, 3, 4):
                if abs(sums[r] - 1) > 1e-6:
                    raise ExerciseError(
                        f"row {r} of the weights sums to {sums[r]:.2f}: the mask was "
                        "applied after the softmax (set masked scores to -inf first)"
                    )
            if (w[..., ~mask] != 0).any():
                raise ExerciseError(
                    "keys the mask forbids get weight: True = may attend, so mask "
                    "where the mask is False"
                )
        hint = _weights_hint(q, k, v, w) if m is None else None
        if hint and not _close(w, want_w):
            raise ExerciseError(hint)
        compare(f"weights {name}", w, want_w, atol=1e-9)
        compare(f"output {name}", out, want_out, atol=1e-9)
    q.requires_grad_()
    out = fn(q, k, v, mask)[0]
    out.sum().backward()
    if q.grad is None or q.grad.isnan().any():
        raise ExerciseError(
            "q's gradient is missing or NaN: a softmax of all -inf breaks backward; "
            "let an empty row attend everywhere, then zero its weights"
        )
    q2 = q.detach().clone().requires_grad_()
    sdpa(q2, k, v, mask)[0].sum().backward()
    compare("q's gradient", q.grad, q2.grad, atol=1e-9)
    return (
        "q (2, 3, 5, 8), k (2, 3, 6, 8), v (2, 3, 6, 4); a mask with an empty row; "
        "gradients"
    )


# 05 · multi-head attention ------------------------------------------------------------


def _mha_variant(m, query, key, value, mask, scale=None, split_wrong=False):
    """MultiHeadAttention's forward with a usual mistake, to recognise it."""
    B, T, C = query.shape
    H = m.n_heads
    D = C // H

    def split(x: Tensor) -> Tensor:  # (B, T, C) -> (B, H, T, D)
        if split_wrong:
            return x.reshape(B, H, x.size(1), D)
        return x.view(B, x.size(1), H, D).transpose(1, 2)

    q, k, v = split(m.q_proj(query)), split(m.k_proj(key)), split(m.v_proj(value))
    s = q @ k.transpose(-2, -1) / math.sqrt(scale or D)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    y = s.softmax(-1) @ v  # (B, H, T, D)
    merged = y.reshape(B, T, C) if split_wrong else y.transpose(1, 2).reshape(B, T, C)
    return m.out_proj(merged)


@_checker("multi-head attention")
def check_multi_head_attention(cls: type) -> str:
    """cls(d_model, n_heads) with q_proj, k_proj, v_proj, out_proj; forward(query,
    key=None, value=None, mask=None) -> (B, T_q, C)."""
    from transformer_lib.multi_head import MultiHeadAttention

    torch.manual_seed(0)
    ref = MultiHeadAttention(16, 4).double().eval()
    mine = cls(16, 4)
    _load(mine, ref.state_dict(), "MyMultiHeadAttention")
    mine.double().eval()
    x, mem = torch.randn(2, 5, 16).double(), torch.randn(2, 7, 16).double()
    pad = torch.tensor([[1] * 7, [1] * 4 + [0] * 3], dtype=torch.bool)[:, None, None]
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    cases = (
        ("self-attention", (x,), None),
        ("self-attention, causal mask", (x,), causal),
        ("cross-attention, padded keys", (x, mem, mem), pad),
    )
    for name, args, mask in cases:
        got = _first(mine(*args, mask=mask))
        kv = args[1] if len(args) > 1 else x
        want = ref(x, kv, kv, mask=mask)[0]
        if _close(got, want):
            continue
        with torch.no_grad():
            if _close(got, _mha_variant(ref, x, kv, kv, mask, scale=16)):
                raise ExerciseError(
                    f"{name}: scores divided by sqrt(d_model) = 4, expected "
                    "sqrt(d_head) = 2: each head has width d_model / n_heads"
                )
            if _close(got, _mha_variant(ref, x, kv, kv, mask, split_wrong=True)):
                raise ExerciseError(
                    f"{name}: heads split with reshape(B, H, T, D), which mixes "
                    "positions: view(B, T, H, D), then transpose(1, 2)"
                )
            if mask is not None and _close(got, ref(x, kv, kv)[0]):
                raise ExerciseError(f"{name}: the mask was ignored")
        compare(name, got, want)
    _first(mine(x, mem, mem, mask=pad)).pow(2).sum().backward()
    ref(x, mem, mem, mask=pad)[0].pow(2).sum().backward()
    _compare_grads(mine, ref, "MyMultiHeadAttention")
    return (
        "equals MultiHeadAttention: self-attention, causal, cross-attention with "
        "padding; gradients"
    )


# 06 · the masks of a batch ------------------------------------------------------------


@_checker("masks")
def check_masks(fn: Callable[[Tensor, Tensor, int], tuple[Tensor, Tensor]]) -> str:
    """fn(src (B, S), tgt_in (B, T), pad_id) -> (src_mask (B, 1, 1, S), tgt_mask
    (B, 1, T, T)), bool, True = may attend."""
    from transformer_lib.masks import causal_mask, padding_mask

    src = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 3, 4, 2]])
    tgt = torch.tensor([[1, 5, 6, 0], [1, 7, 0, 0]])
    got = fn(src, tgt, 0)
    if not (isinstance(got, tuple) and len(got) == 2):
        raise ExerciseError("return a pair (src_mask, tgt_mask)")
    src_mask, tgt_mask = got
    compare("src_mask", src_mask, padding_mask(src, 0))
    pad = padding_mask(tgt, 0)  # (B, 1, 1, T)
    want = causal_mask(4) & pad  # (B, 1, T, T)
    if isinstance(tgt_mask, Tensor) and tgt_mask.shape == want.shape:
        if tgt_mask.dtype == torch.bool and tgt_mask[1, 0].triu(1).any():
            i, j = tgt_mask[1, 0].triu(1).nonzero()[0].tolist()
            raise ExerciseError(
                f"tgt_mask: query {i} may see key {j}, a later token: the causal part "
                "is the lower triangle (tril)"
            )
        if _close(tgt_mask.float(), causal_mask(4).expand_as(want).float()):
            raise ExerciseError(
                "tgt_mask: the target's padding is missing: queries may see <pad> keys"
            )
        if _close(tgt_mask.float(), (causal_mask(4) & pad.transpose(-1, -2)).float()):
            raise ExerciseError(
                "tgt_mask: padding masks the query rows; it must mask the key "
                "columns (the last dimension)"
            )
    compare("tgt_mask", tgt_mask, want)
    return "(2, 5) sources, (2, 4) targets with padding -> (2, 1, 1, 5), (2, 1, 4, 4)"


# 07 · an encoder layer ----------------------------------------------------------------


@_checker("encoder layer")
def check_encoder_layer(cls: type) -> str:
    """cls(d_model, n_heads, d_ff) with self_attn, ff, norm1, norm2; forward(x,
    mask=None) -> (B, T, C), pre-norm."""
    from transformer_lib.encoder import EncoderLayer

    torch.manual_seed(0)
    ref = _jitter(EncoderLayer(16, 4, 32, dropout=0.0, norm_first=True)).eval()
    mine = cls(16, 4, 32)
    _load(mine, ref.state_dict(), "MyEncoderLayer")
    mine.double().eval()
    x = torch.randn(2, 5, 16).double()
    mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]], dtype=torch.bool)[:, None, None]
    got = _first(mine(x, mask))
    want = ref(x, mask)
    if not _close(got, want):
        with torch.no_grad():
            ref.norm_first = False
            post = ref(x, mask)
            ref.norm_first = True
            attended = x + ref.self_attn(ref.norm1(x), mask=mask)[0]
            hints = (
                (
                    post,
                    "this is post-norm, LN(x + sublayer(x)); build pre-norm, "
                    "x + sublayer(LN(x))",
                ),
                (ref(x), "the mask was not passed to self-attention"),
                (
                    ref.ff(ref.norm2(attended)),
                    "the feed-forward output is not added to its input (the residual)",
                ),
                (
                    attended + ref.ff(ref.norm1(attended)),
                    "norm1 is used twice: the "
                    "feed-forward sublayer has its own LayerNorm, norm2",
                ),
            )
            for variant, hint in hints:
                if _close(got, variant):
                    raise ExerciseError(hint)
    compare("MyEncoderLayer(x, mask)", got, want)
    got.pow(2).sum().backward()
    want.pow(2).sum().backward()
    _compare_grads(mine, ref, "MyEncoderLayer")
    return "equals EncoderLayer(norm_first=True) on (2, 5, 16) with padding; gradients"


# 08 · a decoder layer, and the shifted targets ----------------------------------------


@_checker("decoder layer")
def check_decoder_layer(cls: type) -> str:
    """cls(d_model, n_heads, d_ff) with self_attn, cross_attn, ff, norm1..3;
    forward(x, memory, tgt_mask=None, memory_mask=None) -> (B, T, C), pre-norm."""
    from transformer_lib.seq2seq import DecoderLayer

    torch.manual_seed(0)
    ref = _jitter(DecoderLayer(16, 4, 32, dropout=0.0, norm_first=True)).eval()
    mine = cls(16, 4, 32)
    _load(mine, ref.state_dict(), "MyDecoderLayer")
    mine.double().eval()
    x, mem = torch.randn(2, 5, 16).double(), torch.randn(2, 7, 16).double()
    tgt_mask = torch.ones(5, 5, dtype=torch.bool).tril()
    mem_mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3], dtype=torch.bool)
    mem_mask = mem_mask[:, None, None]  # (B, 1, 1, S)
    got = _first(mine(x, mem, tgt_mask, mem_mask))
    want = ref(x, mem, tgt_mask, mem_mask)
    if not _close(got, want):
        with torch.no_grad():

            def sa(h):
                return ref.self_attn(ref.norm1(h), mask=tgt_mask)[0]

            def ca(h, kv=mem, m=mem_mask):
                n = ref.norm2(h)
                return ref.cross_attn(n, n if kv is None else kv, mask=m)[0]

            def ff(h):
                return h + ref.ff(ref.norm3(h))

            h = x + sa(x)
            hints = (
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
            )
            for variant, hint in hints:
                if _close(got, variant):
                    raise ExerciseError(hint)
            h2 = x + ca(x)
            h2 = h2 + ref.self_attn(ref.norm1(h2), mask=tgt_mask)[0]
            if _close(got, ff(h2)):
                raise ExerciseError(
                    "cross-attention came first: self-attention, then cross-attention,"
                    " then the feed-forward network"
                )
    compare("MyDecoderLayer(x, memory, tgt_mask, memory_mask)", got, want)
    got.pow(2).sum().backward()
    want.pow(2).sum().backward()
    _compare_grads(mine, ref, "MyDecoderLayer")
    return (
        "equals DecoderLayer(norm_first=True): x (2, 5, 16), memory (2, 7, 16), "
        "causal and padding masks; gradients"
    )


@_checker("shift targets")
def check_shift_targets(fn: Callable) -> str:
    """fn(seqs, bos, eos, pad) -> tgt_in (B, T), tgt_out (B, T): <bos> y and y <eos>,
    padded with pad."""
    seqs, bos, eos, pad = [[5, 6, 7], [8], [9, 10]], 1, 2, 0
    want_in = torch.tensor([[1, 5, 6, 7], [1, 8, 0, 0], [1, 9, 10, 0]])
    want_out = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0], [9, 10, 2, 0]])
    got = fn(seqs, bos, eos, pad)
    if not (isinstance(got, tuple) and len(got) == 2):
        raise ExerciseError("return a pair (tgt_in, tgt_out)")
    if _close(got[0], want_out) and _close(got[1], want_in):
        raise ExerciseError(
            "tgt_in and tgt_out are swapped: the decoder reads <bos> y, and learns "
            "to predict y <eos>"
        )
    compare("tgt_in", got[0], want_in)
    compare("tgt_out", got[1], want_out)
    return "3 sequences of lengths 3, 1, 2 -> (3, 4) inputs and targets"


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


def _translation_batches() -> list[tuple[Tensor, Tensor, Tensor]]:
    """Two small padded batches (src, tgt_in, tgt_out) for a vocabulary of 12."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(2):
        src = torch.randint(3, 12, (3, 6), generator=g)
        y = torch.randint(3, 12, (3, 5), generator=g)
        src[0, 4:], y[1, 3:] = 0, 0  # padding
        tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), y[:, :-1]], 1)
        out.append((src, tgt_in, y))
    return out


@_checker("training step")
def check_train_step(fn: Callable) -> str:
    """fn(model, optimizer, src, tgt_in, tgt_out, pad_id, label_smoothing) -> the loss
    (a float); the weights take one step."""
    from transformer_lib.seq2seq import Seq2SeqConfig, Transformer

    torch.manual_seed(0)
    model = Transformer(Seq2SeqConfig.tiny(12, 12)).double()
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    for step, (src, tgt_in, tgt_out) in enumerate(_translation_batches(), 1):
        with torch.no_grad():
            logits = ref(src, tgt_in).flatten(0, 1)
            variants = (
                (
                    F.cross_entropy(logits, tgt_out.flatten(), label_smoothing=0.1),
                    "padded targets were counted: pass ignore_index=pad_id",
                ),
                (
                    F.cross_entropy(logits, tgt_out.flatten(), ignore_index=0),
                    "this is plain cross-entropy: pass label_smoothing",
                ),
                (
                    F.cross_entropy(
                        ref(src, tgt_out).flatten(0, 1),
                        tgt_out.flatten(),
                        ignore_index=0,
                        label_smoothing=0.1,
                    ),
                    "the model read tgt_out: it reads tgt_in (<bos> y) and predicts "
                    "tgt_out",
                ),
            )
        before = [p.detach().clone() for p in model.parameters()]
        got = fn(model, opt, src, tgt_in, tgt_out, 0, 0.1)
        want = train_step_reference(ref, ref_opt, src, tgt_in, tgt_out, 0, 0.1)
        if not isinstance(got, float):
            raise ExerciseError(
                f"return the loss as a float (loss.item()), got {type(got).__name__}"
            )
        if not math.isclose(got, want, rel_tol=1e-9):
            for value, hint in variants:
                if math.isclose(got, value.item(), rel_tol=1e-9):
                    raise ExerciseError(f"step {step}: loss {got:.4f}, {hint}")
            raise ExerciseError(f"step {step}: loss {got:.6f}, expected {want:.6f}")
        for (name, p), r, b in zip(model.named_parameters(), ref.parameters(), before):
            if torch.allclose(p, r, atol=1e-10):
                continue
            if torch.equal(p, b):
                raise ExerciseError(
                    f"step {step}: the weights did not change: call optimizer.step() "
                    "after loss.backward()"
                )
            if step == 2:
                raise ExerciseError(
                    f"step 2: the loss is right but {name} moved too far: step 1's "
                    "gradients were still there; call optimizer.zero_grad() first"
                )
            raise ExerciseError(f"step {step}: {name} differs from the reference")
    return "two steps of a tiny translator with padding: losses and weights match"


def _regression_step(log: list) -> Callable:
    """A real training step on a linear model that records the rate and the mode it
    ran at."""

    def step(model, optimizer, batch) -> float:
        log.append((optimizer.param_groups[0]["lr"], model.training))
        x, y = batch
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


@_checker("training loop")
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
    opt = torch.optim.SGD(model.parameters(), lr=123.0)
    log: list = []
    losses = fn(model, opt, batches, lr_at, _regression_step(log))
    if not isinstance(losses, list) or len(losses) != len(batches):
        n = len(losses) if isinstance(losses, list) else type(losses).__name__
        raise ExerciseError(f"returned {n} losses for {len(batches)} batches")
    if len(log) != len(batches):
        raise ExerciseError(
            f"train_step ran {len(log)} times for {len(batches)} batches"
        )
    for s, (lr, training) in enumerate(log):
        if not training:
            raise ExerciseError(
                f"step {s} ran in eval mode (dropout off): call model.train() first"
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
    compare("the losses", torch.tensor(losses), torch.tensor(want))

    def nan_at_2(model, optimizer, batch, calls=[]) -> float:
        calls.append(1)
        return math.nan if len(calls) == 3 else 1.0

    try:
        fn(
            nn.Linear(3, 1),
            torch.optim.SGD([nn.Parameter(torch.zeros(1))]),
            batches,
            lr_at,
            nan_at_2,
        )
    except ValueError as e:
        if "2" not in str(e):
            raise ExerciseError(f"the error should name the step (2): {e}") from None
    else:
        raise ExerciseError(
            "a NaN loss at step 2 went unnoticed: raise ValueError naming the step"
        )
    return "6 steps of warm-up: rates, mode and losses match; a NaN loss stops it"


# 10 · top-p sampling, and beam search -------------------------------------------------


@_checker("top-p sampling")
def check_top_p_sampling(fn: Callable) -> str:
    """fn(logits (B, n_vocab), p, generator) -> (B,) token ids drawn from the smallest
    set of top tokens whose probability reaches p, renormalised."""
    from transformer_lib.sampling import filter_logits

    probs = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05], [0.05, 0.1, 0.6, 0.05, 0.2]])
    n = 4000
    for p in (0.45, 0.65, 0.88, 1.0):  # no p on a boundary: rounding would decide
        want = filter_logits(probs.log(), top_p=p).softmax(-1)  # (2, n_vocab)
        g = torch.Generator().manual_seed(0)
        got = fn(probs.log().repeat(n, 1), p, g)
        if not isinstance(got, Tensor) or got.numel() != 2 * n:
            shape = tuple(got.shape) if isinstance(got, Tensor) else type(got)
            raise ExerciseError(f"p={p}: expected ({2 * n},) token ids, got {shape}")
        got = got.reshape(n, 2)
        for row in range(2):
            freq = torch.bincount(got[:, row], minlength=5).double() / n
            for t in range(5):
                pr, f, w = probs[row, t].item(), freq[t].item(), want[row, t].item()
                if w == 0 and f > 0:
                    raise ExerciseError(
                        f"p={p}: drew token {t} (probability {pr:g}), outside the "
                        "smallest set of top tokens reaching p"
                    )
                if w > 0 and f == 0:
                    raise ExerciseError(
                        f"p={p}: token {t} (probability {pr:g}) was never drawn: the "
                        "token whose probability crosses p belongs to the set"
                    )
            for t in range(5):
                f, w = freq[t].item(), want[row, t].item()
                if abs(f - w) > 0.03:
                    raise ExerciseError(
                        f"p={p}: token {t} drawn {f:.0%} of the time, expected {w:.0%}"
                    )
    return f"two distributions, p = 0.45, 0.65, 0.88, 1; {n} draws each"


_BEAM_TABLE = {
    (): [0.5, 0.4, 0.1],
    (0,): [0.4, 0.3, 0.3],
    (1,): [0.05, 0.9, 0.05],
    (0, 0): [0.0, 0.0, 1.0],
    (0, 1): [0.0, 0.0, 1.0],
    (1, 1): [0.0, 0.0, 1.0],
}


def _toy_step(prefix: tuple[int, ...]) -> Tensor:
    """Log-probabilities of tokens 0, 1 and 2 (= <eos>) after `prefix`: greedy picks 0,
    the best is 1 1."""
    return torch.tensor(_BEAM_TABLE.get(tuple(prefix), [0.1, 0.1, 0.8])).log()


def beam_search_reference(
    step: Callable, beam: int, max_len: int, eos: int = 2
) -> tuple[list[int], float]:
    """The best finished sequence (eos included) and its log-probability, keeping `beam`
    prefixes per step."""
    alive, done = [((), 0.0)], []
    for _ in range(max_len):
        grown = [
            (p + (t,), s + lp)
            for p, s in alive
            for t, lp in enumerate(step(p).tolist())
            if lp > -math.inf
        ]
        grown.sort(key=lambda c: -c[1])
        alive = []
        for p, s in grown[:beam]:
            (done if p[-1] == eos else alive).append((p, s))
        if not alive:
            break
    best = max(done + alive, key=lambda c: c[1])
    return list(best[0]), best[1]


@_checker("beam search")
def check_beam_search(fn: Callable) -> str:
    """fn(step, beam, max_len, eos) -> (tokens, logprob) on a toy model where greedy and
    beam disagree."""
    for beam, want in ((1, [0, 0, 2]), (2, [1, 1, 2])):
        got = fn(_toy_step, beam, 4, 2)
        tokens, score = list(got[0]), float(got[1])
        want_score = beam_search_reference(_toy_step, beam, 4)[1]
        if tokens != want:
            raise ExerciseError(
                f"beam={beam}: got tokens {tokens}, expected {want} (log-prob "
                f"{want_score:.4f})"
            )
        if not math.isclose(score, want_score, rel_tol=1e-5):
            raise ExerciseError(
                f"beam={beam}: tokens right, but log-prob {score:.4f}, expected "
                f"{want_score:.4f}"
            )
    return (
        "beam 1 = greedy [0, 0, <eos>] (p = 0.2), beam 2 finds [1, 1, <eos>] (p = 0.36)"
    )


# 11 · a GPT block, and the KV cache ---------------------------------------------------

_BLOCK_NAMES = {
    "qkv": "attn.qkv",
    "proj": "attn.proj",
    "fc": "mlp.fc",
    "fc_out": "mlp.proj",
}


def _block_name(key: str) -> str:
    """The learner's parameter name -> the library Block's."""
    head, _, rest = key.partition(".")
    return f"{_BLOCK_NAMES.get(head, head)}.{rest}"


@_checker("GPT block")
def check_gpt_block(cls: type) -> str:
    """cls(d_model, n_heads) with norm1, norm2, qkv, proj, fc, fc_out; forward(x) ->
    (B, T, C): x + attn(norm1(x)), then x + mlp(norm2(x)), causal."""
    from transformer_lib.gpt import Block, GPTConfig

    torch.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=10,
        context_len=8,
        n_layers=1,
        n_heads=4,
        d_model=16,
        dropout=0.0,
        bias=True,
        norm="layer",
        gelu_approximate="tanh",
    )
    ref = _jitter(Block(cfg)).eval()
    mine = cls(16, 4)
    inverse = {v: k for k, v in _BLOCK_NAMES.items()}
    state = {
        inverse.get(k.rpartition(".")[0], k.rpartition(".")[0])
        + "."
        + k.rpartition(".")[2]: v
        for k, v in ref.state_dict().items()
    }
    _load(mine, state, "MyBlock")
    mine.double().eval()
    x = torch.randn(2, 6, 16).double()
    got = _first(mine(x))
    want = ref(x)[0]
    if isinstance(got, Tensor) and got.shape == want.shape:
        x2 = x.clone()
        x2[:, 3] = torch.randn(2, 16).double()  # not a shift: LayerNorm removes it
        changed = (_first(mine(x2)) - got)[:, :3].abs().amax().item()
        if changed > 1e-9:
            raise ExerciseError(
                "the output at positions 0-2 changed when token 3 changed: the "
                "attention must be causal (is_causal=True or a lower-triangular mask)"
            )
    if not _close(got, want):
        exact = copy.deepcopy(ref)
        exact.mlp.approximate = "none"
        if _close(got, exact(x)[0]):
            raise ExerciseError(
                "the MLP uses the exact GELU: GPT-2 uses the tanh approximation, "
                "F.gelu(h, approximate='tanh')"
            )
    compare("MyBlock(x)", got, want)
    got.pow(2).sum().backward()
    want.pow(2).sum().backward()
    _compare_grads(mine, ref, "MyBlock", rename=_block_name)
    return (
        "equals the library's Block (LayerNorm, GELU) on (2, 6, 16); causal; gradients"
    )


@_checker("KV cache")
def check_kv_cache(cls: type) -> str:
    """cls() with .length and update(k, v) -> all keys and values so far, (B, H,
    length + T, D) each, the new ones after the stored ones."""
    g = torch.Generator().manual_seed(0)
    cache = cls()
    ks, vs, total = [], [], 0
    for t in (4, 1, 1, 3):  # a prompt of 4 tokens, then generation
        k, v = (torch.randn(2, 3, t, 8, generator=g) for _ in range(2))
        ks.append(k)
        vs.append(v)
        total += t
        got = cache.update(k, v)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise ExerciseError("update should return a pair (keys, values)")
        keys, values = got
        want_k, want_v = torch.cat(ks, 2), torch.cat(vs, 2)
        if isinstance(keys, Tensor) and keys.shape == k.shape and total > t:
            raise ExerciseError(
                f"after {total} tokens update returned {t} keys: return everything "
                "stored so far"
            )
        compare(f"keys after {total} tokens", keys, want_k)
        compare(f"values after {total} tokens", values, want_v)
        if getattr(cache, "length", None) != total:
            raise ExerciseError(
                f"cache.length is {getattr(cache, 'length', None)} after {total} "
                "tokens: it counts the tokens stored"
            )
    q = torch.randn(2, 3, total, 8, generator=g)
    full = F.scaled_dot_product_attention(q, want_k, want_v, is_causal=True)
    last = F.scaled_dot_product_attention(q[:, :, -1:], keys, values)
    compare("attention of the last token over the cache", last, full[:, :, -1:])
    return "a prompt of 4 tokens, then 1, 1 and 3: keys, values and length match"


# 12 · attention in tiles with an online softmax ---------------------------------------


@_checker("tiled attention")
def check_tiled_attention(fn: Callable[[Tensor, Tensor, Tensor, int], Tensor]) -> str:
    """fn(q, k, v, block) -> softmax(q k^T / sqrt(D)) v computed over key blocks of
    `block`, never all T_k at once."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64) for n in (9, 13, 13)
    )
    want = F.scaled_dot_product_attention(q, k, v)
    for block in (1, 4, 13, 32):
        compare(f"block={block}", fn(q, k, v, block), want, atol=1e-9)
    return "equals F.scaled_dot_product_attention for blocks of 1, 4, 13 and 32 keys"


# 13 · grouped-query attention, and SwiGLU ---------------------------------------------


def _grouped_reference(q: Tensor, k: Tensor, v: Tensor, causal: bool = True) -> Tensor:
    """Query head h attends with key/value head h // (H / H_kv), one head at a time."""
    g = q.size(1) // k.size(1)
    heads = [
        F.scaled_dot_product_attention(
            q[:, h], k[:, h // g], v[:, h // g], is_causal=causal
        )
        for h in range(q.size(1))
    ]
    return torch.stack(heads, dim=1)  # (B, H, T, D)


def _wrong_group(name: str, q: Tensor, k: Tensor, v: Tensor, got: Tensor) -> None:
    """Raise ExerciseError naming the mistake, if it is a usual one."""
    if torch.allclose(got, _grouped_reference(q, k, v, causal=False), atol=1e-9):
        raise ExerciseError(
            f"{name}: queries also see later keys: apply the causal mask"
        )
    g = q.size(1) // k.size(1)
    for h in range(q.size(1)):
        for read in range(k.size(1)):
            one = F.scaled_dot_product_attention(
                q[:, h], k[:, read], v[:, read], is_causal=True
            )
            if read != h // g and torch.allclose(got[:, h], one, atol=1e-9):
                raise ExerciseError(
                    f"{name}: query head {h} read key/value head {read}, expected "
                    f"head {h // g} (heads {h // g * g} to {h // g * g + g - 1} share "
                    "it: .repeat tiles the heads, .repeat_interleave groups them)"
                )


@_checker("grouped-query attention")
def check_grouped_attention(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> str:
    """fn(q (B, H, T, D), k, v (B, H_kv, T, D)) -> causal attention (B, H, T, D), where
    query head h reads key/value head h // (H / H_kv)."""
    gen = torch.Generator().manual_seed(0)
    for n_kv in (4, 2, 1):
        q = torch.randn(2, 4, 6, 8, generator=gen, dtype=torch.float64)
        k, v = (
            torch.randn(2, n_kv, 6, 8, generator=gen, dtype=torch.float64)
            for _ in range(2)
        )
        name = f"H=4 query heads, H_kv={n_kv}"
        got, want = fn(q, k, v), _grouped_reference(q, k, v)
        if isinstance(got, Tensor) and got.shape == want.shape:
            if not torch.allclose(got.double(), want, atol=1e-9):
                _wrong_group(name, q, k, v, got.double())
        compare(name, got, want, atol=1e-9)
    return "equals the reference for 4 query heads and 4, 2 and 1 key/value heads"


@_checker("SwiGLU")
def check_swiglu(cls: type) -> str:
    """cls(d_model, d_ff) with gate, up, proj (no biases); forward(x) =
    proj(silu(gate(x)) * up(x))."""
    from transformer_lib.modern import SwiGLU

    torch.manual_seed(0)
    ref = SwiGLU(16, 24).double().eval()
    mine = cls(16, 24)
    _load(mine, ref.state_dict(), "MySwiGLU")
    mine.double().eval()
    x = torch.randn(2, 5, 16).double()
    got, want = mine(x), ref(x)
    if not _close(got, want):
        with torch.no_grad():
            g, u = ref.gate(x), ref.up(x)
            for h, hint in (
                (
                    g * F.silu(u),
                    "the SiLU went on up(x): it gates, so it goes on "
                    "gate(x), and up(x) stays linear",
                ),
                (F.gelu(g) * u, "the gate uses GELU: SwiGLU's is SiLU, x * sigmoid(x)"),
                (
                    F.silu(g),
                    "up(x) is missing: the gate multiplies a second, linear branch",
                ),
            ):
                if _close(got, ref.proj(h)):
                    raise ExerciseError(hint)
    compare("MySwiGLU(x)", got, want)
    got.pow(2).sum().backward()
    want.pow(2).sum().backward()
    _compare_grads(mine, ref, "MySwiGLU")
    return "equals the library's SwiGLU on (2, 5, 16); gradients"


# 14-16 · Part V -----------------------------------------------------------------------


@_checker("mask_targets")
def check_mask_targets(fn: Callable[[list[int], int], list[int]]) -> str:
    """fn(ids, n_prompt) -> ids[1:] with the first n_prompt - 1 targets set to -100."""
    cases = [
        ([1, 10, 11, 2, 20, 21, 3], 4),
        ([1, 2, 20, 3], 2),
        ([1, 5, 6, 7, 2, 9], 5),
    ]
    for ids, n_prompt in cases:
        got = list(fn(list(ids), n_prompt))
        want = [-100] * (n_prompt - 1) + ids[n_prompt:]
        if len(got) != len(want):
            raise ExerciseError(
                f"mask_targets({ids}, {n_prompt}): {len(got)} targets, expected "
                f"{len(want)} (the targets are ids[1:])"
            )
        for t, (g, w) in enumerate(zip(got, want)):
            if g != w:
                if g == -100:
                    what = "masked, but it is part of the translation"
                elif w == -100:
                    what = "kept, but it lies inside the prompt"
                else:
                    what = f"{g}, expected {w}"
                raise ExerciseError(
                    f"mask_targets({ids}, {n_prompt}): target {t} is {what}"
                )
    return "masks the prompt's targets and keeps the translation's"


@_checker("lora_forward")
def check_lora_forward(fn: Callable[..., Tensor]) -> str:
    """fn(x, W, b, A, B, alpha) -> x W^T + b + (alpha / r) x A^T B^T."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 6, generator=gen, dtype=torch.float64)  # (B, T, in)
    W = torch.randn(5, 6, generator=gen, dtype=torch.float64)  # (out, in)
    b = torch.randn(5, generator=gen, dtype=torch.float64)
    A = torch.randn(2, 6, generator=gen, dtype=torch.float64)  # (r, in)
    B = torch.randn(5, 2, generator=gen, dtype=torch.float64)  # (out, r)
    got = fn(x, W, b, A, B, 8.0)
    base = x @ W.T + b
    if isinstance(got, Tensor) and got.shape == base.shape:
        if torch.allclose(got, base + 8.0 * (x @ A.T @ B.T)):
            raise ExerciseError("lora_forward: scale by alpha / r, not alpha")
        if torch.allclose(got, base + x @ A.T @ B.T):
            raise ExerciseError(
                "lora_forward: the update is missing its scale alpha / r"
            )
    compare("lora_forward", got, base + 4.0 * (x @ A.T @ B.T), atol=1e-9)
    return "equals x W^T + b + (alpha / r) x A^T B^T"


@_checker("dpo_loss")
def check_dpo_loss(fn: Callable[..., Tensor]) -> str:
    """fn(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta) -> the mean
    of -log sigmoid(beta * (chosen log-ratio - rejected log-ratio))."""
    gen = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (
        -10 * torch.rand(6, generator=gen, dtype=torch.float64) for _ in range(4)
    )
    margin = (pc - rc) - (pr - rr)
    got = fn(pc, pr, rc, rr, 0.5)
    if isinstance(got, Tensor) and got.shape == ():
        if torch.allclose(got, -F.logsigmoid(-0.5 * margin).mean()):
            raise ExerciseError(
                "dpo_loss: the sign is flipped: the chosen log-ratio comes first"
            )
        if torch.allclose(got, -F.logsigmoid(margin).mean()):
            raise ExerciseError("dpo_loss: multiply the margin by beta")
    compare("dpo_loss", got, -F.logsigmoid(0.5 * margin).mean(), atol=1e-9)
    one = (torch.tensor([v], dtype=torch.float64) for v in (0.0, -2000.0, 0.0, 0.0))
    big = fn(*one, 1.0)
    compare(
        "dpo_loss at a margin of 2000",
        big,
        torch.tensor(0.0, dtype=torch.float64),
        atol=1e-9,
    )
    return "equals the paper's formula, also at a margin of 2000"


# the learner's record -----------------------------------------------------------------

# notebook -> (the name the learner defines, its checker), in the notebook's order
BUILD_ITS: dict[str, list[tuple[str, Callable]]] = {
    "00": [("sha256_file", check_sha256)],
    "01": [("my_bpe_merges", check_bpe_merges)],
    "02": [("MyTokenEmbedding", check_token_embedding)],
    "03": [
        ("my_sinusoidal_positions", check_sinusoidal_positions),
        ("my_apply_rope", check_rope),
    ],
    "04": [("my_attention", check_attention)],
    "05": [("MyMultiHeadAttention", check_multi_head_attention)],
    "06": [("my_masks", check_masks)],
    "07": [("MyEncoderLayer", check_encoder_layer)],
    "08": [
        ("MyDecoderLayer", check_decoder_layer),
        ("my_shift_targets", check_shift_targets),
    ],
    "09": [("my_train_step", check_train_step), ("my_train", check_training_loop)],
    "10": [
        ("my_sample_top_p", check_top_p_sampling),
        ("my_beam_search", check_beam_search),
    ],
    "11": [("MyBlock", check_gpt_block), ("MyKVCache", check_kv_cache)],
    "12": [("my_tiled_attention", check_tiled_attention)],
    "13": [
        ("my_grouped_attention", check_grouped_attention),
        ("MySwiGLU", check_swiglu),
    ],
}


def record(notebook: str, namespace: dict) -> int:
    """Print which build-its of `notebook` ("05") the definitions in `namespace` pass;
    returns how many do."""
    passed = 0
    for name, check in BUILD_ITS[notebook]:
        if name not in namespace:
            status, text = "todo", f"{name} is not defined: run its cell"
        else:
            try:
                status, text = outcome(check, namespace[name])
            except Exception as e:  # the learner's code failed: say how, go on
                status, text = "fail", f"raised {type(e).__name__}: {e}"
        passed += status == "pass"
        print(_line(f"{notebook} {name}", status, text))
    return passed


def build_it_cells(path: Path) -> list[str]:
    """The sources of a notebook's cells tagged `build-it`, in order."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "code" and "build-it" in c["metadata"].get("tags", [])
    ]


def check_notebooks(args: argparse.Namespace) -> int:
    """`python -m transformer_lib check [NN ...]`: run each notebook's build-it cells as
    saved, then their checkers; 0 when every build-it asked for passes."""
    folder = Path(args.notebooks)
    total = passed = 0
    for nb in args.numbers or sorted(BUILD_ITS):
        if nb not in BUILD_ITS:
            print(f"check: no notebook {nb!r}; choose from {', '.join(BUILD_ITS)}")
            return 2
        paths = sorted(folder.glob(f"{nb}_*.ipynb"))
        if not paths:
            print(f"check: no {nb}_*.ipynb in {folder}; pass --notebooks FOLDER")
            return 2
        namespace: dict = {"__name__": f"build_its_{nb}"}
        for source in build_it_cells(paths[0]):
            try:
                exec(compile(source, str(paths[0]), "exec"), namespace)
            except Exception as e:  # a half-written cell: its build-it fails below
                print(f"  a build-it cell of {paths[0].name} raised {e!r}")
        passed += record(nb, namespace)
        total += len(BUILD_ITS[nb])
    print(f"{passed} of {total} build-its pass")
    return 0 if passed == total else 1


def register(commands) -> None:
    """Add `check` to the subparsers of `python -m transformer_lib`."""
    c = commands.add_parser(
        "check",
        help="which build-it exercises of your notebooks pass",
        description=check_notebooks.__doc__,
    )
    c.add_argument("numbers", nargs="*", help="notebooks, e.g. 05 07 (default: all)")
    c.add_argument(
        "--notebooks",
        default="notebooks",
        help="the folder of your notebooks (default: notebooks)",
    )
    c.set_defaults(run=check_notebooks)
