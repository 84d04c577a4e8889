"""Splits by English sentence, the fixed test split, tokenizers, length-bucketed
batches, shifted targets, the loss."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.data import (
    course_pairs,
    drop_test_sentences,
    english_key,
    simplify_pairs,
    to_simplified,
    to_traditional,
)
from transformer_lib.translation_data import (
    TEST_FINGERPRINT,
    build_tokenizers,
    collate,
    encode_pair,
    group_references,
    label_smoothed_cross_entropy,
    length_bucketed_batches,
    split_by_english,
    split_fingerprint,
)

PAIRS = [
    (f"sentence {i // 2}.", f"句子{i}。") for i in range(40)
]  # each English sentence twice


def test_split_keeps_every_translation_of_a_sentence_together():
    splits = split_by_english(PAIRS, n_valid=3, n_test=4, seed=1)
    english = {name: {en for en, _ in part} for name, part in splits.items()}
    assert (
        len(english["test"]) == 4
        and len(english["valid"]) == 3
        and len(english["train"]) == 13
    )
    assert not (
        english["train"] & english["test"]
        or english["train"] & english["valid"]
        or english["valid"] & english["test"]
    )
    assert sorted(p for part in splits.values() for p in part) == sorted(PAIRS)
    assert split_by_english(PAIRS, 3, 4, seed=1) == splits
    assert split_by_english(PAIRS, 3, 4, seed=2)["test"] != splits["test"]


def test_split_too_large_is_refused():
    with pytest.raises(
        ValueError,
        match="n_valid=10 \\+ n_test=10 leaves no training sentences out of 20",
    ):
        split_by_english(PAIRS, n_valid=10, n_test=10)


def test_the_documented_test_split_is_fixed():
    test = split_by_english(course_pairs(), 1000, 2000, seed=0)["test"]
    assert split_fingerprint(test) == TEST_FINGERPRINT
    sources, references = group_references(test)
    assert len(sources) == 2000 and sum(map(len, references)) == len(test)


def test_tokenizers_and_encoding():
    src_tok, tgt_tok = build_tokenizers(PAIRS, src_vocab_size=300)
    again, _ = build_tokenizers(PAIRS, src_vocab_size=300)
    assert (
        src_tok.to_dict() == again.to_dict()
    )  # the same data gives the same vocabulary, every run
    assert (
        tgt_tok.pad_id == 0 and src_tok.pad_id == src_tok.vocab_size - 4
    )  # BPE: specials after bytes and merges
    src, tgt = encode_pair("sentence 3.", "句子7。", src_tok, tgt_tok, context_len=64)
    assert (
        src[-1] == src_tok.eos_id
        and tgt[0] == tgt_tok.bos_id
        and tgt[-1] == tgt_tok.eos_id
    )
    assert tgt_tok.decode(tgt[1:-1]) == "句子7。"
    src, tgt = encode_pair(
        "sentence " * 50, "句" * 100, src_tok, tgt_tok, context_len=8
    )  # cut to the context
    assert len(src) == 8 and len(tgt) == 9  # tgt_in and tgt_out are 8 long


@settings(derandomize=True, deadline=None, max_examples=40)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=80),
    max_tokens=st.integers(30, 200),
    seed=st.one_of(st.none(), st.integers(0, 100)),
)
def test_bucketed_batches_cover_every_example_once_within_the_budget(
    lengths, max_tokens, seed
):
    batches = length_bucketed_batches(lengths, max_tokens, seed)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) * max(lengths[i] for i in b) <= max_tokens


def test_collate_pads_and_shifts():
    src, tgt_in, tgt_out = collate(
        [([5, 6, 2], [1, 7, 8, 2]), ([5, 2], [1, 9, 2])], src_pad_id=0, tgt_pad_id=0
    )
    assert src.tolist() == [[5, 6, 2], [5, 2, 0]]
    assert tgt_in.tolist() == [[1, 7, 8], [1, 9, 2]] and tgt_out.tolist() == [
        [7, 8, 2],
        [9, 2, 0],
    ]


@settings(derandomize=True, deadline=None, max_examples=30)
@given(
    B=st.integers(1, 4),
    T=st.integers(1, 7),
    V=st.integers(2, 20),
    eps=st.sampled_from([0.0, 0.1, 0.3]),
    seed=st.integers(0, 1000),
)
def test_loss_matches_pytorch(B, T, V, eps, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g)
    target = torch.randint(0, V, (B, T), generator=g)
    target[0, 0] = 1  # at least one non-pad label
    expected = F.cross_entropy(
        logits.transpose(1, 2), target, label_smoothing=eps, ignore_index=0
    )
    torch.testing.assert_close(
        label_smoothed_cross_entropy(logits, target, eps, ignore_index=0), expected
    )


def test_loss_of_an_all_padding_batch_is_zero_not_nan():
    loss = label_smoothed_cross_entropy(
        torch.randn(2, 3, 5), torch.zeros(2, 3, dtype=torch.long), 0.1, 0
    )
    assert loss.item() == 0.0


def test_one_script_and_no_test_sentence_in_training():
    assert to_simplified("我上週買了一輛新車。") == "我上周买了一辆新车。"
    assert to_traditional("我上周买了一辆新车。") == "我上週買了一輛新車。"
    assert simplify_pairs(
        [("Hi.", "你們好。"), ("Hi.", "你们好。"), ("Bye.", "再見。")]
    ) == [
        ("Hi.", "你们好。"),
        ("Bye.", "再见。"),
    ]  # identical after conversion: kept once
    assert english_key("  Where  is the STATION? ") == "where is the station?"
    kept = drop_test_sentences(
        [("Hi there.", "嗨"), ("Bye.", "再见")], [("hi  there.", "你好")]
    )
    assert kept == [("Bye.", "再见")]


def test_the_course_corpus_is_simplified_and_disjoint_from_the_public_test():
    from transformer_lib.data import public_test_pairs

    pairs, public = course_pairs(), public_test_pairs()
    assert len(pairs) == 27_526 and len(public) == 8_613
    assert not {english_key(en) for en, _ in pairs} & {
        english_key(en) for en, _ in public
    }
    assert all(to_simplified(zh) == zh for _, zh in pairs[:3000] + public[:3000])
