"""Checkers for the "build it" exercises: each takes the learner's function, runs it on fixed inputs and
either prints that it passes or raises `ExerciseError` saying exactly what is wrong (the shape, the dtype,
or which entries differ from the reference, with both values).

Hand-written, not exported from the notebooks: a checker is a test the learner runs, not part of a lesson,
and one module reads better than thirteen pieces. Each notebook's exercise names its checker:

    00 check_sha256            01 check_merge              02 check_embedding_lookup
    03 check_rope              04 check_attention          05 check_split_heads, check_merge_heads
    06 check_causal_mask, check_padding_mask               07 check_post_norm_layer
    08 check_shift_targets     09 check_label_smoothing    10 check_top_p, check_beam_search
    11 check_get_batch         12 check_tiled_attention

The references are the library's own functions (or PyTorch's), so a checker and the course agree.
tests/test_exercises.py runs every checker on a right and a deliberately wrong solution.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "ExerciseError",
    "compare",
    "check_sha256",
    "check_merge",
    "check_embedding_lookup",
    "check_rope",
    "rope_reference",
    "check_attention",
    "check_split_heads",
    "check_merge_heads",
    "check_causal_mask",
    "check_padding_mask",
    "check_post_norm_layer",
    "check_shift_targets",
    "check_label_smoothing",
    "check_top_p",
    "check_beam_search",
    "beam_search_reference",
    "check_get_batch",
    "check_tiled_attention",
]


class ExerciseError(AssertionError):
    """What is wrong with an exercise's solution, in words."""


def _passed(name: str, detail: str) -> bool:
    print(f"\u2713 {name} passes: {detail}")
    return True


def _fmt(idx: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def compare(
    name: str, got, want: Tensor, atol: float = 1e-5, rtol: float = 1e-4, show: int = 3
) -> None:
    """Raise ExerciseError naming the first differing entries if `got` is not (close to) `want`."""
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
        bad = ~torch.isclose(g, w, rtol=rtol, atol=atol, equal_nan=False)
        bad &= ~(
            torch.isinf(g) & torch.isinf(w) & (g.sign() == w.sign())
        )  # -inf where -inf is right
    if bad.any():
        where = bad.nonzero()[:show].tolist()
        shown = "; ".join(
            f"at {_fmt(i)} got {got[tuple(i)].item():.6g}, expected {want[tuple(i)].item():.6g}"
            for i in where
        )
        raise ExerciseError(
            f"{name}: {int(bad.sum())} of {bad.numel()} entries differ from the reference: {shown}"
        )


# 00 · a file's checksum -------------------------------------------------------------------------------
def check_sha256(fn: Callable[[Path], str]) -> bool:
    """fn(path) -> the file's sha256 as 64 lowercase hex characters, read in chunks."""
    sizes = (0, 1, 3 * 2**20 + 7)  # empty, one byte, more than any sensible chunk
    g = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            path = Path(d) / f"file_{n}.bin"
            path.write_bytes(
                bytes(
                    torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8).tolist()
                )
            )
            got, want = fn(path), hashlib.sha256(path.read_bytes()).hexdigest()
            if not isinstance(got, str):
                raise ExerciseError(
                    f"sha256 of a {n}-byte file: expected a str, got {type(got).__name__} "
                    "(hexdigest(), not digest())"
                )
            if got != want:
                raise ExerciseError(
                    f"sha256 of a {n}-byte file: got {got!r}, expected {want!r}"
                )
    return _passed("sha256", f"files of {', '.join(map(str, sizes))} bytes")


# 01 · one BPE merge -----------------------------------------------------------------------------------
_MERGE_CASES = [
    ([1, 2, 3, 1, 2], (1, 2), 9, [9, 3, 9]),
    ([1, 1, 1], (1, 1), 9, [9, 1]),  # left to right, no overlaps
    ([1, 1, 1, 1], (1, 1), 9, [9, 9]),
    ([3, 1], (1, 2), 9, [3, 1]),  # the pair's first half at the very end
    ([], (1, 2), 9, []),
    ([2, 1, 2, 1], (2, 1), 7, [7, 7]),
]


def check_merge(fn: Callable[[list, tuple, int], list]) -> bool:
    """fn(ids, pair, new_id) -> ids with every occurrence of pair, left to right, replaced by new_id."""
    for ids, pair, new_id, want in _MERGE_CASES:
        got = fn(list(ids), pair, new_id)
        if list(got) != want:
            raise ExerciseError(
                f"merge({ids}, {pair}, {new_id}) returned {list(got)}, expected {want}"
            )
    return _passed("merge", f"{len(_MERGE_CASES)} cases, overlapping runs included")


