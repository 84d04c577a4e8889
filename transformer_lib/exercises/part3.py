"""The checkers of Part III's build-its (notebooks 12-14): a GPT block, the KV cache,
the similarity of position vectors by distance and attention in tiles. Written by
hand."""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from transformer_lib.exercises.framework import (
    ExerciseError,
    checker,
    compare,
    compare_input_grads,
    compare_module,
    first_line,
    is_close,
    jitter,
    learner_line,
    load_weights,
    tensor_output,
)

# 12 · a GPT block, and the KV cache ---------------------------------------------------

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


def _block_hints(ref, x: Tensor) -> tuple[tuple[Tensor, str], ...]:
    """The usual wrong blocks, built from the reference's own parts: (output, hint)."""
    attn, mlp = (lambda h: ref.attn(h)[0]), ref.mlp
    (B, T, C), H = x.shape, ref.attn.n_heads
    q, k, v = (
        t.view(B, T, H, C // H).transpose(1, 2)
        for t in ref.attn.qkv(ref.norm1(x)).chunk(3, -1)
    )
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(C))
    wide = x + ref.attn.proj(y.transpose(1, 2).reshape(B, T, C))
    y = F.scaled_dot_product_attention(k, q, v, is_causal=True)
    swapped = x + ref.attn.proj(y.transpose(1, 2).reshape(B, T, C))
    q, k, v = (
        t.reshape(B, T, H, C // H).transpose(1, 2)
        for t in ref.attn.qkv(ref.norm1(x)).view(B, T, C, 3).unbind(-1)
    )
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    interleaved = x + ref.attn.proj(y.transpose(1, 2).reshape(B, T, C))
    post = ref.norm1(x + attn(x))
    a = x + attn(ref.norm1(x))
    n1 = ref.norm1(x)
    from_normed, n2 = n1 + attn(n1), ref.norm2(n1 + attn(n1))
    normed = "each residual starts from the normalised input: x + sublayer(norm(x)), "
    return (
        (n2 + mlp(n2), normed + "the norm on the sublayer's input only"),
        (
            from_normed + mlp(ref.norm2(from_normed)),
            normed.replace("each", "the attention's") + "the norm on its input only",
        ),
        *(
            (
                m + attn(ref.norm1(m)),
                "the MLP runs before the attention: the attention sublayer comes "
                "first, a = x + attn(norm1(x)), then a + mlp(norm2(a))",
            )
            for m in (x + mlp(ref.norm2(x)), x + mlp(ref.norm1(x)))
        ),
        (
            x + attn(ref.norm1(x)) + mlp(ref.norm2(x)),
            "the two sublayers run in parallel on x: the MLP reads the attention's "
            "result, a = x + attn(norm1(x)), then a + mlp(norm2(a))",
        ),
        (
            _block_with(ref, x, scale=8.0),
            f"scores divided by sqrt(64) = 8, a head width of its own: divide by "
            f"sqrt(d_head) = {math.sqrt(C // H):g}, d_head = d_model / n_heads",
        ),
        (
            _block_with(ref, x, scale=math.sqrt(H)),
            f"scores divided by sqrt(n_heads) = {math.sqrt(H):g}, expected "
            f"sqrt(d_head) = {math.sqrt(C // H):g}: the scale is one head's width, "
            "d_model / n_heads",
        ),
        (
            wide + mlp(ref.norm2(wide)),
            f"scores divided by sqrt(d_model) = {math.sqrt(C):g}, expected "
            f"sqrt(d_head) = {math.sqrt(C // H):g}: each head has width d_model / "
            "n_heads",
        ),
        (
            ref.norm2(post + mlp(post)),
            "this is post-norm, norm(x + sublayer(x)); build "
            "pre-norm, x + sublayer(norm(x))",
        ),
        (
            attn(ref.norm1(x)) + mlp(ref.norm2(attn(ref.norm1(x)))),
            "the attention output is not added to its input (the residual)",
        ),
        (
            swapped + mlp(ref.norm2(swapped)),
            "q and k are swapped: qkv(x).chunk(3, -1) gives q, k, v in that order, "
            "and the scores are q @ k^T",
        ),
        (mlp(ref.norm2(a)), "the MLP output is not added to its input (the residual)"),
        (a + mlp(ref.norm1(a)), "norm1 is used twice: the MLP has its own norm, norm2"),
        (
            interleaved + mlp(ref.norm2(interleaved)),
            "q, k and v were taken as interleaved columns (view(B, T, C, 3)): qkv(x) "
            "holds q, then k, then v, each C wide: qkv(x).split(C, dim=-1)",
        ),
        *(
            (
                a + ref.mlp.proj(act(ref.mlp.fc(ref.norm2(a)))),
                f"the MLP uses {name}: GPT-2 uses GELU, with the tanh approximation, "
                "F.gelu(h, approximate='tanh')",
            )
            for act, name in ((F.relu, "ReLU"), (F.silu, "SiLU"))
        ),
        (
            _block_with(ref, x, merge=lambda y: y.permute(0, 2, 3, 1).reshape(B, T, C)),
            "the heads were merged as (B, T, D, H), permute(0, 2, 3, 1): each head's "
            "D features must stay side by side, (B, T, H, D): y.transpose(1, 2)"
            ".reshape(B, T, C)",
        ),
        *_mlp_hints(ref, a),
        (
            _unscaled(ref, x),
            f"the scores q k^T were not divided by sqrt(d_head) = {math.sqrt(C // H):g}"
            ": softmax(q k^T / sqrt(D)) v, or F.scaled_dot_product_attention",
        ),
    )


def _mlp_hints(ref, a: Tensor) -> tuple[tuple[Tensor, str], ...]:
    """The MLP's activation misplaced: after fc_out, or missing. a: after attention."""
    fc, out, h = ref.mlp.fc, ref.mlp.proj, ref.norm2(a)
    between = "put it between the two layers: fc_out(F.gelu(fc(h), approximate='tanh'))"
    after = f"the GELU was applied after fc_out, to the MLP's output: {between}"
    return (
        (a + F.gelu(out(fc(h)), approximate="tanh"), after),
        (a + F.gelu(out(fc(h))), after),
        (
            a + out(fc(h)),
            "the MLP has no activation: fc_out(fc(h)) is one linear map; " + between,
        ),
    )


def _unscaled(ref, x: Tensor) -> Tensor:
    """The reference block with its scores not divided by sqrt(d_head)."""
    (B, T, C), H = x.shape, ref.attn.n_heads
    q, k, v = (
        t.view(B, T, H, C // H).transpose(1, 2)
        for t in ref.attn.qkv(ref.norm1(x)).chunk(3, -1)
    )
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)
    a = x + ref.attn.proj(y.transpose(1, 2).reshape(B, T, C))
    return a + ref.mlp(ref.norm2(a))


def _block_with(
    ref, x: Tensor, split=None, weights=None, merge=None, scale=None
) -> Tensor:
    """The reference block with one step of its attention done another way: split(z)
    -> q, k, v from qkv's output z (B, T, 3C); weights(scores, keep) -> (B, H, T, T)
    from the scaled scores and the causal mask; merge(y) -> (B, T, C); the scores
    divided by scale, not sqrt(D)."""
    (B, T, C), H = x.shape, ref.attn.n_heads
    D, z = C // H, ref.attn.qkv(ref.norm1(x))
    heads = lambda t: t.view(B, T, H, D).transpose(1, 2)  # noqa: E731
    q, k, v = split(z) if split else (heads(t) for t in z.chunk(3, -1))
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    scores = q @ k.transpose(-2, -1) / (scale or math.sqrt(D))  # (B, H, T, T)
    w = weights(scores, keep) if weights else scores.masked_fill(~keep, -math.inf)
    y = (w.softmax(-1) if weights is None else w) @ v  # (B, H, T, D)
    a = x + ref.attn.proj(merge(y) if merge else y.transpose(1, 2).reshape(B, T, C))
    return a + ref.mlp(ref.norm2(a))


def _attention_hints(ref, x: Tensor) -> tuple[tuple[Tensor, str], ...]:
    """Wrong attentions inside the block, which also leak across positions, so they
    are told apart before the causality test: (output, hint)."""
    (B, T, C), H = x.shape, ref.attn.n_heads
    D = C // H

    def heads(*parts: Tensor) -> tuple:
        return tuple(t.view(B, T, H, D).transpose(1, 2) for t in parts)

    split = "the heads were split with a plain reshape to (B, H, T, D), which mixes "
    return (
        (
            _block_with(
                ref, x, weights=lambda s, k: s.masked_fill(~k.T, -math.inf).softmax(-1)
            ),
            "the mask is inverted: query t kept the keys j >= t (triu()); keep j <= "
            "t, the lower triangle (tril()), and hide the keys after t (triu(1))",
        ),
        (
            _block_with(
                ref, x, weights=lambda s, k: s.masked_fill(k, -math.inf).softmax(-1)
            ),
            "the mask is the wrong way round: -inf was put where the lower triangle "
            "is True, so each query sees only the later keys; hide the keys after t, "
            "masked_fill(~tril, float('-inf')) (or triu(1))",
        ),
        (
            _block_with(ref, x, weights=lambda s, k: s.softmax(-1) * k),
            "the mask was applied after the softmax: the later keys still count in "
            "its sum, so the weights depend on them; hide them in the scores first, "
            "masked_fill(hide, float('-inf')), then take the softmax",
        ),
        (
            _block_with(ref, x, weights=lambda s, k: s.masked_fill(~k, 0).softmax(-1)),
            "the hidden scores were set to 0, not -inf: exp(0) = 1 still weighs the "
            "later keys; masked_fill(hide, float('-inf'))",
        ),
        (
            _block_with(
                ref, x, weights=lambda s, k: s.masked_fill(~k, -math.inf).softmax(-2)
            ),
            "the softmax runs over the queries (dim -2): each query's weights over "
            "the keys sum to 1, softmax(dim=-1)",
        ),
        (
            _block_with(
                ref,
                x,
                split=lambda z: (t.reshape(B, H, T, D) for t in z.chunk(3, -1)),
                merge=lambda y: y.reshape(B, T, C),
            ),
            split + "the tokens: view(B, T, H, D), then transpose(1, 2)",
        ),
        (
            _block_with(
                ref, x, split=lambda z: (t.reshape(B, H, T, D) for t in z.chunk(3, -1))
            ),
            split + "the tokens (the merge back is right): view(B, T, H, D), then "
            "transpose(1, 2)",
        ),
        (
            _block_with(
                ref,
                x,
                split=lambda z: (
                    t.view(B, T, D, H).permute(0, 3, 1, 2) for t in z.chunk(3, -1)
                ),
                merge=lambda y: y.permute(0, 2, 3, 1).reshape(B, T, C),
            ),
            "the heads were split with view(B, T, D, H): head h then takes every "
            "H-th feature, strided; each head is D adjacent features, "
            "view(B, T, H, D), then transpose(1, 2)",
        ),
        (
            _block_with(
                ref,
                x,
                split=lambda z: z.view(B, T, H, 3 * D).transpose(1, 2).chunk(3, -1),
            ),
            "q, k and v were split per head (view(B, T, H, 3 * D)): qkv(x) holds q, "
            "then k, then v, each C wide: qkv(x).split(C, dim=-1)",
        ),
        (
            _block_with(ref, x, split=lambda z: heads(*_qvk(z))),
            "q, v and k came out in the wrong order: qkv(x).split(C, dim=-1) gives "
            "q, k, v in that order",
        ),
        *(
            (
                _block_with(ref, x, split=lambda z, o=order: heads(*_read_as(z, o))),
                f"qkv(x) was read as {', '.join(order)}: its three parts are q, k and "
                "v in that order, q, k, v = qkv(x).split(C, dim=-1)",
            )
            for order in ("vkq", "kvq", "vqk")
        ),
    )


def _read_as(z: Tensor, order: str) -> tuple[Tensor, Tensor, Tensor]:
    """qkv's output z read in the order given ("vkq": v first, then k, then q) ->
    what became q, k, v."""
    parts = dict(zip(order, z.chunk(3, -1)))
    return parts["q"], parts["k"], parts["v"]


def _diagonal_hidden(ref, x: Tensor, got: Tensor) -> None:
    """The mask hides key t from query t too (tril(-1), or triu() as what to hide):
    token 0 then sees nothing (NaN, or whatever was done about it), so only the
    positions after it are compared."""
    if not (isinstance(got, Tensor) and got.shape == x.shape):
        return
    strict = _block_with(
        ref,
        x,
        weights=lambda s, k: s.masked_fill(~k.tril(-1), -math.inf).softmax(-1),
    )
    if is_close(got[:, 1:], strict[:, 1:]):
        raise ExerciseError(
            "the mask hides the diagonal too: a token may attend to itself; hide "
            "only the keys after it, triu(1) (or keep tril()), not triu() / tril(-1)"
        )


def _qvk(z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """qkv's output read as q, v, k."""
    q, v, k = z.chunk(3, -1)
    return q, k, v


def _merged_without_transpose(ref, x: Tensor) -> Tensor:
    """The block whose attention merges its heads with a plain reshape."""
    (B, T, C), H = x.shape, ref.attn.n_heads
    with torch.no_grad():
        q, k, v = (
            t.view(B, T, H, C // H).transpose(1, 2)
            for t in ref.attn.qkv(ref.norm1(x)).chunk(3, -1)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = x + ref.attn.proj(y.reshape(B, T, C))
        return a + ref.mlp(ref.norm2(a))


@checker("GPT block")
def check_gpt_block(cls: type) -> str:
    """cls(d_model, n_heads) with norm1, norm2, qkv, proj, fc, fc_out; forward(x) ->
    (B, T, C): x + attn(norm1(x)), then x + mlp(norm2(x)), causal."""
    from transformer_lib.gpt import Block, GPTConfig

    torch.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=10,
        context_len=64,
        n_layers=1,
        n_heads=2,  # 2 heads of 8: sqrt(n_heads) and sqrt(d_head) differ
        d_model=16,
        dropout=0.0,
        bias=True,
        norm="layer",
        gelu_approximate="tanh",
    )
    ref = jitter(Block(cfg)).eval()
    mine = cls(16, 2)
    inverse = {v: k for k, v in _BLOCK_NAMES.items()}
    state = {
        inverse.get(k.rpartition(".")[0], k.rpartition(".")[0])
        + "."
        + k.rpartition(".")[2]: v
        for k, v in ref.state_dict().items()
    }
    load_weights(mine, state, "MyBlock")
    mine.double().eval()
    x = torch.randn(2, 6, 16).double()
    given = x.clone()
    try:
        got = tensor_output(mine(given), "MyBlock")
    except RuntimeError as e:
        if "(2) must match the size of tensor b (6)" not in str(e):
            raise
        raise ExerciseError(
            f"RuntimeError ({first_line(e)}) on x (2, 6, 16): is the causal mask "
            "(B, B) = (2, 2)? Build it from T = x.size(1), (T, T)"
        ) from None
    if not torch.equal(given, x):
        raise ExerciseError(
            "forward changed its input x in place (x += ...): the caller's x must "
            "stay as it was; write x = x + self.attn(self.norm1(x))"
        )
    if not is_close(tensor_output(mine(x), "MyBlock"), got, equal_nan=True):
        raise ExerciseError(
            "two calls on the same x in eval mode gave different outputs: forward is "
            "random (F.dropout is on unless given training=self.training); this "
            "block has no dropout"
        )
    want = ref(x)[0]
    if is_close(got, _merged_without_transpose(ref, x)):
        raise ExerciseError(
            "the heads were merged without the transpose back: y (B, H, T, D) -> "
            "y.transpose(1, 2).reshape(B, T, C); a plain reshape mixes the tokens"
        )
    with torch.no_grad():
        for variant, hint in _attention_hints(ref, x):
            if is_close(got, variant, equal_nan=True):
                raise ExerciseError(hint)
        _diagonal_hidden(ref, x, got)
    if isinstance(got, Tensor) and got.shape == want.shape:
        x2 = x.clone()
        x2[:, 3] = torch.randn(2, 16).double()  # not a shift: LayerNorm removes it
        changed = (tensor_output(mine(x2), "MyBlock") - got)[:, :3].abs().amax().item()
        if changed > 1e-9:
            raise ExerciseError(
                "the output at positions 0-2 changed when token 3 changed: the "
                "attention must be causal (is_causal=True or a lower-triangular mask)"
            )
    if not is_close(got, want):
        exact = copy.deepcopy(ref)
        exact.mlp.approximate = "none"
        if is_close(got, exact(x)[0]):
            raise ExerciseError(
                "the MLP uses the exact GELU: GPT-2 uses the tanh approximation, "
                "F.gelu(h, approximate='tanh')"
            )
        with torch.no_grad():
            for variant, hint in _block_hints(ref, x):
                if is_close(got, variant):
                    raise ExerciseError(hint)
    from transformer_lib.exercises.part2 import _name_eps, _no_dropout

    _no_dropout(mine, lambda: mine(x), got)
    try:
        compare_module("MyBlock(x)", got, want, mine, ref, rename=_block_name)
    except ExerciseError:
        _name_eps(mine, ref)
        raise
    compare_input_grads("MyBlock", lambda x: mine(x), lambda x: ref(x), x=x)
    _longer_block(mine, ref)
    return (
        "equals the library's Block (LayerNorm, GELU) on (2, 6, 16); causal; gradients"
    )


def _longer_block(mine: torch.nn.Module, ref) -> None:
    """A sequence longer than the first call's (40 tokens): the causal mask fits any
    T, not only the one seen first or a size fixed in __init__."""
    x = torch.randn(2, 40, 16, dtype=torch.float64)
    hint = (
        "the causal mask must fit any T up to the context length: build it from "
        "x's T (or is_causal=True), not at a fixed size"
    )
    with torch.no_grad():
        try:
            got = tensor_output(mine(x), "MyBlock")
        except (RuntimeError, IndexError, ValueError) as e:
            raise ExerciseError(
                f"MyBlock on 40 tokens (after 6) raised {type(e).__name__} "
                f"({first_line(e)}): {hint}"
            ) from None
        if not is_close(got, ref(x)[0]):
            raise ExerciseError(f"MyBlock on 40 tokens (after 6) is wrong: {hint}")


@checker("KV cache")
def check_kv_cache(cls: type) -> str:
    """cls() with .length and update(k, v) -> all keys and values so far, (B, H,
    length + T, D) each, the new ones after the stored ones."""
    g = torch.Generator().manual_seed(0)
    cache = cls()
    try:
        fresh = cache.length
    except Exception as e:
        raise ExerciseError(
            f"a fresh cache's .length raised {type(e).__name__} ({e}): before any "
            "update it is 0, so keep a count (or test for no keys yet)"
        ) from None
    if fresh != 0:
        raise ExerciseError(
            f"a fresh cache's .length is {fresh!r}, expected 0"
            + (
                ": is the state kept on the class (set in the class body), so that "
                "every cache shares it, and an earlier run's tokens stay? Create it "
                "in __init__, on self"
                if isinstance(fresh, int) and fresh > 0
                else ""
            )
        )
    ks, vs, total = [], [], 0
    # a prompt of 4 tokens, generation, long chunks past 64 and 128 stored tokens
    for t in (4, 1, 1, 3, 40, 200):
        k, v = (torch.randn(2, 3, t, 8, generator=g) for _ in range(2))
        ks.append(k)
        vs.append(v)
        total += t
        try:
            got = cache.update(k, v)
        except (RuntimeError, IndexError) as e:
            said = f"update raised {first_line(e)!r} when {t} new tokens met "
            if "Boolean value of Tensor" in str(e):
                raise ExerciseError(
                    f"{said}{total - t} stored: `if not self.k` (or `self.k or ...`) "
                    "asks a tensor of many values whether it is true; test for no "
                    "keys yet with self.k is None (or self.length == 0)"
                ) from e
            if "must match except in dimension" not in str(e):
                raise ExerciseError(
                    f"{said}{total - t} stored: a cache takes any number of tokens, "
                    "with no fixed capacity: torch.cat along dim 2"
                ) from e
            raise ExerciseError(
                f"{said}{total - t} stored: join along dim 2, the tokens of "
                "(B, H, T, D)"
            ) from e
        if not (isinstance(got, tuple) and len(got) == 2):
            raise ExerciseError("update should return a pair (keys, values)")
        keys, values = got
        want_k, want_v = torch.cat(ks, 2), torch.cat(vs, 2)
        if isinstance(keys, Tensor) and keys.shape == k.shape and total > t:
            raise ExerciseError(
                f"after {total} tokens update returned {t} keys: return everything "
                "stored so far"
            )
        if isinstance(keys, Tensor) and keys.dim() == 4 and keys.shape[2] == 1 < total:
            raise ExerciseError(
                f"after {total} tokens update returned one position: keep every token "
                "stored, not only the last one"
            )
        if total > t and is_close(keys, torch.cat([k, *ks[:-1]], 2)):
            raise ExerciseError(
                f"after {total} tokens the new keys come before the stored ones: "
                "append them, torch.cat([stored, new], dim=2), so position t stays t"
            )
        _kv_named(keys, values, want_k, want_v, total)
        n = keys.size(2) if isinstance(keys, Tensor) and keys.dim() == 4 else total
        if 1 < n < total and is_close(keys, want_k[:, :, -n:]):
            raise ExerciseError(
                f"after {total} tokens update returned the last {n}: the cache "
                "dropped the oldest tokens; it keeps every token (cutting to the "
                "context window is the generation loop's job, which starts again "
                "when the context is full)"
            )
        compare(f"keys after {total} tokens", keys, want_k)
        old = total - t
        if (
            old
            and isinstance(values, Tensor)
            and values.shape == want_v.shape
            and is_close(values[:, :, :old], want_k[:, :, :old])
        ):
            raise ExerciseError(
                f"after {total} tokens the values hold the earlier tokens' keys: the "
                "new v was appended to the stored keys; append it to the stored "
                "values, torch.cat([self.v, v], dim=2)"
            )
        if is_close(values, want_k):
            raise ExerciseError(
                f"after {total} tokens the values returned are the keys: store v "
                "in its own tensor, and return (keys, values)"
            )
        if is_close(values[:, :, -t:], k):
            raise ExerciseError(
                f"after {total} tokens the newest values are the new keys: append v "
                "to the values, torch.cat([self.v, v], dim=2)"
            )
        compare(f"values after {total} tokens", values, want_v)
        if getattr(cache, "length", None) != total:
            raise ExerciseError(
                f"cache.length is {getattr(cache, 'length', None)} after {total} "
                "tokens: it counts the tokens stored; add k.size(2), the new "
                "tokens, not 1 per call"
            )
    q = torch.randn(2, 3, total, 8, generator=g)
    full = F.scaled_dot_product_attention(q, want_k, want_v, is_causal=True)
    last = F.scaled_dot_product_attention(q[:, :, -1:], keys, values)
    compare("attention of the last token over the cache", last, full[:, :, -1:])
    _kv_cache_apart(cls, cache, total)
    _kv_dtype(cls)
    return (
        "a prompt of 4 tokens, then 1, 1, 3, 40 and 200: keys, values and length match"
    )


def _kv_named(keys, values, want_k: Tensor, want_v: Tensor, total: int) -> None:
    """Two mistakes told apart from a bare difference: the pair swapped, and a
    preallocated buffer returned whole."""
    if is_close(keys, want_v) and is_close(values, want_k):
        raise ExerciseError(
            f"after {total} tokens keys and values are swapped: return (keys, values)"
        )
    longer = isinstance(keys, Tensor) and keys.dim() == 4 and keys.size(2) > total
    if longer and is_close(keys[:, :, -total:], want_k):
        raise ExerciseError(
            f"after {total} tokens a new cache returned {keys.size(2)} positions, the "
            f"last {total} of them right: it holds tokens from an earlier cache, so "
            "its storage lives on the class (lists in the class body?); create it "
            "in __init__, self.k = None"
        )
    if longer and is_close(keys[:, :, :total], want_k):
        raise ExerciseError(
            f"after {total} tokens update returned {keys.size(2)} positions: a "
            "preallocated buffer is returned up to its length, buffer[:, :, :length]"
        )
    n = keys.size(2) if isinstance(keys, Tensor) and keys.dim() == 4 else total
    if n < total and is_close(keys, want_k[:, :, :n]):
        raise ExerciseError(
            f"after {total} tokens update returned the first {n} keys only: a "
            f"buffer of {n} places dropped the rest; a cache takes any number of "
            "tokens, with no fixed capacity: torch.cat along dim 2"
        )


def _kv_cache_apart(cls: type, cache, total: int) -> None:
    """A second cache starts empty and leaves the first one as it was."""
    other = cls()
    k, v = torch.ones(2, 3, 2, 8), torch.zeros(2, 3, 2, 8)
    keys, _ = other.update(k, v)
    if not (isinstance(keys, Tensor) and keys.shape == k.shape):
        shape = tuple(keys.shape) if isinstance(keys, Tensor) else type(keys)
        raise ExerciseError(
            f"a second cache, given 2 tokens, returned keys of shape {shape}, "
            f"expected {tuple(k.shape)}: the caches share their storage (lists or "
            "tensors set on the class); create them in __init__, self.k = ..."
        )
    if getattr(cache, "length", None) != total or other.length != 2:
        raise ExerciseError(
            f"a second cache changed the first one's length ({cache.length}, "
            f"expected {total}): the caches share state; create it in __init__"
        )


def _kv_dtype(cls: type) -> None:
    """A cache given float64 keys and values, (1, 2, T, 4) unlike the first test's,
    returns them in float64, as given."""
    g = torch.Generator().manual_seed(1)
    cache = cls()
    for t in (3, 1):
        k, v = (torch.randn(1, 2, t, 4, generator=g, dtype=torch.float64) for _ in "kv")
        try:
            keys, values = cache.update(k, v)
        except RuntimeError as e:
            if t != 3 or "must match" not in str(e):
                raise
            raise ExerciseError(
                f"a fresh cache given keys of shape {tuple(k.shape)} raised "
                f"RuntimeError ({first_line(e)}): was the storage made at a "
                "fixed shape, torch.zeros(2, 3, 0, 8)? B, H and D come from the keys "
                "given: keep the first k as it is (self.k = k), or build the "
                "storage from it"
            ) from None
    for name, got in (("keys", keys), ("values", values)):
        if isinstance(got, Tensor) and got.dtype != torch.float64:
            raise ExerciseError(
                f"given float64 keys and values, update returned {name} in {got.dtype}"
                ": store them as given (no .float(), no buffer of another dtype), "
                "in the model's dtype"
            )


# 14 · attention in tiles with an online softmax ---------------------------------------

# what may touch all the keys at once: views, shapes, conversions (they read no score)
_KEY_VIEWS = {
    "__get__", "__getitem__", "__len__", "__repr__", "__str__", "__format__", "size",
    "dim", "numel", "stride", "is_contiguous", "is_floating_point", "transpose", "t",
    "permute", "swapaxes", "swapdims", "movedim", "view", "reshape", "flatten",
    "unflatten", "unsqueeze", "squeeze", "expand", "narrow", "select", "split",
    "chunk", "tensor_split", "unbind", "contiguous", "to", "double", "float", "type",
    "detach", "clone", "new_zeros", "new_full", "new_empty", "new_ones",
}  # fmt: skip


class _KeyReads(TorchFunctionMode):
    """Record the first operation, not a view, that touches a tensor holding all
    `n_keys` keys (a dimension of that size, beside another): a softmax over every key
    at once. A loop over torch.arange(0, T_k, 1) reads no key."""

    def __init__(self, n_keys: int, keys: Tensor | None = None, queries=None):
        super().__init__()
        self.n_keys, self.first = n_keys, None
        self.keys, self.slices = keys, 0  # how many times keys[...] was indexed
        self.widest = 0  # the most keys one slice of them held
        self.queries, self.query_slices = queries, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", str(func))
        if name == "__getitem__" and args and args[0] is self.keys:
            self.slices += 1
            if isinstance(out, Tensor) and out.dim() == self.keys.dim():  # a tile
                self.widest = max(self.widest, out.shape[-2])
        if name == "__getitem__" and args and args[0] is self.queries:
            self.query_slices += 1  # a tile of queries: it reads every key block
        if self.first is None and name not in _KEY_VIEWS:
            tensors = tree_flatten((args, kwargs, out))[0]
            for t in tensors:
                if isinstance(t, Tensor) and t.dim() > 1 and self.n_keys in t.shape:
                    self.first = (name.strip("_"), tuple(t.shape))
                    break
        return out


def _online_softmax(
    q,
    k,
    v,
    block,
    sum_rescaled=True,
    out_rescaled=True,
    divided=True,
    short=0,
    m0=None,
    inverted=False,
    stride=None,
    tile_max=False,
    p_old=False,
    renormed=False,
    shared=None,
    late=(),
    p_block=False,
    stuck=False,
):
    """The online softmax with a usual slip: the running sum or the output not
    rescaled when the maximum grows, the output not divided by the sum at the end,
    each block `short` keys short, the running max started at m0, not -inf, the
    factor inverted, exp(m_new - m_old) (0 on the first block, where ell = out = 0),
    a block starting every `stride` keys (overlapping when stride < block), the block's
    own max taken for the running one, p = exp(s - m_old) with the old max, out divided
    by ell and ell set to 1 after every block, one max `shared` by the rows (the
    score dims it is taken over: (-2, -1) one per head, () one for all), `late` the
    running sums ("out", "ell") rescaled after the block's share is added, p taken
    against the block's own max (`p_block`), m never updated (`stuck`)."""
    m = torch.full(q.shape[:-1] + (1,), -math.inf if m0 is None else m0, dtype=q.dtype)
    ell, out = torch.zeros_like(m), q.new_zeros(q.shape[:-1] + (v.size(-1),))
    for s in range(0, k.size(-2), stride or block):
        end = s + block - short
        scores = q @ k[..., s:end, :].transpose(-2, -1) / math.sqrt(q.size(-1))
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        m_new = scores.amax(-1, keepdim=True) if tile_max else m_new
        if shared is not None:
            top = scores.amax(shared, keepdim=True) if shared else scores.amax()
            m_new = torch.maximum(m, top)
        factor = (m - m_new).exp()
        if inverted:
            factor = torch.where(m.isneginf(), 0.0, (m_new - m).exp())
        p = (scores - (torch.where(m.isneginf(), m_new, m) if p_old else m_new)).exp()
        p = (scores - scores.amax(-1, keepdim=True)).exp() if p_block else p
        new_ell, new_out = p.sum(-1, keepdim=True), p @ v[..., s:end, :]
        if "ell" in late:  # the block's own share rescaled too
            ell = (ell + new_ell) * factor
        else:
            ell = (ell * factor if sum_rescaled else ell) + new_ell
        if "out" in late:
            out = (out + new_out) * factor
        else:
            out = (out * factor if out_rescaled else out) + new_out
        m = m if stuck else m_new
        if renormed:
            out, ell = out / ell, torch.ones_like(ell)
    return out / ell if divided else out


def _tiled_shapes_hint(q: Tensor, k: Tensor, v: Tensor, block: int, got: Tensor):
    """Three slips of sizes: the last, shorter block dropped; the last block skipped,
    range(0, T_k - block, block); the scores divided by the square root of the
    values' width, not of q's and k's."""
    n, D, D_v = k.size(-2), q.size(-1), v.size(-1)
    full = n // block * block
    if 0 < full < n:
        kept = F.scaled_dot_product_attention(q, k[..., :full, :], v[..., :full, :])
        if is_close(got, kept, atol=1e-9):
            raise ExerciseError(
                f"block={block}: the last block ({n - full} of the {n} keys) was "
                "dropped: loop over range(0, T_k, block); the last slice is shorter"
            )
    starts = range(0, n - block, block)  # range(0, T_k - block, block): one too few
    end = min(starts[-1] + block, n) if starts else 0
    if 0 < end < n:
        kept = F.scaled_dot_product_attention(q, k[..., :end, :], v[..., :end, :])
        if is_close(got, kept, atol=1e-9):
            raise ExerciseError(
                f"block={block}: the last block ("
                + (f"key {end}" if end == n - 1 else f"keys {end} to {n - 1}")
                + ") was skipped: "
                "loop over range(0, T_k, block), which reaches the last block, "
                "shorter or not"
            )
    if D_v != D:
        by_v = F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(D_v))
        if is_close(got, by_v, atol=1e-9):
            raise ExerciseError(
                f"block={block}: the scores were divided by sqrt({D_v}), the values' "
                f"width: divide by sqrt(D) = sqrt({D}), the width of q and k"
            )


def _tiled_hint(q: Tensor, k: Tensor, v: Tensor, block: int, got: Tensor) -> None:
    """Raise ExerciseError naming the mistake of a wrong online softmax, if a usual
    one."""
    rescale = "when a block raises the maximum, multiply it by exp(m_old - m_new)"
    slips = [
        (dict(sum_rescaled=False, out_rescaled=False), "the running sum ell and the "
         f"output were never rescaled: {rescale}, both of them"),
        (dict(sum_rescaled=False), f"the running sum ell was never rescaled: {rescale}"
         ", as the output is"),
        (dict(out_rescaled=False), f"the output was never rescaled: {rescale}, as ell"
         " is"),
        (dict(divided=False), "the output was never divided by the running sum ell: "
         "at the end, return out / ell"),
    ]  # fmt: skip
    slips.append((dict(inverted=True), "the correction is inverted: when a block "
                  "raises the maximum, the old ell and out shrink, times exp(m_old - "
                  "m_new), not exp(m_new - m_old)"))  # fmt: skip
    slips.append((dict(m0=0.0), "the running max started at 0, not -inf: when every "
                  "score of a row is far below 0, exp(score - 0) underflows and ell "
                  "stays 0; start m at -inf (torch.full(..., -math.inf))"))  # fmt: skip
    slips.append((dict(tile_max=True), "the running maximum became the block's own "
                  "max: when a block's scores fall far below the earlier ones, "
                  "exp(m_old - m_block) overflows; m_new = max(m_old, the block's "
                  "max), which never decreases"))  # fmt: skip
    slips.append((dict(p_old=True), "p = exp(s - m_old) used the old maximum: compute "
                  "m_new = max(m_old, the block's max) first, then p = exp(s - m_new)"
                  ", the m_new that rescales ell and out"))  # fmt: skip
    slips.append((dict(p_block=True), "p = exp(s - the block's own max), while ell "
                  "and out are rescaled to the running max: each block's weights are "
                  "on another scale; p = exp(s - m_new)"))  # fmt: skip
    slips.append((dict(stuck=True), "the running max never moved (m = m_new "
                  "forgotten): exp(m - m_new) = exp(-inf) = 0 erased every earlier "
                  "block, and the output is the last block's softmax alone; set "
                  "m = m_new after each block"))  # fmt: skip
    slips.append((dict(renormed=True), "out was divided by ell at every block, and "
                  "ell reset to 1: the earlier blocks then weigh as one key; keep ell "
                  "as the running sum of all the weights so far, and divide out by it "
                  "once, at the end"))  # fmt: skip
    for dims, who in (
        ((), "every query row (a single number)"),
        ((-2, -1), "each head's query rows"),
    ):
        slips.append((dict(shared=dims), f"one maximum was shared by {who}: a row "
                      "whose scores lie far below another row's maximum underflows, "
                      "exp(s - m) = 0, and its out / ell is 0 / 0; keep one running "
                      "maximum per query row, scores.amax(-1, keepdim=True), m of "
                      "shape (..., T_q, 1)"))  # fmt: skip
    for late in (("out",), ("out", "ell")):
        what = " and ".join(late)
        slips.append((dict(late=late), f"{what} {'were' if late[1:] else 'was'} "
                      "rescaled after the block's share was added, (out + p @ v) * "
                      "exp(m_old - m_new): p = exp(s - m_new) is already relative to "
                      f"the new maximum; rescale the old {what} only, out * "
                      "exp(m_old - m_new) + p @ v"))  # fmt: skip
    if block > 1:  # with block 1, the slice is empty and amax raises
        slips.append((dict(short=1), "each block dropped its last key, k[..., s : s + "
                      "block - 1]: the end of a slice is excluded, so s : s + block "
                      "holds the block's keys"))  # fmt: skip
        slips.append((dict(stride=1), "the tiles overlap: the loop steps one key at "
                      "a time, range(0, T_k, 1), and each tile holds `block` keys, so "
                      "most keys count several times; step by block, range(0, T_k, "
                      "block)"))  # fmt: skip
    for slip, hint in slips:
        wrong = _online_softmax(q, k, v, block, **slip)
        if is_close(got, wrong, atol=1e-9, equal_nan=True):
            raise ExerciseError(f"block={block}: {hint}")
    _tiled_shapes_hint(q, k, v, block, got)
    per_block = torch.stack(
        [
            F.scaled_dot_product_attention(
                q, k[..., s : s + block, :], v[..., s : s + block, :]
            )
            for s in range(0, k.size(-2), block)
        ]
    )
    unscaled = F.scaled_dot_product_attention(q, k, v, scale=1.0)
    if is_close(got, unscaled, atol=1e-9):
        raise ExerciseError(
            f"block={block}: the scores q k^T were not divided by sqrt(D)"
        )
    if is_close(got, unscaled / math.sqrt(q.size(-1)), atol=1e-9):
        raise ExerciseError(
            f"block={block}: the output was divided by sqrt(D), not the scores: the "
            "scale goes on q k^T, before the exponential"
        )
    by_d = F.scaled_dot_product_attention(q, k, v, scale=1 / q.size(-1))
    if is_close(got, by_d, atol=1e-9):
        raise ExerciseError(
            f"block={block}: the scores were divided by D = {q.size(-1)}, not by its "
            "square root, sqrt(D)"
        )
    if is_close(got, per_block.mean(0), atol=1e-9):
        raise ExerciseError(
            f"block={block}: each block was normalised on its own and the blocks "
            "averaged: carry one running maximum and one sum across all the blocks"
        )
    if is_close(got, per_block.sum(0), atol=1e-9):
        raise ExerciseError(
            f"block={block}: each block was normalised on its own (a softmax per "
            "block) and the blocks summed: carry one running maximum and one sum "
            "across all the blocks, and divide by the sum once, at the end"
        )
    if not torch.isfinite(got).all():
        top = float((q @ k.transpose(-2, -1)).abs().max()) / math.sqrt(q.size(-1))
        raise ExerciseError(
            f"block={block}: the output is not finite, with scores up to {top:.0f}: "
            + (
                "exp of a raw score overflows; subtract the running maximum first"
                if top > 700
                else "is a factor exp(m_new - m_old)? It is infinite on the first "
                "block, where m_old = -inf; the old sums shrink, by exp(m_old - m_new)"
            )
        )


@checker("tiled attention")
def check_tiled_attention(fn: Callable[[Tensor, Tensor, Tensor, int], Tensor]) -> str:
    """fn(q, k, v, block) -> softmax(q k^T / sqrt(D)) v computed over key blocks of
    `block`, never all T_k at once: no operation but a view may touch all 13 keys."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 3, n, d, generator=g, dtype=torch.float64)
        for n, d in ((9, 8), (13, 8), (13, 5))  # the values narrower: D_v = 5
    )
    n_keys = k.size(-2)
    # keys growing along T: a later block's scores exceed the first block's by > 710
    grow = torch.arange(1, n_keys + 1, dtype=k.dtype)[:, None] * 30
    cases = (
        (q, k, (1, 4, 13, 32)),
        (q * 300, k, (4,)),
        (q.abs(), k.abs() * grow, (4,)),
        (q.abs() + 1, -1000 * (k.abs() + 1), (4,)),  # every score far below 0
    )
    how_read = None  # the first block read the wrong way, raised once values are right
    for q, k, blocks in cases:
        want = F.scaled_dot_product_attention(q, k, v)
        for block in blocks:
            mine = q.clone(), k.clone(), v.clone()
            reads = _KeyReads(n_keys, mine[1], mine[0])
            with reads:
                try:
                    got = fn(*mine, block)
                except (IndexError, RuntimeError, TypeError) as e:
                    _tiled_raised(e, q, v, block)
                    _widths_mixed(e, q, v, block)
                    _keepdim_lost(e, q, block)
                    if "non-zero size" not in str(e):
                        raise
                    raise ExerciseError(
                        f"block={block}: {type(e).__name__} ({first_line(e)}"
                        "): a block of keys came out empty; is the slice one short? "
                        "k[..., s : s + block, :] holds the block's keys, the end of "
                        "a slice being excluded"
                    ) from None
            for name, given, kept in zip("qkv", (q, k, v), mine):
                if not torch.equal(given, kept):
                    raise ExerciseError(
                        f"block={block}: {name} was changed in place (q /= ...?): "
                        f"the caller's {name} must stay as it was; write "
                        f"{name} / ... into a new tensor"
                    )
            if isinstance(got, Tensor) and got.dtype != q.dtype:
                raise ExerciseError(
                    f"block={block}: the output is {got.dtype}, q is {q.dtype}: "
                    "return q's dtype; build m, ell and out with dtype=q.dtype, and "
                    "cast nothing (float32 keeps about 7 digits)"
                )
            if isinstance(got, Tensor) and got.shape == want.shape:
                if not is_close(got, want, atol=1e-9):
                    _first_block_max(q, k, v, block, got)
                    _float32_work(got, want, block)
                    _tiled_hint(q, k, v, block, got.detach().double())
            compare(f"block={block}", got, want, atol=1e-9)
            if how_read is None:
                how_read = _how_read(reads, block, n_keys)
    if how_read:  # after every block's values: a dropped last block is named first
        raise ExerciseError(how_read)
    _tiled_3d(fn, q, k, v)
    return (
        "equals F.scaled_dot_product_attention for blocks of 1, 4, 13 and 32 keys, "
        "scores above 1000 and far below 0, later blocks' scores far above the "
        "first's, values narrower than the keys, reading at most one block of keys at "
        "a time, leaving q, k and v as they were"
    )


def _how_read(reads: _KeyReads, block: int, n_keys: int) -> str | None:
    """What was wrong with how one call read the keys, its values being right: all
    at once, in tiles of another size, or in two passes."""
    if block >= n_keys:
        return None
    if reads.first is not None:
        name, shape = reads.first
        return (
            f"block={block}: {name} read all {n_keys} keys at once (a tensor of shape "
            f"{shape}): the values are right, but every score exists at once, as in a "
            f"plain softmax; read the keys {block} at a time"
        )
    if reads.widest and reads.widest != block:
        return (
            f"block={block}: the values are right, but the keys were read "
            f"{reads.widest} at a time: tiles of `block` keys, the argument (the last "
            "one may be shorter)"
        )
    n_blocks = -(-n_keys // block) * max(1, reads.query_slices)
    if reads.slices >= 2 * n_blocks:
        return (
            f"block={block}: the values are right, but k was sliced {reads.slices} "
            f"times for {n_blocks} blocks: two passes over the keys (the maximum "
            "first, then the sums)? The online softmax reads each block once, "
            "rescaling ell and out as the maximum grows"
        )
    return None


def _tiled_3d(fn: Callable, q: Tensor, k: Tensor, v: Tensor) -> None:
    """q, k, v of one head, (T, D) with no batch or head dims: the docstring's
    (..., T_q, D)."""
    q, k, v = q[0, 0], k[0, 0], v[0, 0]
    try:
        got = fn(q.clone(), k.clone(), v.clone(), 4)
    except (ValueError, IndexError, RuntimeError) as e:
        raise ExerciseError(
            f"q, k, v of shape {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)} "
            f"(no batch or head dims): {type(e).__name__} ({first_line(e)})"
            ": the inputs are (..., T, D), any leading dims; index from the end "
            "(q.shape[-2], k[..., s : s + block, :]), not B, H, T, D = q.shape"
        ) from None
    compare(
        "q, k, v of shape (T, D), block=4",
        got,
        F.scaled_dot_product_attention(q, k, v),
        atol=1e-9,
    )


def _float32_work(got: Tensor, want: Tensor, block: int) -> None:
    """An output right to float32's precision only: computed in float32, cast back."""
    err = (got.detach().double() - want).abs().max().item()
    if got.isfinite().all() and torch.allclose(
        got.double(), want, rtol=1e-5, atol=1e-6
    ):
        raise ExerciseError(
            f"block={block}: the output is right to float32's 7 digits only (off by "
            f"up to {err:.1e}): was the work done in float32 (.float()) and cast "
            "back? q is float64: keep its dtype throughout"
        )


def _tiled_raised(error: Exception, q: Tensor, v: Tensor, block: int) -> None:
    """Name the usual slips behind an error: a 2-D or 3-D transpose of a 4-D block,
    max's (values, indices) pair, the keys sliced along D, a correction without its
    last axis."""
    said = f"block={block}: {type(error).__name__} ({first_line(error)})"
    text = str(error)
    line = learner_line(error)
    if re.search(r"\.T\b", line) and "must match" in text:
        raise ExerciseError(
            f"{said} at `{line}`: .T reverses all four axes of a (B, H, T, D) "
            "block; swap the last two, k_block.transpose(-2, -1) (or .mT)"
        ) from None
    sizes = {int(n) for n in re.findall(r"tensor [ab] \((\d+)\)", text)}
    if "return_types.max" in text:
        raise ExerciseError(
            f"{said}: s.max(-1, keepdim=True) returns a pair (values, indices): take "
            ".values, or use s.amax(-1, keepdim=True)"
        ) from None
    got = re.search(r"but got: \[\d+, (\d+)\]", text)
    if "first two dimensions of batch2" in text and got and int(got[1]) != q.size(-3):
        raise ExerciseError(
            f"{said}: a block of keys has {got[1]} columns, not D = {q.size(-1)}: "
            "k[..., s:s + block] slices the last axis (D); the keys are axis -2, "
            "k[..., s:s + block, :]"
        ) from None
    if "first two dimensions of batch2" in text:
        raise ExerciseError(
            f"{said}: the keys were transposed on the wrong axes: q, k, v are (B, H, "
            "T, D), so transpose(1, 2) swaps heads and time and .T reverses every "
            "axis; swap the last two, k_block.transpose(-2, -1)"
        ) from None
    if "must match" in text and 0 in sizes:
        raise ExerciseError(
            f"{said}: a block came out empty: k[..., s:s + block] slices the last "
            "axis (D); the keys are axis -2, k[..., s:s + block, :]"
        ) from None
    if "must match" in text and sizes == {q.size(-2), v.size(-1)}:
        raise ExerciseError(
            f"{said}: a correction of shape (B, H, T_q) met out (B, H, T_q, D_v): "
            "each query row's factor needs a last axis of 1 to scale its row, "
            "keepdim=True or c[..., None]"
        ) from None


def _keepdim_lost(error: Exception, q: Tensor, block: int) -> None:
    """A size mismatch between T_q and H: a row statistic (..., T_q) lost the axis
    that lines it up with the scores (..., T_q, block)."""
    sizes = {int(n) for n in re.findall(r"tensor [ab] \((\d+)\)", str(error))}
    if "must match" in str(error) and sizes == {q.size(-2), q.size(-3)}:
        raise ExerciseError(
            f"block={block}: RuntimeError ({first_line(error)}): a running "
            f"statistic of shape (B, H, T_q) = {tuple(q.shape[:-1])} met the scores "
            f"(B, H, T_q, block): the max (or the sum) lost its last axis; keep it, "
            "s.max(-1, keepdim=True), or line it up, m[..., None]"
        ) from None


def _widths_mixed(error: Exception, q: Tensor, v: Tensor, block: int) -> None:
    """A size mismatch between q's width D and v's D_v: out made with q's width."""
    said, D, D_v = first_line(error), q.size(-1), v.size(-1)
    if "must match the size" in said and f"({D})" in said and f"({D_v})" in said:
        raise ExerciseError(
            f"block={block}: RuntimeError ({said}): was out made with q's width, D "
            f"= {D}? The output has v's width, D_v = {D_v}: q.new_zeros(*q.shape[:-1]"
            ", v.size(-1))"
        ) from None


def _first_block_max(q: Tensor, k: Tensor, v: Tensor, block: int, got: Tensor) -> None:
    """NaN or inf where a later block's scores exceed the first block's max by more
    than exp can hold: the first block's max kept as the stabiliser, never updated."""
    if got.isfinite().all():
        return
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    first = scores[..., :block].amax(-1, keepdim=True)
    gap = (scores.amax(-1, keepdim=True) - first).max().item()
    fixed, raw = (scores - first).exp(), scores.exp()  # (B, H, T_q, T_k)
    finite = got.detach().isfinite().all(-1)
    if not torch.equal(
        finite, (fixed @ v / fixed.sum(-1, keepdim=True)).isfinite().all(-1)
    ):
        return
    if torch.equal(finite, (raw @ v / raw.sum(-1, keepdim=True)).isfinite().all(-1)):
        return  # as a raw exp, without any max
    raise ExerciseError(
        f"block={block}: the output holds NaN or inf where a later block's scores "
        f"exceed the first block's max by up to {gap:.0f} (exp overflows past 709): "
        "was the first block's max kept as the stabiliser? Update the running max m "
        "with every block, and rescale ell and out by exp(m_old - m_new)"
    )


# 13 · the similarity of position vectors, by distance ------------------------------


def _by_distance(table: Tensor, unit: bool = True, mean: bool = True, shift: int = 0):
    """Mean (or summed) cosine (or dot product) of the rows k + shift apart, k < N."""
    rows = F.normalize(table, dim=1) if unit else table
    m = rows @ rows.T  # (N, N)
    n = len(table)
    pick = [m.diagonal(k + shift) for k in range(n - shift)]
    return torch.stack([d.mean() if mean else d.sum() for d in pick])


def _wrong_distance(table: Tensor, got: Tensor) -> None:
    """Raise ExerciseError naming the mistake, if it is a usual one."""
    for wrong, hint in (
        (dict(unit=False), "dot products, not cosines: normalise each row first"),
        (dict(mean=False), "a sum, not a mean: divide by the N - k pairs k apart"),
        (
            dict(unit=False, mean=False),
            "summed dot products: normalise the rows, and divide by the N - k pairs",
        ),
        (dict(shift=1), "entry 0 is distance 0 (each row with itself), not 1"),
    ):
        want = _by_distance(table, **wrong)
        if got.shape == want.shape and torch.allclose(got.double(), want, atol=1e-9):
            raise ExerciseError(hint)
    want, got = _by_distance(table), got.detach().double()
    by_n = _by_distance(table, mean=False) / len(table)
    if got.shape == want.shape and torch.allclose(got, by_n, atol=1e-9):
        raise ExerciseError(
            "divided by N: distance k has only N - k pairs (the k-th diagonal), "
            "divide by N - k (or take the diagonal's mean)"
        )
    if got.shape == want.shape and torch.allclose(got[1:], 2 * want[1:], atol=1e-9):
        raise ExerciseError(
            "each pair was counted twice: the k-th diagonal and the -k-th hold the "
            "same cosines (the table of cosines is symmetric); summing both and "
            "dividing by N - k doubles the mean; take the k-th diagonal's mean"
        )
    if got.shape == want.shape and torch.allclose(got[:-1], want[1:], atol=1e-9):
        raise ExerciseError("entry k holds distance k + 1: entry 0 is distance 0 (1)")
    u = F.normalize(table.double(), dim=-1)
    s = u @ u.T  # (N, N) cosines
    for dim in (0, 1):
        flipped = torch.stack([s.flip(dim).diagonal(k).mean() for k in range(len(s))])
        if got.shape == want.shape and torch.allclose(got, flipped, atol=1e-9):
            raise ExerciseError(
                f"entry 0 is {got[0].item():.2f}, not 1 (each row with itself): the "
                "diagonals were read off a flipped matrix, S.flip(...); read those "
                "of S = u @ u.T itself, S.diagonal(k)"
            )
    if got.shape == want.shape and torch.allclose(got, want, atol=1e-9):
        return  # right here, where the two agree
    unit = F.normalize(table.double(), dim=1)
    m, n = (unit @ unit.T).abs(), len(table)
    absolute = torch.stack([m.diagonal(k).mean() for k in range(n)])
    if got.shape == want.shape and torch.allclose(got, absolute, atol=1e-9):
        raise ExerciseError(
            "the cosines were made positive (.abs()): keep their sign; a negative "
            "cosine says the two positions point apart"
        )
    if got.shape == want.shape and torch.allclose(got, want.abs(), atol=1e-9):
        raise ExerciseError(
            "the means were made positive (.abs()): keep their sign; a negative mean "
            "says positions that far apart point apart"
        )
    sims = unit @ unit.T
    gap = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).abs()  # (N, N)
    at_least = torch.stack([sims[gap >= k].mean() for k in range(n)])
    signed = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # no abs
    at_least_signed = torch.stack([sims[signed >= k].mean() for k in range(n)])
    if got.shape == want.shape and (
        torch.allclose(got, at_least, atol=1e-9)
        or torch.allclose(got, at_least_signed, atol=1e-9)
    ):
        raise ExerciseError(
            "entry k averages every pair at distance k or more (gap >= k): take "
            "the pairs exactly k apart, gap == k (the k-th diagonal)"
        )
    rows = table.double()
    dots, lengths = rows @ rows.T, rows.norm(dim=1)
    ratio = torch.stack(
        [
            dots.diagonal(k).mean() / (lengths[: n - k] * lengths[k:]).mean()
            for k in range(n)
        ]
    )
    for square in (lengths[:, None] ** 2, lengths[None, :] ** 2):
        one = torch.stack([(dots / square).diagonal(k).mean() for k in range(n)])
        if got.shape == want.shape and torch.allclose(got, one, atol=1e-9):
            raise ExerciseError(
                "each dot product a.b was divided by one row's length squared, "
                "|a|^2: the cosine divides by both lengths, a.b / (|a| |b|) (or "
                "normalise every row first, F.normalize(table, dim=1))"
            )
    if got.shape == want.shape and torch.allclose(got, ratio, atol=1e-9):
        raise ExerciseError(
            "the mean dot product was divided by the mean product of the lengths: "
            "a ratio of means, not a mean of cosines; divide each pair's dot product "
            "by its own lengths first (normalise the rows), then take the mean"
        )
    median = torch.stack([(unit @ unit.T).diagonal(k).median() for k in range(n)])
    if got.shape == want.shape and torch.allclose(got, median, atol=1e-9):
        raise ExerciseError(
            "a median, not a mean: entry k is the mean of the N - k cosines on the "
            "k-th diagonal, .mean()"
        )
    t = table.double()
    for centred, what in (
        (t - t.mean(0), "the mean row was subtracted first"),
        (t - t.mean(1, keepdim=True), "each row was centred (minus its own mean)"),
    ):
        if got.shape == want.shape and torch.allclose(
            got, _by_distance(centred), atol=1e-9
        ):
            raise ExerciseError(
                f"{what}: that is a correlation; the cosine compares the rows as "
                "they are, each only divided by its length (F.normalize(table, dim=1))"
            )
    along = [F.cosine_similarity(t[: n - k], t[k:], dim=0).mean() for k in range(n)]
    if got.shape == want.shape and torch.allclose(got, torch.stack(along), atol=1e-9):
        raise ExerciseError(
            "F.cosine_similarity(..., dim=0) compares the columns: each pair of rows "
            "is compared along the features, dim=1 (dim=-1)"
        )
    columns = _by_distance(F.normalize(table, dim=0), unit=False)
    if got.shape == want.shape and torch.allclose(got, columns, atol=1e-9):
        raise ExerciseError(
            "the columns were normalised (dim=0): normalise each row, one position's "
            "vector (dim=1)"
        )
    wrapped = torch.stack([(unit * unit.roll(-k, 0)).sum(-1).mean() for k in range(n)])
    if got.shape == want.shape and torch.allclose(got, wrapped, atol=1e-9):
        raise ExerciseError(
            "the rows wrap around (roll): the last row is not next to the first; "
            "distance k has the N - k pairs (i, i + k), the k-th diagonal"
        )
    _distance_pairs(table.double(), got, want)
    if (
        got.dim() == 1
        and len(got) == n - 1
        and torch.allclose(got, want[:-1], atol=1e-9)
    ):
        raise ExerciseError(
            f"{n - 1} entries for {n} rows: the distances are k = 0 .. N - 1, the "
            "last one a single pair (range(N), not range(N - 1))"
        )


def _distance_pairs(t: Tensor, got: Tensor, want: Tensor) -> None:
    """Two more slips: each distance's last pair dropped (u[: N - k - 1] with
    u[k : N - 1]); the rows divided by their mean length, one number for all."""
    unit, n = F.normalize(t, dim=1), len(t)
    sims = unit @ unit.T
    short = torch.stack([sims.diagonal(k)[:-1].mean() for k in range(n - 1)])
    if got.shape == want.shape and torch.allclose(got[:-1], short, atol=1e-9):
        raise ExerciseError(
            "each distance lost its last pair (u[:N-k-1] with u[k:N-1]): distance "
            "k has N - k pairs (i, i + k), u[:N-k] with u[k:]"
        )
    by_mean = _by_distance(t / t.norm(dim=1).mean(), unit=False)
    if got.shape == want.shape and torch.allclose(got, by_mean, atol=1e-9):
        raise ExerciseError(
            "the rows were divided by their mean length, one number for all: divide "
            "each row by its own length, F.normalize(table, dim=1)"
        )


@checker("similarity by distance")
def check_cosine_by_distance(fn: Callable[[Tensor], Tensor]) -> str:
    """fn(table (N, C)) -> (N,): the mean cosine similarity of the rows k apart."""
    from transformer_lib.positional import sinusoidal_positional_encoding

    gen = torch.Generator().manual_seed(0)
    tables = {
        "a random (7, 5) table": 3 * torch.randn(7, 5, generator=gen),
        "a random (12, 16) table": torch.randn(12, 16, generator=gen) + 1,
        "the (32, 16) sinusoids": sinusoidal_positional_encoding(16, 32),
    }
    for name, table in tables.items():
        table = table.double()
        given = table.clone()
        try:
            got = fn(given)
        except RuntimeError as e:
            sizes = {int(n) for n in re.findall(r"tensor [ab] \((\d+)\)", str(e))}
            if sizes == set(table.shape) and len(sizes) == 2:
                raise ExerciseError(
                    f"{name}: RuntimeError ({first_line(e)}): a row statistic of "
                    f"shape (N,) = ({len(table)},) met the (N, C) table and spread "
                    "over its columns: table.norm(dim=1) lost its axis; keepdim=True, "
                    "or F.normalize(table, dim=1)"
                ) from None
            if "tensor a (0)" not in str(e) and "tensor b (0)" not in str(e):
                raise
            raise ExerciseError(
                f"{name}: RuntimeError ({first_line(e)}): an empty slice: "
                "at k = 0, table[:-k] is table[:0] (-0 is 0), no rows; slice "
                "table[:N - k] and table[k:]"
            ) from None
        if not torch.equal(given, table):
            raise ExerciseError(
                f"{name}: the caller's table was changed in place (table /= ..., or "
                "an in-place op): compute new tensors, F.normalize(table, dim=1), and "
                "leave the table as it was"
            )
        if isinstance(got, Tensor) and not got.is_floating_point():
            raise ExerciseError(
                f"{name}: the similarities came back as {str(got.dtype)[6:]}, whole "
                "numbers: the means were truncated (a buffer made from "
                "torch.arange, or zeros_like of integers); build the result in the "
                "table's dtype, torch.stack of the means"
            )
        if isinstance(got, Tensor):
            _wrong_distance(table, got)
        if isinstance(got, Tensor) and got.dtype != table.dtype:
            raise ExerciseError(
                f"{name}: a {str(table.dtype)[6:]} table gave {str(got.dtype)[6:]} "
                "similarities: keep the table's dtype (torch.zeros(N) or "
                "torch.tensor(a list) makes float32; pass dtype=table.dtype, or build "
                "the result from the table's own tensors)"
            )
        compare(name, got, _by_distance(table), atol=1e-9)
    return "equals the reference on two random tables and notebook 03's sinusoids"
