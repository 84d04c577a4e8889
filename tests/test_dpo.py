"""The DPO loss, sequence log-probabilities and preference pairs (notebook 19), against
hand-computed cases of the paper's formula (trl keeps its loss inside DPOTrainer)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from transformer_lib.decoder_only import IGNORE
from transformer_lib.dpo import dpo_loss, preference_pair, sequence_logprob
from transformer_lib.gpt import GPT, GPTConfig


def test_hand_computed_cases():
    t = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    # policy = reference: every reward is 0, the loss is log 2
    loss, cr, rr = dpo_loss(t(-5.0), t(-7.0), t(-5.0), t(-7.0), beta=0.1)
    assert_close(loss, t(math.log(2))[0])
    # beta (1 - (-1)) = 1 -> log(1 + e^-1)
    loss, cr, rr = dpo_loss(t(-1.0), t(-3.0), t(-2.0), t(-2.0), beta=0.5)
    assert_close(loss, t(math.log(1 + math.exp(-1)))[0])
    assert_close(cr, t(0.5)) and assert_close(rr, t(-0.5))
    # a batch: the mean of the rows
    loss, *_ = dpo_loss(
        t(-1.0, 0.0), t(-3.0, 0.0), t(-2.0, 0.0), t(-2.0, 2.0), beta=0.5
    )
    want = (math.log(1 + math.exp(-1)) + math.log(1 + math.exp(-1))) / 2
    assert_close(loss, t(want)[0])
    with pytest.raises(ValueError, match="beta must be > 0"):
        dpo_loss(t(0.0), t(0.0), t(0.0), t(0.0), beta=0)


def test_gradient_raises_chosen_and_lowers_rejected():
    pc, pr = (
        torch.tensor([-4.0], requires_grad=True),
        torch.tensor([-4.0], requires_grad=True),
    )
    loss, *_ = dpo_loss(pc, pr, torch.tensor([-4.0]), torch.tensor([-4.0]), beta=0.2)
    loss.backward()
    # d loss / d pc = -beta * sigmoid(-margin) = -0.2 * 0.5
    assert_close(pc.grad, torch.tensor([-0.1])) and assert_close(
        pr.grad, torch.tensor([0.1])
    )


def test_sequence_logprob_sums_the_unmasked_targets():
    torch.manual_seed(0)
    model = GPT(GPTConfig.tiny(vocab_size=20)).eval()
    x = torch.randint(0, 20, (2, 6))
    y = torch.randint(0, 20, (2, 6))
    y[:, :3] = IGNORE
    y[1, 5] = IGNORE
    logp = F.log_softmax(model(x)[0], dim=-1)
    want = torch.stack(
        [
            sum(logp[b, t, y[b, t]] for t in range(6) if y[b, t] != IGNORE)
            for b in range(2)
        ]
    )
    assert_close(sequence_logprob(model, x, y), want)


def test_preference_pair_by_sentence_chrf():
    refs = ["我在学西班牙语。"]
    chosen, rejected, high, low = preference_pair(
        ["我学西班牙语。", "你好。", "我在学西班牙语。"], refs
    )
    assert chosen == "我在学西班牙语。" and rejected == "你好。" and high > low
    assert preference_pair(["你好。", "你好。"], refs) is None