# 02 · the embedding lookup as a matrix product --------------------------------------------------------
def check_embedding_lookup(fn: Callable[[Tensor, Tensor], Tensor]) -> bool:
    """fn(ids (B, T), weight (V, C)) -> (B, T, C): one_hot(ids) @ weight, times sqrt(C)."""
    g = torch.Generator().manual_seed(0)
    V, C = 11, 8
    weight = torch.randn(V, C, generator=g)
    ids = torch.randint(0, V, (2, 5), generator=g)
    compare("embedding lookup", fn(ids, weight), weight[ids] * math.sqrt(C))
    return _passed(
        "embedding lookup",
        f"ids (2, 5), weight ({V}, {C}) -> (2, 5, {C}), scaled by sqrt({C})",
    )


# 03 · RoPE --------------------------------------------------------------------------------------------
def rope_reference(x: Tensor, base: float = 10000.0) -> Tensor:
    """x (B, T, C) -> each pair (x[2i], x[2i+1]) of token t rotated by the angle t * base**(-2i/C)."""
    T, C = x.shape[-2:]
    angle = torch.arange(T, dtype=x.dtype)[:, None] * base ** (
        -torch.arange(0, C, 2, dtype=x.dtype) / C
    )  # (T, C/2)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, T, C/2) each
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(
        -2
    )  # (B, T, C)


