"""transformer_lib.tokenization: round trips, unknown characters, special tokens, to_dict/from_dict."""

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.tokenization import (BOS, CHUNK_PATTERN, EOS, PAD, SPECIAL_TOKENS, UNK, BPETokenizer,
                                          CharTokenizer, merge, pair_counts, tokenizer_from_dict,
                                          train_hf_bpe)

ENGLISH = ("First Citizen: Before we proceed any further, hear me speak. You are all resolved rather to die "
           "than to famish? Resolved. resolved. First, you know Caius Marcius is chief enemy to the people. ") * 20
CHINESE = "我们今天去公园散步。你好，世界！他不喜欢吃鱼。"
SETTINGS = settings(derandomize=True, deadline=None, max_examples=40)


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer(specials=SPECIAL_TOKENS).train(ENGLISH, vocab_size=256 + 60 + 4)


@pytest.fixture(scope="module")
def hf():
    return train_hf_bpe(ENGLISH, vocab_size=300)


def test_helpers_on_the_docstring_examples():
    assert pair_counts([1, 2, 3, 1, 2]) == {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    assert merge([1, 2, 3, 1, 2], (1, 2), 4) == [4, 3, 4]
    assert merge([1, 1, 1], (1, 1), 9) == [9, 1]  # left to right, no overlap


def test_char_tokenizer_ids_and_specials():
    tok = CharTokenizer("hello", specials=[PAD, UNK])
    assert tok.vocab_size == 6 and tok.encode("hole") == [3, 5, 4, 2]
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, None, None)
    full = CharTokenizer(["ab", "bc"], specials=SPECIAL_TOKENS)
    assert [full.pad_id, full.bos_id, full.eos_id, full.unk_id] == [0, 1, 2, 3]
    assert full.encode("cab", bos=True, eos=True) == [1, 6, 4, 5, 2]
    assert full.decode([1, 6, 4, 5, 2, 0]) == "<bos>cab<eos><pad>"
    assert full.decode([1, 6, 4, 5, 2, 0], skip_special=True) == "cab"


def test_char_tokenizer_unknown_characters():
    with_unk = CharTokenizer("abc", specials=[UNK])
    assert with_unk.encode("axb€") == [1, 0, 2, 0]
    without = CharTokenizer("abc")
    with pytest.raises(ValueError, match=r"2 character\(s\) not in the vocabulary of 3.*'x€'"):
        without.encode("axb€x")
    with pytest.raises(ValueError, match=f"no {BOS} token"):
        without.encode("ab", bos=True)


def test_decode_refuses_ids_outside_the_vocabulary(bpe):
    tok = CharTokenizer("abc")
    with pytest.raises(ValueError, match=r"token id 3 is outside the vocabulary \[0, 3\)"):
        tok.decode([0, 3])
    with pytest.raises(ValueError, match=r"token id -1 is outside"):
        tok.decode([-1])
    with pytest.raises(ValueError, match=rf"token id {bpe.vocab_size} is outside the vocabulary \[0, {bpe.vocab_size}\)"):
        bpe.decode([bpe.vocab_size])


def test_duplicate_specials_are_refused():
    with pytest.raises(ValueError, match="distinct"):
        CharTokenizer("abc", specials=[PAD, PAD])


@SETTINGS
@given(st.text(max_size=60), st.text(max_size=60))
def test_char_round_trip(train, text):
    tok = CharTokenizer(train + text, specials=SPECIAL_TOKENS)
    ids = tok.encode(text, bos=True, eos=True)
    assert len(ids) == len(text) + 2
    assert tok.decode(ids, skip_special=True) == text
    assert CharTokenizer.from_dict(tok.to_dict()).encode(text) == ids[1:-1]


