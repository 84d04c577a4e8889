"""transformer_lib.tokenization: round trips, unknown characters, special tokens,
to_dict/from_dict, and equality with GPT-2's tokenizer (tiktoken) on whole corpora."""

import json

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.data import (
    gpt2_encoding,
    load_tatoeba_pairs,
    load_tiny_shakespeare,
)
from transformer_lib.tokenization import (
    BOS,
    CHUNK_PATTERN,
    EOS,
    PAD,
    SPECIAL_TOKENS,
    UNK,
    BPETokenizer,
    CharTokenizer,
    apply_merges,
    gpt2_merges,
    merge,
    pair_counts,
    tokenizer_from_dict,
    train_bpe,
    train_hf_bpe,
)

ENGLISH = (
    "First Citizen: Before we proceed any further, hear me speak. You are all "
    "resolved rather to die "
    "than to famish? Resolved. resolved. First, you know Caius Marcius is "
    "chief enemy to the people. "
) * 20
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
    assert apply_merges([108, 111, 119], {(108, 111): 256, (256, 119): 257}) == [257]
    assert apply_merges([1, 2, 3], {(2, 3): 256, (1, 2): 257}) == [
        1,
        256,
    ]  # the earliest-learned pair wins


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
    with pytest.raises(
        ValueError, match=r"2 character\(s\) not in the vocabulary of 3.*'x€'"
    ):
        without.encode("axb€x")
    with pytest.raises(ValueError, match=f"no {BOS} token"):
        without.encode("ab", bos=True)


def test_decode_refuses_ids_outside_the_vocabulary(bpe):
    tok = CharTokenizer("abc")
    with pytest.raises(
        ValueError, match=r"token id 3 is outside the vocabulary \[0, 3\)"
    ):
        tok.decode([0, 3])
    with pytest.raises(ValueError, match=r"token id -1 is outside"):
        tok.decode([-1])
    with pytest.raises(
        ValueError,
        match=rf"token id {bpe.vocab_size} is outside the vocabulary \[0, "
        rf"{bpe.vocab_size}\)",
    ):
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


