"""The seventh blind review's wrong answers to the build-its of notebooks 12-19
(issue 34): each checker names the mistake, in one line."""

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from exercise_helpers import fails, solution
from torch import nn

from transformer_lib import exercises as ex

ROOT = Path(__file__).resolve().parent.parent


# 12 · MyBlock -------------------------------------------------------------------------


def block_with(split=False, scale=None, keep=None, fill=-math.inf, mlp=None):
    """notebook 12's MyBlock with one slip: the heads split with a plain reshape, the
    scores scaled by `scale`, keep(T) the mask of the keys kept, the hidden scores
    set to `fill`, mlp(block, h) the MLP."""
    Right = solution("12").MyBlock

    class Wrong(Right):
        def attn(self, x):
            B, T, C = x.shape
            H, D = self.n_heads, C // self.n_heads
            q, k, v = self.qkv(x).chunk(3, -1)
            if split:
                q, k, v = (t.reshape(B, H, T, D) for t in (q, k, v))
            else:
                q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
            s = q @ k.transpose(-2, -1) / (math.sqrt(D) if scale is None else scale)
            kept = (keep or (lambda n: torch.ones(n, n).tril().bool()))(T)
            w = s.masked_fill(~kept, fill).softmax(-1).nan_to_num(0.0)
            return self.proj((w @ v).transpose(1, 2).reshape(B, T, C))

        def forward(self, x):
            if mlp is None:
                return super().forward(x)
            x = x + self.attn(self.norm1(x))
            return x + mlp(self, self.norm2(x))

    return Wrong


def test_block_heads_split_with_a_plain_reshape():
    fails(ex.check_gpt_block, block_with(split=True), r"split with a plain reshape")


def test_block_scores_not_scaled():
    fails(ex.check_gpt_block, block_with(scale=1.0), r"not divided by sqrt\(d_head\)")


def test_block_mask_hides_the_diagonal():
    diag = "the mask hides the diagonal too"
    strict = block_with(keep=lambda n: ~torch.ones(n, n).triu().bool())
    fails(ex.check_gpt_block, strict, diag)  # triu(0) hidden: row 0 NaN, then 0
    fails(
        ex.check_gpt_block,
        block_with(keep=lambda n: ~torch.ones(n, n).triu().bool(), fill=-1e9),
        diag,
    )
    inverted = block_with(keep=lambda n: torch.ones(n, n).triu().bool())
    fails(ex.check_gpt_block, inverted, "the mask is inverted")
    fails(ex.check_gpt_block, block_with(fill=0.0), "set to 0, not -inf")


def test_block_gelu_misplaced_or_missing():
    def after(m, h):
        return F.gelu(m.fc_out(m.fc(h)), approximate="tanh")

    fails(ex.check_gpt_block, block_with(mlp=after), "GELU was applied after fc_out")
    fails(
        ex.check_gpt_block,
        block_with(mlp=lambda m, h: F.gelu(m.fc_out(m.fc(h)))),
        "after fc_out",
    )
    fails(
        ex.check_gpt_block,
        block_with(mlp=lambda m, h: m.fc_out(m.fc(h))),
        "the MLP has no activation",
    )
    assert ex.outcome(ex.check_gpt_block, block_with())[0] == "pass"


# 15 · grouped-query attention ---------------------------------------------------------


def grouped_with(repeat="kv", scale=None, keep=None, mean_queries=False):
    """A grouped attention with one slip: only the tensors in `repeat` repeated, the
    scores divided by `scale`, keep(T) the keys kept, the group's queries averaged."""

    def fn(q, k, v):
        B, H, T, D = q.shape
        g = H // k.size(1)
        if mean_queries:
            q = q.view(B, k.size(1), g, T, D).mean(2)
        else:
            k = k.repeat_interleave(g, 1) if "k" in repeat else k
            v = v.repeat_interleave(g, 1) if "v" in repeat else v
        s = q @ k.transpose(-2, -1) / (math.sqrt(D) if scale is None else scale(D, g))
        kept = (keep or (lambda n: torch.ones(n, n).tril().bool()))(T)
        y = s.masked_fill(~kept, -math.inf).softmax(-1).nan_to_num(0.0) @ v
        return y.repeat_interleave(g, 1) if mean_queries else y

    return fn


def test_grouped_one_of_k_and_v_not_repeated():
    check = ex.check_grouped_attention
    assert ex.outcome(check, grouped_with())[0] == "pass"
    fails(check, grouped_with(repeat="k"), r"H_kv=2: .*: k was repeated, v was not")
    fails(check, grouped_with(repeat="v"), r"H_kv=2: .*: v was repeated, k was not")


def test_grouped_scale_other_than_sqrt_d():
    check = ex.check_grouped_attention
    by_group = grouped_with(scale=lambda D, g: math.sqrt(D * g))
    fails(
        check, by_group, r"H_kv=2: .*divided by sqrt\(D \* H / H_kv\) = sqrt\(8 \* 2\)"
    )
    fails(check, grouped_with(scale=lambda D, g: 3.0), r"divided by sqrt\(9\), not by")
    fails(check, grouped_with(scale=lambda D, g: 1.0), "not divided by sqrt")


