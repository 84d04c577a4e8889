"""The decoder-only translator's prompt, loss mask and generation (notebook 17)."""

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.decoder_only import (
    IGNORE,
    PairVocab,
    collate_prompts,
    complete,
    fit_cpu_budget,
    masked_loss,
    shift_and_mask,
)
from transformer_lib.gpt import GPT, GPTConfig, generate
from transformer_lib.tokenization import SPECIAL_TOKENS, BPETokenizer, CharTokenizer


@pytest.fixture(scope="module")
def vocab() -> PairVocab:
    src = BPETokenizer(specials=SPECIAL_TOKENS).train("hello there\nhi you", 270)
    return PairVocab(src, CharTokenizer(["你好", "谢谢"], specials=SPECIAL_TOKENS))


def test_shift_and_mask_hides_the_prompt_targets_only():
    x, y = shift_and_mask([1, 10, 11, 2, 20, 21, 3], n_prompt=4)
    assert x == [1, 10, 11, 2, 20, 21]
    assert y == [IGNORE, IGNORE, IGNORE, 20, 21, 3]
    assert shift_and_mask([1, 10, 11, 2, 20, 21, 3], 4, mask_prompt=False)[1] == [
        10,
        11,
        2,
        20,
        21,
        3,
    ]


def test_example_is_prompt_then_shifted_chinese(vocab):
    ids, n_prompt = vocab.example("hello", "你好", context_len=16)
    assert ids[0] == vocab.src_tok.bos_id and ids[n_prompt - 1] == vocab.zh_id
    assert ids[-1] == vocab.eos_id
    assert all(i >= vocab.offset for i in ids[n_prompt:])
    assert vocab.decode(ids[n_prompt:]) == "你好"
    assert len(vocab.example("hello " * 40, "你好" * 40, 16)[0]) == 17
    with pytest.raises(ValueError, match="max_len >= 3"):
        vocab.prompt("hi", 2)


def test_collate_pads_inputs_with_pad_and_targets_with_ignore():
    x, y = collate_prompts([([5, 6, 7], [IGNORE, 7, 8]), ([5], [9])], pad_id=0)
    assert x.tolist() == [[5, 6, 7], [5, 0, 0]]
    assert y.tolist() == [[IGNORE, 7, 8], [9, IGNORE, IGNORE]]


def test_masked_loss_is_the_mean_over_the_kept_targets():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 7, generator=gen)
    y = torch.tensor([[IGNORE, 1, 2], [3, IGNORE, IGNORE]])
    keep = y != IGNORE
    want = F.cross_entropy(logits[keep], y[keep])
    torch.testing.assert_close(masked_loss(logits, y), want)


def test_complete_greedy_equals_generate_and_keeps_the_order():
    torch.manual_seed(0)
    model = GPT(GPTConfig.tiny(vocab_size=20)).eval()
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8]]
    got = complete(model, prompts, eos_id=19, max_new=6)
    for prompt, new in zip(prompts, got):
        want = generate(model, torch.tensor([prompt]), 6, temperature=0)[
            0, len(prompt) :
        ]
        want = want.tolist()
        assert new == (want[: want.index(19)] if 19 in want else want)


def test_complete_stops_at_the_context():
    model = GPT(GPTConfig.tiny(vocab_size=20)).eval()
    out = complete(model, [[1] * 30], eos_id=99, max_new=100)
    assert len(out[0]) == 32 - 30 + 1  # the last token needs no room in the cache


def test_fit_refuses_an_empty_budget():
    model = GPT(GPTConfig.tiny(vocab_size=20))
    with pytest.raises(ValueError, match="budget_s must be > 0"):
        fit_cpu_budget(model, lambda b: torch.tensor(0.0), iter([]), 0)
