"""The tokenizers' kit: what every tokenizer of the course shares, the Hugging Face
one, and GPT-2's merges.

Written by hand (not exported from a notebook), like `viz.py`: this is plumbing, not
the lesson. Notebook 01 builds the tokenizers themselves (characters, byte-pair
encoding) on top of it, says in a sentence what it does and folds this code.
- `PAD`, `BOS`, `EOS`, `UNK` and `SPECIAL_TOKENS`: the special tokens, in their order;
- `Tokenizer`: the base class: `special_ids`, the properties `pad_id`, `bos_id`,
  `eos_id` and `unk_id` (None for a token it lacks), BOS/EOS framing, a repr, and
  `to_dict`/`from_dict` (a plain, JSON-able description, as a checkpoint stores it);
- `check_specials`, `check_ids`: refuse a special token twice, or an id outside the
  vocabulary;
- `HFBPETokenizer`, `train_hf_bpe`: a byte-level BPE trained by Hugging Face
  `tokenizers` (in Rust), behind the interface of the course's tokenizers;
- `gpt2_merges`: GPT-2's 50,000 merges, read from its `vocab.bpe`, as pairs of ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)  # the usual set, in this order (PAD gets id 0)


def check_specials(specials: Sequence[str]) -> list[str]:
    """The special tokens as a list, refusing duplicates (two ids for one token)."""
    specials = list(specials)
    if len(set(specials)) != len(specials):
        raise ValueError(f"special tokens must be distinct, got {specials}")
    return specials


def check_ids(ids: Iterable[int], vocab_size: int) -> list[int]:
    """`ids` as a list of ints (a tensor too), refusing any outside the vocabulary."""
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    if ids and (min(ids) < 0 or max(ids) >= vocab_size):
        bad = next(i for i in ids if not 0 <= i < vocab_size)
        raise ValueError(f"token id {bad} is outside the vocabulary [0, {vocab_size})")
    return ids


def _special_id(token: str) -> property:
    """A read-only property: the tokenizer's id of `token`, or None if it lacks it."""
    return property(
        lambda self: self.special_ids.get(token), doc=f"id of {token}, or None"
    )


class Tokenizer:
    """What the tokenizers share: special ids, BOS/EOS framing, vocab_size, and a
    plain description: {"type": kind, "specials": [...], **state()}."""

    special_ids: dict[str, int]  # special token -> id, set by each subclass
    specials: list[str]
    vocab_size: int
    kind: str  # the "type" of its description: "char", "bpe", "hf_bpe"

    pad_id, bos_id = _special_id(PAD), _special_id(BOS)
    eos_id, unk_id = _special_id(EOS), _special_id(UNK)

    def _frame(self, ids: list[int], bos: bool, eos: bool) -> list[int]:
        """`ids` framed by <bos> and/or <eos>, if the tokenizer has them."""
        for wanted, name, i in ((bos, BOS, self.bos_id), (eos, EOS, self.eos_id)):
            if wanted and i is None:
                raise ValueError(
                    f"this tokenizer has no {name} token; build it with "
                    f"specials including {name}"
                )
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def state(self) -> dict:
        """What the tokenizer is built from, besides its specials: {name: value}, the
        value being the first argument of its class."""
        raise NotImplementedError

    def to_dict(self) -> dict:
        """A plain, JSON-able description, which `from_dict` turns back."""
        return {"type": self.kind, "specials": list(self.specials), **self.state()}

    @classmethod
    def from_dict(cls, d: dict) -> Tokenizer:
        """The tokenizer that `to_dict` described."""
        (built_from,) = (v for k, v in d.items() if k not in ("type", "specials"))
        return cls(built_from, specials=d["specials"])

    def __repr__(self) -> str:
        specials = list(self.special_ids)
        name = type(self).__name__
        return f"{name}(vocab_size={self.vocab_size}, specials={specials})"


class HFBPETokenizer(Tokenizer):
    """A Hugging Face `tokenizers` byte-level BPE behind the interface of the course's
    tokenizers."""

    kind = "hf_bpe"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer  # a tokenizers.Tokenizer
        self.vocab_size = tokenizer.get_vocab_size()
        ids = {s: tokenizer.token_to_id(s) for s in SPECIAL_TOKENS}
        self.special_ids = {s: i for s, i in ids.items() if i is not None}

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        """The ids of `text`, framed by BOS/EOS if asked."""
        return self._frame(self.tokenizer.encode(text).ids, bos, eos)

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """The text of `ids`; specials as names unless `skip_special`."""
        ids = check_ids(ids, self.vocab_size)
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special)

    def to_dict(self) -> dict:
        """A plain, JSON-able description (the library's own JSON, as a string)."""
        return {"type": self.kind, "json": self.tokenizer.to_str()}

    @classmethod
    def from_dict(cls, d: dict) -> HFBPETokenizer:
        """The tokenizer that `to_dict` described."""
        import tokenizers

        return cls(tokenizers.Tokenizer.from_str(d["json"]))


def train_hf_bpe(
    texts: str | Iterable[str],
    vocab_size: int,
    specials: Sequence[str] = SPECIAL_TOKENS,
) -> HFBPETokenizer:
    """A byte-level BPE trained on `texts` by Hugging Face `tokenizers` (in Rust):
    GPT-2's chunks, all 256 bytes in its alphabet (any string encodes), specials
    first."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    # GPT-2's chunks, bytes as symbols
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=check_specials(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([texts] if isinstance(texts, str) else texts, trainer)
    return HFBPETokenizer(tok)


def gpt2_merges() -> list[tuple[int, int]]:
    """GPT-2's 50,000 merges as pairs of our ids, from its pinned `vocab.bpe`: merge k
    makes id 256 + k, as our training numbers them."""
    from transformer_lib.data import GPT2_VOCAB_BPE
    from transformer_lib.downloads import fetch

    # GPT-2's byte -> character table: printable bytes stand for themselves, the other
    # 68 for chr(256 + k)
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    others = [b for b in range(256) if b not in printable]
    byte_of = {chr(b): b for b in printable}
    byte_of |= {chr(256 + k): b for k, b in enumerate(others)}
    ids = {bytes([b]): b for b in range(256)}  # bytes -> our id
    merges = []
    # line 0: a version
    for line in fetch(GPT2_VOCAB_BPE).read_text(encoding="utf-8").splitlines()[1:]:
        a, b = (bytes(byte_of[ch] for ch in part) for part in line.split(" "))
        merges.append((ids[a], ids[b]))
        ids[a + b] = 256 + len(merges) - 1
    return merges