def check_rope(fn: Callable[[Tensor], Tensor]) -> bool:
    """fn(x (B, T, C)) -> RoPE-rotated x; also checks that scores then depend only on the offset."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 8, generator=g, dtype=torch.float64)
    compare("apply_rope", fn(x), rope_reference(x), atol=1e-9)
    q = torch.randn(8, generator=g, dtype=torch.float64).expand(
        1, 7, 8
    )  # the same query at every position
    scores = fn(q)[0] @ fn(q)[0].T  # (T, T)
    for k in range(1, 7):
        diag = scores.diagonal(k)
        if not torch.allclose(diag, diag[:1].expand_as(diag)):
            raise ExerciseError(
                f"apply_rope: scores at offset {k} vary with position: {diag.tolist()}"
            )
    return _passed(
        "apply_rope",
        "equals the reference on (2, 7, 8); scores depend only on the offset",
    )


# 04 · attention from scratch --------------------------------------------------------------------------
def check_attention(fn: Callable[..., Tensor]) -> bool:
    """fn(q, k, v, mask=None) -> softmax(q k^T / sqrt(d_k)) v, (..., T_q, D_v); mask bool, True = may attend."""
    from .attention import scaled_dot_product_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 4, n, d, generator=g) for n, d in ((5, 8), (6, 8), (6, 3))
    )
    compare(
        "attention without a mask",
        fn(q, k, v),
        scaled_dot_product_attention(q, k, v)[0],
    )
    mask = torch.ones(5, 6, dtype=torch.bool).tril(
        1
    )  # every row keeps at least two keys
    compare(
        "attention with a mask",
        fn(q, k, v, mask),
        scaled_dot_product_attention(q, k, v, mask)[0],
    )
    return _passed(
        "attention",
        "q (2, 4, 5, 8), k (2, 4, 6, 8), v (2, 4, 6, 3), with and without a mask",
    )


# 05 · split and merge heads ---------------------------------------------------------------------------
def check_split_heads(fn: Callable[[Tensor, int], Tensor]) -> bool:
    """fn(x (B, T, C), n_heads) -> (B, H, T, C / H), head h holding columns h*D .. (h+1)*D - 1."""
    from .multi_head import split_heads

    x = torch.arange(2 * 3 * 8, dtype=torch.float32).view(
        2, 3, 8
    )  # entries name their position
    compare("split_heads(x, 4)", fn(x, 4), split_heads(x, 4))
    return _passed("split_heads", "(2, 3, 8) -> (2, 4, 3, 2)")


def check_merge_heads(fn: Callable[[Tensor], Tensor]) -> bool:
    """fn(x (B, H, T, D)) -> (B, T, H * D), the inverse of split_heads."""
    from .multi_head import merge_heads

    x = torch.arange(2 * 4 * 3 * 2, dtype=torch.float32).view(2, 4, 3, 2)
    compare("merge_heads(x)", fn(x), merge_heads(x))
    return _passed("merge_heads", "(2, 4, 3, 2) -> (2, 3, 8)")


# 06 · masks -------------------------------------------------------------------------------------------
def check_causal_mask(fn: Callable[[int], Tensor]) -> bool:
    """fn(T) -> (T, T) bool, True where query i may see key j (j <= i)."""
    from .masks import causal_mask

    for T in (1, 4, 7):
        compare(f"causal_mask({T})", fn(T), causal_mask(T))
    return _passed("causal_mask", "T = 1, 4, 7")


def check_padding_mask(fn: Callable[[Tensor, int], Tensor]) -> bool:
    """fn(ids (B, T), pad_id) -> (B, 1, 1, T) bool, True at real tokens."""
    from .masks import padding_mask

    ids = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 0, 0, 0], [1, 2, 3, 4, 5]])
    compare("padding_mask(ids, 0)", fn(ids, 0), padding_mask(ids, 0))
    return _passed("padding_mask", "(3, 5) ids -> (3, 1, 1, 5)")


# 07 · a post-norm encoder layer ----------------------------------------------------------------------
def check_post_norm_layer(fn: Callable) -> bool:
    """fn(layer, x, mask) -> the post-norm forward pass using layer.self_attn, layer.ff, layer.norm1, layer.norm2."""
    from .encoder import EncoderLayer

    torch.manual_seed(0)
    layer = EncoderLayer(16, 4, 32, dropout=0.0, norm_first=False).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)[
        :, None, None, :
    ]  # (B, 1, 1, T)
    got = fn(layer, x, mask)
    layer.norm_first = True
    pre = layer(x, mask)  # the other order, to recognise a common mix-up
    layer.norm_first = False
    if (
        isinstance(got, Tensor)
        and got.shape == pre.shape
        and torch.allclose(got, pre, atol=1e-5)
    ):
        raise ExerciseError(
            "post-norm layer: this is the pre-norm order, x + sublayer(LN(x)); post-norm "
            "normalises after the residual sum, LN(x + sublayer(x))"
        )
    compare("post-norm layer", got, layer(x, mask))
    return _passed(
        "post-norm layer",
        "equals EncoderLayer(norm_first=False) on (2, 5, 16) with padding",
    )


# 08 · teacher forcing ---------------------------------------------------------------------------------
def check_shift_targets(fn: Callable) -> bool:
    """fn(seqs, bos, eos, pad) -> tgt_in (B, T), tgt_out (B, T): <bos> y and y <eos>, padded with pad."""
    seqs, bos, eos, pad = [[5, 6, 7], [8], [9, 10]], 1, 2, 0
    want_in = torch.tensor([[1, 5, 6, 7], [1, 8, 0, 0], [1, 9, 10, 0]])
    want_out = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0], [9, 10, 2, 0]])
    got = fn(seqs, bos, eos, pad)
    if not (isinstance(got, tuple) and len(got) == 2):
        raise ExerciseError("shift_targets: return a pair (tgt_in, tgt_out)")
    compare("tgt_in", got[0], want_in)
    compare("tgt_out", got[1], want_out)
    return _passed(
        "shift_targets", "3 sequences of lengths 3, 1, 2 -> (3, 4) inputs and targets"
    )


# 09 · label-smoothed cross-entropy --------------------------------------------------------------------
def check_label_smoothing(fn: Callable) -> bool:
    """fn(logits (N, V), targets (N,), eps, pad_id) -> mean smoothed loss over non-padding targets."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 7, generator=g, dtype=torch.float64)
    targets = torch.tensor([3, 0, 5, 0, 1, 6])  # pad_id 0 twice
    for eps in (0.0, 0.1):
        want = F.cross_entropy(logits, targets, ignore_index=0, label_smoothing=eps)
        got = fn(logits, targets, eps, 0)
        if isinstance(got, Tensor) and got.shape != torch.Size([]):
            raise ExerciseError(
                f"label smoothing: return one number (a 0-d tensor), got shape {tuple(got.shape)}"
            )
        got_f = float(got)
        if not math.isclose(got_f, want.item(), rel_tol=1e-6):
            hint = ""
            if math.isclose(
                got_f,
                F.cross_entropy(logits, targets, label_smoothing=eps).item(),
                rel_tol=1e-6,
            ):
                hint = " (padding targets were counted: leave them out of the sum and of the mean)"
            raise ExerciseError(
                f"label smoothing with eps={eps}: got {got_f:.6f}, expected {want.item():.6f}{hint}"
            )
    return _passed(
        "label smoothing",
        "equals F.cross_entropy(ignore_index, label_smoothing) for eps 0 and 0.1",
    )


