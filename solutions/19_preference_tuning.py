"""Solution of notebook 19's build-it (checked by tests/test_exercises.py)."""

import torch.nn.functional as F


def my_dpo_nll_loss(
    policy_chosen, policy_rejected, ref_chosen, ref_rejected, chosen_tokens, beta, alpha
):
    """DPO plus alpha times the chosen outputs' negative log-likelihood per token: the
    mean over the batch of -log sigmoid(beta * margin) - alpha * policy_chosen /
    chosen_tokens."""
    margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)  # (B,)
    dpo = -F.logsigmoid(beta * margin)  # (B,), stable for any margin
    nll = -policy_chosen / chosen_tokens  # (B,), per token
    return (dpo + alpha * nll).mean()
