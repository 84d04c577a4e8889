"""Decoding (greedy, beam, sampling, top-k/top-p filters), translate and sacreBLEU/chrF evaluation."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.decoding import (beam_search, evaluate_translations, filter_logits, greedy_decode,
                                      length_penalty_gnmt, sample_decode, translate)
from transformer_lib.seq2seq import Seq2SeqConfig, Transformer
from transformer_lib.tokenization import SPECIAL_TOKENS, CharTokenizer

BOS, EOS = 1, 2


def tiny_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(Seq2SeqConfig.tiny(src_vocab_size=11, tgt_vocab_size=9, context_len=12)).eval()


@settings(derandomize=True, deadline=None, max_examples=25)
@given(V=st.integers(2, 30), k=st.integers(1, 40), p=st.floats(0.01, 1.0), seed=st.integers(0, 1000))
def test_filters_keep_the_top_tokens_and_never_nothing(V, k, p, seed):
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(seed))
    kept = filter_logits(logits, top_k=k) > float("-inf")
    assert torch.all(kept.sum(-1) == min(k, V))
    probs = logits.softmax(-1)
    kept = filter_logits(logits, top_p=p) > float("-inf")
    assert torch.all(kept.gather(-1, probs.argmax(-1, keepdim=True)))  # the most likely token survives
    assert torch.all((probs * kept).sum(-1) >= min(p, 1.0) - 1e-5)  # the kept mass reaches p
    smaller = kept.sum(-1) - 1  # dropping the least likely kept token would fall below p
    sorted_probs = probs.sort(-1, descending=True).values
    below = torch.stack([sorted_probs[b, : int(n)].sum() for b, n in enumerate(smaller)])
    assert torch.all(below < p + 1e-6)


def test_top_p_on_a_known_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    assert (filter_logits(logits, top_p=0.6) > float("-inf")).tolist() == [[True, True, False, False, False]]


def test_beam_of_one_is_greedy_and_outputs_are_clean():
    model = tiny_model()
    src = torch.randint(3, 11, (4, 6), generator=torch.Generator().manual_seed(1))
    greedy = greedy_decode(model, src, BOS, EOS, max_len=6)
    assert greedy == beam_search(model, src, BOS, EOS, beam_size=1, length_penalty=0.0, max_len=6)
    for out in greedy + beam_search(model, src, BOS, EOS, beam_size=3, max_len=6):
        assert EOS not in out and len(out) <= 6


def test_beam_finds_at_least_the_greedy_log_probability():
    model = tiny_model(3)
    src = torch.randint(3, 11, (1, 5), generator=torch.Generator().manual_seed(2))

    def logprob(ids):
        tgt = torch.tensor([[BOS] + ids + [EOS]])
        logp = model(src, tgt[:, :-1]).log_softmax(-1)
        return logp.gather(-1, tgt[:, 1:, None]).sum().item()

    greedy = greedy_decode(model, src, BOS, EOS, max_len=6)[0]
    beam = beam_search(model, src, BOS, EOS, beam_size=8, length_penalty=0.0, max_len=6)[0]
    if len(greedy) < 6 and len(beam) < 6:  # both finished with <eos>
        assert logprob(beam) >= logprob(greedy) - 1e-5


def test_length_penalty():
    assert length_penalty_gnmt(1, 0.6) == 1.0 and length_penalty_gnmt(7, 0.0) == 1.0
    assert length_penalty_gnmt(11, 0.6) > length_penalty_gnmt(10, 0.6)


def test_sampling_is_seeded_and_cold_sampling_is_greedy():
    model = tiny_model()
    src = torch.randint(3, 11, (3, 5), generator=torch.Generator().manual_seed(1))
    a = sample_decode(model, src, BOS, EOS, max_len=6, generator=torch.Generator().manual_seed(0))
    b = sample_decode(model, src, BOS, EOS, max_len=6, generator=torch.Generator().manual_seed(0))
    assert a == b
    cold = sample_decode(model, src, BOS, EOS, temperature=1e-4, top_k=1, max_len=6)
    assert cold == greedy_decode(model, src, BOS, EOS, max_len=6)
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        sample_decode(model, src, BOS, EOS, temperature=0)


class Words:
    """A stand-in source tokenizer: one id per word of a fixed list."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def encode(self, text):
        return [3 + hash(w) % 8 for w in text.split()]


def test_translate_keeps_order_and_cuts_long_inputs():
    model = tiny_model()
    tgt_tok = CharTokenizer("abcde", specials=SPECIAL_TOKENS)  # 9 ids, as the model
    sentences = ["a b c", "word " * 40, "a", ""]
    out = translate(model, Words(), tgt_tok, sentences, "beam", batch_size=2, beam_size=2)
    assert len(out) == 4 and all(isinstance(o, str) and "<" not in o for o in out)
    assert out[0] == translate(model, Words(), tgt_tok, ["a b c"], "beam", beam_size=2)[0]
    with pytest.raises(ValueError, match="method must be one of"):
        translate(model, Words(), tgt_tok, ["a"], "nucleus")


def test_evaluation_uses_every_reference():
    assert evaluate_translations(["我爱你。"], [["我爱你。"]]) == {"bleu": 100.0, "chrf": 100.0}
    one = evaluate_translations(["他是学生。"], [["他是个学生。"]])
    two = evaluate_translations(["他是学生。"], [["他是个学生。", "他是学生。"]])
    assert two["bleu"] == 100.0 and one["bleu"] < 100.0
    with pytest.raises(ValueError, match="2 hypotheses but 1 reference lists"):
        evaluate_translations(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="no sentences to evaluate"):
        evaluate_translations([], [])
