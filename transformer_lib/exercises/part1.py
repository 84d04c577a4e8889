"""The checkers of Part I's build-its (notebooks 00-06): a file's checksum, BPE
encoding with learnt merges, an output layer tied to the embedding, RoPE, attention,
multi-head attention and the masks of a batch. Written by hand."""

from __future__ import annotations

import hashlib
import math
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

from transformer_lib.exercises.framework import (
    ExerciseError,
    checker,
    compare,
    compare_grads,
    first_output,
    is_close,
    load_weights,
)

# 00 · a file's checksum ---------------------------------------------------------------


@checker("sha256_file")
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


# 01 · BPE encoding with learnt merges ------------------------------------------------

_BPE_TRAIN = (
    "the lowest lower newer newest widest wider low low lower, the newest\n" * 3
)
_BPE_TEXTS = [
    "the lowest, the widest",
    "thou know'st the newest",  # a contraction is a chunk of its own
    "slower and newer: the lowlands",  # words never seen whole
    "caf\u00e9 na\u00efve \u6c49\u5b57",  # several bytes per character
    "low  low\n\nlow",  # runs of spaces and newlines
    "",
]


def _bpe_encode_variant(text: str, merges: list, how: str) -> list[int]:
    """Typical wrong encoders: `whole` (no chunks), `leftmost` (the leftmost known pair
    first), `chars` (ord, not bytes)."""
    from transformer_lib.tokenization import CHUNK_PATTERN, merge

    ranks = {pair: 256 + k for k, pair in enumerate(merges)}
    chunks = [text] if how == "whole" else CHUNK_PATTERN.findall(text)
    out = []
    for chunk in chunks:
        ids = [ord(c) for c in chunk] if how == "chars" else list(chunk.encode())
        while len(ids) > 1:
            known = [p for p in zip(ids, ids[1:]) if p in ranks]
            if not known:
                break
            if how == "leftmost":
                pair = known[0]
            else:
                pair = min(known, key=ranks.get)
            ids = merge(ids, pair, ranks[pair])
        out += ids
    return out


_BPE_MISTAKES = {
    "whole": "merges pairs across chunks: split the text with CHUNK_PATTERN first, "
    "then merge inside each chunk",
    "leftmost": "merges the leftmost known pair first: take the pair of lowest rank "
    "(learnt first) wherever it is in the chunk",
    "chars": "starts from characters (ord), not UTF-8 bytes: ids 0-255 are bytes, "
    "use chunk.encode()",
}


@checker("BPE encoding")
def check_bpe_encode(fn: Callable[[str, list], list]) -> str:
    """fn(text, merges) -> the ids of `text` under the learnt `merges`, as
    BPETokenizer(merges).encode(text) gives them."""
    from transformer_lib.tokenization import BPETokenizer

    tok = BPETokenizer().train(_BPE_TRAIN, 256 + 30)
    merges = list(tok.merges)
    for text in _BPE_TEXTS:
        want = tok.encode(text)
        got, call = fn(text, list(merges)), f"my_bpe_encode({text!r}, merges)"
        if not isinstance(got, (list, tuple)):
            raise ExerciseError(
                f"{call}: expected a list of ids, got {type(got).__name__}"
            )
        got = [int(i) for i in got]
        if got == want:
            continue
        for how, mistake in _BPE_MISTAKES.items():
            if got == _bpe_encode_variant(text, merges, how):
                raise ExerciseError(f"{call} {mistake}")
        i = next((j for j, (x, y) in enumerate(zip(got, want)) if x != y), None)
        if i is None:
            raise ExerciseError(f"{call} gave {len(got)} ids, expected {len(want)}")
        raise ExerciseError(
            f"{call}: id {i} is {got[i]}, expected {want[i]} "
            f"({tok.vocab[want[i]]!r}); got {got}, expected {want}"
        )
    return (
        f"{len(_BPE_TEXTS)} texts equal BPETokenizer.encode with {len(merges)} merges: "
        "unseen words, multi-byte characters, whitespace runs, the empty text"
    )


# 02 · weight tying --------------------------------------------------------------------


@checker("tied output layer")
def check_tied_output(cls: type) -> str:
    """cls(embedding) -> a module whose forward(h (B, T, C)) gives the logits h @ W^T,
    W = embedding.weight, shared (not copied), so that both uses train W."""
    from transformer_lib.embeddings import TokenEmbedding

    torch.manual_seed(0)
    V, C = 50, 8
    emb = TokenEmbedding(V, C).double()
    mix = nn.Linear(C, C).double()  # the checker's own model: embed, mix, score
    head = cls(emb)
    if not isinstance(head, nn.Module):
        raise ExerciseError(f"expected an nn.Module, got {type(head).__name__}")
    model = nn.ModuleList([emb, mix, head])
    n, want_n = sum(p.numel() for p in model.parameters()), V * C + C * C + C
    if n != want_n:
        raise ExerciseError(
            f"embedding, a ({C}, {C}) layer and the output layer hold {n} parameters, "
            f"expected {want_n}: the output layer has {n - want_n} of its own, "
            "not 0; use embedding.weight itself (no copy, no nn.Linear of its own)"
        )
    ids = torch.tensor([[3, 1, 4, 1], [5, 9, 2, 6]])
    h = torch.tanh(mix(emb(ids)))  # (2, 4, C)
    logits = head(h)
    want = h @ emb.weight.T  # (2, 4, V)
    if is_close(logits, want * math.sqrt(C)) or is_close(logits, want / math.sqrt(C)):
        raise ExerciseError(
            "the logits are scaled by sqrt(d_model): that scale belongs to the lookup, "
            "the logits are h @ W^T"
        )
    compare("MyTiedOutput(embedding)(h)", logits, want)
    g = torch.randn_like(logits)
    (grad_w,) = torch.autograd.grad((want * g).sum(), emb.weight, retain_graph=True)
    (logits * g).sum().backward()
    if emb.weight.grad is None:
        raise ExerciseError("no gradient reached embedding.weight: is it detached?")
    if torch.allclose(emb.weight.grad[7], torch.zeros(C, dtype=torch.float64)):
        raise ExerciseError(
            "token 7 is never looked up, yet the logits' gradient should reach its row "
            "of embedding.weight: the output use sends none (detached, or a copy?)"
        )
    compare("the gradient of embedding.weight (both uses)", emb.weight.grad, grad_w)
    return (
        f"no parameters of its own ({want_n} in all, not {want_n + V * C}); logits "
        "h @ W^T; W's gradient sums the lookup's and the output's"
    )