def test_char_tokenizer_encodes_a_megabyte():
    # (how fast: benchmarks/bpe_speed.py; a wall-clock limit here would fail on a busy
    # machine)
    text = (ENGLISH + CHINESE) * (1_000_000 // len(ENGLISH + CHINESE) + 1)
    tok = CharTokenizer(text, specials=SPECIAL_TOKENS)
    ids = tok.encode(text)
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
    assert len(bpe.encode(ENGLISH)) < 0.6 * len(
        ENGLISH.encode("utf-8")
    )  # the merges compress
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
    assert train_bpe(text, 15) == expected


def test_bpe_vocab_size_too_small():
    with pytest.raises(
        ValueError, match="vocab_size 258 is below 256 bytes \\+ 4 special tokens"
    ):
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
    assert len(bpe.encode(CHINESE)) == len(
        CHINESE.encode("utf-8")
    )  # never seen: one token per byte
    trained_on_chinese = BPETokenizer().train(CHINESE * 5, 256 + 20)
    assert len(trained_on_chinese.encode(CHINESE)) < len(CHINESE.encode("utf-8"))
    assert trained_on_chinese.decode(trained_on_chinese.encode(CHINESE)) == CHINESE


def test_hf_bpe_round_trip_and_specials(hf):
    assert hf.vocab_size == 300 and [hf.pad_id, hf.bos_id, hf.eos_id, hf.unk_id] == [
        0,
        1,
        2,
        3,
    ]
    for text in [CHINESE, ENGLISH[:300], "  two  spaces 🙂"]:
        ids = hf.encode(text, bos=True, eos=True)
        assert ids[0] == hf.bos_id and ids[-1] == hf.eos_id
        assert hf.decode(ids, skip_special=True) == text
    with pytest.raises(
        ValueError, match=r"token id 300 is outside the vocabulary \[0, 300\)"
    ):
        hf.decode([300])


@pytest.mark.parametrize("make", ["char", "bpe", "hf"])
def test_to_dict_round_trip_is_plain_json(make, bpe, hf):
    tok = {
        "char": CharTokenizer(ENGLISH, specials=SPECIAL_TOKENS),
        "bpe": bpe,
        "hf": hf,
    }[make]
    d = json.loads(
        json.dumps(tok.to_dict())
    )  # plain JSON: what a weights_only checkpoint can hold
    again = tokenizer_from_dict(d)
    assert type(again) is type(tok) and again.vocab_size == tok.vocab_size
    text = ENGLISH[:300]
    assert again.encode(text, bos=True, eos=True) == tok.encode(
        text, bos=True, eos=True
    )
    assert (again.pad_id, again.bos_id, again.eos_id, again.unk_id) == (
        tok.pad_id,
        tok.bos_id,
        tok.eos_id,
        tok.unk_id,
    )


def test_unknown_tokenizer_type():
    with pytest.raises(ValueError, match="unknown tokenizer type 'wordpiece'"):
        tokenizer_from_dict({"type": "wordpiece"})


def test_decode_accepts_a_tensor():
    torch = pytest.importorskip("torch")
    tok = CharTokenizer("abc")
    assert tok.decode(torch.tensor([0, 1, 2])) == "abc"


# ---- GPT-2's tokenizer as the reference (minbpe's test_gpt4_tiktoken_equality, on
# whole corpora) ----

SAMPLE = (
    "Hello world! It's 2024: 12,345 apples, 3.14 pies, 1/2 cup.\n"
    "I'm sure you've heard they're fine; we'll see, he'd say. IT'S DON'T 'tis 'S\n"
    "Emoji 🙂🙂 👍🏽 and 🇫🇷; café naïve Zürich façade, x² ½ ¾ Ⅻ ٣ 二〇二四\n"
    "\t\ttabs\t and  two   three    spaces, \u00a0nbsp, \r\nCRLF\n\n\n   \n"
    "under_score __init__ a-b--c ... !!! ?!  snake_case 我们今天去公园散步。   "
)


@pytest.fixture(scope="module")
def gpt2():
    return gpt2_encoding()


@pytest.fixture(scope="module")
def gpt2_bpe(gpt2):
    """Our class with GPT-2's merges, and our id -> GPT-2's id (the same above 255; the
    256 bytes are numbered in another order by GPT-2)."""
    tok = BPETokenizer(gpt2_merges())
    to_gpt2 = [gpt2.encode_single_token(piece) for piece in tok.vocab]
    assert len(tok.merges) == 50_000 and to_gpt2[256:] == list(range(256, 50_256))
    return tok, to_gpt2


@pytest.fixture(scope="module")
def corpora():
    return {
        "shakespeare": load_tiny_shakespeare(),
        "tatoeba_chinese": "\n".join(zh for _, zh in load_tatoeba_pairs()),
        "sample": SAMPLE,
    }


@pytest.mark.parametrize("name", ["shakespeare", "tatoeba_chinese", "sample"])
def test_bpe_matches_tiktoken_gpt2(name, corpora, gpt2, gpt2_bpe):
    tok, to_gpt2 = gpt2_bpe
    text = corpora[name]
    expected = gpt2.encode_ordinary(text)
    got = [to_gpt2[i] for i in tok.encode(text)]
    assert len(got) == len(expected)
    assert got == expected
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("name", ["shakespeare", "tatoeba_chinese", "sample"])
def test_chunks_match_gpt2_regex(name, corpora, gpt2):
    # tiktoken's spelling of GPT-2's pattern (possessive quantifiers, for speed) splits
    # the same way
    text = corpora[name]
    assert CHUNK_PATTERN.findall(text) == regex.findall(gpt2._pat_str, text)


def test_chunk_pattern_on_numbers_and_letters():
    assert CHUNK_PATTERN.findall("x² ½ café") == [
        "x",
        "²",
        " ½",
        " café",
    ]  # ² is a number, not a letter
    assert CHUNK_PATTERN.findall("it's IT'S") == [
        "it",
        "'s",
        " IT",
        "'",
        "S",
    ]  # contractions: lower case only


@settings(derandomize=True, deadline=None, max_examples=200)
@given(st.text(max_size=40))
def test_chunks_and_ids_match_gpt2_on_any_text(gpt2, gpt2_bpe, text):
    tok, to_gpt2 = gpt2_bpe
    assert CHUNK_PATTERN.findall(text) == regex.findall(gpt2._pat_str, text)
    assert [to_gpt2[i] for i in tok.encode(text)] == gpt2.encode_ordinary(text)
