"""The checkers of Part IV's build-its (notebooks 15-16): RoPE, grouped-query attention
and GeGLU. Written by hand."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
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
    load_weights,
)

# 15 · RoPE ----------------------------------------------------------------------------


def rope_reference(x: Tensor, base: float = 10000.0) -> Tensor:
    """x (B, T, C) -> each pair (x[2i], x[2i+1]) of token t rotated by the angle t *
    base**(-2i/C)."""
    C = x.size(-1)
    return _rotate_pairs(x, base ** (-torch.arange(0, C, 2, dtype=x.dtype) / C))


def _rotate_pairs(
    x: Tensor, freq: Tensor, start: int = 0, signs: tuple[int, int] = (-1, 1)
) -> Tensor:
    """x (B, T, C) -> each pair (x[2i], x[2i+1]) of token t rotated by the angle
    (start + t) * freq[i]; `signs` are the two sin terms' signs (others are slips)."""
    T = x.size(-2)
    angle = torch.arange(start, start + T, dtype=x.dtype)[:, None] * freq  # (T, C/2)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, T, C/2) each
    first, second = x1 * cos + signs[0] * x2 * sin, signs[1] * x1 * sin + x2 * cos
    rotated = torch.stack([first, second], dim=-1)
    return rotated.flatten(-2)  # (B, T, C)


def _batch_positions(x: Tensor, freq: Tensor) -> Tensor:
    """x (B, T, C) with every token of sequence b rotated as if at position b."""
    rows = [_rotate_pairs(x[b][:, None], freq, start=b)[:, 0] for b in range(len(x))]
    return torch.stack(rows)


def _cos_sin_swapped(x: Tensor, freq: Tensor) -> Tensor:
    """RoPE with cos and sin exchanged: (x sin - y cos, x cos + y sin)."""
    angle = torch.arange(x.size(-2), dtype=x.dtype)[:, None] * freq  # (T, C/2)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    first, second = (
        x1 * angle.sin() - x2 * angle.cos(),
        x1 * angle.cos() + x2 * angle.sin(),
    )
    return torch.stack([first, second], dim=-1).flatten(-2)