# 03 · positions -----------------------------------------------------------------------


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


@checker("RoPE")
def check_rope(fn: Callable[[Tensor], Tensor]) -> str:
    """fn(x (B, T, C)) -> RoPE-rotated x; also checks that scores then depend only on
    the offset."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 8, generator=g, dtype=torch.float64)
    got = fn(x)
    if isinstance(got, Tensor) and got.shape == x.shape:
        halves = torch.cat([x[..., :4], x[..., 4:]], -1)
        swapped = rope_reference(halves[..., [0, 4, 1, 5, 2, 6, 3, 7]])
        if is_close(got, swapped[..., [0, 2, 4, 6, 1, 3, 5, 7]], atol=1e-9):
            raise ExerciseError(
                "my_apply_rope rotates the first half against the second half (a "
                "real convention, not this one): rotate neighbours x[2i], x[2i+1]"
            )
        flip = torch.tensor([1.0, -1.0], dtype=x.dtype).repeat(4)  # negate x[2i+1]
        if is_close(got, flip * rope_reference(flip * x), atol=1e-9):
            raise ExerciseError(
                "my_apply_rope rotates the other way, clockwise (by -omega_i t): turn "
                "each pair counter-clockwise, (x cos - y sin, x sin + y cos)"
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
        if is_close(w, (s / scale).softmax(-1)):
            return f"the weights are the softmax of q k^T {what}"
    if is_close(w, (s / math.sqrt(q.size(-1))).softmax(-2)):
        return "each column sums to 1: take the softmax over the keys (dim=-1)"
    return None


@checker("attention with a mask")
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
        if hint and not is_close(w, want_w):
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


@checker("multi-head attention")
def check_multi_head_attention(cls: type) -> str:
    """cls(d_model, n_heads) with q_proj, k_proj, v_proj, out_proj; forward(query,
    key=None, value=None, mask=None) -> (B, T_q, C)."""
    from transformer_lib.multi_head import MultiHeadAttention

    torch.manual_seed(0)
    ref = MultiHeadAttention(16, 4).double().eval()
    mine = cls(16, 4)
    load_weights(mine, ref.state_dict(), "MyMultiHeadAttention")
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
        got = first_output(mine(*args, mask=mask))
        kv = args[1] if len(args) > 1 else x
        want = ref(x, kv, kv, mask=mask)[0]
        if is_close(got, want):
            continue
        with torch.no_grad():
            if is_close(got, _mha_variant(ref, x, kv, kv, mask, scale=16)):
                raise ExerciseError(
                    f"{name}: scores divided by sqrt(d_model) = 4, expected "
                    "sqrt(d_head) = 2: each head has width d_model / n_heads"
                )
            if is_close(got, _mha_variant(ref, x, kv, kv, mask, split_wrong=True)):
                raise ExerciseError(
                    f"{name}: heads split with reshape(B, H, T, D), which mixes "
                    "positions: view(B, T, H, D), then transpose(1, 2)"
                )
            if mask is not None and is_close(got, ref(x, kv, kv)[0]):
                raise ExerciseError(f"{name}: the mask was ignored")
        compare(name, got, want)
    first_output(mine(x, mem, mem, mask=pad)).pow(2).sum().backward()
    ref(x, mem, mem, mask=pad)[0].pow(2).sum().backward()
    compare_grads(mine, ref, "MyMultiHeadAttention")
    return (
        "equals MultiHeadAttention: self-attention, causal, cross-attention with "
        "padding; gradients"
    )


# 06 · the masks of a batch ------------------------------------------------------------


@checker("masks")
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
        if is_close(tgt_mask.float(), causal_mask(4).expand_as(want).float()):
            raise ExerciseError(
                "tgt_mask: the target's padding is missing: queries may see <pad> keys"
            )
        if is_close(tgt_mask.float(), (causal_mask(4) & pad.transpose(-1, -2)).float()):
            raise ExerciseError(
                "tgt_mask: padding masks the query rows; it must mask the key "
                "columns (the last dimension)"
            )
    compare("tgt_mask", tgt_mask, want)
    return "(2, 5) sources, (2, 4) targets with padding -> (2, 1, 1, 5), (2, 1, 4, 4)"
