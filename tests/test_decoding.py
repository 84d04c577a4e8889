"""Decoding (greedy, beam, sampling, top-k/top-p filters), translate and sacreBLEU/chrF
evaluation."""

import zlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.decoding import (
    beam_search,
    evaluate_translations,
    greedy_decode,
    length_penalty_gnmt,
    sample_decode,
    translate,
)
from transformer_lib.sampling import filter_logits
from transformer_lib.seq2seq import Seq2SeqConfig, Transformer
from transformer_lib.tokenization import SPECIAL_TOKENS, CharTokenizer

BOS, EOS = 1, 2


def tiny_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(
        Seq2SeqConfig.tiny(src_vocab_size=11, tgt_vocab_size=9, context_len=12)
    ).eval()


@settings(derandomize=True, deadline=None, max_examples=25)
@given(
    V=st.integers(2, 30),
    k=st.integers(1, 40),
    p=st.floats(0.01, 1.0),
    seed=st.integers(0, 1000),
)
def test_filters_keep_the_top_tokens_and_never_nothing(V, k, p, seed):
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(seed))
    kept = filter_logits(logits, top_k=k) > float("-inf")
    assert torch.all(kept.sum(-1) == min(k, V))
    probs = logits.softmax(-1)
    kept = filter_logits(logits, top_p=p) > float("-inf")
    assert torch.all(
        kept.gather(-1, probs.argmax(-1, keepdim=True))
    )  # the most likely token survives
    assert torch.all(
        (probs * kept).sum(-1) >= min(p, 1.0) - 1e-5
    )  # the kept mass reaches p
    smaller = (
        kept.sum(-1) - 1
    )  # dropping the least likely kept token would fall below p
    sorted_probs = probs.sort(-1, descending=True).values
    below = torch.stack(
        [sorted_probs[b, : int(n)].sum() for b, n in enumerate(smaller)]
    )
    assert torch.all(below < p + 1e-6)


def test_top_p_on_a_known_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    assert (filter_logits(logits, top_p=0.6) > float("-inf")).tolist() == [
        [True, True, False, False, False]
    ]


def test_beam_of_one_is_greedy_and_outputs_are_clean():
    model = tiny_model()
    src = torch.randint(3, 11, (4, 6), generator=torch.Generator().manual_seed(1))
    greedy = greedy_decode(model, src, BOS, EOS, max_len=6)
    assert greedy == beam_search(
        model, src, BOS, EOS, beam_size=1, length_penalty=0.0, max_len=6
    )
    for out in greedy + beam_search(model, src, BOS, EOS, beam_size=3, max_len=6):
        assert EOS not in out and len(out) <= 6


