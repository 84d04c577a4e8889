"""The checkers of Part V's build-its (notebooks 17-19): pairs packed into one row,
LoRA on the attention projections only, and DPO with an NLL term on the chosen
outputs. By hand."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_lib.exercises.framework import (
    ExerciseError,
    checker,
    compare,
)

# 17-19 · Part V -----------------------------------------------------------------------


def _pack_reference(pairs: list[tuple[list[int], int]]) -> tuple[list, list, Tensor]:
    """Each pair shifted and masked on its own, joined; a causal block per pair."""
    from transformer_lib.decoder_only import shift_and_mask

    xs, ys, blocks = [], [], []
    for ids, n_prompt in pairs:
        x, y = shift_and_mask(ids, n_prompt)
        xs, ys = xs + x, ys + y
        blocks.append(torch.ones(len(x), len(x)).tril())
    return xs, ys, torch.block_diag(*blocks).bool()  # (T, T), True = may attend


def _wrong_pack_mask(call: str, got, want: Tensor) -> None:
    """Raise ExerciseError naming the usual mistake of the attention mask, if it is."""
    if not (isinstance(got, Tensor) and got.shape == want.shape):
        return
    got = got.bool()
    causal = torch.ones_like(want).tril()
    for wrong, what in (
        (
            causal,
            "is plain causal: a query of the second pair may attend the first "
            "pair's keys; allow only keys of the query's own pair",
        ),
        (
            want | want.T,
            "is not causal inside a pair: a query sees its pair's later "
            "keys; each pair's block is lower triangular",
        ),
        (
            want.T,
            "is transposed: row t is query t, and its True columns are the "
            "keys it may attend",
        ),
        (~want, "is inverted: True means may attend"),
    ):
        if torch.equal(got, wrong):
            raise ExerciseError(f"{call}: the attention mask {what}")


@checker("pack_pairs")
def check_pack_pairs(fn: Callable[..., tuple]) -> str:
    """fn([(ids, n_prompt), ...]) -> (inputs, targets, mask): each pair shifted and
    its prompt's targets masked on its own, joined into one row, and a (T, T) bool
    attention mask that is causal inside each pair and keeps the pairs apart."""
    cases = [
        [([1, 10, 11, 2, 20, 21, 3], 4), ([1, 5, 2, 9, 3], 3)],
        [([1, 5, 6, 7, 2, 9], 5), ([1, 2, 20, 3], 2), ([1, 8, 2, 30, 31, 3], 3)],
    ]
    for pairs in cases:
        call = f"pack_pairs({pairs})"
        want_x, want_y, want_mask = _pack_reference(pairs)
        got = fn([(list(ids), n) for ids, n in pairs])
        if not (isinstance(got, tuple) and len(got) == 3):
            raise ExerciseError(f"{call}: expected (inputs, targets, mask)")
        x, y, mask = list(got[0]), list(got[1]), got[2]
        if len(x) == len(want_x) + len(pairs) - 1 or len(y) == len(want_y) + 1:
            raise ExerciseError(
                f"{call}: {len(x)} inputs and {len(y)} targets, expected "
                f"{len(want_x)}: shift each pair on its own (its inputs are ids[:-1]), "
                "or a pair's <eos> learns to predict the next pair's <bos>"
            )
        if x != want_x:
            raise ExerciseError(
                f"{call}: inputs {x}, expected {want_x} (each pair's ids[:-1], joined)"
            )
        if len(y) != len(want_y):
            raise ExerciseError(f"{call}: {len(y)} targets, expected {len(want_y)}")
        starts = [0]
        for ids, _ in pairs:
            starts.append(starts[-1] + len(ids) - 1)
        for t, (g, w) in enumerate(zip(y, want_y)):
            if g != w:
                k = max(i for i, s in enumerate(starts) if s <= t) + 1
                if g == -100:
                    what = f"masked, but it is part of pair {k}'s translation"
                elif w == -100:
                    what = f"kept, but it lies inside pair {k}'s prompt"
                else:
                    what = f"{g}, expected {w}"
                raise ExerciseError(f"{call}: target {t} is {what}")
        _wrong_pack_mask(call, mask, want_mask)
        compare(f"{call}: the attention mask", mask, want_mask)
    return (
        "two and three pairs: each shifted and its prompt masked on its own; the "
        "attention mask causal inside each pair, False across pairs"
    )


def _is_lora(module) -> bool:
    """A LoRALinear: the library's, or the one a notebook's kernel defined."""
    return type(module).__name__ == "LoRALinear"


def _lora_attention_reference(model, rank: int, alpha: float) -> list[str]:
    """Freeze `model`, wrap each block's attention qkv and proj in a LoRALinear."""
    from transformer_lib.lora import LoRALinear

    model.requires_grad_(False)
    for block in model.blocks:
        block.attn.qkv = LoRALinear(block.attn.qkv, rank, alpha)
        block.attn.proj = LoRALinear(block.attn.proj, rank, alpha)
    return [
        f"blocks.{i}.attn.{n}"
        for i in range(len(model.blocks))
        for n in ("qkv", "proj")
    ]


