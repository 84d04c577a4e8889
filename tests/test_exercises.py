"""Every build-it's checker in both directions: it passes the solution in solutions/,
says "not implemented yet" for the notebook's untouched stub, and names the mistake of
typical wrong answers. Also: checkers print one line, return None and leave the global
random stream alone; `python -m transformer_lib check` reads a notebook's build-its."""

import hashlib
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import fails, passes, solution
from torch import nn

from transformer_lib import exercises as ex
from transformer_lib.__main__ import main

ROOT = Path(__file__).resolve().parent.parent
ALL = [(nb, name, check) for nb, items in ex.BUILD_ITS.items() for name, check in items]
IDS = [f"{nb}-{name}" for nb, name, _ in ALL]


def stubs(nb: str) -> dict:
    """The notebook's build-it cells, run as saved."""
    path = next((ROOT / "notebooks").glob(f"{nb}_*.ipynb"))
    namespace: dict = {}
    for source in ex.build_it_cells(path):
        exec(compile(source, str(path), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("nb,name,check", ALL, ids=IDS)
def test_the_solution_passes(nb, name, check, capsys):
    fn = getattr(solution(nb), name)
    assert ex.outcome(check, fn)[0] == "pass", ex.outcome(check, fn)
    assert check(fn) is None  # no stray True under the cell
    assert capsys.readouterr().out.startswith(f"\u2713 {check.title} passes: ")


@pytest.mark.parametrize("nb,name,check", ALL, ids=IDS)
def test_the_untouched_stub_is_not_implemented_yet(nb, name, check, capsys):
    namespace = stubs(nb)
    assert name in namespace, f"notebook {nb} has no build-it cell defining {name}"
    assert ex.outcome(check, namespace[name]) == ("todo", ex.TODO)
    check(namespace[name])
    assert capsys.readouterr().out == f"\u00b7 {check.title}: {ex.TODO}\n"


@pytest.mark.parametrize("nb,name,check", ALL, ids=IDS)
def test_a_checker_leaves_the_random_stream_alone(nb, name, check, capsys):
    torch.manual_seed(1)
    before = torch.get_rng_state()
    check(getattr(solution(nb), name))
    assert torch.equal(torch.get_rng_state(), before)


def test_every_notebook_has_a_build_it():
    notebooks = (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
    assert sorted(ex.BUILD_ITS) == sorted(p.name[:2] for p in notebooks)


def test_every_notebook_with_a_build_it_cell_is_in_the_registry():
    """A notebook holding a cell tagged `build-it` is listed in BUILD_ITS (so `check NN`
    and `record` know it), and each listed notebook holds build-it cells."""
    with_cells = {
        path.name[:2]
        for path in (ROOT / "notebooks").glob("*.ipynb")
        if ex.build_it_cells(path)
    }
    assert with_cells - set(ex.BUILD_ITS) == set(), "build-it cells with no checker"
    assert set(ex.BUILD_ITS) - with_cells == set(), "checkers with no build-it cell"


@pytest.mark.parametrize("nb", sorted(ex.BUILD_ITS))
def test_the_registry_lists_build_its_in_page_order(nb):
    """`check NN` reports a notebook's build-its in the order the page shows them."""
    path = next((ROOT / "notebooks").glob(f"{nb}_*.ipynb"))
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    where = []
    for name, _ in ex.BUILD_ITS[nb]:
        defines = re.compile(rf"^(def|class) {name}\b", re.M)
        where.append(
            next(
                i
                for i, cell in enumerate(cells)
                if cell["cell_type"] == "code"
                and defines.search("".join(cell["source"]))
            )
        )
    assert where == sorted(where), f"{nb}: {ex.BUILD_ITS[nb]} is not in page order"


# wrong answers, one test per build-it ------------------------------------------------


def test_sha256():
    fails(
        ex.check_sha256,
        lambda p: hashlib.sha256(p.read_bytes()).digest(),
        "expected a str, got bytes",
    )
    fails(
        ex.check_sha256,
        lambda p: hashlib.sha256(p.read_bytes()[: 2**20]).hexdigest(),
        "a 3145735-byte file: only its first MiB was hashed",
    )
    fails(  # the right digest, but the whole file in memory at once
        ex.check_sha256,
        lambda p: hashlib.sha256(p.read_bytes()).hexdigest(),
        "the whole file was read in one go; read it 1 MiB at a time",
    )
    fails(
        ex.check_sha256,
        lambda p: hashlib.sha256(p.read_bytes()).hexdigest().upper(),
        "the digest is in uppercase hex",
    )

    def text_mode(path):
        h = hashlib.sha256()
        with open(path, encoding="utf-8", errors="replace") as f:
            while chunk := f.read(2**20):
                h.update(chunk.encode())
        return h.hexdigest()

    fails(ex.check_sha256, text_mode, "the file was read as text")


def test_bpe_encode():
    right = solution("01").my_bpe_encode
    # the docstring's example, and the merges' order matters: "ow" before "lo"
    merges = [(111, 119), (108, 111), (32, 108)]
    assert right("low lower", merges) == [108, 256, 258, 256, 101, 114]

    def wrong(text, merges, leftmost=False, chars=False):
        from transformer_lib.tokenization import CHUNK_PATTERN, merge

        ranks, out = {p: 256 + k for k, p in enumerate(merges)}, []
        for chunk in CHUNK_PATTERN.findall(text):
            ids = [ord(c) for c in chunk] if chars else list(chunk.encode())
            while known := [p for p in zip(ids, ids[1:]) if p in ranks]:
                pair = known[0] if leftmost else min(known, key=ranks.get)
                ids = merge(ids, pair, ranks[pair])
            out += ids
        return out

    # the first known pair met, not the one learnt first
    fails(
        ex.check_bpe_encode,
        lambda t, m: wrong(t, m, leftmost=True),
        r"merges the leftmost known pair first",
    )

    def frequent(text, merges):  # the most frequent known pair, the reviewer's version
        from collections import Counter

        from transformer_lib.tokenization import CHUNK_PATTERN, merge

        ranks, out = {p: 256 + k for k, p in enumerate(merges)}, []
        for chunk in CHUNK_PATTERN.findall(text):
            ids = list(chunk.encode())
            while c := Counter(p for p in zip(ids, ids[1:]) if p in ranks):
                pair = c.most_common(1)[0][0]
                ids = merge(ids, pair, ranks[pair])
            out += ids
        return out

    fails(ex.check_bpe_encode, frequent, r"merges the most frequent known pair first")
    # code points, not UTF-8 bytes
    fails(
        ex.check_bpe_encode,
        lambda t, m: wrong(t, m, chars=True),
        r"starts from characters \(ord\), not UTF-8 bytes",
    )

    def whole(text, merges):  # no chunks: merges run across chunk boundaries
        from transformer_lib.tokenization import apply_merges

        ranks = {p: 256 + k for k, p in enumerate(merges)}
        return apply_merges(list(text.encode()), ranks)

    fails(ex.check_bpe_encode, whole, r"merges pairs across chunks: split the text")
    fails(
        ex.check_bpe_encode,
        lambda t, m: torch.tensor(right(t, m), dtype=torch.long),
        "expected a list of ids, got Tensor",
    )
    fails(
        ex.check_bpe_encode,
        lambda text, merges: right(text, merges[:-1]),
        r"id \d+ is \d+, expected",
    )


def test_tied_output():
    Right = solution("02").MyTiedOutput

    class Copied(Right):  # a copy of the table: a second matrix, trained apart
        def __init__(self, embedding):
            super().__init__(embedding)
            self.weight = nn.Parameter(embedding.weight.detach().clone())

        def forward(self, h):
            return h @ self.weight.T

    fails(ex.check_tied_output, Copied, r"has 400 of its own, not 0")

    class OwnLinear(Right):
        def __init__(self, embedding):
            super().__init__(embedding)
            self.out = nn.Linear(embedding.d_model, embedding.vocab_size, bias=False)

    fails(ex.check_tied_output, OwnLinear, r"has 400 of its own, not 0")

    class Scaled(Right):
        def forward(self, h):
            return super().forward(h) * self.embedding.d_model**0.5

    fails(ex.check_tied_output, Scaled, r"logits are (multiplied|divided) by sqrt\(d_")

    class Detached(Right):
        def forward(self, h):
            return h @ self.embedding.weight.detach().T

    fails(ex.check_tied_output, Detached, r"token 7 is never looked up")


def shift_variant(
    sign: int = 1,
    exponent: float = -2.0,
    halves: bool = False,
    concatenated: bool = False,
    from_new_sine: bool = False,
    degrees: bool = False,
):
    """my_shift_encoding with one of the usual slips."""

    def shift(x, k):
        C = x.shape[-1]
        angle = k * 10000 ** (exponent * torch.arange(C // 2, dtype=torch.float64) / C)
        angle = angle * 180 / math.pi if degrees else angle
        c, s = angle.cos().to(x.dtype), sign * angle.sin().to(x.dtype)
        a, b = (
            (x[..., : C // 2], x[..., C // 2 :])
            if halves
            else (x[..., 0::2], x[..., 1::2])
        )
        new_a = a * c + b * s
        new_b = -(new_a if from_new_sine else a) * s + b * c
        if halves or concatenated:
            return torch.cat([new_a, new_b], -1)
        return torch.stack([new_a, new_b], -1).flatten(-2)

    return shift


def test_shift_encoding():
    check = ex.check_shift_encoding
    assert ex.outcome(check, shift_variant())[0] == "pass"
    fails(check, shift_variant(sign=-1), r"turned the other way: .* gave pe\[p - 7\]")
    fails(check, shift_variant(halves=True), r"paired with feature i \+ C/2")
    fails(check, shift_variant(concatenated=True), "concatenated, all sines then")
    fails(check, shift_variant(from_new_sine=True), "from the sine already turned")
    fails(check, shift_variant(exponent=-1.0), r"10000\^\(-i/C\)")
    fails(check, shift_variant(exponent=2.0), r"10000\^\(\+2i/C\)")
    fails(check, shift_variant(exponent=-4.0), r"10000\^\(-4i/C\).*do not double")

    def in_float32(exponent: float = -2.0):  # angles built as the library's table
        def shift(x, k):
            C = x.shape[-1]
            i = torch.arange(C // 2, dtype=torch.float32)
            angle = k * 10000.0 ** (exponent * i / C)  # up to 1000 rad: 6e-5 off
            c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
            a, b = x[..., 0::2], x[..., 1::2]
            return torch.stack([a * c + b * s, -a * s + b * c], -1).flatten(-2)

        return shift

    assert ex.outcome(check, in_float32())[0] == "pass"  # the blind review's refusal
    fails(check, in_float32(exponent=2.0), r"10000\^\(\+2i/C\)")
    fails(check, shift_variant(degrees=True), "in degrees")
    fails(check, lambda x, k: x.clone(), "returned x unchanged")
    right = solution("03").my_shift_encoding

    def with_the_matrix(x, k):  # notebook 03's shift_matrix, called
        C = x.shape[-1]
        w = 10000 ** (-2 * torch.arange(C // 2, dtype=torch.float64) / C)
        c, s = torch.cos(w * k), torch.sin(w * k)
        blocks = torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)
        return x @ torch.block_diag(*blocks).to(x.dtype).T

    fails(check, with_the_matrix, r"built a \(16, 16\) matrix, R_k itself")

    def looked_up(x, k):  # finds x's row in a table and returns the row k further
        from transformer_lib.positional import sinusoidal_positional_encoding

        pe = sinusoidal_positional_encoding(x.shape[-1], 2000).to(x.dtype)
        return pe[((x @ pe.T).argmax(-1) + k).clamp(0, 1999)]

    fails(check, looked_up, "right on the table's rows, wrong here")

    def in_place(x, k):
        x.copy_(right(x, k))
        return x

    fails(check, in_place, "wrote into its input x")
    fails(check, lambda x, k: right(x.double(), k), "a float32 x gave a float64")
    kept: dict = {}

    def cached(x, k):  # the angles cached by width alone
        C = x.shape[-1]
        if C not in kept:
            kept[C] = k * 10000 ** (-torch.arange(0, C, 2, dtype=torch.float64) / C)
        c, s = kept[C].cos().to(x.dtype), kept[C].sin().to(x.dtype)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * c + b * s, -a * s + b * c], -1).flatten(-2)

    fails(check, cached, "kept between calls")


def test_rope():
    def halves(x):  # rotates the first half against the second half
        T, C = x.shape[-2:]
        ang = torch.arange(T, dtype=x.dtype)[:, None] * 10000 ** (
            -torch.arange(0, C, 2, dtype=x.dtype) / C
        )
        x1, x2 = x[..., : C // 2], x[..., C // 2 :]
        return torch.cat(
            [x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1
        )

    fails(ex.check_rope, halves, "rotates the first half against the second half")

    def clockwise(x):  # 03's M_pos read the other way: (x cos + y sin, -x sin + y cos)
        T, C = x.shape[-2:]
        ang = torch.arange(T, dtype=x.dtype)[:, None] * 10000 ** (
            -torch.arange(0, C, 2, dtype=x.dtype) / C
        )
        x1, x2 = x[..., 0::2], x[..., 1::2]
        c, s = ang.cos(), ang.sin()
        return torch.stack([x1 * c + x2 * s, -x1 * s + x2 * c], -1).flatten(-2)

    fails(ex.check_rope, clockwise, r"rotates the other way, clockwise")
    # base 100 is base 10000 at the exponent i/C: named
    fails(ex.check_rope, lambda x: ex.rope_reference(x, base=100.0), "sqrt\\(base\\)")
    fails(ex.check_rope, lambda x: ex.rope_reference(x, base=500.0), "entries differ")


def masked_with(scale=None, fill=-math.inf, dim=-1, inverted=False, batch_t=False):
    """Attention with a bool mask, or with a usual mistake."""

    def attention(q, k, v, allowed):
        kt = k.transpose(0, 1) if batch_t else k.transpose(-2, -1)
        s = q @ kt / (math.sqrt(q.size(-1)) if scale is None else scale)
        w = s.masked_fill(allowed if inverted else ~allowed, fill).softmax(dim)
        return w @ v, w

    return attention


def test_attention_with_mask():
    check = ex.check_attention_with_mask
    passes(check, solution("04").my_attention_with_mask)
    passes(check, masked_with(fill=-1e9))  # a large negative number does as well
    fails(check, masked_with(dim=-2), r"the softmax ran over the queries \(dim=-2")
    fails(check, masked_with(scale=1.0), r"not divided by sqrt\(d_k\)")
    fails(check, masked_with(fill=0.0), "the blocked scores were set to 0, not -inf")
    fails(check, masked_with(inverted=True), "allowed was read the wrong way round")
    fails(check, masked_with(batch_t=True), r"k.transpose\(-2, -1\)")

    def after(q, k, v, allowed):
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1) * allowed
        return w @ v, w

    fails(check, after, "zeroed after the softmax")
    right = solution("04").my_attention_with_mask
    fails(check, lambda *a: right(*a)[::-1], r"came back as \(weights, output\)")
    # the docstring's example, as it says
    zeros, triangle = torch.zeros(3, 2), torch.ones(3, 3, dtype=torch.bool).tril()
    w = right(zeros, zeros, torch.eye(3), triangle)[1]
    want = [[1, 0, 0], [0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3]]
    torch.testing.assert_close(w, torch.tensor(want))


def alibi_with(sign=-1.0, scaled=False, causal=True, after=False, per_key=False):
    """Attention with ALiBi, or with a usual mistake."""

    def attention(q, k, v, slopes):
        T = q.size(-2)
        pos = torch.arange(T, dtype=q.dtype)
        dist = pos[:, None] - pos  # (T, T)
        bias = sign * (slopes * dist if per_key else slopes[:, None, None] * dist)
        s = q @ k.transpose(-2, -1)
        root = math.sqrt(q.size(-1))
        s = (s + bias) / root if scaled else s / root + (0.0 if after else bias)
        if causal:
            s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
        w = s.softmax(-1)
        w = w + bias if after else w
        return w @ v, w

    return attention


def test_alibi_attention():
    assert ex.outcome(ex.check_alibi_attention, alibi_with())[0] == "pass"
    check = ex.check_alibi_attention
    fails(check, alibi_with(sign=1.0), "the penalty has the wrong sign")
    fails(check, alibi_with(scaled=True), r"divided by sqrt\(d_k\) too")
    fails(check, alibi_with(causal=False), "query 0 gives weight to key 1, a later")
    fails(check, alibi_with(after=True), "added to the weights, after the softmax")
    fails(check, alibi_with(per_key=True), "slopes were spread over the keys")
    fails(
        check,
        lambda q, k, v, slopes: alibi_with()(q, k, v, slopes)[0],
        r"return a pair \(output, weights\)",
    )


def test_multi_head_attention():
    Right = solution("05").MyMultiHeadAttention

    class WideScale(Right):
        def __init__(self, C, H):
            super().__init__(C, H)
            self.d_head = C  # divides by sqrt(d_model)

    fails(ex.check_multi_head_attention, WideScale, r"sqrt\(d_model\) = sqrt\(16\)")

    class Reshaped(Right):  # splits and merges the heads with a plain reshape
        def split(self, x):
            return x.reshape(x.size(0), self.n_heads, x.size(1), self.d_head)

        def forward(self, query, key=None, value=None, mask=None):
            y = _attend(self, query, key, value, mask)  # (B, H, T, D)
            return self.out_proj(y.reshape(query.shape))

    fails(ex.check_multi_head_attention, Reshaped, r"reshape\(B, H, T, D\)")

    class NoMask(Right):
        def forward(self, query, key=None, value=None, mask=None):
            return super().forward(query, key, value)

    fails(ex.check_multi_head_attention, NoMask, "the mask was ignored")

    class NoMix(Right):  # the heads concatenated, never mixed by W_O
        def forward(self, query, key=None, value=None, mask=None):
            self.out_proj.forward = lambda y: y  # an identity in W_O's place
            return super().forward(query, key, value, mask)

    fails(ex.check_multi_head_attention, NoMix, r"not mixed by out_proj \(W_O\)")

    class Named(Right):
        def __init__(self, C, H):
            super().__init__(C, H)
            self.w_o = self.out_proj
            del self.out_proj

    fails(ex.check_multi_head_attention, Named, r"missing \['out_proj.weight'")

    class DetachedLinear(nn.Linear):
        def forward(self, x):
            return super().forward(x).detach()

    class Detached(Right):  # the keys' projection cut off from the gradient
        def __init__(self, C, H):
            super().__init__(C, H)
            self.k_proj = DetachedLinear(C, C)

    fails(ex.check_multi_head_attention, Detached, "no gradient reached k_proj.weight")


def _attend(m, query, key, value, mask):
    """Reshaped heads' attention, (B, H, T, D) before the merge."""
    key = query if key is None else key
    value = key if value is None else value
    q, k, v = m.split(m.q_proj(query)), m.split(m.k_proj(key)), m.split(m.v_proj(value))
    s = q @ k.transpose(-2, -1) / math.sqrt(m.d_head)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    return s.softmax(-1) @ v


def window_with(low=0, high=0, both_sides=False, pad="keys"):
    """A sliding-window mask, or one with a usual mistake: query t sees t - s in
    [low, window - 1 + high], |t - s| < window if both_sides, padding on `pad`."""

    def mask(ids, pad_id, window):
        T = ids.size(1)
        pos = torch.arange(T)
        back = pos[:, None] - pos
        if both_sides:
            allowed = back.abs() < window
        else:
            allowed = (back >= low) & (back <= window - 1 + high)
        real = ids != pad_id
        if pad == "keys":
            return allowed & real[:, None, None, :]
        if pad == "rows":
            return allowed & real[:, None, :, None]
        return allowed.expand(ids.size(0), 1, T, T)

    return mask


def test_sliding_window_mask():
    check = ex.check_sliding_window_mask
    assert ex.outcome(check, window_with())[0] == "pass"
    fails(check, window_with(both_sides=True), "query 0 may see key 1, a later token")
    fails(check, window_with(low=-1), "query 0 may see key 1, a later token")
    fails(check, window_with(high=1), "off by one: each query sees window \\+ 1")
    fails(check, window_with(high=-1), "off by one: each query sees window - 1")
    fails(check, window_with(pad="none"), "the padding is missing")
    fails(check, window_with(pad="rows"), "padding masks the query rows")

    def rows_and_keys(ids, pad_id, window):  # the reviewer's belief: mask both
        keep = ids != pad_id
        return window_with()(ids, pad_id, window) & keep[:, None, :, None]

    fails(check, rows_and_keys, "masks the query rows as well as the key columns")
    fails(
        check,
        lambda ids, pad, w: window_with()(ids, pad, w).float(),
        "dtype torch.float32, expected torch.bool",
    )


def test_encoder_layer():
    Right = solution("07").MyEncoderLayer

    class PostNorm(Right):
        def forward(self, x, mask=None):
            x = self.norm1(x + self.self_attn(x, mask=mask)[0])
            return self.norm2(x + self.ff(x))

    fails(ex.check_encoder_layer, PostNorm, "this is post-norm")

    class NoMask(Right):
        def forward(self, x, mask=None):
            return super().forward(x)

    fails(ex.check_encoder_layer, NoMask, "mask was not passed")

    class NoResidual(Right):
        def forward(self, x, mask=None):
            x = x + self.self_attn(self.norm1(x), mask=mask)[0]
            return self.ff(self.norm2(x))

    fails(ex.check_encoder_layer, NoResidual, r"not added to its input \(the residual")

    class NoAttnResidual(Right):
        def forward(self, x, mask=None):
            x = self.self_attn(self.norm1(x), mask=mask)[0]
            return x + self.ff(self.norm2(x))

    fails(ex.check_encoder_layer, NoAttnResidual, "the attention output is not added")

    class OneNorm(Right):
        def forward(self, x, mask=None):
            x = x + self.self_attn(self.norm1(x), mask=mask)[0]
            return x + self.ff(self.norm1(x))

    fails(ex.check_encoder_layer, OneNorm, "norm1 is used twice")


def test_decoder_layer():
    Right = solution("08").MyDecoderLayer

    class SelfCross(Right):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
            h = self.norm2(x)
            x = x + self.cross_attn(h, h, h, mask=tgt_mask)[0]
            return x + self.ff(self.norm3(x))

    fails(ex.check_decoder_layer, SelfCross, "cross-attention read x")

    class SelfCrossNoMask(Right):  # the reviewer's slip: cross_attn(n) with no mask
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
            h = self.norm2(x)
            x = x + self.cross_attn(h)[0]
            return x + self.ff(self.norm3(x))

    fails(
        ex.check_decoder_layer, SelfCrossNoMask, "cross-attention read x, with no mask"
    )

    class PostNorm(Right):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = self.norm1(x + self.self_attn(x, mask=tgt_mask)[0])
            x = self.norm2(x + self.cross_attn(x, memory, mask=memory_mask)[0])
            return self.norm3(x + self.ff(x))

    fails(ex.check_decoder_layer, PostNorm, "this is post-norm")

    class NoCausal(Right):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            return super().forward(x, memory, None, memory_mask)

    fails(ex.check_decoder_layer, NoCausal, "self-attention ignored tgt_mask")

    class NoMemoryMask(Right):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            return super().forward(x, memory, tgt_mask, None)

    fails(ex.check_decoder_layer, NoMemoryMask, "ignored memory_mask")

    class CrossFirst(Right):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = x + self.cross_attn(self.norm2(x), memory, memory, mask=memory_mask)[0]
            x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
            return x + self.ff(self.norm3(x))

    fails(ex.check_decoder_layer, CrossFirst, "cross-attention came first")


def test_shift_targets():
    right = solution("08").my_shift_targets
    fails(ex.check_shift_targets, lambda *a: right(*a)[::-1], "are swapped")
    fails(ex.check_shift_targets, lambda *a: right(*a)[0], "return a pair")

    def no_eos(seqs, bos, eos, pad):  # off by one: y without <eos>
        tgt_in, tgt_out = right(seqs, bos, eos, pad)
        return tgt_in, tgt_out.masked_fill(tgt_out == eos, pad)

    fails(ex.check_shift_targets, no_eos, r"tgt_out has no <eos> \(2\)")

    def left_padded(seqs, bos, eos, pad):  # the padding before the sequence
        n = max(map(len, seqs)) + 1
        rows_in = [[pad] * (n - 1 - len(s)) + [bos] + s for s in seqs]
        rows_out = [[pad] * (n - 1 - len(s)) + s + [eos] for s in seqs]
        return torch.tensor(rows_in), torch.tensor(rows_out)

    fails(ex.check_shift_targets, left_padded, r"tgt_in is padded on the left")


# build before the reveal (issue 34): the stub of a component, its check and its
# solution come before the notebook shows the course's own version of the component
REVEALS = [
    ("02", "MyTiedOutput", "lm_head.weight = embed.weight"),
    ("03", "my_shift_encoding", "def shift_matrix("),
    ("04", "my_attention_with_mask", "def scaled_dot_product_attention("),
    ("05", "MyMultiHeadAttention", "class MultiHeadAttention("),
    ("07", "MyEncoderLayer", "class EncoderLayer("),
    ("08", "MyDecoderLayer", "class DecoderLayer("),
    ("08", "my_shift_targets", "def reversal_batch("),
    ("09", "my_train_step", "def train_step("),
    ("09", "my_train", "def train_loop("),
    ("10", "my_beam_search", "def score_candidates("),
    ("15", "my_grouped_attention", "def repeat_kv("),
    ("16", "MyGeGLU", "class ModernConfig("),
    ("16", "my_newton_schulz", "def newton_schulz("),
    ("18", "merge_and_unload", "theirs.merge_and_unload()"),
]


@pytest.mark.parametrize("nb,name,reveal", REVEALS, ids=[r[1] for r in REVEALS])
def test_a_component_is_built_before_the_course_shows_it(nb, name, reveal):
    path = next((ROOT / "notebooks").glob(f"{nb}_*.ipynb"))
    cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    stub = next(
        i for i, s in enumerate(cells) if f"class {name}(" in s or f"def {name}(" in s
    )
    shown = next(i for i, s in enumerate(cells) if reveal in s)
    assert stub < shown, f"{path.name}: {name}'s stub (cell {stub}) after cell {shown}"
    check, solution = cells[stub + 1 : stub + 3]
    assert f"({name})" in check and f":pyobject: {name}" in solution


def step_with(ignore=True, smoothing=True, zero=True, step=True, read_out=False):
    """A training step with a usual mistake."""

    def train_step(model, optimizer, src, tgt_in, tgt_out, pad_id, eps):
        logits = model(src, tgt_out if read_out else tgt_in)
        loss = F.cross_entropy(
            logits.flatten(0, 1),
            tgt_out.flatten(),
            ignore_index=pad_id if ignore else -100,
            label_smoothing=eps if smoothing else 0.0,
        )
        if zero:
            optimizer.zero_grad()
        loss.backward()
        if step:
            optimizer.step()
        return loss.item()

    return train_step


def test_train_step():
    assert ex.outcome(ex.check_train_step, step_with())[0] == "pass"
    fails(ex.check_train_step, step_with(ignore=False), "padded targets were counted")
    fails(ex.check_train_step, step_with(smoothing=False), "pass label_smoothing")
    fails(ex.check_train_step, step_with(read_out=True), "the model read tgt_out")
    fails(ex.check_train_step, step_with(zero=False), "call optimizer.zero_grad")
    fails(ex.check_train_step, step_with(step=False), "call optimizer.step")

    def returns_tensor(*args):
        step_with()(*args)
        return torch.tensor(1.0)

    fails(ex.check_train_step, returns_tensor, r"as a float \(loss.item\(\)\)")


def test_training_loop():
    right = solution("09").my_train

    def late_lr(model, optimizer, batches, lr_at, train_step):  # the rate set after
        model.train()
        losses = []
        for s, batch in enumerate(batches):
            losses.append(train_step(model, optimizer, batch))
            for g in optimizer.param_groups:
                g["lr"] = lr_at(s)
        return losses

    fails(ex.check_training_loop, late_lr, r"the rate was set after train_step")

    def nan_only(model, optimizer, batches, lr_at, train_step):  # inf slips through
        model.train()
        losses = []
        for s, batch in enumerate(batches):
            for g in optimizer.param_groups:
                g["lr"] = lr_at(s)
            losses.append(train_step(model, optimizer, batch))
            if math.isnan(losses[-1]):
                raise ValueError(f"step {s}: the loss is NaN")
        return losses

    fails(ex.check_training_loop, nan_only, "an inf loss at step 2 went unnoticed")

    def next_lr(model, optimizer, batches, lr_at, train_step):  # off by one
        return right(model, optimizer, batches, lambda s: lr_at(s + 1), train_step)

    fails(ex.check_training_loop, next_lr, r"step s ran at lr_at\(s \+ 1\)")

    def no_train(model, optimizer, batches, lr_at, train_step):
        model.train = lambda mode=True: model  # as if model.train() were forgotten
        return right(model, optimizer, batches, lr_at, train_step)

    fails(ex.check_training_loop, no_train, "ran in eval mode")

    def skips_last(model, optimizer, batches, lr_at, train_step):
        return right(model, optimizer, list(batches)[:-1], lr_at, train_step)

    fails(ex.check_training_loop, skips_last, "returned 5 losses for 6 batches")

    def no_nan_check(model, optimizer, batches, lr_at, train_step):
        model.train()
        out = []
        for s, batch in enumerate(batches):
            for g in optimizer.param_groups:
                g["lr"] = lr_at(s)
            out.append(train_step(model, optimizer, batch))
        return out

    fails(ex.check_training_loop, no_nan_check, "NaN loss at step 2 went unnoticed")


def min_p_with(absolute=False, greedy=False, uniform=False, no_filter=False):
    """Min-p sampling, or with a usual mistake."""

    def sample(logits, min_p, generator=None):
        probs = logits.softmax(-1)
        threshold = min_p if absolute else min_p * probs.max(-1, keepdim=True).values
        kept = probs.masked_fill(probs < threshold, 0.0)
        if greedy:
            return kept.argmax(-1)
        if uniform:  # the kept tokens, each as likely as the others
            kept = (kept > 0).double()
        if no_filter:
            kept = probs
        return torch.multinomial(kept, 1, generator=generator).squeeze(-1)

    return sample


def test_min_p_sampling():
    check = ex.check_min_p_sampling
    assert ex.outcome(check, min_p_with())[0] == "pass"
    fails(check, min_p_with(absolute=True), "min_p=0.12: kept the tokens of probab")
    fails(check, min_p_with(greedy=True), "min_p=0.12: only token 0 was drawn")
    fails(check, min_p_with(no_filter=True), "min_p=0.45: drew token 1 .*, below")
    fails(check, min_p_with(uniform=True), "every kept token drawn about equally often")


def test_beam_search():
    def greedy(step, beam, max_len, eos):
        tokens, score = [], 0.0
        for _ in range(max_len):
            lp = step(tuple(tokens))
            tokens.append(int(lp.argmax()))
            score += float(lp.max())
            if tokens[-1] == eos:
                break
        return tokens, score

    fails(
        ex.check_beam_search, greedy, r"expected \[1.*= greedy's answer: keep the beam"
    )
    right = solution("10").my_beam_search
    fails(
        ex.check_beam_search,
        lambda *a: (right(*a)[0], math.exp(right(*a)[1])),
        "tokens right, but 0.2000 is the probability: return the log-probability",
    )

    def beam_search(step, beam, max_len, eos, finished_take_places=True, keep=False):
        alive, done = [((), 0.0)], []
        for _ in range(max_len):
            grown = [
                (p + (t,), s + lp) for p, s in alive for t, lp in enumerate(step(p))
            ]
            pool = sorted(grown + (done if keep else []), key=lambda c: -c[1])
            if finished_take_places:  # keep=True: a finished prefix keeps its place
                done = [c for c in pool[:beam] if c[0][-1] == eos] + (
                    [] if keep else done
                )
                alive = [c for c in pool[:beam] if c[0][-1] != eos]
            else:  # the beam is filled with unfinished prefixes only
                done += [c for c in pool[:beam] if c[0][-1] == eos]
                alive = [c for c in pool if c[0][-1] != eos][:beam]
            if not alive:
                break
        tokens, score = max(done or alive, key=lambda c: c[1])
        return list(tokens), float(score)

    assert ex.outcome(ex.check_beam_search, beam_search)[0] == "pass"
    fails(
        ex.check_beam_search,
        lambda *a: beam_search(*a, finished_take_places=False),
        r"\[1\] \(p = 0.15\) was grown, but the finished \[<eos>\]",
    )
    fails(
        ex.check_beam_search,
        lambda *a: beam_search(*a, keep=True),
        r"\[0, 1\] \(p = 0.19\) was never grown: the finished \[<eos>\] kept a place",
    )


def test_corpus_bleu():
    right = solution("11").my_corpus_bleu
    assert ex.outcome(ex.check_corpus_bleu, right)[0] == "pass"
    for mistake, message in (
        ({"clip": False}, "corpus 3: .*counts not clipped"),
        ({"bp": False}, "corpus 2: .*no brevity penalty"),
        ({"longest": True}, "corpus 2: .*r is the longest reference"),
        ({"arithmetic": True}, "corpus 3: .*an arithmetic mean"),
    ):
        fails(
            ex.check_corpus_bleu,
            lambda h, r, m=mistake: ex.bleu_reference(list(zip(h, r)), **m),
            message,
        )
    fails(ex.check_corpus_bleu, lambda h, r: right(h, r) / 100, "0-100 scale")

    def lengths(hyps, refs):
        c = sum(map(len, hyps))
        closest = [
            min(rs, key=lambda x: (abs(len(x) - len(h)), len(x)))
            for h, rs in zip(hyps, refs)
        ]
        return c, sum(map(len, closest))

    def every_gram(hyps, refs):  # every hypothesis n-gram counted as a match
        c, r = lengths(hyps, refs)
        return 100 * (1.0 if c >= r else math.exp(1 - r / c))

    def inverted(hyps, refs):  # BP = exp(1 - c / r)
        c, r = lengths(hyps, refs)
        no_bp = ex.bleu_reference(list(zip(hyps, refs)), bp=False)
        return no_bp * (1.0 if c >= r else math.exp(1 - c / r))

    fails(ex.check_corpus_bleu, every_gram, "corpus 3: .*every n-gram of the hyp")
    fails(ex.check_corpus_bleu, inverted, "corpus 2: .*the brevity penalty is inverted")


def test_gpt_block():
    Right = solution("12").MyBlock

    class NotCausal(Right):
        def attn(self, x):
            B, T, C = x.shape
            q, k, v = (
                t.view(B, T, self.n_heads, -1).transpose(1, 2)
                for t in self.qkv(x).chunk(3, -1)
            )
            y = F.scaled_dot_product_attention(q, k, v)
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    fails(ex.check_gpt_block, NotCausal, "the attention must be causal")

    class QKSwapped(Right):  # the reviewer's slip: k, q, v = qkv(x).chunk(3)
        def attn(self, x):
            B, T, C = x.shape
            k, q, v = (
                t.view(B, T, self.n_heads, -1).transpose(1, 2)
                for t in self.qkv(x).chunk(3, -1)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    fails(ex.check_gpt_block, QKSwapped, "q and k are swapped")

    class ExactGelu(Right):
        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.fc_out(F.gelu(self.fc(self.norm2(x))))

    fails(ex.check_gpt_block, ExactGelu, "tanh approximation")

    class PostNorm(Right):
        def forward(self, x):
            x = self.norm1(x + self.attn(x))
            return self.norm2(x + self.fc_out(F.gelu(self.fc(x), approximate="tanh")))

    fails(ex.check_gpt_block, PostNorm, "this is post-norm")

    def mlp(block, h):
        return block.fc_out(F.gelu(block.fc(h), approximate="tanh"))

    class NoAttnResidual(Right):
        def forward(self, x):
            x = self.attn(self.norm1(x))
            return x + mlp(self, self.norm2(x))

    fails(ex.check_gpt_block, NoAttnResidual, "attention output is not added")

    class NoMlpResidual(Right):
        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return mlp(self, self.norm2(x))

    fails(ex.check_gpt_block, NoMlpResidual, "MLP output is not added")

    class Norm1Twice(Right):
        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + mlp(self, self.norm1(x))

    fails(ex.check_gpt_block, Norm1Twice, "norm1 is used twice")

    class WideScale(Right):  # scores over sqrt(d_model), not sqrt(d_head)
        def attn(self, x):
            B, T, C = x.shape
            q, k, v = (
                t.view(B, T, self.n_heads, -1).transpose(1, 2)
                for t in self.qkv(x).chunk(3, -1)
            )
            y = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=1 / math.sqrt(C)
            )
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    fails(
        ex.check_gpt_block,
        WideScale,
        r"sqrt\(d_model\) = 4, expected sqrt\(d_head\) = 2",
    )

    class OwnNames(Right):  # W_o instead of proj
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.W_o = self.proj
            del self.proj

        def attn(self, x):
            self.proj = self.W_o
            return super().attn(x)

    fails(ex.check_gpt_block, OwnNames, r"named as the docstring says; missing \['proj")


def test_kv_cache():
    Right = solution("12").MyKVCache

    class OnlyNew(Right):
        def update(self, k, v):
            super().update(k, v)
            return k, v

    fails(ex.check_kv_cache, OnlyNew, "after 5 tokens update returned 1 keys")

    class Prepends(Right):  # the new keys and values before the stored ones
        def update(self, k, v):
            if self.length:
                self.keys = torch.cat([k, self.keys], 2)
                self.values = torch.cat([v, self.values], 2)
                self.length += k.size(2)
                return self.keys, self.values
            return super().update(k, v)

    fails(ex.check_kv_cache, Prepends, "the new keys come before the stored ones")

    class KeysTwice(Right):
        def update(self, k, v):
            keys, _ = super().update(k, v)
            return keys, keys

    fails(
        ex.check_kv_cache, KeysTwice, "after 4 tokens the values returned are the keys"
    )

    class CountsUpdates(Right):
        def update(self, k, v):
            out = super().update(k, v)
            self.length += 1 - k.size(2)
            return out

    fails(ex.check_kv_cache, CountsUpdates, "cache.length is 1 after 4 tokens")

    class NoLength(Right):
        def update(self, k, v):
            out = super().update(k, v)
            self.length = 0
            return out

    fails(ex.check_kv_cache, NoLength, "cache.length is 0 after 4 tokens")

    class CatHeads(Right):  # joins along dim 1, the heads
        def update(self, k, v):
            if self.keys is None:
                self.keys, self.values = k, v
            else:
                self.keys = torch.cat([self.keys, k], dim=1)
                self.values = torch.cat([self.values, v], dim=1)
            self.length += k.size(2)
            return self.keys, self.values

    fails(
        ex.check_kv_cache,
        CatHeads,
        r"except in dimension 1.* when 1 new tokens met 4 stored: join along dim 2",
    )


def online(q, k, v, block, sum_rescaled=True, out_rescaled=True, upside=False):
    """The online softmax as a learner writes it, with a usual slip."""
    m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
    ell, out = torch.zeros_like(m), q.new_zeros(q.shape[:-1] + (v.size(-1),))
    for s in range(0, k.size(-2), block):
        scores = q @ k[..., s : s + block, :].transpose(-2, -1) / math.sqrt(8)
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        factor = (m_new - m if upside else m - m_new).exp()
        p = (scores - m_new).exp()
        ell = (ell * factor if sum_rescaled else ell) + p.sum(-1, keepdim=True)
        out = (out * factor if out_rescaled else out) + p @ v[..., s : s + block, :]
        m = m_new
    return out / ell


def test_cosine_by_distance():
    def by_distance(table, unit=True, mean=True):
        rows = F.normalize(table, dim=1) if unit else table
        m = rows @ rows.T
        diagonals = [m.diagonal(k) for k in range(len(table))]
        return torch.stack([d.mean() if mean else d.sum() for d in diagonals])

    assert ex.outcome(ex.check_cosine_by_distance, by_distance)[0] == "pass"
    fails(
        ex.check_cosine_by_distance,
        lambda t: by_distance(t, unit=False),
        "dot products, not cosines: normalise each row first",
    )
    fails(
        ex.check_cosine_by_distance,
        lambda t: by_distance(t, mean=False),
        "a sum, not a mean: divide by the N - k pairs k apart",
    )
    fails(
        ex.check_cosine_by_distance,
        lambda t: by_distance(t)[1:],
        r"entry 0 is distance 0 \(each row with itself\), not 1",
    )

    def over_n(table):  # the sum of each diagonal over N, not over its N - k pairs
        return by_distance(table, mean=False) / len(table)

    fails(ex.check_cosine_by_distance, over_n, "divided by N: .* divide by N - k")


def test_tiled_attention():
    from transformer_lib.tiled_attention import tiled_attention

    right = solution("14").my_tiled_attention
    assert ex.outcome(ex.check_tiled_attention, right)[0] == "pass"
    assert ex.outcome(ex.check_tiled_attention, online)[0] == "pass"

    def by_tensor_starts(q, k, v, block):  # a loop over torch.arange is no full read
        m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
        ell, out = torch.zeros_like(m), torch.zeros_like(q[..., : v.size(-1)])
        for s in torch.arange(0, k.size(-2), block).tolist():
            kb, vb = (
                k.narrow(-2, s, min(block, k.size(-2) - s)),
                v[..., s : s + block, :],
            )
            scores = torch.einsum("...qd,...kd->...qk", q, kb) / math.sqrt(q.size(-1))
            m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
            p, c = (scores - m_new).exp(), (m - m_new).exp()
            ell, out, m = c * ell + p.sum(-1, keepdim=True), c * out + p @ vb, m_new
        return out / ell

    assert ex.outcome(ex.check_tiled_attention, by_tensor_starts)[0] == "pass"
    # the notebook's own version, which also tiles the queries
    tiled = lambda q, k, v, b: tiled_attention(q, k, v, b, causal=False)  # noqa: E731
    assert ex.outcome(ex.check_tiled_attention, tiled)[0] == "pass"

    def per_block_softmax(q, k, v, block):  # normalises each block on its own
        outs = [
            F.scaled_dot_product_attention(
                q, k[..., s : s + block, :], v[..., s : s + block, :]
            )
            for s in range(0, k.shape[-2], block)
        ]
        return torch.stack(outs).mean(0)

    fails(ex.check_tiled_attention, per_block_softmax, "block=1: each block was norm")
    # the review's learner: the maximum follows the blocks, the sums are not rescaled
    no_rescale = lambda *a: online(*a, sum_rescaled=False, out_rescaled=False)  # noqa: E731
    fails(
        ex.check_tiled_attention,
        no_rescale,
        r"block=1: the running sum ell and the output were never rescaled: .* "
        r"multiply it by exp\(m_old - m_new\)",
    )
    fails(
        ex.check_tiled_attention,
        lambda *a: online(*a, out_rescaled=False),
        "the output was never rescaled",
    )
    fails(
        ex.check_tiled_attention,
        lambda *a: online(*a, sum_rescaled=False),
        "the running sum ell was never rescaled",
    )
    fails(
        ex.check_tiled_attention,
        lambda *a: online(*a, upside=True),
        r"is a factor exp\(m_new - m_old\)\? It is infinite on the first block",
    )

    def no_max(q, k, v, block):  # exact in theory, exp overflows on large scores
        ell, out = 0, 0
        for s in range(0, k.size(-2), block):
            p = (q @ k[..., s : s + block, :].transpose(-2, -1) / math.sqrt(8)).exp()
            ell, out = ell + p.sum(-1, keepdim=True), out + p @ v[..., s : s + block, :]
        return out / ell

    fails(ex.check_tiled_attention, no_max, "overflows; subtract the running maximum")
    # the review's blind spot: a plain softmax that ignores `block` has the right values
    fails(
        ex.check_tiled_attention,
        lambda q, k, v, block: (q @ k.transpose(-2, -1) / math.sqrt(8)).softmax(-1) @ v,
        r"block=1: matmul read all 13 keys at once .* read the keys 1 at a time",
    )
    fails(
        ex.check_tiled_attention,
        lambda q, k, v, block: F.scaled_dot_product_attention(q, k, v),
        "block=1: scaled_dot_product_attention read all 13 keys at once",
    )

    def whole_scores(q, k, v, block):  # scores at once, then a softmax in tiles
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(8)
        return scores.softmax(-1) @ v

    fails(ex.check_tiled_attention, whole_scores, "einsum read all 13 keys at once")


def grouped(q, k, v, tile_heads=False, causal=True):
    """A right solution, or with the heads tiled (0, 1, 0, 1: .repeat) or no mask."""
    g = q.size(1) // k.size(1)
    if tile_heads:
        k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
    else:
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def test_grouped_attention():
    assert ex.outcome(ex.check_grouped_attention, grouped)[0] == "pass"
    fails(
        ex.check_grouped_attention,
        lambda q, k, v: grouped(q, k, v, tile_heads=True),
        r"H_kv=2: query head 1 read key/value head 1, expected head 0 \(heads 0 to 1",
    )
    fails(
        ex.check_grouped_attention,
        lambda q, k, v: grouped(q, k, v, causal=False),
        "apply the causal mask",
    )
    fails(
        ex.check_grouped_attention,
        lambda q, k, v: F.scaled_dot_product_attention(
            q[:, : k.size(1)], k, v, is_causal=True
        ),
        r"shape \(2, 2, 6, 8\), expected \(2, 4, 6, 8\)",
    )


def test_newton_schulz():
    right = solution("16").my_newton_schulz
    check = ex.check_newton_schulz
    passes(check, right)

    def iterate(abc=(3.4445, -4.775, 2.0315), norm=True, steps_used=None):
        def fn(G, steps=5):
            a, b, c = abc
            X = G / G.norm() if norm else G.clone()
            for _ in range(steps_used or steps):
                A = X @ X.T
                X = a * X + (b * A + c * A @ A) @ X
            return X

        return fn

    fails(check, iterate(abc=(2.0315, -4.775, 3.4445)), "the coefficients are reversed")
    fails(check, iterate(norm=False), "divide G by its Frobenius norm first")
    fails(check, iterate(steps_used=1), "one step only")
    fails(check, iterate(steps_used=5), "the argument steps is ignored")
    fails(check, iterate(abc=(3.4445, 0.0, 0.0)), "only a X is left")

    def not_back(G, steps=5):
        X = right(G, steps)
        return X.T if G.size(0) > G.size(1) else X

    fails(check, not_back, "transpose the result back")

    def in_place(G, steps=5):
        G /= G.norm()
        return right(G, steps)

    fails(check, in_place, "wrote into its input G")


def test_geglu():
    Right = solution("16").MyGeGLU

    def with_forward(forward):
        return type("Wrong", (Right,), {"forward": forward})

    def with_width(width):
        def init(m, d_model):
            nn.Module.__init__(m)
            m.gate = nn.Linear(d_model, width(d_model), bias=False)
            m.up = nn.Linear(d_model, width(d_model), bias=False)
            m.proj = nn.Linear(width(d_model), d_model, bias=False)

        return type("Wrong", (Right,), {"__init__": init})

    check = ex.check_geglu
    fails(check, with_forward(lambda m, x: m.proj(F.silu(m.gate(x)) * m.up(x))), "SiLU")
    fails(
        check,
        with_forward(lambda m, x: m.proj(m.gate(x) * F.gelu(m.up(x)))),
        "the GELU went on up",
    )
    fails(check, with_forward(lambda m, x: m.proj(F.gelu(m.gate(x)))), "is missing")
    fails(check, with_width(lambda d: 4 * d), r"MyGeGLU\(24\): hidden width 96: 4 \*")
    fails(check, with_width(lambda d: int(8 * d / 3)), "is not a multiple of 64")
    fails(check, with_width(lambda d: 64 * (8 * d // 3 // 64)), "rounded down")
    fails(check, with_width(lambda d: 8 * round(8 * d / 3 / 8)), "a multiple of 8")


def test_pack_pairs():
    right = solution("17").pack_pairs

    def with_mask(mask):  # the right inputs and targets, another attention mask
        def pack(pairs):
            x, y, _ = right(pairs)
            return x, y, mask(pairs, len(x))

        return pack

    def joined_then_shifted(pairs):
        ids = [i for p, _ in pairs for i in p]
        x, y, _ = right([(ids, pairs[0][1])])
        return x, y, torch.ones(len(x), len(x), dtype=torch.bool).tril()

    def first_prompt_only(pairs):  # masks the first pair's prompt, not the others'
        x, y, mask = right(pairs)
        ys = [i for p, _ in pairs for i in p[1:]]
        ys[: pairs[0][1] - 1] = [-100] * (pairs[0][1] - 1)
        return x, ys, mask

    check = ex.check_pack_pairs
    fails(
        check,
        with_mask(lambda p, T: torch.ones(T, T, dtype=torch.bool).tril()),
        "the attention mask is plain causal: a query of the second pair",
    )
    fails(
        check,
        with_mask(lambda p, T: right(p)[2] | right(p)[2].T),
        "is not causal inside a pair",
    )
    fails(check, with_mask(lambda p, T: right(p)[2].T), "is transposed")
    fails(check, joined_then_shifted, "shift each pair on its own")
    fails(check, first_prompt_only, "only pair 1.s prompt was masked")


def unload_with(scale=1.0, merge=True, unload=True):
    """merge_and_unload, or with a usual slip: W + scale * (alpha / r) B A put back,
    merged only (no unload), or the base layer put back unmerged (merge=False)."""

    def unload_(model):
        names = [n for n, m in model.named_modules() if hasattr(m, "lora_A")]
        for name in names:
            layer = model.get_submodule(name)
            if merge and not layer.merged:  # a merged one holds its update already
                with torch.no_grad():
                    layer.base.weight += scale * layer.delta_weight()
            if unload:
                parent, _, child = name.rpartition(".")
                setattr(model.get_submodule(parent), child, layer.base)
        return names

    return unload_


def test_merge_and_unload():
    check = ex.check_merge_and_unload
    assert ex.outcome(check, unload_with())[0] == "pass"
    fails(check, unload_with(merge=False), "qkv: its weight is W alone: the update was")
    fails(
        check, unload_with(scale=0.4), r"W \+ B A: the scale alpha / r = 2.5 is missing"
    )
    fails(check, unload_with(scale=4.0), "the scale is alpha / r = 2.5, not alpha")
    fails(check, unload_with(scale=2.0), "the update was added twice")
    fails(check, unload_with(unload=False), "blocks.0.attn.qkv is still a LoRALinear")

    def without_names(model):
        solution("18").merge_and_unload(model)

    fails(check, without_names, r"returned None, expected the names replaced")


def test_dpo_nll_loss():
    def loss_with(nll="chosen", per_token=True, naive=False, beta=True, pooled=False):
        def loss(pc, pr, rc, rr, n, b, a):
            z = (b if beta else 1.0) * ((pc - rc) - (pr - rr))
            dpo = -torch.log(torch.sigmoid(z)) if naive else -F.logsigmoid(z)
            if pooled:
                return dpo.mean() - a * pc.sum() / n.sum()
            side = {"chosen": pc, "rejected": pr, "ratio": pc - rc, "none": 0 * pc}
            terms = -side[nll] / (n if per_token else 1)
            return (dpo + a * terms).mean()

        return loss

    check = ex.check_dpo_nll_loss
    assert ex.outcome(check, loss_with())[0] == "pass"
    fails(check, loss_with(nll="none"), "this is DPO alone")
    fails(check, loss_with(per_token=False), "summed over each chosen output's tokens")
    fails(check, loss_with(nll="rejected"), "the NLL term is on the rejected outputs")
    fails(check, loss_with(nll="ratio"), "not a log-ratio to the reference")
    fails(check, loss_with(pooled=True), r"pooled all the tokens \(sum / sum\)")
    fails(check, loss_with(beta=False), "multiply the margin by beta")
    # -log(sigmoid(z)) overflows where the margin is very negative
    fails(
        check,
        loss_with(naive=True),
        r"margin of -2000 the loss is inf, .*-F.logsigmoid\(z\) .*is stable",
    )


def test_dpo_nll_loss_signs_and_sums():
    def wrong(sign_nll=1, sign_margin=1, summed=False, alpha_on_dpo=False):
        def loss(pc, pr, rc, rr, n, b, a):
            dpo = -F.logsigmoid(sign_margin * b * ((pc - rc) - (pr - rr)))
            if alpha_on_dpo:
                return (a * dpo - pc / n).mean()
            per = dpo - sign_nll * a * pc / n
            return per.sum() if summed else per.mean()

        return loss

    check = ex.check_dpo_nll_loss
    fails(check, wrong(sign_nll=-1), "the NLL has the wrong sign")
    fails(check, wrong(sign_margin=-1), "the sign of the margin is flipped")
    fails(check, wrong(summed=True), "summed over the batch: take the mean")
    fails(check, wrong(alpha_on_dpo=True), "alpha weighs the NLL term")


# the learner's record ---------------------------------------------------------------


def test_record_counts_what_passes(capsys):
    sol = solution("03")
    assert ex.record("03", {"my_shift_encoding": sol.my_shift_encoding}) == 1
    assert ex.record("03", {}) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("\u2713 03 my_shift_encoding passes")
    assert out[1] == (
        "\u00b7 03 my_shift_encoding: my_shift_encoding is not defined: run its cell"
    )


def test_record_reports_an_error_of_the_learners_code(capsys):
    assert ex.record("14", {"my_tiled_attention": lambda q, k, v, b: 1 / 0}) == 0
    assert "raised ZeroDivisionError" in capsys.readouterr().out


def test_check_command_reads_the_saved_notebook(tmp_path, capsys):
    nb = next((ROOT / "notebooks").glob("04_*.ipynb"))
    assert main(["check", "04", "--notebooks", str(nb.parent)]) == 1
    out = capsys.readouterr().out
    assert f"\u00b7 04 my_attention_with_mask: {ex.TODO}" in out
    assert out.endswith("0 of 1 build-its pass\n")
    # the learner fills in the stub and saves: the command sees it
    import json

    data = json.loads(nb.read_text(encoding="utf-8"))
    for cell in data["cells"]:
        if "build-it" in cell["metadata"].get("tags", []):
            src = (
                ROOT / "solutions" / "04_scaled_dot_product_attention.py"
            ).read_text()
            cell["source"] = src
    (tmp_path / nb.name).write_text(json.dumps(data), encoding="utf-8")
    assert main(["check", "04", "--notebooks", str(tmp_path)]) == 0
    assert capsys.readouterr().out.endswith("1 of 1 build-its pass\n")


def test_check_command_refuses_an_unknown_notebook(capsys):
    assert main(["check", "99"]) == 2
    assert "no notebook '99'" in capsys.readouterr().out


def test_check_command_names_the_line_of_a_saved_cell_that_raises(tmp_path, capsys):
    nb = next((ROOT / "notebooks").glob("15_*.ipynb"))
    data = json.loads(nb.read_text(encoding="utf-8"))
    for cell in data["cells"]:
        if "build-it" in cell["metadata"].get("tags", []):
            stub = "".join(cell["source"])
            cell["source"] = stub.replace(
                "raise NotImplementedError", "return q @ torch.ones(3, 4)  #"
            )
    (tmp_path / nb.name).write_text(json.dumps(data), encoding="utf-8")
    assert main(["check", "15", "--notebooks", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"raised RuntimeError at line \d+: return q @ torch.ones", out), (
        out
    )


def test_check_command_reads_7_as_07(capsys):
    assert main(["check", "7"]) == 1  # the stub: not implemented yet
    assert "07 MyEncoderLayer: not implemented yet" in capsys.readouterr().out


# issue 34's learner review (h-review): wrong answers that passed before --------------


def test_training_loop_sets_every_param_group():
    def first_group_only(model, optimizer, batches, lr_at, train_step):
        model.train()
        losses = []
        for s, batch in enumerate(batches):
            optimizer.param_groups[0]["lr"] = lr_at(s)
            losses.append(train_step(model, optimizer, batch))
            if not math.isfinite(losses[-1]):
                raise ValueError(f"step {s}: the loss is {losses[-1]}")
        return losses

    fails(ex.check_training_loop, first_group_only, "not only the first")


def test_min_p_returns_one_id_per_row():
    def column(logits, min_p, generator=None):
        probs = logits.softmax(-1)
        probs = probs * (probs >= min_p * probs.max(-1, keepdim=True).values)
        return torch.multinomial(probs, 1, generator=generator)  # (B, 1)

    fails(ex.check_min_p_sampling, column, r"got \(8000, 1\): squeeze")


def beam_with(mean=False, drop_finished=False):
    def search(step, beam, max_len, eos):
        def score(c):
            return c[1] / len(c[0]) if mean else c[1]

        alive, done = [((), 0.0)], []
        for _ in range(max_len):
            grown = [
                (p + (t,), s + lp)
                for p, s in alive
                for t, lp in enumerate(step(p).tolist())
                if lp > -math.inf
            ]
            grown.sort(key=lambda c: -score(c))
            alive = []
            for c in grown:
                if c[0][-1] == eos and (drop_finished or len(alive) + len(done) < beam):
                    done.append(c)
                elif len(alive) < beam - (0 if drop_finished else len(done)):
                    alive.append(c)
            if not alive:
                break
        best = max(done or alive, key=score)
        return list(best[0]), best[1]

    return search


def test_beam_search_length_and_places():
    fails(ex.check_beam_search, beam_with(mean=True), "no length penalty")
    fails(ex.check_beam_search, beam_with(drop_finished=True), "takes one of the beam")


def test_cosine_by_distance_shift_and_axis():
    def by_distance(table, dim=1, shift=0):
        rows = F.normalize(table, dim=dim)
        sims = rows @ rows.T
        n = len(table)
        return torch.stack(
            [
                sims.diagonal(k + shift).mean() if k + shift < n else sims.new_zeros(())
                for k in range(n)
            ]
        )

    fails(ex.check_cosine_by_distance, lambda t: by_distance(t, shift=1), "k \\+ 1")
    fails(ex.check_cosine_by_distance, lambda t: by_distance(t, dim=0), "dim=0")


def mha_with(split_wrong=False, mask_after=False):
    from transformer_lib.multi_head import merge_heads, split_heads

    class Attention(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.h = n_heads
            self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
                nn.Linear(d_model, d_model) for _ in range(4)
            )

        def split(self, x):
            if split_wrong:  # no transpose: positions mixed into heads
                return x.reshape(x.size(0), self.h, x.size(1), -1)
            return split_heads(x, self.h)

        def forward(self, query, key=None, value=None, mask=None):
            key = query if key is None else key
            value = key if value is None else value
            q, k = self.split(self.q_proj(query)), self.split(self.k_proj(key))
            v = self.split(self.v_proj(value))
            s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
            if mask is not None and not mask_after:
                s = s.masked_fill(~mask, float("-inf"))
            w = s.softmax(-1) * (mask if mask is not None and mask_after else 1)
            return self.out_proj(merge_heads(w @ v))

    return Attention


def test_multi_head_split_without_transpose_and_mask_after_softmax():
    check = ex.check_multi_head_attention
    assert ex.outcome(check, mha_with())[0] == "pass"
    fails(check, mha_with(split_wrong=True), r"split with reshape\(B, H, T, D\)")
    fails(check, mha_with(mask_after=True), "mask was applied after the softmax")


def decoder_with(no_cross_residual=False, norm_memory=False):
    from transformer_lib.encoder import PositionwiseFeedForward
    from transformer_lib.multi_head import MultiHeadAttention

    class Layer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__()
            self.self_attn = MultiHeadAttention(d_model, n_heads)
            self.cross_attn = MultiHeadAttention(d_model, n_heads)
            self.ff = PositionwiseFeedForward(d_model, d_ff)
            self.norm1, self.norm2, self.norm3 = (
                nn.LayerNorm(d_model) for _ in range(3)
            )

        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, tgt_mask)[0]
            h, kv = self.norm2(x), self.norm2(memory) if norm_memory else memory
            y = self.cross_attn(h, kv, kv, memory_mask)[0]
            x = y if no_cross_residual else x + y
            return x + self.ff(self.norm3(x))

    return Layer


def test_decoder_layer_residual_and_memory_norm():
    check = ex.check_decoder_layer
    assert ex.outcome(check, decoder_with())[0] == "pass"
    fails(
        check, decoder_with(no_cross_residual=True), "cross-attention's output is not"
    )
    fails(check, decoder_with(norm_memory=True), "memory went through norm2")


def test_shift_targets_eos_place_and_padding():
    def eos_last(seqs, bos, eos, pad):
        n = max(map(len, seqs))
        tgt_in = [[bos] + s + [pad] * (n - len(s)) for s in seqs]
        return torch.tensor(tgt_in), torch.tensor(
            [s + [pad] * (n - len(s)) + [eos] for s in seqs]
        )

    def eos_padding(seqs, bos, eos, pad):
        n = max(map(len, seqs))
        tgt_in = [[bos] + s + [eos] * (n - len(s)) for s in seqs]
        return torch.tensor(tgt_in), torch.tensor(
            [s + [eos] * (n + 1 - len(s)) for s in seqs]
        )

    fails(ex.check_shift_targets, eos_last, "<eos> goes right after the sequence")
    fails(ex.check_shift_targets, eos_padding, r"tgt_in is padded with eos \(2\)")


def test_train_step_summed_loss():
    def summed(model, optimizer, src, tgt_in, tgt_out, pad_id, label_smoothing):
        logits = model(src, tgt_in)
        loss = F.cross_entropy(
            logits.flatten(0, 1),
            tgt_out.flatten(),
            ignore_index=pad_id,
            label_smoothing=label_smoothing,
            reduction="sum",
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    fails(ex.check_train_step, summed, "summed over the targets")


def test_rope_frequency_exponent():
    def slow(x, base=10000.0):
        T, C = x.shape[-2:]
        angle = torch.arange(T, dtype=x.dtype)[:, None] * base ** (
            -torch.arange(C // 2, dtype=x.dtype) / C
        )
        x1, x2 = x[..., 0::2], x[..., 1::2]
        cos, sin = angle.cos(), angle.sin()
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)

    fails(ex.check_rope, slow, r"pair i turns at base\^\(-i/C\)")


def mha_one_split_wrong(wrong: str = "", merge_wrong: bool = False):
    """Notebook 05's solution with `wrong` ("k", "v", ...) of q, k, v split into heads
    by a plain reshape (no transpose), or the heads merged without the transpose."""
    from transformer_lib.multi_head import merge_heads

    Right = solution("05").MyMultiHeadAttention

    class Attention(Right):
        def forward(self, query, key=None, value=None, mask=None):
            key = query if key is None else key
            value = key if value is None else value

            def split(x, name):  # (B, T, C) -> (B, H, T, D)
                B, T, _ = x.shape
                if name in wrong:
                    return x.reshape(B, self.n_heads, T, self.d_head)
                return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)

            q, k = split(self.q_proj(query), "q"), split(self.k_proj(key), "k")
            v = split(self.v_proj(value), "v")
            s = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            y = s.softmax(-1) @ v  # (B, H, T, D)
            merged = y.reshape(query.shape) if merge_wrong else merge_heads(y)
            return self.out_proj(merged)

    return Attention


def test_multi_head_one_projection_split_wrong():
    check = ex.check_multi_head_attention
    assert ex.outcome(check, mha_one_split_wrong())[0] == "pass"
    for wrong, right in (("k", "q_proj and v_proj"), ("v", "q_proj and k_proj")):
        fails(
            check,
            mha_one_split_wrong(wrong),
            rf"the output of {wrong}_proj was split into heads with "
            rf"reshape\(B, H, T, D\), .*as for {right}",
        )
    fails(check, mha_one_split_wrong("qv"), r"the output of q_proj and v_proj was sp")
    fails(
        check,
        mha_one_split_wrong(merge_wrong=True),
        r"merged with reshape\(B, T, C\) alone, .*transpose\(1, 2\) back first",
    )


def test_min_p_threshold_on_the_logits():
    def on_logits(fill):  # min-p's threshold applied to the logits, not probabilities
        def sample(logits, min_p, generator=None):
            top = logits.max(-1, keepdim=True).values
            if fill:  # masked to -inf, then softmax: NaN rows
                kept = logits.masked_fill(logits < min_p * top, -math.inf).softmax(-1)
            else:  # probabilities zeroed: rows of zeros
                kept = logits.softmax(-1) * (logits >= min_p * top)
            return torch.multinomial(kept, 1, generator=generator).squeeze(-1)

        return sample

    for fill in (True, False):
        fails(
            ex.check_min_p_sampling,
            on_logits(fill),
            r"min_p=0.45: RuntimeError \(.*\), but not with the logits \+ 10.*was the "
            "threshold applied to the logits",
        )

    def broken(
        logits, min_p, generator=None
    ):  # another RuntimeError: said, with its line
        return torch.multinomial(logits.softmax(-1), 1, generator=generator).view(3, -1)

    fails(
        ex.check_min_p_sampling,
        broken,
        r"your code raised RuntimeError at line \d+: +return torch.multinomial",
    )


# A second blind review's wrong answers that passed (issue 34): each is named now.


def test_min_p_must_leave_the_callers_logits_alone():
    right = min_p_with()

    def in_place(logits, min_p, generator=None):
        probs = logits.softmax(-1)
        top = probs.max(-1, keepdim=True).values
        logits.masked_fill_(probs < min_p * top, float("-inf"))  # the caller's tensor
        return right(logits, min_p, generator)

    fails(ex.check_min_p_sampling, in_place, "the caller's logits were changed")


def test_corpus_bleu_shortest_reference():
    fails(
        ex.check_corpus_bleu,
        lambda h, r: ex.bleu_reference(list(zip(h, r)), shortest=True),
        "corpus 5: .*r is the shortest reference",
    )


def test_multi_head_value_defaults_to_key():
    Right = solution("05").MyMultiHeadAttention

    class ValueIsQuery(Right):
        def forward(self, query, key=None, value=None, mask=None):
            key = query if key is None else key
            value = query if value is None else value  # should default to key
            return super().forward(query, key, value, mask=mask)

    fails(ex.check_multi_head_attention, ValueIsQuery, "value=None must default to key")


# a second blind review (issue 34): every typical wrong answer gets a named mistake ----


def test_sha256_last_chunk_path_and_text_mode():
    def last_chunk(path):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(2**20):
                h = hashlib.sha256(chunk)  # a new hash for every chunk
        return h.hexdigest()

    fails(ex.check_sha256, last_chunk, "only its last chunk was hashed")
    fails(
        ex.check_sha256,
        lambda p: hashlib.sha256(str(p).encode()).hexdigest(),
        "the path was hashed, not the file",
    )
    fails(  # text mode, strict: the first byte above 127 raises UnicodeDecodeError
        ex.check_sha256,
        lambda p: hashlib.sha256(open(p).read().encode()).hexdigest(),
        "UnicodeDecodeError .*opened as text; open it in binary mode",
    )


def test_bpe_merge_ids_off_by_one():
    def from_257(text, merges):
        from transformer_lib.tokenization import CHUNK_PATTERN, merge

        rank, out = {p: k for k, p in enumerate(merges)}, []
        for chunk in CHUNK_PATTERN.findall(text):
            ids = list(chunk.encode())
            while known := [p for p in zip(ids, ids[1:]) if p in rank]:
                pair = min(known, key=rank.get)
                ids = merge(ids, pair, 257 + rank[pair])  # should be 256 + k
            out += ids
        return out

    fails(ex.check_bpe_encode, from_257, "gives merge k the id 257 \\+ k")


def rope_with(exponent=-1.0, start=0, concatenate=False, in_place=False):
    """RoPE, or with a usual mistake."""

    def rope(x, base=10000.0):
        T, C = x.shape[-2:]
        w = torch.promote_types(x.dtype, torch.float32)  # the angles' dtype
        freq = base ** (exponent * torch.arange(0, C, 2, dtype=w) / C)
        ang = torch.arange(start, start + T, dtype=w)[:, None] * freq
        x1, x2 = x[..., 0::2], x[..., 1::2]
        c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        r1, r2 = x1 * c - x2 * s, x1 * s + x2 * c
        if in_place:
            x[..., 0::2], x[..., 1::2] = r1, r2
            return x
        return (
            torch.cat([r1, r2], -1)
            if concatenate
            else torch.stack([r1, r2], -1).flatten(-2)
        )

    return rope


def test_rope_exponent_sign_start_order_and_input():
    assert ex.outcome(ex.check_rope, rope_with())[0] == "pass"
    fails(ex.check_rope, rope_with(exponent=1.0), r"base\^\(\+2i/C\)")
    fails(ex.check_rope, rope_with(start=1), "the positions start at 1")
    fails(ex.check_rope, rope_with(concatenate=True), "concatenated.*interleave them")
    fails(ex.check_rope, rope_with(in_place=True), "wrote into its input x")


def test_alibi_slopes_axis_inverted_mask_and_softmax_axis():
    check = ex.check_alibi_attention

    def attention(slopes_view=(-1, 1, 1), inverted=False, dim=-1, multiply=False):
        def f(q, k, v, slopes):
            T = q.size(-2)
            i, j = torch.arange(T)[:, None], torch.arange(T)
            s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
            s = s - slopes.view(*slopes_view) * (i - j).to(q.dtype)
            keep = (j <= i) != inverted
            s = s * keep if multiply else s.masked_fill(~keep, -math.inf)
            w = s.softmax(dim)
            return w @ v, w

        return f

    assert ex.outcome(check, attention())[0] == "pass"
    fails(check, attention(slopes_view=(-1, 1, 1, 1)), "RuntimeError .*line up with")
    fails(check, attention(inverted=True), "the causal mask is inverted")
    fails(check, attention(dim=-2), r"the softmax ran over the queries \(dim=-2\)")
    fails(check, attention(multiply=True), "multiplied by the causal mask")


def test_multi_head_inverted_and_multiplied_mask():
    Right = solution("05").MyMultiHeadAttention

    def with_mask(how):
        class Wrong(Right):
            def forward(self, query, key=None, value=None, mask=None):
                if mask is not None:  # the right layer fills ~mask with -inf
                    mask = ~mask if how == "inverted" else mask
                return super().forward(query, key, value, mask=mask)

        return Wrong

    fails(ex.check_multi_head_attention, with_mask("inverted"), "the mask is inverted")

    class MaskTimesScores(Right):
        def forward(self, query, key=None, value=None, mask=None):
            from transformer_lib.multi_head import merge_heads, split_heads

            key = query if key is None else key
            value = key if value is None else value
            q, k, v = (
                split_heads(proj(t), self.n_heads)
                for proj, t in (
                    (self.q_proj, query),
                    (self.k_proj, key),
                    (self.v_proj, value),
                )
            )
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
            scores = scores * mask if mask is not None else scores  # 0, not -inf
            return self.out_proj(merge_heads(scores.softmax(-1) @ v))

    fails(ex.check_multi_head_attention, MaskTimesScores, "multiplied by the mask")


def test_encoder_layer_residual_from_the_norm_no_norm2_and_one_shared_norm():
    Right = solution("07").MyEncoderLayer

    class ResidualFromNorm(Right):
        def forward(self, x, mask=None):
            h = self.norm1(x)
            x = h + self.self_attn(h, mask=mask)[0]  # should be x + ...
            return x + self.ff(self.norm2(x))

    fails(ex.check_encoder_layer, ResidualFromNorm, r"residual starts from norm1\(x\)")

    class NoNorm2(Right):
        def forward(self, x, mask=None):
            x = x + self.self_attn(self.norm1(x), mask=mask)[0]
            return x + self.ff(x)

    fails(ex.check_encoder_layer, NoNorm2, "feed-forward sublayer's input was not norm")

    class SharedNorm(Right):
        def __init__(self, *args):
            super().__init__(*args)
            self.norm2 = self.norm1  # one LayerNorm, loaded twice

    fails(ex.check_encoder_layer, SharedNorm, "norm1 and norm2 are one LayerNorm")


def test_decoder_layer_names_the_wiring_behind_a_mask_shape_error():
    Right = solution("08").MyDecoderLayer

    def wired(how):
        class Wrong(Right):
            def forward(self, x, memory, tgt_mask=None, memory_mask=None):
                self_mask, cross_mask = tgt_mask, memory_mask
                if how == "swapped":
                    self_mask, cross_mask = memory_mask, tgt_mask
                x = x + self.self_attn(self.norm1(x), mask=self_mask)[0]
                h = self.norm2(x)
                q, kv = (memory, h) if how == "query" else (h, memory)
                kv = h if how == "kv" else kv
                x = x + self.cross_attn(q, kv, kv, mask=cross_mask)[0]
                return x + self.ff(self.norm3(x))

        return Wrong

    assert ex.outcome(ex.check_decoder_layer, wired(""))[0] == "pass"
    fails(
        ex.check_decoder_layer, wired("kv"), "ValueError .*keys and values came from x"
    )
    fails(ex.check_decoder_layer, wired("query"), "query came from memory")
    fails(ex.check_decoder_layer, wired("swapped"), "the masks are swapped")


def test_shift_targets_one_column_short_and_eos_in_tgt_in():
    right = solution("08").my_shift_targets

    def short(seqs, bos, eos, pad):
        tgt_in, tgt_out = right(seqs, bos, eos, pad)
        return tgt_in[:, :-1], tgt_out[:, :-1]  # T = the longest length

    fails(ex.check_shift_targets, short, r"shape \(3, 3\), expected \(3, 4\)")

    def eos_in_both(seqs, bos, eos, pad):
        tgt_in, tgt_out = right(seqs, bos, eos, pad)
        rows = [[bos, *y, eos] + [pad] * (3 - len(y)) for y in seqs]
        return torch.tensor(rows)[:, :4], tgt_out

    fails(ex.check_shift_targets, eos_in_both, "tgt_in holds <eos> .*after the seq")


def test_train_step_targets_and_zero_grad_before_the_step():
    def target_in(model, optimizer, src, tgt_in, tgt_out, pad_id, eps):
        return step_with()(model, optimizer, src, tgt_in, tgt_in, pad_id, eps)

    fails(ex.check_train_step, target_in, "compared the predictions with tgt_in")

    def zero_between(model, optimizer, src, tgt_in, tgt_out, pad_id, eps):
        logits = model(src, tgt_in)
        loss = F.cross_entropy(
            logits.flatten(0, 1),
            tgt_out.flatten(),
            ignore_index=pad_id,
            label_smoothing=eps,
        )
        loss.backward()
        optimizer.zero_grad()  # wipes the gradients just computed
        optimizer.step()
        return loss.item()

    fails(ex.check_train_step, zero_between, "found no gradients.*not between")
    fails(ex.check_train_step, step_with(step=False), "call optimizer.step\\(\\) after")


def beam_ending_early(stop_at_first=False, first=False):
    """A beam search with the right places (the top `beam` of all grown prefixes,
    the finished set aside) that stops at the first finished sequence, or returns
    the first finished instead of the best."""

    def search(step, beam, max_len, eos):
        alive, done = [((), 0.0)], []
        for _ in range(max_len):
            grown = sorted(
                (
                    (p + (t,), s + lp)
                    for p, s in alive
                    for t, lp in enumerate(step(p).tolist())
                ),
                key=lambda c: -c[1],
            )[:beam]
            alive = [c for c in grown if c[0][-1] != eos]
            done += [c for c in grown if c[0][-1] == eos]
            if not alive or (done and stop_at_first):
                break
        best = done[0] if first else max(done or alive, key=lambda c: c[1])
        return list(best[0]), best[1]

    return search


def test_beam_search_stops_at_the_first_finished_and_drops_eos():
    right = solution("10").my_beam_search

    def no_eos(step, beam, max_len, eos):
        tokens, score = right(step, beam, max_len, eos)
        return tokens[:-1], score

    fails(ex.check_beam_search, no_eos, "the <eos> was dropped")

    stop_first = beam_ending_early(
        stop_at_first=True
    )  # stops at the first finished one

    fails(ex.check_beam_search, stop_first, "stopped when \\[<eos>\\] finished")


def test_corpus_bleu_first_reference_only():
    fails(
        ex.check_corpus_bleu,
        lambda h, r: ex.bleu_reference([(a, refs[:1]) for a, refs in zip(h, r)]),
        "only each sentence's first reference was used",
    )


def test_gpt_block_interleaved_qkv_and_relu():
    Right = solution("12").MyBlock

    class Interleaved(Right):
        def attn(self, x):
            B, T, C = x.shape
            q, k, v = (  # columns 0, 3, 6, ... as q: not how qkv's weight is laid out
                t.reshape(B, T, self.n_heads, -1).transpose(1, 2)
                for t in self.qkv(x).view(B, T, C, 3).unbind(-1)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    fails(ex.check_gpt_block, Interleaved, "interleaved columns")

    class Relu(Right):
        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.fc_out(F.relu(self.fc(self.norm2(x))))

    fails(ex.check_gpt_block, Relu, "the MLP uses ReLU")


def test_tiled_attention_scale_final_division_and_slice_one_short():
    def tiled(scaled=True, divided=True, short=0):
        def f(q, k, v, block):
            m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
            ell, out = torch.zeros_like(m), q.new_zeros(q.shape[:-1] + (v.size(-1),))
            for s in range(0, k.size(-2), block):
                end = s + block - short
                scores = q @ k[..., s:end, :].transpose(-2, -1)
                scores = scores / math.sqrt(q.size(-1)) if scaled else scores
                m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
                p, factor = (scores - m_new).exp(), (m - m_new).exp()
                ell = ell * factor + p.sum(-1, keepdim=True)
                out = out * factor + p @ v[..., s:end, :]
                m = m_new
            return out / ell if divided else out

        return f

    check = ex.check_tiled_attention
    assert ex.outcome(check, tiled())[0] == "pass"
    fails(check, tiled(scaled=False), r"not divided by sqrt\(D\)")
    fails(check, tiled(divided=False), "never divided by the running sum ell")
    fails(check, tiled(short=1), "IndexError .*a block of keys came out empty")

    def short_but_one(q, k, v, block):  # block 1 right, then each block a key short
        return tiled(short=int(block > 1))(q, k, v, block)

    fails(check, short_but_one, "block=4: each block dropped its last key")


def test_grouped_attention_keys_and_values_expanded_apart_and_no_scale():
    def keys_grouped_values_tiled(q, k, v):
        g = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(g, dim=1), v.repeat(1, g, 1, 1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    fails(
        ex.check_grouped_attention,
        keys_grouped_values_tiled,
        "read key head 0 but value head 1, expected head 0 for both",
    )

    def unscaled(q, k, v):
        g = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)

    fails(ex.check_grouped_attention, unscaled, r"not divided by sqrt\(D\)")


def test_merge_and_unload_alpha_times_r_and_w_replaced():
    fails(ex.check_merge_and_unload, unload_with(scale=16.0), "not alpha \\* r = 40")

    def replaced(model):
        names = [n for n, m in model.named_modules() if hasattr(m, "lora_A")]
        for name in names:
            layer = model.get_submodule(name)
            with torch.no_grad():
                layer.base.weight.copy_(layer.delta_weight())  # W <- delta W
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, layer.base)
        return names

    fails(ex.check_merge_and_unload, replaced, "the update replaced W; add it")


def test_dpo_nll_loss_beta_outside_the_log_sigmoid():
    def beta_outside(pc, pr, rc, rr, n, beta, alpha):
        dpo = -beta * F.logsigmoid((pc - rc) - (pr - rr))
        return (dpo - alpha * pc / n).mean()

    fails(ex.check_dpo_nll_loss, beta_outside, "beta multiplies the margin inside")


def test_sliding_window_mask_without_the_head_axis():
    right = solution("06").my_sliding_window_mask
    fails(
        ex.check_sliding_window_mask,
        lambda ids, pad_id, window: right(ids, pad_id, window)[:, 0],
        "the head axis is missing",
    )


# The third blind review (issue 34): wrong answers that passed, raw errors, misnames --


def test_sha256_reads_chunk_bytes_and_names_a_hash_made_in_the_loop():
    def one_mib(path, chunk=1 << 20):  # ignores chunk
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
        return h.hexdigest()

    fails(ex.check_sha256, one_mib, "the argument chunk is ignored")

    def last_only(path, chunk=1 << 20):
        with open(path, "rb") as f:
            while block := f.read(chunk):
                h = hashlib.sha256(block)
        return h.hexdigest()

    fails(
        ex.check_sha256, last_only, "0-byte file: UnboundLocalError .*before the loop"
    )


def test_tied_output_refuses_a_tied_linear_and_names_a_missing_transpose():
    class TiedLinear(nn.Module):
        def __init__(self, embedding):
            super().__init__()
            V, C = embedding.weight.shape
            self.out = nn.Linear(C, V, bias=False)
            self.out.weight = embedding.weight

        def forward(self, h):
            return self.out(h)

    fails(ex.check_tied_output, TiedLinear, r"holds an nn.Linear \(out\)")

    class NoTranspose(solution("02").MyTiedOutput):
        def forward(self, h):
            return h @ self.embedding.weight

    fails(ex.check_tied_output, NoTranspose, r"RuntimeError .*use h @ W.T")


def test_rope_uses_its_base_argument():
    right = solution("15").my_apply_rope
    fails(
        ex.check_rope,
        lambda x, base=10000.0: right(x),
        "the argument base is ignored",
    )


def test_sliding_window_mask_pad_id_one_and_padding_missing():
    right = solution("06").my_sliding_window_mask
    fails(
        ex.check_sliding_window_mask,
        lambda ids, pad_id, window: right(ids, 0, window),
        "pad_id=1, window=3: token 0 was masked as <pad>",
    )
    fails(
        ex.check_sliding_window_mask,
        lambda ids, pad_id, window: right(torch.ones_like(ids[:1]), 0, window),
        r"shape \(1, 1, 8, 8\), expected \(2, 1, 8, 8\): the padding is missing",
    )


def test_shift_targets_pad_three_long_ids_unequal_rows_and_no_eos():
    right = solution("08").my_shift_targets
    check = ex.check_shift_targets
    fails(check, lambda s, b, e, p: right(s, b, e, 0), "padded with 0, but pad is 3")
    fails(
        check,
        lambda s, b, e, p: tuple(t.int() for t in right(s, b, e, p)),
        "tgt_in is torch.int32, expected torch.long",
    )

    def longest(seqs, bos, eos, pad):  # T = the longest length: rows of 4 and 3
        T = max(map(len, seqs))
        tgt_in = [[bos, *y] + [pad] * (T - len(y)) for y in seqs]
        tgt_out = [[*y, eos] + [pad] * (T - 1 - len(y)) for y in seqs]
        return torch.tensor(tgt_in), torch.tensor(tgt_out)

    fails(check, longest, "ValueError .*pad every row to T = the longest length \\+ 1")

    def no_eos(seqs, bos, eos, pad):
        tgt_in, tgt_out = right(seqs, bos, eos, pad)
        return tgt_in, torch.where(tgt_out == eos, pad, tgt_out)

    fails(check, no_eos, "tgt_out has no <eos>")


def test_min_p_uses_its_generator():
    def global_rng(logits, min_p, generator=None):
        probs = F.softmax(logits, -1)
        keep = probs >= min_p * probs.max(-1, keepdim=True).values
        return torch.multinomial(probs * keep, 1).squeeze(-1)  # generator ignored

    fails(ex.check_min_p_sampling, global_rng, "the argument generator is ignored")


def test_corpus_bleu_clipped_to_the_sum_over_references():
    fails(
        ex.check_corpus_bleu,
        lambda h, r: ex.bleu_reference(list(zip(h, r)), summed=True),
        "corpus 6: .*clipped to their sum over the references",
    )


def test_kv_cache_instances_apart_and_values_from_v():
    class Shared:  # lists on the class: every cache shares them
        ks: list = []
        vs: list = []

        @property
        def length(self):
            return sum(k.size(2) for k in self.ks)

        def update(self, k, v):
            self.ks.append(k)
            self.vs.append(v)
            return torch.cat(self.ks, 2), torch.cat(self.vs, 2)

    fails(ex.check_kv_cache, Shared, "the caches share their storage")

    class ValuesFromKeys(solution("12").MyKVCache):
        def update(self, k, v):
            keys, _ = super().update(k, v)
            return keys, keys

    fails(ex.check_kv_cache, ValuesFromKeys, "the values returned are the keys")


def test_grouped_attention_refuses_enable_gqa():
    def shortcut(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    fails(ex.check_grouped_attention, shortcut, "build the repetition yourself")


def test_dpo_nll_loss_needs_the_nll_gradient():
    def detached(pc, pr, rc, rr, n, beta, alpha):
        dpo = -F.logsigmoid(beta * ((pc - rc) - (pr - rr)))
        return (dpo - alpha * pc.detach() / n).mean()

    fails(ex.check_dpo_nll_loss, detached, "the NLL term sends no gradient")


def test_tiled_attention_first_block_max_never_updated():
    def first_max(q, k, v, block):
        m, ell, out = None, 0.0, 0.0
        for s in range(0, k.size(-2), block):
            scores = q @ k[..., s : s + block, :].transpose(-2, -1)
            scores = scores / math.sqrt(q.size(-1))
            m = scores.amax(-1, keepdim=True) if m is None else m  # kept, not updated
            p = (scores - m).exp()
            ell, out = ell + p.sum(-1, keepdim=True), out + p @ v[..., s : s + block, :]
        return out / ell

    fails(ex.check_tiled_attention, first_max, "first block's max kept as the stabil")


def test_geglu_gelu_of_the_product_and_grouped_scale_one_over_d():
    class GeluOfProduct(solution("16").MyGeGLU):
        def forward(self, x):
            return self.proj(F.gelu(self.gate(x) * self.up(x)))

    fails(ex.check_geglu, GeluOfProduct, r"gelu\(gate\(x\) \* up\(x\)\): the GELU")

    def over_d(q, k, v):
        g, D = q.size(1) // k.size(1), q.size(-1)
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / D)

    fails(ex.check_grouped_attention, over_d, r"divided by D = 8, not by sqrt\(D\)")


def test_merge_and_unload_a_fresh_linear_and_train_with_assert():
    def fresh(model):
        names = [n for n, m in model.named_modules() if hasattr(m, "lora_A")]
        for name in names:
            layer = model.get_submodule(name)
            new = nn.Linear(layer.base.in_features, layer.base.out_features)
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, new)
        return names

    fails(ex.check_merge_and_unload, fresh, "put the merged base back")

    def asserts(model, optimizer, batches, lr_at, train_step):
        model.train()
        losses = []
        for step, batch in enumerate(batches):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step)
            loss = train_step(model, optimizer, batch)
            assert math.isfinite(loss), f"step {step}"
            losses.append(loss)
        return losses

    fails(
        ex.check_training_loop, asserts, "raise ValueError naming the step, not assert"
    )


def test_sha256_md5_rope_exponent_from_one_alibi_diagonal_and_mha_unscaled():
    def md5(path, chunk=1 << 20):
        return hashlib.md5(Path(path).read_bytes()).hexdigest()

    fails(ex.check_sha256, md5, "the file's md5, not its sha256")

    def rope_from_one(x, base=10000.0):  # pair i at base^(-2(i + 1)/C)
        T, C = x.shape[-2:]
        freq = base ** (-2 * (torch.arange(C // 2, dtype=x.dtype) + 1) / C)
        ang = torch.arange(T, dtype=x.dtype)[:, None] * freq
        x1, x2 = x[..., 0::2], x[..., 1::2]
        c, s = ang.cos(), ang.sin()
        return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)

    fails(ex.check_rope, rope_from_one, r"base\^\(-2\(i\+1\)/C\)")

    def diagonal_masked(q, k, v, slopes):
        T = q.size(-2)
        pos = torch.arange(T, dtype=q.dtype)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        s = s - slopes[:, None, None] * (pos[:, None] - pos)
        later_or_self = torch.ones(T, T, dtype=torch.bool).triu(0)  # j >= i
        w = s.masked_fill(later_or_self, -math.inf).softmax(-1)
        return w @ v, w

    fails(ex.check_alibi_attention, diagonal_masked, "must see key i .the diagonal")

    module = solution("05")

    class Unscaled(module.MyMultiHeadAttention):
        def forward(self, query, key=None, value=None, mask=None):
            key = query if key is None else key
            value = key if value is None else value
            q = module.split_heads(self.q_proj(query), self.n_heads)
            k = module.split_heads(self.k_proj(key), self.n_heads)
            v = module.split_heads(self.v_proj(value), self.n_heads)
            scores = q @ k.transpose(-2, -1)  # not divided by sqrt(d_head)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            return self.out_proj(module.merge_heads(scores.softmax(-1) @ v))

    fails(ex.check_multi_head_attention, Unscaled, "the scores q k\\^T were not scaled")


def test_decoder_layer_cross_attention_values_from_x():
    Right = solution("08").MyDecoderLayer

    class ValuesFromX(Right):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
            h = self.norm2(x)
            x = x + self.cross_attn(h, memory, h, mask=memory_mask)[0]
            return x + self.ff(self.norm3(x))

    fails(ex.check_decoder_layer, ValuesFromX, "keys and values are both memory")


def test_gpt_block_heads_merged_without_the_transpose():
    class NoTranspose(solution("12").MyBlock):
        def attn(self, x):
            B, T, C = x.shape
            q, k, v = (
                t.view(B, T, self.n_heads, -1).transpose(1, 2)
                for t in self.qkv(x).chunk(3, -1)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.reshape(B, T, C))  # no transpose(1, 2) first

    fails(ex.check_gpt_block, NoTranspose, "merged without the transpose back")


def test_check_command_names_a_cell_that_raised(tmp_path, capsys):
    nb = next((ROOT / "notebooks").glob("04_*.ipynb"))
    data = json.loads(nb.read_text(encoding="utf-8"))
    for cell in data["cells"]:
        if "build-it" in cell["metadata"].get("tags", []):
            cell["source"] = (
                "def my_attention_with_mask(q, k, v, allowed):\n    return (\n"
            )
    (tmp_path / nb.name).write_text(json.dumps(data), encoding="utf-8")
    assert main(["check", "04", "--notebooks", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "04 my_attention_with_mask: its cell raised SyntaxError" in out
    assert "is not defined" not in out


def test_encoder_layer_parallel_swapped_norms_and_raw_keys():
    Right = solution("07").MyEncoderLayer

    class Parallel(Right):
        def forward(self, x, mask=None):
            return (
                x + self.self_attn(self.norm1(x), mask=mask)[0] + self.ff(self.norm2(x))
            )

    fails(ex.check_encoder_layer, Parallel, "the two sublayers run in parallel")

    class Swapped(Right):
        def forward(self, x, mask=None):
            x = x + self.self_attn(self.norm2(x), mask=mask)[0]
            return x + self.ff(self.norm1(x))

    fails(ex.check_encoder_layer, Swapped, "norm1 and norm2 are swapped")

    class RawKeys(Right):
        def forward(self, x, mask=None):
            x = x + self.self_attn(self.norm1(x), x, x, mask=mask)[0]
            return x + self.ff(self.norm2(x))

    fails(ex.check_encoder_layer, RawKeys, "the keys and values came from x")


def test_train_step_mean_over_all_positions():
    def all_positions(model, optimizer, src, tgt_in, tgt_out, pad_id, eps):
        logits = model(src, tgt_in)
        loss = (
            F.cross_entropy(
                logits.flatten(0, 1),
                tgt_out.flatten(),
                ignore_index=pad_id,
                label_smoothing=eps,
                reduction="sum",
            )
            / tgt_out.numel()
        )  # <pad> positions in the denominator
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    fails(ex.check_train_step, all_positions, "averaged over all the positions")


def test_pack_pairs_targets_not_shifted():
    right = solution("17").pack_pairs

    def unshifted(pairs):
        x, y, mask = right(pairs)
        return x, [t if t == -100 else a for a, t in zip(x, y)], mask

    fails(ex.check_pack_pairs, unshifted, "the targets were not shifted")


def test_dpo_nll_loss_margin_without_the_reference():
    def no_reference(pc, pr, rc, rr, n, beta, alpha):
        return (-F.logsigmoid(beta * (pc - pr)) - alpha * pc / n).mean()

    fails(ex.check_dpo_nll_loss, no_reference, "the margin leaves out the reference")


def test_tied_output_softmax_on_the_logits():
    class Softmaxed(solution("02").MyTiedOutput):
        def forward(self, h):
            return (h @ self.embedding.weight.T).softmax(-1)

    fails(ex.check_tied_output, Softmaxed, "the output is a softmax of the logits")


def test_bpe_one_merge_per_chunk():
    fails(
        ex.check_bpe_encode,
        lambda text, merges: ex.part1._bpe_encode_variant(text, merges, "once"),
        "merges only one pair per chunk",
    )


def test_alibi_slopes_over_the_queries():
    def over_queries(q, k, v, slopes):
        T = q.size(-2)
        pos = torch.arange(T, dtype=q.dtype)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        s = s - slopes[:, None] * (pos[:, None] - pos)  # (T, 1): over the queries
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        w = s.masked_fill(~causal, -math.inf).softmax(-1)
        return w @ v, w

    fails(ex.check_alibi_attention, over_queries, "spread over the queries")


def test_cosine_by_distance_abs_and_cosine_similarity_dim_0():
    def absolute(table):
        unit = F.normalize(table, dim=1)
        cosines = (unit @ unit.T).abs()
        return torch.stack([cosines.diagonal(k).mean() for k in range(len(table))])

    fails(ex.check_cosine_by_distance, absolute, r"made positive \(.abs\(\)\)")

    def dim_0(table):
        n = len(table)
        return torch.stack(
            [
                F.cosine_similarity(table[: n - k], table[k:], dim=0).mean()
                for k in range(n)
            ]
        )

    fails(ex.check_cosine_by_distance, dim_0, "dim=0\\) compares the columns")


def test_tiled_attention_two_passes_over_the_keys():
    def two_pass(q, k, v, block):
        scale, m = 1 / math.sqrt(q.size(-1)), None
        for s in range(0, k.size(-2), block):  # pass 1: the maximum
            x = (q @ k[..., s : s + block, :].transpose(-2, -1) * scale).amax(-1, True)
            m = x if m is None else torch.maximum(m, x)
        ell, out = 0.0, 0.0
        for s in range(0, k.size(-2), block):  # pass 2: the sums
            p = (q @ k[..., s : s + block, :].transpose(-2, -1) * scale - m).exp()
            ell, out = ell + p.sum(-1, keepdim=True), out + p @ v[..., s : s + block, :]
        return out / ell

    fails(ex.check_tiled_attention, two_pass, "two passes over the keys")


def test_tiled_attention_a_softmax_per_block_summed():
    def per_block(q, k, v, block):
        return sum(
            F.scaled_dot_product_attention(
                q, k[..., s : s + block, :], v[..., s : s + block, :]
            )
            for s in range(0, k.size(-2), block)
        )

    fails(ex.check_tiled_attention, per_block, "normalised on its own .*summed")


# The fourth blind review (notebooks 00-06): a digest that is never made, and a rotation
# with one sign slipped


def test_sha256_empty_result_and_rope_one_sign_slipped():
    def chained(path, chunk=1 << 20):
        digest = ""
        with open(path, "rb") as f:
            while block := f.read(chunk):
                digest = hashlib.sha256(digest.encode() + block).hexdigest()
        return digest

    fails(ex.check_sha256, chained, "got an empty string: return h.hexdigest")

    def rope_signs(first, second):
        def rope(x, base=10000.0):
            T, C = x.shape[-2:]
            w = torch.promote_types(x.dtype, torch.float32)  # the angles' dtype
            freq = base ** (-torch.arange(0, C, 2, dtype=w) / C)
            ang = torch.arange(T, dtype=w)[:, None] * freq
            x1, x2 = x[..., 0::2], x[..., 1::2]
            c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
            r1, r2 = x1 * c + first * x2 * s, second * x1 * s + x2 * c
            return torch.stack([r1, r2], -1).flatten(-2)

        return rope

    assert ex.outcome(ex.check_rope, rope_signs(-1, 1))[0] == "pass"
    fails(ex.check_rope, rope_signs(1, 1), "the first coordinate's sign is wrong")
    fails(ex.check_rope, rope_signs(-1, -1), "the second coordinate's sign is wrong")


# The fifth blind review (notebooks 07 and 12-19): passes, bare diffs, misnames, raw
# errors; every one is named now


def test_an_error_of_the_learners_code_is_one_line_with_its_line():
    def broken(q, k, v):
        return q @ torch.ones(3, 4)

    fails(
        ex.check_grouped_attention,
        broken,
        r"your code raised RuntimeError at line \d+: +return q @ torch.ones",
    )


def test_encoder_layer_tuple_and_inverted_mask():
    base = solution("07").MyEncoderLayer

    class Pair(base):
        def forward(self, x, mask=None):
            return super().forward(x, mask), None

    class Inverted(base):
        def forward(self, x, mask=None):
            return super().forward(x, None if mask is None else ~mask)

    fails(ex.check_encoder_layer, Pair, "returned a tuple of 2: .* alone")
    fails(ex.check_encoder_layer, Inverted, r"mask is inverted: .*not ~mask")


def _block_with_attention(attend):
    """notebook 12's solution block with its attention replaced by attend(self, x)."""

    class Wrong(solution("12").MyBlock):
        def attn(self, x):
            return attend(self, x)

    return Wrong


def _heads(self, x, split=None):
    B, T, C = x.shape
    z = self.qkv(x)
    if split:
        return split(z, B, T, C, self.n_heads)
    return (
        t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        for t in z.chunk(3, -1)
    )


def _manual(self, x, split=None, keep=0, dim=-1, fill=-math.inf, merge=None):
    B, T, C = x.shape
    q, k, v = _heads(self, x, split)
    s = q @ k.transpose(-2, -1) / math.sqrt(C // self.n_heads)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(keep), fill)
    y = s.softmax(dim) @ v
    return self.proj(merge(y, B, T, C) if merge else y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize(
    "attend, message",
    [
        (lambda s, x: _manual(s, x, keep=-1, fill=-1e9), "hides the diagonal too"),
        (lambda s, x: _manual(s, x, keep=-1), "hides the diagonal too"),
        (lambda s, x: _manual(s, x, dim=-2), "softmax runs over the queries"),
        (
            lambda s, x: _manual(
                s,
                x,
                split=lambda z, B, T, C, H: (
                    t.reshape(B, H, T, C // H) for t in z.split(C, -1)
                ),
                merge=lambda y, B, T, C: y.reshape(B, T, C),
            ),
            "split with a plain reshape",
        ),
        (
            lambda s, x: _manual(
                s,
                x,
                split=lambda z, B, T, C, H: (
                    z.view(B, T, H, 3 * C // H).transpose(1, 2).chunk(3, -1)
                ),
            ),
            "split per head",
        ),
        (
            lambda s, x: _manual(
                s,
                x,
                split=lambda z, B, T, C, H: (
                    z.split(C, -1)[i].view(B, T, H, C // H).transpose(1, 2)
                    for i in (0, 2, 1)
                ),
            ),
            "q, v and k came out in the wrong order",
        ),
    ],
    ids=["tril-1", "tril-1-inf", "dim-2", "reshape-split", "per-head", "qvk"],
)
def test_gpt_block_attention_slips(attend, message):
    fails(ex.check_gpt_block, _block_with_attention(attend), message)


def test_gpt_block_tuple():
    class Pair(solution("12").MyBlock):
        def forward(self, x):
            return super().forward(x), None

    fails(ex.check_gpt_block, Pair, "returned a tuple of 2")


def test_kv_cache_swapped_and_unsliced_buffer():
    base = solution("12").MyKVCache

    class Swapped(base):
        def update(self, k, v):
            keys, values = super().update(k, v)
            return values, keys

    class Buffer:
        def __init__(self):
            self.length, self.k = 0, None

        def update(self, k, v):
            B, H, T, D = k.shape
            if self.k is None:
                self.k, self.v = k.new_zeros(B, H, 64, D), v.new_zeros(B, H, 64, D)
            self.k[:, :, self.length : self.length + T] = k
            self.v[:, :, self.length : self.length + T] = v
            self.length += T
            return self.k, self.v

    fails(ex.check_kv_cache, Swapped, "keys and values are swapped")
    fails(ex.check_kv_cache, Buffer, r"returned 64 positions: .*\[:, :, :length\]")


def test_cosine_by_distance_wraps_around_or_stops_short():
    def wraps(table):
        u = F.normalize(table, dim=-1)
        return torch.stack([(u * u.roll(-k, 0)).sum(-1).mean() for k in range(len(u))])

    def short(table):
        u = F.normalize(table, dim=-1)
        s = u @ u.T
        return torch.stack([s.diagonal(k).mean() for k in range(len(u) - 1)])

    fails(ex.check_cosine_by_distance, wraps, "wrap around")
    fails(ex.check_cosine_by_distance, short, r"range\(N\), not range\(N - 1\)")


def _online(q, k, v, block, m0=-math.inf, stop=None, scale=None):
    """An online softmax with a slip: the running max started at m0, the keys cut at
    stop, the scores divided by `scale`."""
    m = torch.full(q.shape[:-1] + (1,), m0, dtype=q.dtype)
    ell, out = torch.zeros_like(m), q.new_zeros(q.shape[:-1] + (v.size(-1),))
    for s in range(0, stop or k.size(-2), block):
        scores = q @ k[..., s : s + block, :].transpose(-2, -1)
        scores = scores / (scale or math.sqrt(q.size(-1)))
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        p, factor = (scores - m_new).exp(), (m - m_new).exp()
        ell = ell * factor + p.sum(-1, keepdim=True)
        out, m = out * factor + p @ v[..., s : s + block, :], m_new
    return out / ell


def test_tiled_attention_narrow_values_low_scores_in_place_last_block():
    def by_v(q, k, v, block):
        return _online(q, k, v, block, scale=math.sqrt(v.size(-1)))

    def from_zero(q, k, v, block):
        return _online(q, k, v, block, m0=0.0)

    def in_place(q, k, v, block):
        q /= math.sqrt(q.size(-1))  # the caller's q, scaled
        return _online(q, k, v, block, scale=1.0)

    def drop_last(q, k, v, block):
        return _online(q, k, v, block, stop=k.size(-2) // block * block)

    fails(ex.check_tiled_attention, by_v, r"divided by sqrt\(5\), the values' width")
    fails(ex.check_tiled_attention, from_zero, "running max started at 0, not -inf")
    fails(ex.check_tiled_attention, in_place, "q was changed in place")
    fails(ex.check_tiled_attention, drop_last, r"the last block \(1 of the 13 keys\)")


def test_grouped_attention_wrong_axis_inverted_mask_head_zero():
    def repeated(q, k, v, dim=1, keep=None, first=False):
        g = q.size(1) // k.size(1)
        if first:
            k, v = k[:, :1], v[:, :1]
            g = q.size(1)
        k, v = k.repeat_interleave(g, dim), v.repeat_interleave(g, dim)
        if keep is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)

    T = 6
    later = torch.ones(T, T, dtype=torch.bool).triu()
    fails(
        ex.check_grouped_attention,
        lambda q, k, v: repeated(q, k, v, dim=2),
        r"repeated along another axis\? .*dim=1",
    )
    fails(
        ex.check_grouped_attention,
        lambda q, k, v: repeated(q, k, v, keep=later),
        "causal mask is inverted",
    )
    fails(
        ex.check_grouped_attention,
        lambda q, k, v: repeated(q, k, v, first=True),
        "every query head read key/value head 0",
    )


def test_pack_pairs_found_by_a_token_id():
    right = solution("17").pack_pairs

    def by_bos(pairs):  # splits the joined ids at every 1
        flat = [t for ids, _ in pairs for t in ids]
        starts = [i for i, t in enumerate(flat) if t == 1] + [len(flat)]
        found = [flat[a:b] for a, b in zip(starts, starts[1:])]
        return right(list(zip(found, [n for _, n in pairs])))

    fails(ex.check_pack_pairs, by_bos, "are the pairs found by looking for a token")


def test_merge_and_unload_in_place_with_autograd_on():
    def in_place(model):
        names = [
            n for n, m in model.named_modules() if type(m).__name__ == "LoRALinear"
        ]
        for name in names:
            parent, _, leaf = name.rpartition(".")
            layer = model.get_submodule(name)
            layer.base.weight += layer.delta_weight()  # autograd on
            setattr(model.get_submodule(parent), leaf, layer.base)
        return names

    fails(ex.check_merge_and_unload, in_place, r"merge under torch.no_grad\(\)")


def test_dpo_nll_pairing_floor_division_per_pair():
    def loss(pair_wrong=False, floor=False, mean=True):
        def fn(pc, pr, rc, rr, n, beta, alpha):
            margin = (pc - pr) - (rr - rc) if pair_wrong else (pc - rc) - (pr - rr)
            nll = torch.div(pc, n, rounding_mode="floor") if floor else pc / n
            per = -F.logsigmoid(beta * margin) - alpha * nll
            return per.mean() if mean else per

        return fn

    fails(ex.check_dpo_nll_loss, loss(pair_wrong=True), "paired wrong")
    fails(ex.check_dpo_nll_loss, loss(floor=True), r"floor-divided \(//\)")
    fails(ex.check_dpo_nll_loss, loss(mean=False), r"a loss per pair, shape \(6,\)")


# The fifth blind review (notebooks 08-11): swapped norms, a hard-coded pad id, a strict
# min-p threshold, beam scores, BLEU's zero precision and ties


def test_decoder_layer_norm2_and_norm3_swapped():
    class Swapped(solution("08").MyDecoderLayer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
            x = x + self.cross_attn(self.norm3(x), memory, memory, mask=memory_mask)[0]
            return x + self.ff(self.norm2(x))

    fails(ex.check_decoder_layer, Swapped, "norm2 and norm3 are swapped")


def _train_step(loss_of, clip=None):
    """A training step whose loss is loss_of(logits, tgt_out, pad_id, eps)."""

    def step(model, optimizer, src, tgt_in, tgt_out, pad_id, label_smoothing):
        loss = loss_of(model(src, tgt_in), tgt_out, pad_id, label_smoothing)
        optimizer.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    return step


def test_train_step_hard_coded_pad_sentence_means_extra_shift_clipping():
    def ce(logits, targets, ignore, eps, **kw):
        return F.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), ignore_index=ignore,
            label_smoothing=eps, **kw,
        )  # fmt: skip

    def sentence_means(logits, tgt_out, pad_id, eps):
        losses = F.cross_entropy(
            logits.transpose(1, 2), tgt_out, reduction="none", label_smoothing=eps
        )
        real = (tgt_out != pad_id).float()
        return ((losses * real).sum(1) / real.sum(1)).mean()

    def shifted(logits, tgt_out, pad_id, eps):
        return ce(logits[:, :-1], tgt_out[:, 1:], pad_id, eps)

    def right(logits, tgt_out, pad_id, eps):
        return ce(logits, tgt_out, pad_id, eps)

    check = ex.check_train_step
    fails(check, _train_step(lambda lg, y, p, e: ce(lg, y, 0, e)), "hard-coded 0")
    fails(check, _train_step(sentence_means), "a mean of per-sentence means")
    fails(check, _train_step(shifted), r"shifted once more \(logits\[:, :-1\]")
    fails(check, _train_step(right, clip=1.0), "the gradients were clipped")
    assert ex.outcome(check, _train_step(right))[0] == "pass"


def test_min_p_strict_threshold_drops_a_tie():
    def strict(logits, min_p, generator=None):
        p = logits.softmax(-1)
        p = p * (p > min_p * p.max(-1, keepdim=True).values)
        return torch.multinomial(p, 1, generator=generator).squeeze(-1)

    fails(ex.check_min_p_sampling, strict, r"at least, not more than: >=, not >")


def test_beam_search_product_ascending_and_length_normalised():
    right = solution("10").my_beam_search

    def search(combine, start, best_first=True):
        def beam_search(step, beam, max_len, eos):
            live, done = [((), start)], []
            for _ in range(max_len):
                grown = [
                    (p + (t,), combine(s, lp))
                    for p, s in live
                    for t, lp in enumerate(step(p).tolist())
                ]
                grown.sort(key=lambda c: -c[1] if best_first else c[1])
                live = []
                for p, s in grown[:beam]:
                    (done if p[-1] == eos else live).append((p, s))
                if not live:
                    break
            return max(done or live, key=lambda c: c[1])

        return beam_search

    def normalised(step, beam, max_len, eos):
        tokens, score = right(step, beam, max_len, eos)
        return tokens, score / len(tokens)

    fails(ex.check_beam_search, search(lambda s, lp: s * lp, 1.0), "multiplied")
    fails(
        ex.check_beam_search,
        search(lambda s, lp: s + lp, 0.0, best_first=False),
        "sorted in ascending order, so the beam kept the worst",
    )
    fails(ex.check_beam_search, normalised, "length-normalised score: return the raw")


def _bleu(orders=4, add_k=0, tie="shorter", guard=True):
    """Corpus BLEU with one of the fifth review's slips."""
    from collections import Counter

    def grams(tokens, n):
        return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))

    def bleu(hypotheses, references):
        match, total, c, r = [0] * 4, [0] * 4, 0, 0
        sign = 1 if tie == "shorter" else -1
        for hyp, refs in zip(hypotheses, references):
            c += len(hyp)
            r += len(min(refs, key=lambda x: (abs(len(x) - len(hyp)), sign * len(x))))
            for n in range(1, 5):
                most = Counter()
                for ref in refs:
                    most |= grams(ref, n)
                match[n - 1] += sum((grams(hyp, n) & most).values())
                total[n - 1] += sum(grams(hyp, n).values())
        if guard and min(match) == 0 and not add_k:
            return 0.0
        p = [(m + add_k) / (t + add_k) for m, t in zip(match, total)][:orders]
        bp = 1.0 if c >= r else math.exp(1 - r / c)
        return 100 * bp * math.exp(sum(map(math.log, p)) / orders)

    return bleu


def test_corpus_bleu_zero_precision_ties_unigrams_and_smoothing():
    check = ex.check_corpus_bleu
    assert ex.outcome(check, _bleu())[0] == "pass"
    fails(check, _bleu(guard=False), r"ValueError \(math domain error\): no 4-gram")
    fails(check, _bleu(tie="longer"), "the longer was taken for r: take the shorter")
    fails(check, _bleu(orders=1), "only unigram precision")
    fails(check, _bleu(add_k=1), "add-one smoothing")


# The seventh blind review (issue 34): the wrong answers that passed, and more -------


def test_sha256_a_loop_over_lines_and_the_last_partial_chunk_dropped():
    def lines(path, chunk=1 << 20):  # binary "lines": as long as the file has no \n
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for line in f:
                h.update(line)
        return h.hexdigest()

    def full_chunks_only(path, chunk=1 << 20):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while len(block := f.read(chunk)) == chunk:
                h.update(block)
        return h.hexdigest()

    fails(ex.check_sha256, lines, r"a loop over the file's lines")
    fails(ex.check_sha256, full_chunks_only, "the sha256 of no bytes at all")


def test_tied_output_a_copy_of_w_made_in_init():
    class Copied(nn.Module):
        def __init__(self, embedding):
            super().__init__()
            self.w = embedding.weight.clone()  # follows the gradient, not the steps

        def forward(self, h):
            return h @ self.w.T

    fails(ex.check_tied_output, Copied, "keeps a copy of W made in __init__")


def test_multi_head_attention_a_projection_left_unused():
    right = solution("05").MyMultiHeadAttention

    def without(name):
        class Unused(right):
            def __init__(self, d_model, n_heads):
                super().__init__(d_model, n_heads)
                getattr(self, name).forward = lambda x: x  # its weights never used

        return Unused

    fails(ex.check_multi_head_attention, without("v_proj"), "does not depend on v_proj")
    fails(ex.check_multi_head_attention, without("k_proj"), "does not depend on k_proj")


def test_shift_targets_that_change_the_callers_lists():
    def appends(seqs, bos, eos, pad):
        T = max(map(len, seqs)) + 1
        for s in seqs:
            s.append(eos)  # the caller's lists grow
        tgt_out = [s + [pad] * (T - len(s)) for s in seqs]
        tgt_in = [[bos] + s[:-1] + [pad] * (T - len(s)) for s in seqs]
        return torch.tensor(tgt_in), torch.tensor(tgt_out)

    fails(ex.check_shift_targets, appends, "the caller's sequences changed")


def test_train_step_hard_coded_smoothing_and_the_classes_on_the_last_dim():
    def ce(logits, targets, ignore, eps):
        return F.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), ignore_index=ignore,
            label_smoothing=eps,
        )  # fmt: skip

    fixed = _train_step(lambda lg, y, p, e: ce(lg, y, p, 0.1))
    fails(ex.check_train_step, fixed, "label_smoothing is a hard-coded 0.1")
    unflattened = _train_step(
        lambda lg, y, p, e: F.cross_entropy(lg, y, ignore_index=p, label_smoothing=e)
    )
    fails(ex.check_train_step, unflattened, "cross_entropy wants the classes on dim 1")


def test_beam_search_toys_have_no_exact_tie():
    """Two continuations of one prefix with the same probability would make two
    answers right; the checker's toys keep every row's non-zero entries distinct."""
    from transformer_lib.exercises.part2 import _BEAM_TABLE, _length_step

    rows = [torch.tensor(r) for r in _BEAM_TABLE.values()]
    rows += [_length_step(p).exp() for p in [(), (0,), (0, 0), (0, 0, 0)]]
    for row in rows:
        kept = row[row > 0]
        assert len(set(kept.tolist())) == len(kept), row


def test_kv_cache_of_a_fixed_size_and_one_that_keeps_the_last_token():
    class Fixed:
        def __init__(self, slots=16):
            self.slots, self.k, self.v, self.length = slots, None, None, 0

        def update(self, k, v):
            if self.k is None:
                B, H, _, D = k.shape
                self.k, self.v = (k.new_zeros(B, H, self.slots, D) for _ in "kv")
            end = self.length + k.shape[2]
            self.k[:, :, self.length : end], self.v[:, :, self.length : end] = k, v
            self.length = end
            return self.k[:, :, :end], self.v[:, :, :end]

    class LastOnly:
        def __init__(self):
            self.length = 0

        def update(self, k, v):
            self.k, self.v = k[:, :, -1:], v[:, :, -1:]
            self.length += k.shape[2]
            return self.k, self.v

    fails(ex.check_kv_cache, Fixed, "no fixed capacity")
    fails(ex.check_kv_cache, LastOnly, "returned one position")


def test_merge_and_unload_r_over_alpha_a_linear_without_bias_and_the_model_returned():
    fails(ex.check_merge_and_unload, unload_with(scale=0.16), "not r / alpha")

    def no_bias(model):
        names = [n for n, m in model.named_modules() if hasattr(m, "lora_A")]
        for name in names:
            layer = model.get_submodule(name)
            base = layer.base
            new = nn.Linear(base.in_features, base.out_features, bias=False).double()
            with torch.no_grad():
                new.weight.copy_(base.weight + layer.delta_weight())
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, new)
        return names

    fails(ex.check_merge_and_unload, no_bias, "without the bias the base layer has")

    def returns_model(model):
        unload_with()(model)
        return model

    fails(ex.check_merge_and_unload, returns_model, "fn returned the model")


def test_an_error_in_the_library_is_reported_at_the_learners_line():
    right = solution("07").MyEncoderLayer

    class Positional(right):
        def forward(self, x, mask=None):
            return x + self.self_attn(self.norm1(x), mask)[0]  # mask as the key

    status, text = ex.outcome(ex.check_encoder_layer, Positional)
    assert status == "fail" and "your code raised" in text, text
    assert "self.self_attn(self.norm1(x), mask)" in text, text
    assert "\n" not in text


def test_min_p_softmax_over_the_batch_or_twice_and_a_transposed_window_mask():
    def batch_axis(logits, min_p, generator=None):
        p = logits.softmax(0)  # over the rows, not the vocabulary
        q = p * (p >= min_p * p.max(-1, keepdim=True).values)
        return torch.multinomial(q / q.sum(-1, keepdim=True), 1, generator=generator)[
            :, 0
        ]

    def twice(logits, min_p, generator=None):
        p = logits.softmax(-1)
        keep = p >= min_p * p.max(-1, keepdim=True).values
        q = p.masked_fill(~keep, float("-inf")).softmax(-1)  # softmax of probabilities
        return torch.multinomial(q, 1, generator=generator)[:, 0]

    fails(ex.check_min_p_sampling, batch_axis, r"softmax was taken over the batch")
    fails(ex.check_min_p_sampling, twice, "went through a second softmax")
    right = solution("06").my_sliding_window_mask
    fails(
        ex.check_sliding_window_mask,
        lambda ids, pad_id, window: right(ids, pad_id, window).transpose(-1, -2),
        "the mask is transposed",
    )


def test_encoder_layer_final_norm_feed_forward_first_and_the_pair_added():
    right = solution("07").MyEncoderLayer

    class FinalNorm(right):
        def forward(self, x, mask=None):
            return self.norm2(super().forward(x, mask))

    class FeedForwardFirst(right):
        def forward(self, x, mask=None):
            x = x + self.ff(self.norm2(x))
            return x + self.self_attn(self.norm1(x), mask=mask)[0]

    class PairAdded(right):
        def forward(self, x, mask=None):
            x = x + self.self_attn(self.norm1(x), mask=mask)  # (output, weights)
            return x + self.ff(self.norm2(x))

    check = ex.check_encoder_layer
    fails(check, FinalNorm, "a LayerNorm was applied to the layer's output")
    fails(check, FeedForwardFirst, "the feed-forward sublayer ran first")
    fails(check, PairAdded, r"return a pair \(output, weights\); take the output")


def test_decoder_layer_cross_first_norms_one_two_swapped_and_inverted_tgt_mask():
    right = solution("08").MyDecoderLayer

    def layer(order):
        class Wrong(right):
            def forward(self, x, memory, tgt_mask=None, memory_mask=None):
                for kind, norm in order:
                    n = getattr(self, norm)(x)
                    if kind == "self":
                        x = x + self.self_attn(n, mask=tgt_mask)[0]
                    elif kind == "inverted":
                        x = x + self.self_attn(n, mask=~tgt_mask)[0]
                    else:
                        x = x + self.cross_attn(n, memory, memory, mask=memory_mask)[0]
                return x + self.ff(self.norm3(x))

        return Wrong

    check = ex.check_decoder_layer
    fails(check, layer([("cross", "norm1"), ("self", "norm2")]), "cross-attention came")
    fails(check, layer([("self", "norm2"), ("cross", "norm1")]), "norm1 and norm2 are")
    fails(check, layer([("inverted", "norm1"), ("cross", "norm2")]), "tgt_mask is inv")


def test_bpe_encode_highest_rank_one_pass_ids_from_255_spaces_latin1_and_nested():
    from transformer_lib.exercises.part1 import _bpe_encode_variant

    check = ex.check_bpe_encode
    for how, message in (
        ("highest", "highest rank"),
        ("onepass", "only the pairs present at the start"),
        ("low", "255 \\+ k, one too few"),
        ("spaces", "split the text at spaces"),
        ("latin1", "as Latin-1"),
    ):
        fails(
            check, lambda text, merges: _bpe_encode_variant(text, merges, how), message
        )
    right = solution("01").my_bpe_encode
    fails(check, lambda text, merges: [right(text, merges)], "a list per chunk")


def test_rope_positions_from_the_batch_integer_exponent_and_two_exponents_off():
    from transformer_lib.exercises.part4 import _rotate_pairs

    def with_freq(exponents):
        return lambda x, base=10000.0: _rotate_pairs(
            x, base ** exponents(x.size(-1), x)
        )

    check = ex.check_rope
    fails(
        check,
        with_freq(lambda C, x: ((-2 * torch.arange(C // 2)) // C).to(x.dtype)),
        "computed in integers",
    )
    fails(
        check,
        with_freq(lambda C, x: -torch.arange(0, C, 2, dtype=x.dtype) / (C - 2)),
        r"base\^\(-2i/\(C-2\)\)",
    )
    fails(
        check,
        with_freq(lambda C, x: -torch.arange(1, C, 2, dtype=x.dtype) / C),
        r"base\^\(-\(2i\+1\)/C\)",
    )

    def batch_positions(x, base=10000.0):
        freq = base ** (-torch.arange(0, x.size(-1), 2, dtype=x.dtype) / x.size(-1))
        return torch.stack(
            [_rotate_pairs(x[b][:, None], freq, start=b)[:, 0] for b in range(len(x))]
        )

    fails(check, batch_positions, "the positions came from the batch axis")


def test_alibi_divided_by_d_and_multi_head_softmax_over_queries_and_cross_keys():
    from transformer_lib.exercises.part1 import alibi_reference

    fails(
        ex.check_alibi_attention,
        lambda q, k, v, slopes: alibi_reference(q, k, v, slopes, scale=q.size(-1)),
        "divided by d_k, not by its square root",
    )
    right = solution("05").MyMultiHeadAttention

    class QueryKeys(right):
        def forward(self, query, key=None, value=None, mask=None):
            return super().forward(
                query, query, query if value is None else value, mask
            )

    fails(ex.check_multi_head_attention, QueryKeys, "come from key and value")


def test_beam_search_one_step_short_and_the_last_tokens_score():
    right = solution("10").my_beam_search
    fails(
        ex.check_beam_search,
        lambda step, beam, max_len, eos: right(step, beam, max_len - 1, eos),
        "stopped one step short",
    )

    def last_score(step, beam, max_len, eos):
        tokens, _ = right(step, beam, max_len, eos)
        return tokens, step(tuple(tokens[:-1]))[tokens[-1]].item()

    fails(ex.check_beam_search, last_score, "is the last token's alone")


def test_corpus_bleu_first_reference_penalty_always_three_orders_reference_counts():
    from transformer_lib.exercises.part2 import bleu_reference

    def as_fn(**wrong):
        return lambda hyps, refs: bleu_reference(list(zip(hyps, refs)), **wrong)

    check = ex.check_corpus_bleu
    fails(check, as_fn(first=("clip",)), "clipped against the first reference only")
    fails(check, as_fn(first=("r",)), "r came from each sentence's first reference")
    fails(check, as_fn(bp_always=True), "the brevity penalty was applied although")
    fails(check, as_fn(orders=3), "the precisions of n = 1..3 only")
    fails(check, as_fn(ref_total=True), "divided by the reference's n-grams")


def test_record_takes_a_number_and_refuses_an_unknown_notebook_in_one_line(capsys):
    assert ex.record(8, {}) == 0  # 8 is read as "08"
    assert capsys.readouterr().out.count("08 ") == 2
    with pytest.raises(ex.ExerciseError, match="no build-its for notebook '99'"):
        ex.record("99", {})


def test_tied_output_transposed_and_train_step_smoothing_over_the_wrong_tokens():
    class Transposed(nn.Module):
        def __init__(self, embedding):
            super().__init__()
            self.embedding = embedding

        def forward(self, h):
            return (h @ self.embedding.weight.T).transpose(1, 2)

    fails(ex.check_tied_output, Transposed, r"the logits are \(B, n_vocab, T\)")

    def spread(logits, tgt_out, pad_id, eps):
        logp = logits.flatten(0, 1).log_softmax(-1)
        y, real = tgt_out.flatten(), (tgt_out.flatten() != pad_id).double()
        nll = -logp.gather(1, y[:, None])[:, 0]
        loss = (1 - eps) * nll + eps / (logp.size(-1) - 1) * (-logp.sum(-1) - nll)
        return (loss * real).sum() / real.sum()

    fails(ex.check_train_step, _train_step(spread), "spread over the n_vocab - 1")


def test_bpe_encode_a_run_of_one_pair_merged_from_the_right():
    from transformer_lib.tokenization import CHUNK_PATTERN

    def merge_from_right(ids, pair, new):
        out, i = [], len(ids) - 1
        while i >= 0:
            if i > 0 and (ids[i - 1], ids[i]) == pair:
                out, i = [new, *out], i - 2
            else:
                out, i = [ids[i], *out], i - 1
        return out

    def from_right(text, merges):
        ranks = {pair: 256 + k for k, pair in enumerate(merges)}
        out = []
        for chunk in CHUNK_PATTERN.findall(text):
            ids = list(chunk.encode())
            while known := [p for p in zip(ids, ids[1:]) if p in ranks]:
                pair = min(known, key=ranks.get)
                ids = merge_from_right(ids, pair, ranks[pair])
            out += ids
        return out

    fails(ex.check_bpe_encode, from_right, "merge from the left")


# The eighth blind review (issue 34) ---------------------------------------------------


def test_correct_answers_the_eighth_review_found_rejected_now_pass():
    from transformer_lib.translation_data import label_smoothed_cross_entropy

    def course_loss(logits, tgt_out, pad_id, eps):  # the function 09 shows
        return label_smoothed_cross_entropy(logits, tgt_out, eps, pad_id)

    assert ex.outcome(ex.check_train_step, _train_step(course_loss))[0] == "pass"

    class MaskBuffer(solution("12").MyBlock):  # nanoGPT keeps its mask as a buffer
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.register_buffer("mask", torch.ones(64, 64, dtype=torch.bool).tril())

    assert ex.outcome(ex.check_gpt_block, MaskBuffer)[0] == "pass"


def test_scores_divided_by_sqrt_n_heads_fail():
    class ByHeads(nn.Module):  # sqrt(n_heads) where sqrt(d_head) belongs
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.n_heads = n_heads
            self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
                nn.Linear(d_model, d_model) for _ in range(4)
            )

        def forward(self, query, key=None, value=None, mask=None):
            key = query if key is None else key
            value = key if value is None else value
            (B, T, C), H = query.shape, self.n_heads

            def split(t):
                return t.view(B, t.size(1), H, C // H).transpose(1, 2)

            q, k = split(self.q_proj(query)), split(self.k_proj(key))
            s = q @ k.transpose(-2, -1) / math.sqrt(H)
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            y = s.softmax(-1) @ split(self.v_proj(value))
            return self.out_proj(y.transpose(1, 2).reshape(B, T, C))

    fails(ex.check_multi_head_attention, ByHeads, r"sqrt\(n_heads\)")


def test_inplace_residual_bleu_tie_order_multiple_of_tile_width_and_a_late_finish():
    class InPlace(solution("07").MyEncoderLayer):
        def forward(self, x, mask=None):
            x = x.clone()
            x += self.self_attn(self.norm1(x), mask=mask)[0]
            x += self.ff(self.norm2(x))
            return x

    fails(ex.check_encoder_layer, InPlace, "changed in place")

    def first_listed(hypotheses, references):  # the closest reference, ties by order
        from transformer_lib.exercises.part2 import bleu_reference

        picked = [
            [min(refs, key=lambda r: abs(len(r) - len(h)))] + refs
            for h, refs in zip(hypotheses, references)
        ]
        return bleu_reference(list(zip(hypotheses, picked)), first=("r",))

    fails(ex.check_corpus_bleu, first_listed, "the longer was taken for r")

    class Fixed64(solution("16").MyGeGLU):
        def __init__(self, d_model, multiple_of=64):
            super().__init__(d_model, 64)

    fails(ex.check_geglu, Fixed64, "a multiple of the argument multiple_of")
    right = solution("14").my_tiled_attention
    fails(
        ex.check_tiled_attention,
        lambda q, k, v, block: right(q, k, v, max(1, block // 2)),
        "the keys were read",
    )

    first_finished = beam_ending_early(
        first=True
    )  # searches on, returns the first finished

    fails(ex.check_beam_search, first_finished, "the first sequence to finish")


def test_the_eighth_reviews_bare_and_misnamed_answers_now_named():
    from transformer_lib.exercises.part1 import (
        alibi_reference,
        sliding_window_reference,
    )
    from transformer_lib.exercises.part4 import _cos_sin_swapped, _rotate_pairs

    fails(ex.check_rope, lambda x, base=10000.0: _cos_sin_swapped(
        x, base ** (-torch.arange(0, x.size(-1), 2, dtype=x.dtype) / x.size(-1))
    ), "cos and sin are swapped")  # fmt: skip
    fails(
        ex.check_rope,
        lambda x, base=10000.0: _rotate_pairs(x, torch.ones(x.size(-1) // 2)),
        "every pair turns at 1 radian",
    )
    fails(
        ex.check_alibi_attention,
        lambda q, k, v, s: alibi_reference(q, k, v, s[:1].expand(len(s))),
        "every head used slopes",
    )
    fails(
        ex.check_sliding_window_mask,
        lambda ids, pad_id, window: sliding_window_reference(ids, pad_id, ids.size(1)),
        "the window is missing",
    )

    def dpo(sign=-1.0, alpha_div=False):
        def loss(pc, pr, rc, rr, n, beta, alpha):
            term = sign * F.logsigmoid(beta * ((pc - rc) - (pr - rr)))
            nll = -pc / n
            return (term + (nll / alpha if alpha_div else alpha * nll)).mean()

        return loss

    fails(ex.check_dpo_nll_loss, dpo(sign=1.0), r"\+log sigmoid")
    fails(ex.check_dpo_nll_loss, dpo(alpha_div=True), "divided by alpha")

    def scaled(model, optimizer, batches, lr_at, train_step):
        model.train()
        base = [g["lr"] for g in optimizer.param_groups]
        losses = []
        for s, batch in enumerate(batches):
            for g, b in zip(optimizer.param_groups, base):
                g["lr"] = b * lr_at(s)  # as LambdaLR does
            losses.append(train_step(model, optimizer, batch))
            if not math.isfinite(losses[-1]):
                raise ValueError(f"step {s}")
        return losses

    fails(ex.check_training_loop, scaled, "do not scale the base rate")

    class Fused(nn.Module):
        def __init__(self, d_model, multiple_of=64):
            super().__init__()
            hidden = multiple_of * math.ceil(8 * d_model / 3 / multiple_of)
            self.gate_up = nn.Linear(d_model, 2 * hidden, bias=False)
            self.proj = nn.Linear(hidden, d_model, bias=False)

    fails(ex.check_geglu, Fused, "not one fused gate_up")
    right = solution("15").my_grouped_attention

    def scaled_in_place(q, k, v):
        q *= 2.0  # the caller's q changes
        return right(q / 2.0, k, v)

    fails(ex.check_grouped_attention, scaled_in_place, "q was changed in place")


def test_corpus_bleu_epsilon_smoothing_and_totals_by_length():
    from transformer_lib.exercises.part2 import bleu_reference

    def as_fn(**wrong):
        return lambda hyps, refs: bleu_reference(list(zip(hyps, refs)), **wrong)

    fails(ex.check_corpus_bleu, as_fn(add_k=1e-9), "expected 0.0: one precision is 0")
    fails(
        ex.check_corpus_bleu,
        as_fn(hyp_length=True),
        "divided by the hypothesis's length",
    )


# The eighth blind review, second round: the wrong answers that still passed, and the
# bare differences named ---------------------------------------------------------------


def test_encoder_and_decoder_layers_one_head_heads_swapped_and_layer_norm_eps():
    from transformer_lib.multi_head import MultiHeadAttention

    def with_heads(layer, heads):  # heads(d_model, n_heads) -> the count built
        class Wrong(layer):
            def __init__(self, d_model, n_heads, d_ff):
                super().__init__(d_model, n_heads, d_ff)
                for name in ("self_attn", "cross_attn"):
                    if hasattr(self, name):
                        setattr(
                            self,
                            name,
                            MultiHeadAttention(d_model, heads(d_model, n_heads)),
                        )

        return Wrong

    for nb, check in (("07", ex.check_encoder_layer), ("08", ex.check_decoder_layer)):
        layer = (
            solution(nb).MyEncoderLayer if nb == "07" else solution(nb).MyDecoderLayer
        )
        swapped = with_heads(layer, lambda d, h: d // h)
        fails(check, swapped, "n_heads and d_head are swapped")
        fails(check, with_heads(layer, lambda d, h: 1), "1 head of width 16")

    class Eps(solution("07").MyEncoderLayer):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__(d_model, n_heads, d_ff)
            self.norm1 = nn.LayerNorm(d_model, eps=1e-6)

    fails(ex.check_encoder_layer, Eps, r"norm1 is nn.LayerNorm\(d_model, eps=1e-06\)")


def test_decoder_layer_cross_attention_reads_the_stale_x():
    class Stale(solution("08").MyDecoderLayer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            n = self.norm2(x)  # before self-attention's residual
            x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
            x = x + self.cross_attn(n, memory, memory, mask=memory_mask)[0]
            return x + self.ff(self.norm3(x))

    fails(ex.check_decoder_layer, Stale, "from before self-attention's residual")


def test_multi_head_attention_one_head_unsplit():
    class OneHead(solution("05").MyMultiHeadAttention):
        def forward(self, query, key=None, value=None, mask=None):
            key = query if key is None else key
            value = key if value is None else value
            q, k, v = (
                p(t)[:, None] for p, t in ((self.q_proj, query), (self.k_proj, key),
                                           (self.v_proj, value))
            )  # fmt: skip
            s = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            return self.out_proj((s.softmax(-1) @ v)[:, 0])

    fails(ex.check_multi_head_attention, OneHead, "one head of width d_model = 16")


def beam_steps(extra=0, best=max):
    """A beam search of max_len + extra steps, returning best(finished) by score (or
    the last finished of the latest step that finished any, best="last")."""

    def search(step, beam, max_len, eos):
        alive, done, last = [((), 0.0)], [], []
        for _ in range(max_len + extra):
            grown = sorted(
                (
                    (p + (t,), s + lp)
                    for p, s in alive
                    for t, lp in enumerate(step(p).tolist())
                ),
                key=lambda c: -c[1],
            )[:beam]
            alive = [c for c in grown if c[0][-1] != eos]
            done += [c for c in grown if c[0][-1] == eos]
            last = [c for c in grown if c[0][-1] == eos] or last
            if not alive:
                break
        pool = last if best == "last" else done or alive
        tokens, score = max(pool, key=lambda c: c[1])
        return list(tokens), score

    return search


def test_beam_search_runs_max_len_steps_and_returns_the_best_finished():
    assert ex.outcome(ex.check_beam_search, beam_steps())[0] == "pass"
    fails(ex.check_beam_search, beam_steps(extra=1), "the search ran more than max_len")
    fails(ex.check_beam_search, beam_steps(extra=-1), "stopped one step short")
    fails(ex.check_beam_search, beam_steps(best="last"), "the last sequence to finish")


def test_train_step_in_eval_mode_and_the_loss_after_the_update():
    right = solution("09").my_train_step

    def eval_mode(model, *args):
        model.eval()
        return right(model, *args)

    fails(ex.check_train_step, eval_mode, "the model ran in eval mode")

    def after(model, optimizer, src, tgt_in, tgt_out, pad_id, eps):
        right(model, optimizer, src, tgt_in, tgt_out, pad_id, eps)
        with torch.no_grad():
            logits = model(src, tgt_in)
        return F.cross_entropy(
            logits.flatten(0, 1), tgt_out.flatten(), ignore_index=pad_id,
            label_smoothing=eps,
        ).item()  # fmt: skip

    fails(ex.check_train_step, after, "the loss of the model after optimizer.step")


def test_training_loop_tensors_and_a_running_mean():
    right = solution("09").my_train

    def tensors(*args):
        return [torch.tensor(loss) for loss in right(*args)]

    fails(ex.check_training_loop, tensors, "return a list of floats")

    def running(*args):
        losses = right(*args)
        return [sum(losses[: s + 1]) / (s + 1) for s in range(len(losses))]

    fails(ex.check_training_loop, running, "the losses are a running mean")


def test_merge_and_unload_a_layer_merged_already():
    def always(model):  # merge() called on every layer, merged or not
        names = [n for n, m in model.named_modules() if hasattr(m, "lora_A")]
        for name in names:
            model.get_submodule(name).merge()
        return solution("18").merge_and_unload(model)

    fails(ex.check_merge_and_unload, always, "merge only the layers not merged yet")

    def by_hand(model):  # the update added to every weight, merged or not
        names = [n for n, m in model.named_modules() if hasattr(m, "lora_A")]
        for name in names:
            layer = model.get_submodule(name)
            with torch.no_grad():
                layer.base.weight += layer.delta_weight()
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, layer.base)
        return names

    fails(ex.check_merge_and_unload, by_hand, "its update was added again")


def test_sha256_chained_per_chunk_and_reads_of_a_fixed_size():
    import hashlib

    def chained(path, chunk=2**20):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while data := f.read(chunk):
                h = hashlib.sha256(h.hexdigest().encode() + data)
        return h.hexdigest()

    fails(ex.check_sha256, chained, "chained")

    def fixed(path, chunk=2**20):
        return solution("00").sha256_file(path)  # chunk ignored: 1 MiB reads

    fails(ex.check_sha256, fixed, "read in pieces of a size of its own")


def test_sliding_window_from_the_start_and_over_non_pad_tokens():
    def from_start(ids, pad_id, window):
        k = torch.arange(ids.size(1))
        m = (k[None, :] <= k[:, None]) & (k[None, :] < window)
        return (m[None] & (ids != pad_id)[:, None, :])[:, None]

    fails(ex.check_sliding_window_mask, from_start, "counted from the sequence's start")

    def non_pad(ids, pad_id, window):
        keep = ids != pad_id
        n, k = keep.cumsum(1) - 1, torch.arange(ids.size(1))
        m = (k[None, :] <= k[:, None])[None] & (n[:, None, :] > n[:, :, None] - window)
        return (m & keep[:, None, :])[:, None]

    fails(ex.check_sliding_window_mask, non_pad, "counted over the non-<pad> tokens")


def test_corpus_bleu_mean_reference_length_told_from_the_first():
    from transformer_lib.exercises.part2 import bleu_reference

    def as_fn(**wrong):
        return lambda hyps, refs: bleu_reference(list(zip(hyps, refs)), **wrong)

    fails(ex.check_corpus_bleu, as_fn(mean_r=True), "the mean of each sentence's")
    fails(ex.check_corpus_bleu, as_fn(first=("r",)), "each sentence's first reference")


def test_gpt_block_hard_coded_scales_and_qkv_read_as_v_k_q():
    def block(scale=None, order="qkv"):
        class Wrong(solution("12").MyBlock):
            def attn(self, x):
                B, T, C = x.shape
                parts = dict(zip(order, self.qkv(x).chunk(3, dim=-1)))
                q, k, v = (
                    parts[n].view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
                    for n in "qkv"
                )
                y = F.scaled_dot_product_attention(
                    q, k, v, is_causal=True, scale=scale and 1 / scale(self)
                )
                return self.proj(y.transpose(1, 2).reshape(B, T, C))

        return Wrong

    fails(ex.check_gpt_block, block(scale=lambda m: 8.0), r"sqrt\(64\) = 8")
    fails(ex.check_gpt_block, block(lambda m: math.sqrt(m.n_heads)), r"sqrt\(n_heads\)")
    fails(ex.check_gpt_block, block(order="vkq"), "qkv.x. was read as v, k, q")


def test_cosine_by_distance_a_ratio_of_means():
    def ratio(table):
        n, lengths = len(table), table.norm(dim=1)
        dots = table @ table.T
        return torch.stack([
            dots.diagonal(k).mean() / (lengths[: n - k] * lengths[k:]).mean()
            for k in range(n)
        ])  # fmt: skip

    fails(ex.check_cosine_by_distance, ratio, "a ratio of means")


def test_tiled_attention_overlapping_tiles_and_float32_work():
    right = solution("14").my_tiled_attention

    def overlapping(q, k, v, block):
        m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
        ell, out = torch.zeros_like(m), q.new_zeros(q.shape[:-1] + (v.size(-1),))
        for s in range(k.size(-2)):  # a tile starting at every key
            scores = (
                q @ k[..., s : s + block, :].transpose(-2, -1) / math.sqrt(q.size(-1))
            )
            m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
            p, c = (scores - m_new).exp(), (m - m_new).exp()
            ell, out = (
                ell * c + p.sum(-1, keepdim=True),
                out * c + p @ v[..., s : s + block, :],
            )
            m = m_new
        return out / ell  # fmt: skip

    fails(ex.check_tiled_attention, overlapping, "the tiles overlap")

    def in_float32(q, k, v, block):
        return right(q.float(), k.float(), v.float(), block).to(q.dtype)

    fails(ex.check_tiled_attention, in_float32, "float32's 7 digits")


def test_grouped_attention_triu_given_as_the_keys_to_keep():
    def inverted(q, k, v):
        g, T = q.size(1) // k.size(1), q.size(2)
        hide = torch.ones(T, T, dtype=torch.bool).triu(1)
        return F.scaled_dot_product_attention(
            q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), attn_mask=hide
        )

    fails(ex.check_grouped_attention, inverted, "the mask is inverted")


def test_geglu_gelu_after_proj():
    class Outer(solution("16").MyGeGLU):
        def forward(self, x):
            return F.gelu(self.proj(self.gate(x) * self.up(x)))

    fails(ex.check_geglu, Outer, "the GELU went after proj")


def test_pack_pairs_blocks_one_token_too_long():
    right = solution("17").pack_pairs

    def long_blocks(pairs):
        inputs, targets, _ = right(pairs)
        seg = torch.tensor([i for i, (ids, _) in enumerate(pairs) for _ in ids])
        seg = seg[: len(inputs)]
        causal = torch.ones(len(inputs), len(inputs), dtype=torch.bool).tril()
        return inputs, targets, causal & (seg[:, None] == seg[None, :])

    fails(ex.check_pack_pairs, long_blocks, "pairs are one token too long")


def test_beam_search_probabilities_added():
    def added(step, beam, max_len, eos):
        tokens, _ = solution("10").my_beam_search(step, beam, max_len, eos)
        return tokens, sum(
            step(tuple(tokens[:i]))[t].exp().item() for i, t in enumerate(tokens)
        )

    fails(ex.check_beam_search, added, "the sum of the tokens' probabilities")


def test_encoder_layer_mask_given_as_key():
    class Positional(solution("07").MyEncoderLayer):
        def forward(self, x, mask=None):
            x = x + self.self_attn(self.norm1(x), mask)[0]  # mask lands in key
            return x + self.ff(self.norm2(x))

    fails(ex.check_encoder_layer, Positional, "the mask went in as key")


# The ninth blind review: the wrong answers that passed (a transpose kept from
# __init__, exp without the max, a live prefix returned, an all-empty corpus, a float32
# cache, the caller's table or pairs edited, d_model 25, a loss threshold, dropout),
# and the misnamed, raw and bare ones named -----------------------------------------


def test_tied_output_a_transpose_kept_from_init():
    class Stale(nn.Module):
        def __init__(self, embedding):
            super().__init__()
            self.wt = embedding.weight.T  # a view: .double() leaves it behind

        def forward(self, h):
            return h @ self.wt

    fails(ex.check_tied_output, Stale, r"after model.double\(\).*copy of W")


def test_min_p_exp_without_the_max_one_row_and_sorted_positions():
    def exp_only(logits, min_p, generator=None):
        p = logits.exp()
        p = p * (p >= min_p * p.max(-1, keepdim=True).values)
        return torch.multinomial(p, 1, generator=generator).squeeze(-1)

    fails(ex.check_min_p_sampling, exp_only, r"logits \+ 100.*exp\(100\) overflows")

    def one_row(logits, min_p, generator=None):
        p = logits.softmax(-1)
        p = p * (p >= min_p * p.max(-1, keepdim=True).values)
        return torch.multinomial(p[0], len(p), replacement=True, generator=generator)

    fails(ex.check_min_p_sampling, one_row, "row 1's draws follow row 0's")

    def unsorted(logits, min_p, generator=None):
        p = logits.softmax(-1).sort(-1, descending=True).values
        p = p * (p >= min_p * p[:, :1])
        return torch.multinomial(p, 1, generator=generator).squeeze(-1)

    fails(ex.check_min_p_sampling, unsorted, "positions in the sorted order")


def test_beam_search_a_live_prefix_and_summed_probabilities():
    import transformer_lib.exercises.part2 as p2

    def live_too(step, beam, max_len, eos):  # the best of finished and live
        alive, done = [((), 0.0)], []
        for _ in range(max_len):
            grown = sorted(
                ((p + (t,), s + lp) for p, s in alive for t, lp in enumerate(step(p))),
                key=lambda c: -c[1],
            )
            alive = []
            for p, s in grown[:beam]:
                (done if p[-1] == eos else alive).append((p, s))
            if not alive:
                break
        tokens, score = max(done + alive, key=lambda c: c[1])
        return list(tokens), float(score)

    fails(ex.check_beam_search, live_too, "a prefix still live at max_len")

    def log_of_sum(step, beam, max_len, eos):
        tokens, _ = solution("10").my_beam_search(step, beam, max_len, eos)
        probs = [step(tuple(tokens[:i]))[t].exp().item() for i, t in enumerate(tokens)]
        return tokens, math.log(sum(probs))

    fails(ex.check_beam_search, log_of_sum, r"\(the log of\) the sum")
    assert p2.beam_search_reference(p2._toy_step, 2, 4)[0] == [1, 1, 2]


def test_corpus_bleu_empty_hypotheses_and_four_counting_slips():
    right = solution("11").my_corpus_bleu

    def penalty_first(hyps, refs):
        c = sum(map(len, hyps))
        math.exp(1 - 1 / c)  # the brevity penalty before the zero test
        return right(hyps, refs)

    fails(ex.check_corpus_bleu, penalty_first, "every hypothesis empty.*ZeroDivision")
    for slip, message in (
        ({"short": True}, "n-grams are one short"),
        ({"longest_total": True}, "divided by the references' n-grams"),
        ({"distinct": True}, "each distinct n-gram"),
        ({"corpus_r": True}, "r was chosen once for the corpus"),
    ):
        fails(
            ex.check_corpus_bleu,
            lambda h, r, s=slip: ex.bleu_reference(list(zip(h, r)), **s),
            message,
        )


def test_kv_cache_float32_copies_and_a_fixed_buffer():
    class Float32(solution("12").MyKVCache):
        def update(self, k, v):
            return super().update(k.float(), v.float())

    fails(ex.check_kv_cache, Float32, "update returned keys in torch.float32")

    class Fixed(solution("12").MyKVCache):
        def update(self, k, v):
            keys, values = super().update(k, v)
            return keys[:, :, :48], values[:, :, :48]

    fails(ex.check_kv_cache, Fixed, "a buffer of 48 places dropped the rest")


def test_gpt_block_mask_after_softmax_normed_residuals_and_parallel():
    Right = solution("12").MyBlock

    class AfterSoftmax(Right):
        def attn(self, x):
            B, T, C = x.shape
            q, k, v = (
                t.view(B, T, self.n_heads, -1).transpose(1, 2)
                for t in self.qkv(x).chunk(3, -1)
            )
            w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
            y = (w * torch.ones(T, T).tril()) @ v
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    fails(ex.check_gpt_block, AfterSoftmax, "the mask was applied after the softmax")

    class FromNormed(Right):
        def forward(self, x):
            x = self.norm1(x)
            x = self.norm2(x + self.attn(x))
            return x + self.fc_out(F.gelu(self.fc(x), approximate="tanh"))

    fails(ex.check_gpt_block, FromNormed, "each residual starts from the normalised")

    class Parallel(Right):
        def forward(self, x):
            h = F.gelu(self.fc(self.norm2(x)), approximate="tanh")
            return x + self.attn(self.norm1(x)) + self.fc_out(h)

    fails(ex.check_gpt_block, Parallel, "the two sublayers run in parallel")


def test_cosine_by_distance_in_place_one_length_and_an_empty_slice():
    right = solution("13").my_cosine_by_distance

    def in_place(table):
        table /= table.norm(dim=1, keepdim=True)
        return right(table)

    fails(ex.check_cosine_by_distance, in_place, "the caller's table was changed")

    def one_length(table):
        lengths = table.norm(dim=1)
        s = table @ table.T / lengths[:, None] ** 2
        return torch.stack([s.diagonal(k).mean() for k in range(len(table))])

    fails(ex.check_cosine_by_distance, one_length, "one row's length squared")

    def minus_k(table):
        return torch.stack(
            [
                F.cosine_similarity(table[:-k], table[k:], dim=-1).mean()
                for k in range(len(table))
            ]
        )

    fails(ex.check_cosine_by_distance, minus_k, r"table\[:-k\] is table\[:0\]")


def test_geglu_nearest_eight_then_up_to_sixty_four():
    class Round8(solution("16").MyGeGLU):
        def __init__(self, d_model, multiple_of=64):
            super().__init__(d_model, multiple_of)
            n = 8 * round(8 * d_model / 3 / 8)
            f = multiple_of * math.ceil(n / multiple_of)
            self.gate, self.up = (
                nn.Linear(d_model, f, False),
                nn.Linear(d_model, f, False),
            )
            self.proj = nn.Linear(f, d_model, bias=False)

    fails(ex.check_geglu, Round8, r"MyGeGLU\(25\): hidden width 64: .*nearest")


def test_pack_pairs_caller_pairs_tensors_and_first_pair_blocks():
    right = solution("17").pack_pairs

    def pops(pairs):
        for ids, _ in pairs:
            ids.pop()
        return right([(ids + [0], n) for ids, n in pairs])

    fails(ex.check_pack_pairs, pops, "the caller's pairs changed")

    def tensors(pairs):
        inputs, targets, mask = right(pairs)
        return torch.tensor(inputs), torch.tensor(targets), mask

    fails(ex.check_pack_pairs, tensors, "inputs is a Tensor")

    def first_length(pairs):
        inputs, targets, _ = right(pairs)
        t, n = torch.arange(len(inputs)), len(pairs[0][0]) - 1
        same = (t[:, None] // n) == (t[None, :] // n)
        return inputs, targets, same & same.tril()

    fails(ex.check_pack_pairs, first_length, "blocks all have the first pair's length")


def test_training_loop_threshold_counter_and_rounded_step_loss():
    right = solution("09").my_train

    def threshold(model, optimizer, batches, lr_at, train_step):
        def step(*a):
            loss = train_step(*a)
            return math.nan if loss > 1e6 else loss

        return right(model, optimizer, batches, lr_at, step)

    fails(ex.check_training_loop, threshold, "a finite loss of 1e\\+30")

    count = [0]

    def global_count(model, optimizer, batches, lr_at, train_step):
        losses = []
        model.train()
        for batch in batches:
            for g in optimizer.param_groups:
                g["lr"] = lr_at(count[0])
            loss = train_step(model, optimizer, batch)
            if not math.isfinite(loss):
                raise ValueError(f"step {count[0]}: not finite")
            losses.append(loss)
            count[0] += 1
        return losses

    fails(ex.check_training_loop, global_count, "went on from an earlier call")

    def rounded(*args):
        return round(solution("09").my_train_step(*args), 2)

    fails(ex.check_train_step, rounded, "the loss was rounded")


def test_layers_dropout_final_norm_and_cross_residual():
    from transformer_lib.encoder import PositionwiseFeedForward

    class Dropout(solution("07").MyEncoderLayer):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__(d_model, n_heads, d_ff)
            self.ff = PositionwiseFeedForward(d_model, d_ff, dropout=0.5)

    fails(ex.check_encoder_layer, Dropout, r"training mode.*\(ff.dropout\)")

    class FinalNorm(solution("07").MyEncoderLayer):
        def forward(self, x, mask=None):
            y = super().forward(x, mask)
            return F.layer_norm(y, y.shape[-1:])

    fails(ex.check_encoder_layer, FinalNorm, "a LayerNorm was applied to the layer's")

    class CrossFromNorm(solution("08").MyDecoderLayer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
            h = self.norm2(x)
            x = h + self.cross_attn(h, memory, memory, mask=memory_mask)[0]
            return x + self.ff(self.norm3(x))

    fails(ex.check_decoder_layer, CrossFromNorm, "residual starts from norm2")

    class DecoderDropout(solution("08").MyDecoderLayer):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__(d_model, n_heads, d_ff)
            self.drop = nn.Dropout(0.5)

        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            y = super().forward(x, memory, tgt_mask, memory_mask)
            return x + self.drop(y - x)

    fails(ex.check_decoder_layer, DecoderDropout, r"training mode.*\(drop\)")


def test_multi_head_attention_truthy_defaults_and_an_unsqueezed_mask():
    Right = solution("05").MyMultiHeadAttention

    class Truthy(Right):
        def forward(self, query, key=None, value=None, mask=None):
            key = key or query
            return super().forward(query, key, value or key, mask)

    fails(ex.check_multi_head_attention, Truthy, r"`key = key or query` asks a tensor")

    class Unsqueezed(Right):
        def forward(self, query, key=None, value=None, mask=None):
            mask = None if mask is None else mask.unsqueeze(1)
            return super().forward(query, key, value, mask)

    fails(ex.check_multi_head_attention, Unsqueezed, r"mask.unsqueeze\(1\)")


def test_tiled_attention_keepdim_the_blocks_max_and_p_with_the_old_max():
    def tiled(q, k, v, block, keepdim=True, own_max=False, old_max=False):
        m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
        m = m if keepdim else m[..., 0]
        ell, out = torch.zeros_like(m), q.new_zeros(q.shape[:-1] + (v.size(-1),))
        for s in range(0, k.size(-2), block):
            scores = q @ k[..., s : s + block, :].transpose(-2, -1) / math.sqrt(8)
            top = scores.amax(-1, keepdim=keepdim)
            m_new = top if own_max else torch.maximum(m, top)
            base = torch.where(m.isneginf(), m_new, m) if old_max else m_new
            p = (scores - base).exp()
            ell = ell * (m - m_new).exp() + p.sum(-1, keepdim=True)
            out = out * (m - m_new).exp() + p @ v[..., s : s + block, :]
            m = m_new
        return out / ell

    fails(ex.check_tiled_attention, lambda *a: tiled(*a, keepdim=False), "keepdim")
    fails(ex.check_tiled_attention, lambda *a: tiled(*a, own_max=True), "block's own")
    fails(ex.check_tiled_attention, lambda *a: tiled(*a, old_max=True), "the old max")


def test_grouped_attention_repeated_by_h_kv():
    def by_h_kv(q, k, v):
        n = k.size(1)
        k, v = k.repeat_interleave(n, 1), v.repeat_interleave(n, 1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    fails(ex.check_grouped_attention, by_h_kv, "repeated by H_kv = 4, giving 16")


def test_sliding_window_two_too_wide_token_zero_and_a_padding_suffix():
    right = solution("06").my_sliding_window_mask
    fails(
        ex.check_sliding_window_mask,
        lambda ids, pad_id, w: right(ids, pad_id, w + 2),
        "off by two",
    )
    fails(
        ex.check_sliding_window_mask,
        lambda ids, pad_id, w: right(ids, pad_id, w) & (ids != 0)[:, None, None],
        "token 0 was masked as well as <pad>",
    )

    def suffix(ids, pad_id, window):
        pads = ids == pad_id
        first = torch.where(pads.any(1), pads.int().argmax(1), ids.size(1))
        before = torch.arange(ids.size(1))[None, :] < first[:, None]
        return right(torch.ones_like(ids), 0, window) & before[:, None, None]

    fails(ex.check_sliding_window_mask, suffix, "every key from the first <pad> on")


def test_rope_second_coordinate_from_the_rotated_first():
    def sequential(x, base=10000.0):
        T, C = x.shape[-2:]
        angle = torch.arange(T, dtype=x.dtype)[:, None] * base ** (
            -torch.arange(0, C, 2, dtype=x.dtype) / C
        )
        y = x.clone()
        y[..., 0::2] = x[..., 0::2] * angle.cos() - x[..., 1::2] * angle.sin()
        y[..., 1::2] = y[..., 0::2] * angle.sin() + x[..., 1::2] * angle.cos()
        return y

    fails(ex.check_rope, sequential, r"x'\[2i\+1\] was computed from the new")


def test_three_unlikely_slips_named_latin1_transposed_update_trunc_division():
    import hashlib

    def latin1(path, chunk=1 << 20):
        h = hashlib.sha256()
        with open(path, encoding="latin-1") as f:
            while text := f.read(chunk):
                h.update(text.encode())
        return h.hexdigest()

    fails(ex.check_sha256, latin1, "the file was read as text")

    def transposed(model):
        names = [name for name, m in model.named_modules() if hasattr(m, "lora_A")]
        for name in names:
            layer = model.get_submodule(name)
            with torch.no_grad():
                d = layer.delta_weight()
                square = d.size(0) == d.size(1)
                layer.base.weight += d.T if square and not layer.merged else 0 * d
                if not square and not layer.merged:
                    layer.base.weight += d
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, layer.base)
        return names

    fails(ex.check_merge_and_unload, transposed, r"\(B A\)\^T, the update transposed")

    def trunc(pc, pr, rc, rr, n, beta, alpha):
        dpo = -F.logsigmoid(beta * ((pc - rc) - (pr - rr)))
        return (dpo - alpha * torch.div(pc, n, rounding_mode="trunc")).mean()

    fails(ex.check_dpo_nll_loss, trunc, "divided as integers, rounded toward 0")


# Read 8 (an expert reader) tried a BPE encoder that merges the pair of smallest ids,
# min(pairs), and was told it merged the leftmost pair: on the first text the two agree.
def test_bpe_encode_smallest_pair_ids_first_is_named_not_leftmost():
    fails(
        ex.check_bpe_encode,
        lambda t, m: ex.part1._bpe_encode_variant(t, m, "smallest"),
        r"merges the pair of smallest ids first",
    )
    fails(
        ex.check_bpe_encode,
        lambda t, m: ex.part1._bpe_encode_variant(t, m, "leftmost"),
        r"merges the leftmost",
    )


# The tenth blind review: the wrong answers that passed (dropout kept in training mode,
# stale gradients, a BLEU that sorts the caller's lists or counts -1 n-grams, a
# 4-D-only tiled attention, a fixed-size KV cache) and the answers it misnamed.
def _dropped(cls):
    """cls with dropout 0.1 on its output in training mode."""

    class Dropped(cls):
        def forward(self, *args, **kwargs):
            return F.dropout(super().forward(*args, **kwargs), 0.1, self.training)

    return Dropped


def test_review10_dropout_in_training_mode_is_refused():
    for nb, name, check in (
        ("05", "MyMultiHeadAttention", ex.check_multi_head_attention),
        ("12", "MyBlock", ex.check_gpt_block),
        ("16", "MyGeGLU", ex.check_geglu),
    ):
        fails(check, _dropped(getattr(solution(nb), name)), "in training mode")


def test_review10_kv_cache_fresh_length_and_no_fixed_capacity():
    base = solution("12").MyKVCache

    class Lazy(base):
        def __init__(self):
            self.keys = self.values = None

        @property
        def length(self):
            return self.keys.size(2)

    fails(ex.check_kv_cache, Lazy, r"a fresh cache's \.length raised")

    class Fixed:
        def __init__(self):
            self.length, self.k = 0, None

        def update(self, k, v):
            if self.k is None:
                self.k = k.new_zeros(*k.shape[:2], 64, k.size(3))
                self.v = v.new_zeros(*v.shape[:2], 64, v.size(3))
            t = k.size(2)
            self.k[:, :, self.length : self.length + t] = k
            self.v[:, :, self.length : self.length + t] = v
            self.length += t
            return self.k[:, :, : self.length], self.v[:, :, : self.length]

    fails(ex.check_kv_cache, Fixed, "no fixed capacity")


def test_review10_train_step_stale_gradients_no_grad_and_transposed_targets():
    def late_zero(model, opt, src, tgt_in, tgt_out, pad_id, eps):
        loss = F.cross_entropy(
            model(src, tgt_in).flatten(0, 1),
            tgt_out.flatten(),
            ignore_index=pad_id,
            label_smoothing=eps,
        )
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    fails(ex.check_train_step, late_zero, r"gradients already in \.grad")

    def no_grad(model, opt, src, tgt_in, tgt_out, pad_id, eps):
        opt.zero_grad()
        with torch.no_grad():
            logits = model(src, tgt_in)
        loss = F.cross_entropy(
            logits.flatten(0, 1).requires_grad_(),
            tgt_out.flatten(),
            ignore_index=pad_id,
            label_smoothing=eps,
        )
        loss.backward()
        opt.step()
        return loss.item()

    fails(ex.check_train_step, no_grad, r"under torch\.no_grad\(\)")

    def transposed(model, opt, src, tgt_in, tgt_out, pad_id, eps):
        opt.zero_grad()
        loss = F.cross_entropy(
            model(src, tgt_in).flatten(0, 1),
            tgt_out.T.flatten(),
            ignore_index=pad_id,
            label_smoothing=eps,
        )
        loss.backward()
        opt.step()
        return loss.item()

    fails(ex.check_train_step, transposed, "flattened in another order")


def test_review10_bleu_untouched_clamped_and_not_rounded():
    right = solution("11").my_corpus_bleu

    def sorts(hyps, refs):
        for rs in refs:
            rs.sort(key=len, reverse=True)
        return right(hyps, refs)

    fails(ex.check_corpus_bleu, sorts, "the caller's hypotheses or references changed")
    fails(ex.check_corpus_bleu, lambda h, r: round(right(h, r), 1), "was rounded")

    def unclamped(hyps, refs):  # len(h) - n + 1 n-grams, -1 for 2 tokens and n = 4
        def grams(t, n):
            return Counter(tuple(t[i : i + n]) for i in range(len(t) - n + 1))

        match, total, c, r = [0] * 4, [0] * 4, 0, 0
        for h, rs in zip(hyps, refs):
            c += len(h)
            r += min((abs(len(x) - len(h)), len(x)) for x in rs)[1]
            for n in range(1, 5):
                most = Counter()
                for x in rs:
                    most |= grams(x, n)
                match[n - 1] += sum((grams(h, n) & most).values())
                total[n - 1] += len(h) - n + 1
        if min(match) == 0:
            return 0.0
        bp = 1.0 if c > r else math.exp(1 - r / c)
        return (
            100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(match, total)) / 4)
        )

    fails(ex.check_corpus_bleu, unclamped, r"max\(L - n \+ 1, 0\)")


def test_review10_tiled_attention_takes_any_leading_dims():
    right = solution("14").my_tiled_attention

    def four_d(q, k, v, block):
        B, H, T, D = q.shape
        return right(q, k, v, block)

    fails(ex.check_tiled_attention, four_d, r"not B, H, T, D = q\.shape")


def test_review10_tied_output_stub_says_no_linear():
    assert "No nn.Linear" in stubs("02")["MyTiedOutput"].__doc__


def test_review10_alibi_in_place_swapped_and_slope_slips_named():
    right = solution("06").my_alibi_attention

    def in_place(q, k, v, slopes):
        q *= 2  # the caller's q changed, the result right
        return right(q / 2, k, v, slopes)

    fails(ex.check_alibi_attention, in_place, "q was changed in place")
    fails(
        ex.check_alibi_attention,
        lambda q, k, v, s: right(q, k, v, s)[::-1],
        r"came back as \(weights, output\)",
    )
    for wrong, message in (
        (lambda s: s * 0, "no penalty at all"),
        (lambda s: s.mean().expand(len(s)), "the slopes' mean"),
        (lambda s: s.flip(0), "the slopes were reversed"),
    ):
        fails(
            ex.check_alibi_attention,
            lambda q, k, v, s, wrong=wrong: right(q, k, v, wrong(s)),
            message,
        )


def test_review10_weights_added_and_mask_as_value_named():
    class AddsWeights(solution("07").MyEncoderLayer):
        def forward(self, x, mask=None):
            x = x + self.self_attn(self.norm1(x), mask=mask)[1]
            return x + self.ff(self.norm2(x))

    fails(ex.check_encoder_layer, AddsWeights, r"\[1\] is the weights")

    class MaskAsValue(solution("08").MyDecoderLayer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
            x = x + self.cross_attn(self.norm2(x), memory, memory_mask)[0]
            return x + self.ff(self.norm3(x))

    fails(ex.check_decoder_layer, MaskAsValue, "the mask went in as value")


def test_review10_min_p_as_top_p_is_named():
    def top_p(logits, min_p, generator):
        probs = logits.softmax(-1)
        sorted_p, order = probs.sort(-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p >= min_p
        sorted_p = sorted_p.masked_fill(drop, 0)
        pick = torch.multinomial(sorted_p, 1, generator=generator)
        return order.gather(-1, pick)[:, 0]

    fails(ex.check_min_p_sampling, top_p, "the top-p set")


def test_review10_sha256_text_ignore_and_hash_of_hashes_named():
    def text_ignore(path, chunk=2**20):
        h = hashlib.sha256()
        with open(path, encoding="utf-8", errors="ignore") as f:
            while text := f.read(chunk):
                h.update(text.encode())
        return h.hexdigest()

    fails(ex.check_sha256, text_ignore, "the file was read as text")

    def of_hashes(path, chunk=2**20):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while b := f.read(chunk):
                h.update(hashlib.sha256(b).digest())
        return h.hexdigest()

    fails(ex.check_sha256, of_hashes, "a hash of hashes")


def _beam_slip(step, beam, max_len, eos, per_prefix=False, last=False):
    """Beam search with one of two slips: each prefix's best tokens kept in the order
    they were made, or the last finished sequence returned."""
    live, done = [((), 0.0)], []
    for _ in range(max_len):
        grown = []
        for prefix, score in live:
            lp = step(prefix).tolist()
            order = sorted(range(len(lp)), key=lambda t: -lp[t])
            grown += [(prefix + (t,), score + lp[t]) for t in order[:beam]]
        if not per_prefix:
            grown.sort(key=lambda c: -c[1])
        live = [c for c in grown[:beam] if c[0][-1] != eos]
        done += [c for c in grown[:beam] if c[0][-1] == eos]
        if not live:
            break
    best = done[-1] if last else max(done, key=lambda c: c[1])
    return list(best[0]), best[1]


def test_review10_beam_insertion_order_and_last_finished_named():
    fails(
        ex.check_beam_search,
        lambda *a: _beam_slip(*a, per_prefix=True),
        "in the order they were made",
    )
    fails(
        ex.check_beam_search,
        lambda *a: _beam_slip(*a, last=True),
        r"was reached \(step\(\) saw \[1, 1\]\) but not returned",
    )
    assert ex.outcome(ex.check_beam_search, _beam_slip)[0] == "pass"


def test_review10_mha_returning_output_and_weights_still_passes():
    class Pair(solution("05").MyMultiHeadAttention):  # as the library's layer returns
        def forward(self, *args, **kwargs):
            return super().forward(*args, **kwargs), None

    assert ex.outcome(ex.check_multi_head_attention, Pair)[0] == "pass"


def test_review10_geglu_negated_gate_named():
    class Negated(solution("16").MyGeGLU):
        def forward(self, x):
            return self.proj(F.gelu(-self.gate(x)) * self.up(x))

    fails(ex.check_geglu, Negated, "the gate negated")


def test_review10_dpo_beta_on_the_nll_named():
    def beta_on_nll(pc, pr, rc, rr, n, beta, alpha):
        dpo = -F.logsigmoid(beta * ((pc - rc) - (pr - rr)))
        return (dpo - alpha * beta * pc / n).mean()

    fails(ex.check_dpo_nll_loss, beta_on_nll, "beta scaled the NLL too")


# The tenth blind review, leftovers: bare diffs named (07, 08, 12, 13, 14, 18), the
# contrived passes closed (05 key=value, 08 tgt_mask for a missing memory_mask, 12 a
# mask of the first call's size), a merge that thaws the model refused, and a beam
# pruned by the mean per token accepted (it orders candidates of one length as the
# total does).
def test_review10_encoder_ff_on_attention_output_named():
    class FFOnA(solution("07").MyEncoderLayer):
        def forward(self, x, mask=None):
            a = self.self_attn(self.norm1(x), mask=mask)[0]
            return x + a + self.ff(self.norm2(a))

    fails(ex.check_encoder_layer, FFOnA, "read the attention's output, not the res")


def test_review10_encoder_d_ff_ignored_named():
    from transformer_lib.encoder import PositionwiseFeedForward

    class Wide(solution("07").MyEncoderLayer):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__(d_model, n_heads, d_ff)
            self.ff = PositionwiseFeedForward(d_model, 4 * d_model)

    fails(ex.check_encoder_layer, Wide, "hidden width is 64, not d_ff=32")


def test_review10_decoder_cross_residual_from_x_named():
    class FromX(solution("08").MyDecoderLayer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            h = x + self.self_attn(self.norm1(x), mask=tgt_mask)[0]
            n = self.norm2(h)
            h = x + self.cross_attn(n, memory, memory, mask=memory_mask)[0]
            return h + self.ff(self.norm3(h))

    fails(ex.check_decoder_layer, FromX, "residual starts from the layer's input x")


def test_review10_decoder_raw_self_keys_named():
    class Raw(solution("08").MyDecoderLayer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            x = x + self.self_attn(self.norm1(x), x, x, mask=tgt_mask)[0]
            n = self.norm2(x)
            x = x + self.cross_attn(n, memory, memory, mask=memory_mask)[0]
            return x + self.ff(self.norm3(x))

    fails(ex.check_decoder_layer, Raw, "self-attention's keys and values came from x")


def test_review10_decoder_tgt_mask_for_missing_memory_mask_refused():
    class Fallback(solution("08").MyDecoderLayer):
        def forward(self, x, memory, tgt_mask=None, memory_mask=None):
            mm = tgt_mask if memory_mask is None else memory_mask
            return super().forward(x, memory, tgt_mask, mm)

    fails(ex.check_decoder_layer, Fallback, "with memory_mask=None, cross-attention")


def test_review10_mha_key_defaults_to_query_even_with_value():
    class KeyFromValue(solution("05").MyMultiHeadAttention):
        def forward(self, query, key=None, value=None, mask=None):
            if key is None and value is not None:
                key = value
            return super().forward(query, key, value, mask)

    fails(ex.check_multi_head_attention, KeyFromValue, "key=None must default to query")


def test_review10_gpt_block_strided_heads_named():
    class Strided(solution("12").MyBlock):
        def attn(self, x):
            B, T, C = x.shape
            H = self.n_heads
            q, k, v = (
                t.view(B, T, C // H, H).permute(0, 3, 1, 2)
                for t in self.qkv(x).chunk(3, dim=-1)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.permute(0, 2, 3, 1).reshape(B, T, C))

    fails(ex.check_gpt_block, Strided, r"split with view\(B, T, D, H\)")


def test_review10_gpt_block_mask_of_the_first_size_refused():
    class Fixed(solution("12").MyBlock):
        def attn(self, x):
            B, T, C = x.shape
            H = self.n_heads
            q, k, v = (
                t.view(B, T, H, C // H).transpose(1, 2)
                for t in self.qkv(x).chunk(3, dim=-1)
            )
            keep = torch.ones(6, 6, dtype=torch.bool).tril()[:T, :T]  # T = 6 at most
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    fails(ex.check_gpt_block, Fixed, "MyBlock on 40 tokens .*causal mask must fit")


def test_review10_cosine_pairs_off_by_one_and_mean_norm_named():
    def short(table):
        u, n = F.normalize(table, dim=1), len(table)
        return torch.stack(
            [
                (u[: n - k - 1] * u[k : n - 1]).sum(-1).mean()
                if n - k - 1 > 0
                else (u[0] * u[-1]).sum()
                for k in range(n)
            ]
        )

    def by_mean_norm(table):
        u, n = table / table.norm(dim=1).mean(), len(table)
        return torch.stack([(u[: n - k] * u[k:]).sum(-1).mean() for k in range(n)])

    fails(ex.check_cosine_by_distance, short, "each distance lost its last pair")
    fails(ex.check_cosine_by_distance, by_mean_norm, "divided by their mean length")


def test_review10_tiled_attention_normalised_every_block_named():
    def renormed(q, k, v, block):
        m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
        ell = torch.zeros_like(m)
        out = q.new_zeros(q.shape[:-1] + (v.size(-1),))
        for s in range(0, k.size(-2), block):
            scores = q @ k[..., s : s + block, :].transpose(-2, -1) / q.size(-1) ** 0.5
            m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
            p, c = (scores - m_new).exp(), (m - m_new).exp()
            ell = ell * c + p.sum(-1, keepdim=True)
            out = out * c + p @ v[..., s : s + block, :]
            m, out, ell = m_new, out / ell, torch.ones_like(ell)
        return out / ell

    fails(ex.check_tiled_attention, renormed, "out was divided by ell at every block")


def test_review10_merge_names_with_base_and_a_thawed_model_named():
    merge = solution("18").merge_and_unload
    fails(
        ex.check_merge_and_unload,
        lambda model: [f"{n}.base" for n in merge(model)],
        r"'\.base' is the LoRALinear's own child",
    )

    def thawed(model):
        names = merge(model)
        model.requires_grad_(True)
        return names

    fails(ex.check_merge_and_unload, thawed, r"require grad after the merge.*\(True\)")

    def new_parameter(model):
        names = [n for n, m in model.named_modules() if hasattr(m, "lora_A")]
        for name in names:
            layer = model.get_submodule(name)
            if not layer.merged:
                w = layer.base.weight + layer.delta_weight()
                layer.base.weight = nn.Parameter(w.detach())
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, layer.base)
        return names

    fails(ex.check_merge_and_unload, new_parameter, "nn.Parameter requires grad")


def test_review10_beam_pruned_by_mean_passes_final_pick_by_mean_named():
    def beam_by(step, beam, max_len, eos, prune_mean=True, pick_mean=False):
        live, done = [((), 0.0)], []
        for _ in range(max_len):
            grown = [
                (p + (t,), s + lp)
                for p, s in live
                for t, lp in enumerate(step(p).tolist())
            ]
            # every candidate of a step has the same length: the mean orders them
            # as the total does
            grown.sort(key=lambda c: -c[1] / len(c[0]) if prune_mean else -c[1])
            live = [c for c in grown[:beam] if c[0][-1] != eos]
            done += [c for c in grown[:beam] if c[0][-1] == eos]
            if not live:
                break
        best = max(done, key=lambda c: c[1] / len(c[0]) if pick_mean else c[1])
        return list(best[0]), best[1]

    assert ex.outcome(ex.check_beam_search, beam_by)[0] == "pass"
    fails(
        ex.check_beam_search,
        lambda *a: beam_by(*a, pick_mean=True),
        "the best mean log-prob per token",
    )