def test_grouped_diagonal_hidden_and_queries_averaged():
    check = ex.check_grouped_attention
    strict = grouped_with(keep=lambda n: ~torch.ones(n, n).triu().bool())
    fails(check, strict, "the mask hides the diagonal too")
    fails(check, grouped_with(mean_queries=True), "query heads of each group were av")


# 16 · GeGLU ---------------------------------------------------------------------------


def geglu_with(width=None, hidden=None, residual=False):
    """notebook 16's MyGeGLU with width(d_model) its hidden width, hidden(g, u) its
    hidden activation from gate(x) and up(x), or x added to its output."""
    Right = solution("16").MyGeGLU

    class Wrong(Right):
        def __init__(self, d_model, multiple_of=64):
            super().__init__(d_model, multiple_of)
            if width is not None:
                n = width(d_model)
                self.gate = nn.Linear(d_model, n, bias=False)
                self.up = nn.Linear(d_model, n, bias=False)
                self.proj = nn.Linear(n, d_model, bias=False)

        def forward(self, x):
            if hidden is None:
                return super().forward(x) + (x if residual else 0)
            return self.proj(hidden(self.gate(x), self.up(x)))

    return Wrong


def test_geglu_widths_named_by_their_rule():
    check = ex.check_geglu
    assert ex.outcome(check, geglu_with())[0] == "pass"
    for rule, message in (
        (
            lambda d: 64 * math.ceil(2 * d / 3 / 64),
            r"\(40\): hidden width 64: 2/3 of d_",
        ),
        (lambda d: 64 * math.ceil(4 * d / 3 / 64), r"\(40\): .*: 4 \* d_model / 3: "),
        (lambda d: 64 * (8 * d // 3 // 64), r"\(40\): hidden width 64: rounded down"),
        (lambda d: 64 * round(8 * d / 3 / 64), r"\(50\): .*nearest multiple of 64"),
        (lambda d: (8 * d // 3 // 64 + 1) * 64, r"\(24\): .*\(n // 64 \+ 1\) \* 64"),
        (lambda d: 64 * math.ceil(4 * d / 64), r"\(24\): hidden width 128: 4 \* d_m"),
        (lambda d: int(2 * d / 3), r"\(24\): hidden width 16: 2/3 of d_model"),
        (lambda d: 8 * math.ceil(8 * d / 3 / 8), "a multiple of 8"),
        (lambda d: 100, r"\(24\): hidden width 100: expected 64 \* ceil"),
    ):
        fails(check, geglu_with(width=rule), message)


def test_geglu_forward_mistakes():
    check = ex.check_geglu
    for hidden, message in (
        (lambda g, u: F.gelu(u), "gate\\(x\\) is missing"),
        (lambda g, u: F.gelu(g) * F.gelu(u), "the GELU went on both branches"),
        (lambda g, u: F.relu(g) * u, "the gate uses ReLU"),
        (lambda g, u: F.gelu(g) + u, "the branches were added"),
        (lambda g, u: torch.sigmoid(g) * u, "the gate uses a sigmoid"),
    ):
        fails(check, geglu_with(hidden=hidden), message)
    fails(check, geglu_with(residual=True), "x was added to the output")


# 17 · pack_pairs ----------------------------------------------------------------------


def pack_with(fill=-100, diagonal=0, additive=False):
    """A pack_pairs whose prompt targets hold `fill`, whose blocks are
    tril(diagonal), or whose mask is additive (0 and -inf)."""

    def fn(pairs):
        xs, ys, blocks = [], [], []
        for ids, n in pairs:
            xs += ids[:-1]
            ys += [fill] * (n - 1) + ids[n:]
            blocks.append(torch.ones(len(ids) - 1, len(ids) - 1).tril(diagonal))
        mask = torch.block_diag(*blocks).bool()
        if additive:
            return xs, ys, torch.zeros(mask.shape).masked_fill(~mask, -math.inf)
        return xs, ys, mask

    return fn


def test_pack_pairs_mask_dtype_targets_and_diagonal():
    check = ex.check_pack_pairs
    assert ex.outcome(check, pack_with())[0] == "pass"
    fails(check, pack_with(additive=True), "an additive one .*a bool mask, True = may")
    fails(
        check, pack_with(fill=-1), r"prompt's targets are -1, expected -100: .*ignore_"
    )
    fails(check, pack_with(fill=None), "prompt's targets are None, expected -100")
    fails(check, pack_with(diagonal=-1), "the attention mask hides the diagonal")

    def sink(pairs):  # every query also sees position 0, the first pair's <bos>
        x, y, mask = pack_with()(pairs)
        return x, y, mask | (torch.arange(len(x)) == 0)

    fails(check, sink, r"lets query 6 attend key 0, of another pair")


# 19 · DPO with an NLL term ------------------------------------------------------------


def dpo_with(nll=None, weight=None, clamp=None):
    """A dpo_nll_loss whose NLL is nll(pc, rc, n), whose loss is weight(dpo, nll,
    alpha), or whose scaled margin is clamped to [-clamp, clamp]."""

    def fn(pc, pr, rc, rr, n, beta, alpha):
        z = beta * ((pc - rc) - (pr - rr))
        if clamp is not None:
            dpo = -torch.log(torch.sigmoid(z.clamp(-clamp, clamp)))
        else:
            dpo = -F.logsigmoid(z)
        per_token = -pc / n if nll is None else nll(pc, rc, n)
        if weight is not None:
            return weight(dpo, per_token, alpha).mean()
        return (dpo + alpha * per_token).mean()

    return fn


def test_dpo_nll_alpha_nll_and_margin_mistakes():
    check = ex.check_dpo_nll_loss
    assert ex.outcome(check, dpo_with())[0] == "pass"
    fails(
        check, dpo_with(weight=lambda d, nll, a: d + nll), "the NLL term has weight 1"
    )
    fails(
        check,
        dpo_with(weight=lambda d, nll, a: a * (d + nll)),
        "alpha multiplies the whole loss",
    )
    fails(check, dpo_with(nll=lambda pc, rc, n: -rc / n), "the NLL is of ref_chosen")
    fails(
        check,
        dpo_with(nll=lambda pc, rc, n: -pc / (n + 1)),
        r"divided by chosen_tokens \+ 1",
    )
    fails(
        check,
        dpo_with(clamp=50.0),
        r"margin of -2000 the loss is 110, expected 2060: .* clamped to -50",
    )


# 14 · attention in tiles --------------------------------------------------------------


def tiled_with(skip_last=False, inverted=False, dtype=None, out_width_of_q=False):
    """An online softmax with one slip: the last block skipped (range(0, T_k - block,
    block)), the correction exp(m_new - m_old) after the first block, the output
    cast to `dtype`, or out made with q's width."""

    def fn(q, k, v, block):
        m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
        ell = torch.zeros_like(m)
        width = q.size(-1) if out_width_of_q else v.size(-1)
        out = q.new_zeros(*q.shape[:-1], width)
        stop = k.size(-2) - block if skip_last else k.size(-2)
        for s in range(0, stop, block):
            scores = (
                q @ k[..., s : s + block, :].transpose(-2, -1) / math.sqrt(q.size(-1))
            )
            m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
            factor = (m_new - m if inverted and s else m - m_new).exp()
            p = (scores - m_new).exp()
            ell = factor * ell + p.sum(-1, keepdim=True)
            out = factor * out + p @ v[..., s : s + block, :]
            m = m_new
        out = out / ell
        return out if dtype is None else out.to(dtype)

    return fn


def test_tiled_last_block_correction_dtype_and_width():
    check = ex.check_tiled_attention
    assert ex.outcome(check, tiled_with())[0] == "pass"
    fails(
        check, tiled_with(skip_last=True), r"block=1: the last block \(key 12\) was s"
    )
    fails(check, tiled_with(inverted=True), r"block=1: the correction is inverted")
    fails(check, tiled_with(dtype=torch.float32), r"torch.float32, q is torch.float64:")
    fails(check, tiled_with(out_width_of_q=True), r"out made with q's width, D = 8\?")


# 13 · the similarity of position vectors, by distance ---------------------------------


def by_distance_with(centre=None, median=False):
    """notebook 13's answer with the rows centred (centre: the dim whose mean is
    subtracted) or a median of each diagonal."""

    def fn(table):
        if centre is not None:
            table = table - table.mean(centre, keepdim=True)
        unit = F.normalize(table, dim=1)
        cosines = unit @ unit.T
        pick = [cosines.diagonal(k) for k in range(len(table))]
        return torch.stack([d.median() if median else d.mean() for d in pick])

    return fn


def test_cosine_by_distance_centred_rows_and_median():
    check = ex.check_cosine_by_distance
    assert ex.outcome(check, by_distance_with())[0] == "pass"
    fails(check, by_distance_with(centre=0), "the mean row was subtracted first")
    fails(check, by_distance_with(centre=1), r"each row was centred .*correlation")
    fails(check, by_distance_with(median=True), "a median, not a mean")


# 18 · merge_and_unload ----------------------------------------------------------------


def test_merge_and_unload_a_new_linear_with_a_fresh_bias():
    from torch import nn

    def fresh_linear(model, copy_bias=False):
        names = []
        for name, m in list(model.named_modules()):
            if type(m).__name__ != "LoRALinear":
                continue
            base = m.base
            new = nn.Linear(
                base.in_features,
                base.out_features,
                bias=base.bias is not None,
                dtype=base.weight.dtype,
            )
            with torch.no_grad():
                new.weight.copy_(base.weight + (0 if m.merged else m.delta_weight()))
                if copy_bias and base.bias is not None:
                    new.bias.copy_(base.bias)
            new.requires_grad_(False)  # frozen, as the stub's docstring asks
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, new)
            names.append(name)
        return names

    check = ex.check_merge_and_unload
    assert ex.outcome(check, lambda m: fresh_linear(m, copy_bias=True))[0] == "pass"
    fails(
        check, fresh_linear, r"blocks.0.attn.qkv is a new nn.Linear whose bias is not"
    )