@checker("lora_attention_only")
def check_lora_attention_only(fn: Callable[..., list[str]]) -> str:
    """fn(model, rank, alpha) -> the names wrapped: LoRA on the attention's qkv and proj
    of every block, every other parameter frozen."""
    from transformer_lib.gpt import GPT, GPTConfig
    from transformer_lib.lora import trainable_parameters

    def fresh():
        torch.manual_seed(0)
        return GPT(GPTConfig.tiny(vocab_size=17, n_layers=3))

    mine, ref, plain = fresh(), fresh(), fresh()
    names = fn(mine, 4, 8.0)
    want = _lora_attention_reference(ref, 4, 8.0)
    wrapped = [n for n, m in mine.named_modules() if _is_lora(m)]
    for name in want:
        if name not in wrapped:
            raise ExerciseError(
                f"{name} is not wrapped: expected a LoRALinear "
                "around every attention projection"
            )
    for name in wrapped:
        if name not in want:
            what = "the MLP's proj" if ".mlp." in name else "not an attention layer"
            raise ExerciseError(
                f"{name} is wrapped, but it is {what}: match the "
                "Linear layers inside the attention, not every layer named proj"
            )
    for name in want:
        layer = mine.get_submodule(name)
        if (layer.rank, layer.alpha) != (4, 8.0):
            raise ExerciseError(
                f"{name} has rank {layer.rank} and alpha "
                f"{layer.alpha}, expected 4 and 8.0 (pass rank and alpha on)"
            )
    trains = [n for n, p in mine.named_parameters() if p.requires_grad]  # model order
    lora = [n for n, _ in ref.named_parameters() if n.endswith(("lora_A", "lora_B"))]
    if frozen := [n for n in lora if n not in trains]:
        raise ExerciseError(
            f"{frozen[0]} is frozen: freeze the model before "
            "wrapping, or the LoRA's own parameters freeze with it"
        )
    if extra := [n for n in trains if n not in lora]:
        raise ExerciseError(
            f"{extra[0]} still trains: freeze every parameter but "
            "the LoRA's (model.requires_grad_(False) first)"
        )
    got, expected = trainable_parameters(mine), trainable_parameters(ref)
    if got != expected:
        raise ExerciseError(f"{got} trainable parameters, expected {expected}")
    ids = torch.randint(0, 17, (2, 9))
    compare("the wrapped model's logits", mine(ids)[0], plain(ids)[0])
    if list(names or []) != want:
        raise ExerciseError(
            f"returned {names}, expected the names wrapped, in "
            f"the model's order: {want}"
        )
    return (
        f"wraps the {len(want)} attention projections only; {expected} parameters "
        "train, all of them LoRA's; the model starts as it was"
    )


def _dpo_nll_reference(
    pc: Tensor, pr: Tensor, rc: Tensor, rr: Tensor, n: Tensor, beta: float, alpha: float
) -> Tensor:
    """DPO + alpha times the chosen outputs' NLL per token, stable for any margin."""
    dpo = -F.logsigmoid(beta * ((pc - rc) - (pr - rr)))  # (B,)
    return (dpo + alpha * (-pc / n)).mean()


