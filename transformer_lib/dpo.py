import torch.nn.functional as F
from torch import Tensor

from transformer_lib.gpt import GPT
from transformer_lib.prompt_mask import IGNORE


def sequence_logprob(model: GPT, x: Tensor, y: Tensor) -> Tensor:
    """log pi(y | x) of each row: the sum, over the targets (B, T) that are not IGNORE
    (the translation), of the log-probability of the target token -> (B,)."""
    logits, _ = model(x)  # (B, T, V)
    logp = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    keep = y != IGNORE  # (B, T)
    picked = logp.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    return (picked * keep).sum(dim=1)  # (B,)


def dpo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    beta: float = 0.1,
) -> tuple[Tensor, Tensor, Tensor]:
    """The DPO loss (Rafailov et al., 2023), from sequence log-probabilities (B,):
    -log sigmoid(beta * [(log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l))]).
    Returns (mean loss, chosen rewards (B,), rejected rewards (B,)), a reward being
    beta * (log pi - log ref)."""
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    chosen_reward = beta * (policy_chosen - ref_chosen)  # (B,)
    rejected_reward = beta * (policy_rejected - ref_rejected)  # (B,)
    loss = -F.logsigmoid(chosen_reward - rejected_reward).mean()
    return loss, chosen_reward.detach(), rejected_reward.detach()


def preference_pair(
    candidates: list[str], references: list[str]
) -> tuple[str, str, float, float] | None:
    """The candidate with the best sentence chrF against the references (chosen) and
    the one with the worst (rejected), with their chrF; None when all score the same
    (nothing to prefer)."""
    import sacrebleu

    scored = sorted(
        {c: sacrebleu.sentence_chrf(c, references).score for c in candidates}.items(),
        key=lambda kv: kv[1],
    )
    (rejected, low), (chosen, high) = scored[0], scored[-1]
    return None if high == low else (chosen, rejected, high, low)
