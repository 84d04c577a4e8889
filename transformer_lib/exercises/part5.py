"""The checkers of Part V's build-its (notebooks 14-16): the prompt's masked targets,
the LoRA forward pass and the DPO loss. Written by hand."""

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

# 14-16 · Part V -----------------------------------------------------------------------


@checker("mask_targets")
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


@checker("lora_forward")
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


@checker("dpo_loss")
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
    for margin, want in ((2000.0, 0.0), (-2000.0, 2000.0)):
        one = (torch.tensor([v], dtype=torch.float64) for v in (margin, 0.0, 0.0, 0.0))
        big = fn(*one, 1.0)
        if isinstance(big, Tensor) and big.numel() == 1 and not big.isfinite().all():
            raise ExerciseError(
                f"dpo_loss at a margin of {margin:g} is {big.item()}, expected "
                f"{want:g}: sigmoid({margin:g}) rounds to 0 and its log to -inf; "
                "-F.logsigmoid(z) is stable for any margin, -log(sigmoid(z)) is not"
            )
        compare(
            f"dpo_loss at a margin of {margin:g}",
            big,
            torch.tensor(want, dtype=torch.float64),
            atol=1e-9,
        )
    return "equals the paper's formula, also at margins of 2000 and -2000"