def _rope_hint(x: Tensor, got: Tensor) -> str | None:
    """Name the usual mistake that turns x (2, 7, 8) into `got`, if any."""
    halves = torch.cat([x[..., :4], x[..., 4:]], -1)
    swapped = rope_reference(halves[..., [0, 4, 1, 5, 2, 6, 3, 7]])
    flip = torch.tensor([1.0, -1.0], dtype=x.dtype).repeat(4)  # negate x[2i+1]
    freq = 10000.0 ** (-torch.arange(0, 8, 2, dtype=x.dtype) / 8)
    angle = torch.arange(x.size(-2), dtype=x.dtype)[:, None] * freq  # (T, C/2)
    first = x[..., 0::2] * angle.cos() - x[..., 1::2] * angle.sin()
    second = first * angle.sin() + x[..., 1::2] * angle.cos()  # from the new x[2i]
    hints = (
        (
            torch.stack([first, second], -1).flatten(-2),
            "x'[2i+1] was computed from the new x'[2i], already rotated: both come "
            "from the old pair, x'[2i] = x cos - y sin and x'[2i+1] = x sin + y cos "
            "with x, y = x[2i], x[2i+1] as given (compute both, then write them)",
        ),
        (
            swapped[..., [0, 2, 4, 6, 1, 3, 5, 7]],
            "my_apply_rope rotates the first half against the second half (a real "
            "convention, not this one): rotate neighbours x[2i], x[2i+1]",
        ),
        (
            flip * rope_reference(flip * x),
            "my_apply_rope rotates the other way, clockwise (by -omega_i t): turn each "
            "pair counter-clockwise, (x cos - y sin, x sin + y cos)",
        ),
        (  # base^(-i/C) for pair i: the same as base^(-2i/C) at width 2C
            rope_reference(torch.cat([x, torch.zeros_like(x)], -1))[..., :8],
            "pair i turns at base^(-i/C), expected base^(-2i/C): the exponent counts "
            "the dimension 2i, not the pair i (or the base is sqrt(base))",
        ),
        (
            _rotate_pairs(x, 1 / freq),
            "pair i turns at base^(+2i/C), faster and faster: the exponent is "
            "negative, base^(-2i/C), so that pair 0 turns fastest and the last slowest",
        ),
        (
            _rotate_pairs(x, freq * 10000.0 ** (-2 / 8)),
            "pair i turns at base^(-2(i+1)/C): pair 0 must turn at base^0 = 1 "
            "radian per position; the exponent is -2i/C with i from 0",
        ),
        (
            _rotate_pairs(x, freq, start=1),
            "the positions start at 1: token 0 is at position 0, where nothing turns",
        ),
        (
            _rotate_pairs(x, freq, signs=(1, 1)),
            "the first coordinate's sign is wrong, x cos + y sin: a rotation gives "
            "(x cos - y sin, x sin + y cos)",
        ),
        (
            _rotate_pairs(x, freq, signs=(-1, -1)),
            "the second coordinate's sign is wrong, -x sin + y cos: a rotation gives "
            "(x cos - y sin, x sin + y cos)",
        ),
        (
            _batch_positions(x, freq),
            "the positions came from the batch axis (dim 0): a token's position is "
            "its index along T, dim -2, the same in every sequence of the batch",
        ),
        (
            _rotate_pairs(x, 10000.0 ** ((-2 * torch.arange(4)) // 8).to(x.dtype)),
            "the exponent -2i // C was computed in integers (floor division gives -1 "
            "or 0): compute -2i / C in floating point, torch.arange(..., dtype=float)",
        ),
        (
            _rotate_pairs(x, 10000.0 ** (-torch.arange(0, 8, 2, dtype=x.dtype) / 6)),
            "pair i turns at base^(-2i/(C-2)): the exponent divides by C, the full "
            "width, base^(-2i/C)",
        ),
        (
            _rotate_pairs(x, 10000.0 ** (-torch.arange(1, 8, 2, dtype=x.dtype) / 8)),
            "pair i turns at base^(-(2i+1)/C): the exponent is -2i/C, so pair 0 turns "
            "at base^0 = 1 radian per position",
        ),
        (
            _cos_sin_swapped(x, freq),
            "cos and sin are swapped: a rotation by the angle a gives "
            "(x cos a - y sin a, x sin a + y cos a)",
        ),
        (
            _rotate_pairs(x, torch.ones_like(freq)),
            "every pair turns at 1 radian per position: pair i turns at "
            "base^(-2i/C), fast for the first pairs, slow for the last",
        ),
        (
            _rotate_pairs(x, 10000.0 ** (-torch.arange(0, 16, 4, dtype=x.dtype) / 8)),
            "pair i turns at base^(-4i/C): the exponent is -2i/C (2i is the pair's "
            "first dimension)",
        ),
        (
            rope_reference(x)[..., [0, 2, 4, 6, 1, 3, 5, 7]],
            "the rotated pairs were concatenated, all first coordinates then all "
            "second ones: interleave them back, torch.stack([...], -1).flatten(-2), so "
            "pair i stays at x[2i], x[2i+1]",
        ),
    )
    for variant, hint in hints:
        if is_close(got, variant, atol=1e-6):
            return hint
    return None


@checker("RoPE")
def check_rope(fn: Callable[[Tensor], Tensor]) -> str:
    """fn(x (B, T, C)) -> RoPE-rotated x; also checks that scores then depend only on
    the offset."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 8, generator=g, dtype=torch.float64)
    given = x.clone()
    try:
        got = fn(given)
    except RuntimeError as e:
        _rope_positions_axis(e, x.shape)
        raise
    if not torch.equal(given, x):
        raise ExerciseError(
            "my_apply_rope wrote into its input x: return a new tensor (torch.stack, "
            "then flatten) and leave the caller's x as it was"
        )
    if isinstance(got, Tensor) and got.shape == x.shape:
        hint = None if is_close(got, rope_reference(x)) else _rope_hint(x, got)
        if hint:
            raise ExerciseError(hint)
    compare("my_apply_rope", got, rope_reference(x), atol=1e-9)
    if got.dtype != x.dtype:
        raise ExerciseError(
            f"my_apply_rope: a {str(x.dtype)[6:]} x gave a {str(got.dtype)[6:]} "
            "result: return x's dtype (angles may be built in float32 or float64, "
            "as LLaMA does; cast cos and sin to x.dtype before rotating)"
        )
    _check_rope_gradient(fn, x)
    _check_rope_bf16(fn)
    got = fn(x.clone(), base=100.0)
    if isinstance(got, Tensor) and is_close(got, rope_reference(x), atol=1e-9):
        longer = torch.randn(2, 9, 8, generator=g, dtype=torch.float64)
        again = fn(longer.clone(), base=100.0)
        if is_close(again, rope_reference(longer, 100.0), atol=1e-9):
            raise ExerciseError(
                "my_apply_rope(x, base=100.0) gave the rotation of base 10000 for a "
                "T seen before, and the right one for a new T: something kept "
                "between calls (a cos/sin cache keyed by T alone) answered; key it "
                "by everything it depends on (T, C, base, dtype) or compute it "
                "each call"
            )
        raise ExerciseError(
            "my_apply_rope(x, base=100.0) gives the rotation of base 10000: the "
            "argument base is ignored (hard-coded 10000); use base ** (-2i/C)"
        )
    compare("my_apply_rope(x, base=100.0)", got, rope_reference(x, 100.0), atol=1e-9)
    q = torch.randn(8, generator=g, dtype=torch.float64).expand(1, 7, 8)
    scores = fn(q)[0] @ fn(q)[0].T  # (T, T): the same query at every position
    for k in range(1, 7):
        diag = scores.diagonal(k)
        if not torch.allclose(diag, diag[:1].expand_as(diag)):
            raise ExerciseError(f"scores at offset {k} vary with position")
    return "equals the reference on (2, 7, 8); scores depend only on the offset"


def _check_rope_gradient(fn: Callable, x: Tensor) -> None:
    """The rotation must let the gradient through to x: RoPE turns q and k inside
    attention, and W_Q, W_K learn through it."""
    lost = (
        "my_apply_rope's result carries no gradient back to x ({}): RoPE turns q and "
        "k inside attention, and W_Q, W_K learn through it; compute with torch "
        "operations on x itself"
    )
    try:
        got = fn(x.clone().requires_grad_())
    except RuntimeError as e:
        if "numpy" not in str(e).lower():
            raise
        raise ExerciseError(lost.format("it went through NumPy")) from None
    if isinstance(got, Tensor) and not got.requires_grad:
        raise ExerciseError(
            lost.format("detached, through NumPy, or under torch.no_grad()")
        )


def _check_rope_bf16(fn: Callable) -> None:
    """A bfloat16 x of 512 positions, as mixed-precision training gives: the result
    keeps x's dtype, and the angles are not computed in bfloat16 (which holds the
    positions above 256 only to the nearest 2, 4, ...), as the docstring asks."""
    x = torch.randn(1, 512, 8, generator=torch.Generator().manual_seed(1))
    x = x.to(torch.bfloat16)
    got = fn(x.clone())
    if isinstance(got, Tensor) and got.dtype != x.dtype:
        raise ExerciseError(
            f"my_apply_rope: a bfloat16 x came back as {str(got.dtype)[6:]}: cast cos "
            "and sin to x.dtype before rotating, so the result keeps x's dtype"
        )
    want = rope_reference(x.double())
    if isinstance(got, Tensor) and got.shape == x.shape:
        err = (got.double() - want).abs().amax().item()
        if err > 0.1:
            raise ExerciseError(
                f"my_apply_rope on a bfloat16 x of 512 positions is off by up to "
                f"{err:.2g}: the positions or angles were computed in bfloat16, "
                "which rounds the positions above 256; build them in float32, as "
                "the docstring says (torch.arange(T, dtype=torch.float32)), then "
                "cast cos and sin to x's dtype"
            )


def _rope_positions_axis(error: Exception, shape: torch.Size) -> None:
    """Name positions counted along another axis than time: a size mismatch between T
    and the batch or the channels."""
    sizes = re.search(
        r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)",
        str(error),
    )
    B, T, C = shape
    if not sizes or T not in (int(sizes[1]), int(sizes[2])):
        return
    other = ({int(sizes[1]), int(sizes[2])} - {T} or {T}).pop()
    axis = {B: f"x.size(0), the batch ({B})", C: f"x.size(-1), the channels ({C})"}
    if other in axis:
        raise ExerciseError(
            f"RuntimeError ({first_line(error)}): the positions were counted "
            f"along {axis[other]}: x is (B, T, C), and the positions 0..T-1 run along "
            f"dim 1 (-2), torch.arange(x.size(1)), T = {T} here"
        ) from None


# 15 · grouped-query attention ---------------------------------------------------------


def _grouped_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = True,
    scale: float | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """Query head h attends with key/value head h // (H / H_kv), one head at a time;
    scale=1.0: the scores not divided by sqrt(D), a usual mistake; mask: the keys
    each query keeps, in place of the causal mask."""
    g = q.size(1) // k.size(1)
    causal = causal and mask is None
    heads = [
        F.scaled_dot_product_attention(
            q[:, h], k[:, h // g], v[:, h // g], mask, is_causal=causal, scale=scale
        )
        for h in range(q.size(1))
    ]
    return torch.stack(heads, dim=1)  # (B, H, T, D)


def _wrong_group(name: str, q: Tensor, k: Tensor, v: Tensor, got: Tensor) -> None:
    """Raise ExerciseError naming the mistake, if it is a usual one."""
    if (got == 0).all():
        raise ExerciseError(
            f"{name}: every output is 0: were k and v repeated 0 times (H_kv // H, "
            "which is 0)? The group size is H // H_kv query heads per key/value head"
        )
    if torch.allclose(got, _grouped_reference(q, k, v, causal=False), atol=1e-9):
        raise ExerciseError(
            f"{name}: queries also see later keys: apply the causal mask"
        )
    later = torch.ones(q.size(2), q.size(2), dtype=torch.bool).triu()
    if torch.allclose(got, _grouped_reference(q, k, v, mask=later), atol=1e-9):
        raise ExerciseError(
            f"{name}: the causal mask is inverted: query t saw keys t and later; it "
            "keeps the keys j <= t, the lower triangle (tril), and hides the rest"
        )
    hide = torch.ones(q.size(2), q.size(2), dtype=torch.bool).triu(1)
    kept_hidden = _grouped_reference(q, k, v, mask=hide)  # the last query keeps none
    if torch.allclose(got[:, :, :-1], kept_hidden[:, :, :-1], atol=1e-9):
        raise ExerciseError(
            f"{name}: the mask is inverted: query t saw only the keys after it, "
            "triu(1), the ones to hide; masked_fill(triu(1), -inf) hides them (a "
            "boolean attn_mask is the opposite, True where a query may attend: "
            "tril()), or is_causal=True"
        )
    B, H, T, D = q.shape
    n_kv = k.size(1)
    folded = F.scaled_dot_product_attention(  # query row j * T + t of each group
        q.reshape(B, n_kv, H // n_kv * T, D), k, v, is_causal=True
    ).view(B, H, T, D)
    if H > n_kv and torch.allclose(got, folded, atol=1e-9):
        raise ExerciseError(
            f"{name}: the query heads of a group were folded into the time axis, "
            "(B, H_kv, g * T, D): is_causal then lines up query row r with key r, so "
            "head j of a group acts as positions j * T + t and sees keys after t; "
            "keep q (B, H, T, D) and repeat k and v instead, repeat_interleave(H // "
            "H_kv, dim=1)"
        )
    along_time = (t.repeat_interleave(H // n_kv, dim=2)[:, :, :T] for t in (k, v))
    if H > n_kv and torch.allclose(got, _grouped_reference(q, *along_time), atol=1e-9):
        raise ExerciseError(
            f"{name}: k and v were repeated along time (dim 2), so key t became key "
            "t // g: repeat the heads, dim 1 of (B, H_kv, T, D), "
            "k.repeat_interleave(H // H_kv, dim=1)"
        )
    by_time = (
        t.repeat_interleave(H // n_kv, dim=2).reshape(B, H, T, D) for t in (k, v)
    )
    if H > n_kv and torch.allclose(got, _grouped_reference(q, *by_time), atol=1e-9):
        raise ExerciseError(
            f"{name}: k and v were repeated along time (dim 2), then reshaped to H "
            "heads, which mixes time and heads: repeat the heads, dim 1 of (B, H_kv, "
            "T, D), k.repeat_interleave(H // H_kv, dim=1)"
        )
    _masked_another_way(name, q, k, v, got)
    if torch.allclose(got, _grouped_reference(q, k, v, scale=1.0), atol=1e-9):
        raise ExerciseError(f"{name}: the scores q k^T were not divided by sqrt(D)")
    D = q.size(-1)
    if torch.allclose(got, _grouped_reference(q, k, v, scale=1 / D), atol=1e-9):
        raise ExerciseError(
            f"{name}: the scores q k^T were divided by D = {D}, not by sqrt(D)"
        )
    _wrong_scale(name, q, k, v, got)
    g, n_kv = q.size(1) // k.size(1), k.size(1)
    strict = torch.ones(q.size(2), q.size(2), dtype=torch.bool).tril(-1)
    excluded = _grouped_reference(q, k, v, mask=strict)  # query 0 sees nothing
    if torch.allclose(got[:, :, 1:], excluded[:, :, 1:], atol=1e-9):
        raise ExerciseError(
            f"{name}: the mask hides the diagonal too: query t may attend to key t "
            "itself; hide only the later keys, triu(1) (or keep tril()), not triu()"
        )
    pooled = q.view(B, n_kv, g, T, D).mean(2)  # the group's query heads averaged
    averaged = _grouped_reference(pooled, k, v).repeat_interleave(g, dim=1)
    if g > 1 and torch.allclose(got, averaged, atol=1e-9):
        raise ExerciseError(
            f"{name}: the query heads of each group were averaged: every query head "
            "keeps its own queries; it is k and v that are repeated for the group, "
            "repeat_interleave(H // H_kv, dim=1)"
        )
    first = _grouped_reference(q, k[:, :1].expand_as(k), v[:, :1].expand_as(v))
    if n_kv > 1 and torch.allclose(got, first, atol=1e-9):
        raise ExerciseError(
            f"{name}: every query head read key/value head 0: query head h reads "
            "head h // (H / H_kv)"
        )
    for h in range(q.size(1)):
        for rk, rv in ((a, b) for a in range(n_kv) for b in range(n_kv)):
            one = F.scaled_dot_product_attention(
                q[:, h], k[:, rk], v[:, rv], is_causal=True
            )
            if (rk, rv) == (h // g, h // g) or not torch.allclose(
                got[:, h], one, atol=1e-9
            ):
                continue
            if rk == rv and g == 1:
                raise ExerciseError(
                    f"{name}: query head {h} read key/value head {rk}, expected head "
                    f"{h}: with as many key/value heads as query heads, each query "
                    "head has its own"
                )
            if rk == rv:
                raise ExerciseError(
                    f"{name}: query head {h} read key/value head {rk}, expected "
                    f"head {h // g} (heads {h // g * g} to {h // g * g + g - 1} share "
                    "it: the copies were tiled 0, 1, 0, 1, as .repeat or an expand "
                    "before the H_kv axis makes them; .repeat_interleave groups them)"
                )
            raise ExerciseError(
                f"{name}: query head {h} read key head {rk} but value head {rv}, "
                f"expected head {h // g} for both: expand k and v the same way, "
                ".repeat_interleave(H // H_kv, dim=1)"
            )


def _masked_another_way(name: str, q: Tensor, k: Tensor, v: Tensor, got: Tensor):
    """The softmax over the queries, a 0/1 float mask added to the scores, or the
    scores multiplied by it: each named."""
    g, T = q.size(1) // k.size(1), q.size(2)
    k, v = (t.repeat_interleave(g, dim=1) for t in (k, v))  # (B, H, T, D)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T, T)
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    for weights, hint in (
        (
            s.masked_fill(~keep, -math.inf).softmax(-2),
            "the softmax ran over the queries (dim -2): each query's weights over "
            "the keys sum to 1, softmax(dim=-1)",
        ),
        (
            (s + keep.to(s.dtype)).softmax(-1),
            "a 0/1 float mask was given as attn_mask: a float mask is added to the "
            "scores, so it hides nothing; pass a bool mask (True = may attend), a "
            "0/-inf float one, or is_causal=True",
        ),
        (
            (s * keep).softmax(-1),
            "the later keys' scores were multiplied by 0, not hidden: exp(0) = 1 "
            "still gives them weight; masked_fill(~tril, float('-inf')), or "
            "is_causal=True",
        ),
    ):
        if torch.allclose(got, weights @ v, atol=1e-9):
            raise ExerciseError(f"{name}: {hint}")


def _wrong_scale(name: str, q: Tensor, k: Tensor, v: Tensor, got: Tensor) -> None:
    """The scores scaled by some 1/s other than 1/sqrt(D): s read from query 1 of
    head 0, which weighs keys 0 and 1 only, then checked on every output."""
    g, D = q.size(1) // k.size(1), q.size(-1)
    q1, k01, v01 = q[0, 0, 1], k[0, 0, :2], v[0, 0, :2]
    dv = v01[1] - v01[0]
    w = ((got[0, 0, 1] - v01[0]) @ dv / (dv @ dv)).item()  # the weight of key 1
    gap = (q1 @ (k01[1] - k01[0])).item()  # its score minus key 0's, unscaled
    if not (0 < w < 1) or abs(gap) < 1e-3:
        return
    scale = math.log(w / (1 - w)) / gap
    if scale <= 0 or abs(scale * math.sqrt(D) - 1) < 1e-6:
        return
    if not torch.allclose(got, _grouped_reference(q, k, v, scale=scale), atol=1e-7):
        return
    s2 = 1 / scale**2
    what = f"sqrt({s2:.4g})"
    if abs(s2 - D * g) < 1e-6 * s2 and g > 1:
        what = f"sqrt(D * H / H_kv) = sqrt({D} * {g})"
    elif abs(s2 - D * q.size(1)) < 1e-6 * s2:
        what = f"sqrt(D * H) = sqrt({D} * {q.size(1)})"
    raise ExerciseError(
        f"{name}: the scores q k^T were divided by {what}, not by sqrt(D) = "
        f"sqrt({D}): the scale is one head's width, whatever the grouping"
    )


_REPEATS = {"repeat_interleave", "repeat", "expand", "expand_as", "tile", "cat"}


class _Repeats(TorchFunctionMode):
    """Which of k and v went through a repetition (repeat_interleave, repeat, expand,
    cat, ...), following what is computed from each of them alone."""

    def __init__(self, k: Tensor, v: Tensor):
        super().__init__()
        self.origin, self.repeated = {id(k): "k", id(v): "v"}, set()
        self.alive = [k, v]  # no id is reused while the mode runs

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = {
            self.origin[id(t)]
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, Tensor) and id(t) in self.origin
        }
        if len(ins) == 1:
            if getattr(func, "__name__", "") in _REPEATS:
                self.repeated |= ins
            for t in tree_flatten(out)[0]:
                if isinstance(t, Tensor):
                    self.origin[id(t)] = next(iter(ins))
                    self.alive.append(t)
        return out


def _one_not_repeated(fn: Callable, name: str, q: Tensor, k, v, error) -> None:
    """fn raised on a size mismatch: was only one of k and v repeated?"""
    mine = q.clone(), k.clone(), v.clone()
    trace = _Repeats(*mine[1:])
    try:
        with trace:
            _without_enable_gqa(fn, *mine)
    except Exception:  # noqa: BLE001 - the first run's error is the one reported
        pass
    if len(trace.repeated) == 1:
        (done,) = trace.repeated
        raise ExerciseError(
            f"{name}: RuntimeError ({first_line(error)}): {done} was "
            f"repeated, {'kv'.replace(done, '')} was not: repeat k and v alike, each "
            "repeat_interleave(H // H_kv, dim=1)"
        ) from None


@checker("grouped-query attention")
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
        given = q.clone(), k.clone(), v.clone()  # the caller's, to compare after
        try:
            got = _without_enable_gqa(fn, *given)
        except RuntimeError as e:
            sizes = {int(n) for n in re.findall(r"tensor [ab] \((\d+)\)", str(e))}
            if n_kv > 2 and sizes == {4, n_kv * n_kv}:
                raise ExerciseError(
                    f"{name}: RuntimeError ({first_line(e)}): k and v were "
                    f"repeated by H_kv = {n_kv}, giving {n_kv * n_kv} heads: the "
                    f"factor is H // H_kv = {4 // n_kv}, so that the H_kv heads become "
                    "H, repeat_interleave(H // H_kv, dim=1)"
                ) from None
            if n_kv == 4 or "must match the size" not in str(e):
                raise
            _one_not_repeated(fn, name, q, k, v, e)
            raise ExerciseError(
                f"{name}: RuntimeError ({first_line(e)}): were k and v "
                "repeated along another axis? The heads are dim 1 of (B, H_kv, T, D): "
                "repeat_interleave(H // H_kv, dim=1)"
            ) from None
        for what, kept, was in zip("qkv", given, (q, k, v)):
            if not torch.equal(kept, was):
                raise ExerciseError(
                    f"{name}: {what} was changed in place (q /= ...?): the caller's "
                    f"{what} must stay as it was; write {what} / ... into a new tensor"
                )
        want = _grouped_reference(q, k, v)
        if isinstance(got, Tensor) and got.shape == want.shape:
            if not torch.allclose(got.double(), want, atol=1e-9):
                _wrong_group(name, q, k, v, got.double())
        compare(name, got, want, atol=1e-9)
    return "equals the reference for 4 query heads and 4, 2 and 1 key/value heads"


def _without_enable_gqa(fn: Callable, q: Tensor, k: Tensor, v: Tensor):
    """fn(q, k, v), refusing F.scaled_dot_product_attention(..., enable_gqa=True)."""
    sdpa = F.scaled_dot_product_attention

    def guarded(*args, **kwargs):
        if kwargs.get("enable_gqa"):
            raise ExerciseError(
                "F.scaled_dot_product_attention(..., enable_gqa=True) does the "
                "grouping for you: build the repetition yourself (each key/value "
                "head repeated for its group of query heads), then attend"
            )
        return sdpa(*args, **kwargs)

    F.scaled_dot_product_attention = guarded
    try:
        return fn(q, k, v)
    finally:
        F.scaled_dot_product_attention = sdpa


# 16 · GeGLU ---------------------------------------------------------------------------


def _geglu_width(d_model: int, multiple_of: int = 64) -> int:
    """LLaMA's rule: 2/3 of 4 * d_model, rounded up to a multiple of `multiple_of`."""
    return multiple_of * math.ceil(8 * d_model / 3 / multiple_of)


def _geglu_reference(d_model: int):
    """The library's SwiGLU with GELU (exact) as its gate: GeGLU."""
    from transformer_lib.modern import SwiGLU

    class GeGLU(SwiGLU):
        def forward(self, x: Tensor) -> Tensor:
            return self.proj(F.gelu(self.gate(x)) * self.up(x))

    return GeGLU(d_model, _geglu_width(d_model)).double().eval()


def _geglu_width_hints() -> list[tuple[Callable[[int], int], str]]:
    """The usual wrong widths, each as a rule d_model -> width, and what to say."""
    up = "rounds up to a multiple of 64"
    third = "2/3 of the GELU MLP's width 4 * d_model, 8 * d_model / 3"
    four = (
        "4 * d_model is the GELU MLP's: three matrices take 2/3 of it, "
        "8 * d_model / 3, to keep its parameter count"
    )
    raw = "8 * d_model / 3 is not a multiple of 64: round it up"
    return [
        (lambda d: 4 * d, four),
        (lambda d: 64 * math.ceil(4 * d / 64), four),
        (lambda d: int(8 * d / 3), raw),
        (lambda d: round(8 * d / 3), raw),
        (lambda d: math.ceil(8 * d / 3), raw),
        (
            lambda d: 64 * math.floor(8 * d / 3 / 64),
            "rounded down: round up to the next multiple of 64, so the width never "
            "falls below 8 * d_model / 3",
        ),
        (
            lambda d: 64 * round(8 * d / 3 / 64),
            "rounded to the nearest multiple of 64: round up (math.ceil), so the "
            "width never falls below 8 * d_model / 3",
        ),
        (
            lambda d: (int(8 * d / 3) // 64 + 1) * 64,
            "(n // 64 + 1) * 64 adds a multiple of 64 too many where n is one "
            "already (d_model 24: n = 64): round up, 64 * math.ceil(n / 64)",
        ),
        (
            lambda d: 64 * math.ceil(2 * d / 3 / 64),
            f"2/3 of d_model: the width is {third}",
        ),
        (
            lambda d: 64 * math.ceil(4 * d / 3 / 64),
            f"4 * d_model / 3: the width is {third}",
        ),
        (lambda d: int(2 * d / 3), f"2/3 of d_model: the width is {third}, then {up}"),
        (lambda d: int(4 * d / 3), f"4 * d_model / 3: the width is {third}, then {up}"),
        (
            lambda d: 8 * round(8 * d / 3 / 8),
            f"a multiple of 8, as the library's SwiGLU: this one {up}",
        ),
        (
            lambda d: 8 * math.ceil(8 * d / 3 / 8),
            f"a multiple of 8, as the library's SwiGLU: this one {up}",
        ),
        (
            lambda d: 64 * math.ceil(8 * round(8 * d / 3 / 8) / 64),
            "8 * d_model / 3 was first rounded to the nearest multiple of 8, as the "
            "library's SwiGLU does, then up to 64: 66.7 (d_model 25) becomes 64 and "
            "stays 64; round 8 * d_model / 3 itself up, 64 * math.ceil(8 * d_model / "
            "3 / 64) = 128",
        ),
    ]


def _check_geglu_width(cls: type) -> None:
    """Raise ExerciseError naming the rounding mistake, if the width is wrong: the
    widths at four d_model are matched against each usual wrong rule at once."""

    def width(d: int):
        return getattr(getattr(cls(d), "gate", None), "out_features", None)

    layers = {n for n, m in cls(24).named_children() if isinstance(m, nn.Linear)}
    if not {"gate", "up", "proj"} <= layers:
        raise ExerciseError(
            f"MyGeGLU's layers are {sorted(layers)}: the docstring asks for three "
            "nn.Linear named gate, up and proj (not one fused gate_up), so that the "
            "weights load by name"
        )
    for d in (24, 40, 50, 25):  # 25: 8 * 25 / 3 = 66.7 rounds to 64 but up to 128
        if (got := width(d)) == (want := _geglu_width(d)):
            continue
        seen = tuple(width(e) for e in (24, 40, 50, 100, 25))
        hint = next(
            (
                h
                for rule, h in _geglu_width_hints()
                if seen == tuple(map(rule, (24, 40, 50, 100, 25)))
            ),
            f"expected 64 * ceil(8 * d_model / 3 / 64) = {want}"
            + (
                ": 2 // 3 is 0 in Python (floor division); write 8 * d_model / 3, "
                "then round up"
                if got == 0
                else ""
            ),
        )
        raise ExerciseError(f"MyGeGLU({d}): hidden width {got}: {hint}")
    got = getattr(getattr(cls(40, multiple_of=16), "gate", None), "out_features", None)
    if got != (want := _geglu_width(40, multiple_of=16)):
        raise ExerciseError(
            f"MyGeGLU(40, multiple_of=16): hidden width {got}, expected {want}: round "
            "up to a multiple of the argument multiple_of, not of a fixed 64"
        )


def _geglu_hints(g: Tensor, u: Tensor) -> tuple[tuple[Tensor, str], ...]:
    """More wrong hidden activations, from gate(x) = g and up(x) = u: (h, hint)."""
    gated = "gelu(gate(x)) * up(x)"
    return (
        (
            F.gelu(u),
            "gate(x) is missing: the GELU goes on gate(x), which multiplies up(x), "
            + gated,
        ),
        (
            F.gelu(g) * F.gelu(u),
            f"the GELU went on both branches: up(x) stays linear, {gated}",
        ),
        (
            F.relu(g) * u,
            f"the gate uses ReLU (that is ReGLU): GeGLU's is GELU, {gated}",
        ),
        (
            torch.sigmoid(g) * u,
            "the gate uses a sigmoid (that is the first GLU): GeGLU's is GELU, "
            + gated,
        ),
        (F.gelu(g) + u, f"the branches were added: the gate multiplies, {gated}"),
    )


@checker("GeGLU")
def check_geglu(cls: type) -> str:
    """cls(d_model) with gate, up, proj (no biases) of hidden width 2/3 * 4 * d_model
    rounded up to a multiple of 64; forward(x) = proj(gelu(gate(x)) * up(x))."""
    _check_geglu_width(cls)
    torch.manual_seed(0)
    ref = _geglu_reference(24)
    mine = cls(24)
    load_weights(mine, ref.state_dict(), "MyGeGLU")
    mine.double().eval()
    x = torch.randn(2, 5, 24).double()
    got, want = mine(x), ref(x)
    if not is_close(got, want):
        with torch.no_grad():
            g, u = ref.gate(x), ref.up(x)
            for h, hint in (
                (F.silu(g) * u, "the gate uses SiLU: that is SwiGLU; GeGLU's is GELU"),
                (
                    F.gelu(g, approximate="tanh") * u,
                    "the gate uses GELU's tanh approximation: use the exact F.gelu",
                ),
                (
                    g * F.gelu(u),
                    "the GELU went on up(x): it gates, so it goes on "
                    "gate(x), and up(x) stays linear",
                ),
                (
                    F.gelu(g),
                    "up(x) is missing: the gate multiplies a second, linear branch",
                ),
                (
                    F.gelu(-g) * u,
                    "the GELU went on -gate(x), the gate negated: use "
                    "gelu(gate(x)) * up(x)",
                ),
                (
                    F.gelu(g * u),
                    "gelu(gate(x) * up(x)): the GELU goes on gate(x) alone, then "
                    "multiplies up(x): gelu(gate(x)) * up(x)",
                ),
                *_geglu_hints(g, u),
            ):
                if is_close(got, ref.proj(h)):
                    raise ExerciseError(hint)
            if is_close(got, F.gelu(ref.proj(g * u))):
                raise ExerciseError(
                    "gelu(proj(gate(x) * up(x))): the GELU went after proj, on the "
                    "output, so nothing gates: it goes on gate(x) alone, "
                    "proj(gelu(gate(x)) * up(x))"
                )
            if is_close(got, x + want):
                raise ExerciseError(
                    "x was added to the output: MyGeGLU returns the MLP alone, "
                    "proj(gelu(gate(x)) * up(x)); the block adds the residual"
                )
    from transformer_lib.exercises.part2 import _no_dropout

    _no_dropout(mine, lambda: mine(x), got)
    compare_module("MyGeGLU(x)", got, want, mine, ref)
    compare_input_grads("MyGeGLU", lambda x: mine(x), lambda x: ref(x), x=x)
    widths = ", ".join(str(_geglu_width(d)) for d in (24, 40, 50))
    return (
        f"hidden widths {widths} for d_model 24, 40, 50; equals "
        "proj(gelu(gate(x)) * up(x)) on (2, 5, 24); gradients"
    )


# 16 · Muon's Newton-Schulz iteration ---------------------------------------------

_NS_COEFFICIENTS = (3.4445, -4.775, 2.0315)


def _newton_schulz_reference(
    G: Tensor, steps: int = 5, abc=_NS_COEFFICIENTS, norm=None
) -> Tensor:
    """The iteration as the notebook writes it, in G's dtype; `abc` and `norm` (a
    function of X giving the divisor) let the checker rebuild the usual slips."""
    a, b, c = abc
    X = G / (norm(G) if norm else G.norm())
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X


def _newton_schulz_hint(G: Tensor, got: Tensor, steps: int) -> str | None:
    """What a wrong answer on G did instead, if it is a usual slip."""
    slips = (
        (
            _newton_schulz_reference(G, steps, _NS_COEFFICIENTS[::-1]),
            "the coefficients are reversed: (a, b, c) = (3.4445, -4.7750, 2.0315), "
            "a on X, b on (X X^T) X, c on (X X^T)^2 X",
        ),
        (
            _newton_schulz_reference(G, steps, norm=lambda X: 1.0),
            "G was not divided by its norm first: X_0 = G / ||G||_F puts every "
            "singular value in (0, 1], where the polynomial pushes it towards 1",
        ),
        (
            _newton_schulz_reference(G, steps, norm=lambda X: X.abs().max()),
            "G was divided by its largest entry: divide by its Frobenius norm, "
            "G.norm(), which bounds every singular value by 1",
        ),
        (
            _newton_schulz_reference(G, 1),
            "one step only: repeat the update `steps` times (5 by default)",
        ),
        (
            _newton_schulz_reference(G, steps, (_NS_COEFFICIENTS[0], 0.0, 0.0)),
            "only a X is left: the update is a X + b (X X^T) X + c (X X^T)^2 X",
        ),
    )
    for want, hint in slips:
        if got.shape == want.shape and is_close(got, want, atol=1e-8):
            return hint
    if got.shape == G.shape and is_close(got, G / G.norm(), atol=1e-8):
        return "only the normalisation: then repeat the update `steps` times"
    return None


@checker("Newton-Schulz")
def check_newton_schulz(fn: Callable[..., Tensor]) -> str:
    """fn(G, steps=5) -> about U V^T of G (d_out, d_in), by Muon's Newton-Schulz
    iteration; compared with the reference in float64 on wide, square and tall G."""
    g = torch.Generator().manual_seed(0)
    shapes = ((6, 10), (8, 8), (12, 5))
    for shape in shapes:
        G = torch.randn(*shape, generator=g, dtype=torch.float64)
        given = G.clone()
        got = fn(given)
        if not torch.equal(given, G):
            raise ExerciseError(
                "my_newton_schulz wrote into its input G: work on a copy "
                "(X = G / G.norm() makes one)"
            )
        if isinstance(got, Tensor) and got.shape == G.T.shape and shape[0] != shape[1]:
            raise ExerciseError(
                f"my_newton_schulz on a {shape} G returned shape {tuple(got.shape)}: "
                "a tall G is transposed to work on, so transpose the result back"
            )
        want = _newton_schulz_reference(G)
        if isinstance(got, Tensor) and not torch.isfinite(got).all():
            raise ExerciseError(
                f"my_newton_schulz on a {shape} G gave nan or inf: the iteration grows "
                "any singular value above about 1.26 without bound, so divide G by its "
                "Frobenius norm first, X_0 = G / G.norm()"
            )
        if isinstance(got, Tensor) and got.shape == G.shape:
            hint = (
                None
                if is_close(got, want, atol=1e-8)
                else _newton_schulz_hint(G, got, 5)
            )
            if hint:
                raise ExerciseError(hint)
        compare(f"my_newton_schulz(G of shape {shape})", got, want, atol=1e-8)
    G = torch.randn(7, 4, generator=g, dtype=torch.float64)
    got = fn(G.clone(), steps=2)
    if isinstance(got, Tensor) and is_close(got, _newton_schulz_reference(G), 1e-8):
        raise ExerciseError(
            "my_newton_schulz(G, steps=2) did 5 steps: the argument steps is ignored"
        )
    compare("my_newton_schulz(G, steps=2)", got, _newton_schulz_reference(G, 2), 1e-8)
    singular = torch.linalg.svdvals(fn(torch.randn(32, 64, generator=g)))
    return (
        "equals the iteration on (6, 10), (8, 8) and (12, 5) in float64, and with "
        f"steps=2; on a random (32, 64) G its singular values lie in "
        f"[{singular.min():.2f}, {singular.max():.2f}], near 1"
    )