# 10 · top-p and beam search ---------------------------------------------------------------------------
def check_top_p(fn: Callable[[Tensor, float], Tensor]) -> bool:
    """fn(logits (B, V), p) -> logits with -inf outside the smallest set of top tokens whose probability reaches p."""
    from .sampling import filter_logits

    probs = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05], [0.05, 0.1, 0.6, 0.05, 0.2]])
    logits = probs.log()
    for p in (0.5, 0.6, 0.75, 0.9, 1.0):
        got, want = fn(logits.clone(), p), filter_logits(logits, top_p=p)
        compare(f"top_p(p={p})", got, want)
    return _passed(
        "top_p", "two distributions, p = 0.5, 0.6, 0.75, 0.9, 1.0 (boundaries included)"
    )


_BEAM_TABLE = {
    (): [0.5, 0.4, 0.1],
    (0,): [0.4, 0.3, 0.3],
    (1,): [0.05, 0.9, 0.05],
    (0, 0): [0.0, 0.0, 1.0],
    (0, 1): [0.0, 0.0, 1.0],
    (1, 1): [0.0, 0.0, 1.0],
}


def _toy_step(prefix: tuple[int, ...]) -> Tensor:
    """Log-probabilities of tokens 0, 1 and 2 (= <eos>) after `prefix`: greedy picks 0, the best is 1 1."""
    return torch.tensor(_BEAM_TABLE.get(tuple(prefix), [0.1, 0.1, 0.8])).log()


def beam_search_reference(
    step: Callable, beam: int, max_len: int, eos: int = 2
) -> tuple[list[int], float]:
    """The best finished sequence (eos included) and its log-probability, keeping `beam` prefixes per step."""
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


def check_beam_search(fn: Callable) -> bool:
    """fn(step, beam, max_len, eos) -> (tokens, logprob) on a toy model where greedy and beam disagree."""
    for beam, want in ((1, [0, 0, 2]), (2, [1, 1, 2])):
        got = fn(_toy_step, beam, 4, 2)
        tokens, score = list(got[0]), float(got[1])
        want_score = beam_search_reference(_toy_step, beam, 4)[1]
        if tokens != want:
            raise ExerciseError(
                f"beam={beam}: got tokens {tokens}, expected {want} (log-prob {want_score:.4f})"
            )
        if not math.isclose(score, want_score, rel_tol=1e-5):
            raise ExerciseError(
                f"beam={beam}: tokens right, but log-prob {score:.4f}, expected {want_score:.4f}"
            )
    return _passed(
        "beam search",
        "beam 1 = greedy [0, 0, <eos>] (p = 0.2), beam 2 finds [1, 1, <eos>] (p = 0.36)",
    )


# 11 · random windows for a language model -------------------------------------------------------------
def check_get_batch(fn: Callable) -> bool:
    """fn(ids (N,), batch_size, context_len, generator) -> x (B, T), y (B, T): random windows, y = x shifted by one."""
    ids = torch.arange(
        100, 160
    )  # position i holds 100 + i, so a window shows where it starts
    B, T = 8, 10
    x, y = fn(ids, B, T, torch.Generator().manual_seed(0))
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, Tensor) or tuple(t.shape) != (B, T):
            raise ExerciseError(
                f"get_batch: {name} should be a tensor of shape ({B}, {T}), got "
                f"{tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__}"
            )
    compare("y (the targets: each x shifted one token to the right)", y, x + 1)
    contiguous = (x - x[:, :1]) == torch.arange(T)
    if not contiguous.all():
        b = int((~contiguous.all(1)).nonzero()[0])
        raise ExerciseError(
            f"get_batch: row {b} of x is not a window of consecutive tokens: {x[b].tolist()}"
        )
    if int(y.max()) > int(ids[-1]):
        raise ExerciseError("get_batch: a window runs past the end of the data")
    if len(set(x[:, 0].tolist())) == 1:
        raise ExerciseError(
            "get_batch: every row starts at the same place; draw a random start per row"
        )
    return _passed(
        "get_batch", f"x and y ({B}, {T}), consecutive windows, y = x shifted by one"
    )


# 12 · attention in tiles with an online softmax ------------------------------------------------------
def check_tiled_attention(fn: Callable[[Tensor, Tensor, Tensor, int], Tensor]) -> bool:
    """fn(q, k, v, block) -> softmax(q k^T / sqrt(D)) v computed over key blocks of `block`, never all T_k at once."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64) for n in (9, 13, 13)
    )
    want = F.scaled_dot_product_attention(q, k, v)
    for block in (1, 4, 13, 32):
        compare(f"tiled attention, block={block}", fn(q, k, v, block), want, atol=1e-9)
    return _passed(
        "tiled attention",
        "equals F.scaled_dot_product_attention for blocks of 1, 4, 13 and 32 keys",
    )