@pytest.fixture(scope="module")
def reverser() -> Transformer:
    """A tiny model trained for 40 steps to reverse 4 digits (ids 3..8).

    It already ends every output with <eos> but is unsure of the digits, so beam search
    has better translations than greedy decoding to find (on 7 of the 16 sources below).
    """
    torch.manual_seed(0)
    model = Transformer(
        Seq2SeqConfig.tiny(src_vocab_size=9, tgt_vocab_size=9, context_len=12)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        src = torch.randint(3, 9, (32, 4), generator=g)
        tgt = torch.cat(
            [torch.full((32, 1), BOS), src.flip(1), torch.full((32, 1), EOS)], dim=1
        )
        loss = torch.nn.functional.cross_entropy(
            model(src, tgt[:, :-1]).transpose(1, 2), tgt[:, 1:]
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@torch.no_grad()
def log_probability(
    model: Transformer, src: torch.Tensor, ids: list[int], finished: bool = True
) -> float:
    """log P(ids (+ <eos> if finished) | src) under teacher forcing, for one source
    (S,)."""
    tgt = torch.tensor([[BOS] + ids + ([EOS] if finished else [])])
    logp = model(src[None], tgt[:, :-1]).log_softmax(-1)  # (1, T, V)
    return logp.gather(-1, tgt[:, 1:, None]).sum().item()


def test_beam_finds_at_least_the_greedy_log_probability(reverser):
    src = torch.randint(
        3, 9, (16, 4), generator=torch.Generator().manual_seed(1)
    )  # (B, S)
    greedy = greedy_decode(reverser, src, BOS, EOS, max_len=8)
    beam = beam_search(
        reverser, src, BOS, EOS, beam_size=4, length_penalty=0.0, max_len=8
    )
    assert all(
        len(ids) < 8 for ids in greedy + beam
    )  # every output ended with <eos>, none was cut
    gain = [
        log_probability(reverser, s, b) - log_probability(reverser, s, g)
        for s, b, g in zip(src, beam, greedy)
    ]
    assert min(gain) >= -1e-5  # never worse than greedy...
    assert (
        sum(d > 1e-3 for d in gain) >= 5
    )  # ...and often better (7 of 16 when this was written)


def test_wide_beam_is_exhaustive_search():
    """With more beams than hypotheses, beam search returns the best length-penalised
    score of them all."""
    model, max_len, alpha = tiny_model(), 3, 0.6
    src = torch.randint(3, 11, (5,), generator=torch.Generator().manual_seed(2))  # (S,)
    tokens = [t for t in range(9) if t != EOS]
    finished = (
        [[]] + [[a] for a in tokens] + [[a, b] for a in tokens for b in tokens]
    )  # then <eos>
    cut = [
        [a, b, c] for a in tokens for b in tokens for c in tokens
    ]  # stopped by max_len
    scores = {
        tuple(ids): log_probability(model, src, ids)
        / length_penalty_gnmt(len(ids) + 1, alpha)
        for ids in finished
    }
    scores |= {
        tuple(ids): log_probability(model, src, ids, finished=False)
        / length_penalty_gnmt(len(ids), alpha)
        for ids in cut
    }
    best = max(scores, key=scores.get)
    beam = beam_search(
        model,
        src[None],
        BOS,
        EOS,
        beam_size=1024,
        length_penalty=alpha,
        max_len=max_len,
    )[0]
    assert beam == list(best)
    runner_up = sorted(scores.values())[-2]
    assert (
        scores[best] - runner_up > 1e-4
    )  # the best is unique, so the comparison is not a tie-break


def test_length_penalty():
    assert length_penalty_gnmt(1, 0.6) == 1.0 and length_penalty_gnmt(7, 0.0) == 1.0
    assert length_penalty_gnmt(11, 0.6) > length_penalty_gnmt(10, 0.6)


def test_sampling_is_seeded_and_cold_sampling_is_greedy():
    model = tiny_model()
    src = torch.randint(3, 11, (3, 5), generator=torch.Generator().manual_seed(1))
    a = sample_decode(
        model, src, BOS, EOS, max_len=6, generator=torch.Generator().manual_seed(0)
    )
    b = sample_decode(
        model, src, BOS, EOS, max_len=6, generator=torch.Generator().manual_seed(0)
    )
    assert a == b
    cold = sample_decode(model, src, BOS, EOS, temperature=1e-4, top_k=1, max_len=6)
    assert cold == greedy_decode(model, src, BOS, EOS, max_len=6)
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        sample_decode(model, src, BOS, EOS, temperature=0)


class Words:
    """A stand-in source tokenizer: one id per word, from its checksum (not hash(),
    which changes per run)."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def encode(self, text):
        return [3 + zlib.crc32(w.encode()) % 8 for w in text.split()]


def test_translate_keeps_order_and_cuts_long_inputs():
    model = tiny_model()
    tgt_tok = CharTokenizer("abcde", specials=SPECIAL_TOKENS)  # 9 ids, as the model
    sentences = ["a b c", "word " * 40, "a", ""]
    out = translate(
        model, Words(), tgt_tok, sentences, "beam", batch_size=2, beam_size=2
    )
    assert len(out) == 4 and all(isinstance(o, str) and "<" not in o for o in out)
    assert (
        out[0] == translate(model, Words(), tgt_tok, ["a b c"], "beam", beam_size=2)[0]
    )
    with pytest.raises(ValueError, match="method must be one of"):
        translate(model, Words(), tgt_tok, ["a"], "nucleus")


def test_evaluation_uses_every_reference():
    assert evaluate_translations(["我爱你。"], [["我爱你。"]]) == {
        "bleu": 100.0,
        "chrf": 100.0,
    }
    one = evaluate_translations(["他是学生。"], [["他是个学生。"]])
    two = evaluate_translations(["他是学生。"], [["他是个学生。", "他是学生。"]])
    assert two["bleu"] == 100.0 and one["bleu"] < 100.0
    with pytest.raises(ValueError, match="2 hypotheses but 1 reference lists"):
        evaluate_translations(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="no sentences to evaluate"):
        evaluate_translations([], [])


def test_zero_new_tokens_means_zero_and_bad_settings_are_refused():
    torch.manual_seed(0)
    model = Transformer(Seq2SeqConfig.tiny(src_vocab_size=10, tgt_vocab_size=10))
    src = torch.tensor([[3, 4, 2]])
    assert greedy_decode(model, src, BOS, EOS, max_len=0) == [[]]
    assert sample_decode(model, src, BOS, EOS, max_len=0) == [[]]
    assert (
        len(greedy_decode(model, src, BOS, 99, max_len=3)[0]) == 3
    )  # <eos> never comes: 3 tokens
    with pytest.raises(ValueError, match="max_len must be >= 0"):
        greedy_decode(model, src, BOS, EOS, max_len=-1)
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        sample_decode(model, src, BOS, EOS, top_k=0)
    with pytest.raises(ValueError, match="top_p must lie in"):
        sample_decode(model, src, BOS, EOS, top_p=0.0)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        sample_decode(model, src, BOS, EOS, temperature=float("nan"))
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        beam_search(model, src, BOS, EOS, beam_size=0)