def _dpo_nll_mistakes(pc, pr, rc, rr, n) -> list[tuple[Tensor, str]]:
    """What the usual mistakes give at beta 0.5 and alpha 0.3, and what to say."""
    z = 0.5 * ((pc - rc) - (pr - rr))
    dpo = -F.logsigmoid(z)  # (B,)
    return [
        (dpo.mean(), "this is DPO alone: add alpha times the chosen outputs' NLL"),
        (
            (dpo + 0.3 * pc / n).mean(),
            "the NLL has the wrong sign: it is minus the log-probability, so that "
            "the term falls as the chosen outputs become more likely",
        ),
        (
            (dpo - 0.3 * pc).mean(),
            "the NLL is summed over each chosen output's tokens: divide "
            "policy_chosen by chosen_tokens (a long sentence would weigh more)",
        ),
        (
            (dpo - 0.3 * pr / n).mean(),
            "the NLL term is on the rejected outputs: it is the chosen ones' "
            "likelihood that DPO lets fall",
        ),
        (
            (dpo - 0.3 * (pc - rc) / n).mean(),
            "the NLL is the policy's own, -policy_chosen / chosen_tokens, not a "
            "log-ratio to the reference",
        ),
        (
            dpo.mean() - 0.3 * pc.sum() / n.sum(),
            "the NLL is averaged per sentence, then over the batch: "
            "(-policy_chosen / chosen_tokens).mean(), not all tokens pooled",
        ),
        (
            (-F.logsigmoid(-z) - 0.3 * pc / n).mean(),
            "the sign of the margin is flipped: the chosen log-ratio comes first",
        ),
        (
            (-F.logsigmoid(2 * z) - 0.3 * pc / n).mean(),
            "multiply the margin by beta",
        ),
        (
            (0.3 * dpo - pc / n).mean(),
            "alpha weighs the NLL term, not the DPO term",
        ),
        (
            (dpo - 0.3 * pc / n).sum(),
            "summed over the batch: take the mean",
        ),
    ]


@checker("dpo_nll_loss")
def check_dpo_nll_loss(fn: Callable[..., Tensor]) -> str:
    """fn(policy_chosen, policy_rejected, ref_chosen, ref_rejected, chosen_tokens, beta,
    alpha) -> the mean of -log sigmoid(beta * margin) - alpha * policy_chosen /
    chosen_tokens."""
    gen = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (
        -20 * torch.rand(6, generator=gen, dtype=torch.float64) for _ in range(4)
    )
    n = torch.randint(3, 15, (6,), generator=gen)  # each chosen output's tokens
    got = fn(pc, pr, rc, rr, n, 0.5, 0.3)
    if isinstance(got, Tensor) and got.shape == ():
        for wrong, what in _dpo_nll_mistakes(pc, pr, rc, rr, n):
            if torch.allclose(got, wrong):
                raise ExerciseError(what)
    compare(
        "dpo_nll_loss", got, _dpo_nll_reference(pc, pr, rc, rr, n, 0.5, 0.3), atol=1e-9
    )
    for m in (2000.0, -2000.0):
        one = [torch.tensor([v], dtype=torch.float64) for v in (m, 0.0, 0.0, 0.0)]
        ten = torch.tensor([10])
        big = fn(*one, ten, 1.0, 0.3)
        want = _dpo_nll_reference(*one, ten, 1.0, 0.3)
        if isinstance(big, Tensor) and big.numel() == 1 and not big.isfinite().all():
            raise ExerciseError(
                f"at a margin of {m:g} the loss is {big.item()}, expected "
                f"{want.item():g}: sigmoid(-2000) rounds to 0 and its log to -inf; "
                "-F.logsigmoid(z) is stable for any margin, -log(sigmoid(z)) is not"
            )
        compare(f"dpo_nll_loss at a margin of {m:g}", big, want, atol=1e-9)
    return (
        "equals DPO plus alpha times the chosen outputs' NLL per token, also at "
        "margins of 2000 and -2000"
    )