def test_char_tokenizer_encodes_a_megabyte_fast():
    text = (ENGLISH + CHINESE) * (1_000_000 // len(ENGLISH + CHINESE) + 1)
    tok = CharTokenizer(text, specials=SPECIAL_TOKENS)
    t0 = time.perf_counter()
    ids = tok.encode(text)
    assert time.perf_counter() - t0 < 0.5
    assert len(ids) == len(text) and tok.decode(ids) == text


def test_chunks_cover_the_text():
    chunks = CHUNK_PATTERN.findall("Hello, world!  It's 2024_x\n\n散步 ok")
    assert "".join(chunks) == "Hello, world!  It's 2024_x\n\n散步 ok"
    assert " world" in chunks and "'s" in chunks


@SETTINGS
@given(st.text(max_size=80))
def test_chunks_cover_any_text(text):
    assert "".join(CHUNK_PATTERN.findall(text)) == text


def test_bpe_learns_merges_and_sizes(bpe):
    assert bpe.vocab_size == 256 + 60 + 4 and len(bpe.merges) == 60
    assert [bpe.pad_id, bpe.bos_id, bpe.eos_id, bpe.unk_id] == [316, 317, 318, 319]
    assert len(bpe.encode(ENGLISH)) < 0.6 * len(ENGLISH.encode("utf-8"))  # the merges compress
    assert bpe.vocab[bpe.encode(" resolved")[0]].startswith(b" r")


def test_bpe_training_matches_a_plain_recount():
    text = "low lower lowest newer newest wider widest low low newer"
    words = [list(c.encode()) for c in CHUNK_PATTERN.findall(text)]
    expected = []
    for k in range(15):
        counts = {}
        for w in words:
            for p in zip(w, w[1:]):
                counts[p] = counts.get(p, 0) + 1
        best = max(counts.values())
        pair = min(p for p, c in counts.items() if c == best)
        words = [merge(w, pair, 256 + k) for w in words]
        expected.append(pair)
    assert BPETokenizer().train(text, 256 + 15).merges == expected


def test_bpe_vocab_size_too_small():
    with pytest.raises(ValueError, match="vocab_size 258 is below 256 bytes \\+ 4 special tokens"):
        BPETokenizer(specials=SPECIAL_TOKENS).train("abc", 258)


@SETTINGS
@given(st.text(max_size=60))
def test_bpe_round_trip_any_text(bpe, text):
    assert bpe.decode(bpe.encode(text)) == text


def test_bpe_round_trip_chinese_and_specials(bpe):
    for text in [CHINESE, ENGLISH[:200], "naïve café 🙂\n\t end"]:
        ids = bpe.encode(text, bos=True, eos=True)
        assert ids[0] == bpe.bos_id and ids[-1] == bpe.eos_id
        assert bpe.decode(ids, skip_special=True) == text
        assert bpe.decode(ids) == BOS + text + EOS
    assert len(bpe.encode(CHINESE)) == len(CHINESE.encode("utf-8"))  # never seen: one token per byte
    trained_on_chinese = BPETokenizer().train(CHINESE * 5, 256 + 20)
    assert len(trained_on_chinese.encode(CHINESE)) < len(CHINESE.encode("utf-8"))
    assert trained_on_chinese.decode(trained_on_chinese.encode(CHINESE)) == CHINESE


def test_hf_bpe_round_trip_and_specials(hf):
    assert hf.vocab_size == 300 and [hf.pad_id, hf.bos_id, hf.eos_id, hf.unk_id] == [0, 1, 2, 3]
    for text in [CHINESE, ENGLISH[:300], "  two  spaces 🙂"]:
        ids = hf.encode(text, bos=True, eos=True)
        assert ids[0] == hf.bos_id and ids[-1] == hf.eos_id
        assert hf.decode(ids, skip_special=True) == text
    with pytest.raises(ValueError, match=r"token id 300 is outside the vocabulary \[0, 300\)"):
        hf.decode([300])


@pytest.mark.parametrize("make", ["char", "bpe", "hf"])
def test_to_dict_round_trip_is_plain_json(make, bpe, hf):
    tok = {"char": CharTokenizer(ENGLISH, specials=SPECIAL_TOKENS), "bpe": bpe, "hf": hf}[make]
    d = json.loads(json.dumps(tok.to_dict()))  # plain JSON: what a weights_only checkpoint can hold
    again = tokenizer_from_dict(d)
    assert type(again) is type(tok) and again.vocab_size == tok.vocab_size
    text = ENGLISH[:300]
    assert again.encode(text, bos=True, eos=True) == tok.encode(text, bos=True, eos=True)
    assert (again.pad_id, again.bos_id, again.eos_id, again.unk_id) == (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id)


def test_unknown_tokenizer_type():
    with pytest.raises(ValueError, match="unknown tokenizer type 'wordpiece'"):
        tokenizer_from_dict({"type": "wordpiece"})


def test_decode_accepts_a_tensor():
    torch = pytest.importorskip("torch")
    tok = CharTokenizer("abc")
    assert tok.decode(torch.tensor([0, 1, 2])) == "abc"
