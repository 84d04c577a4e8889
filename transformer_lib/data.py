"""The files the course reads, and their loaders: pinned, fetched once, verified.

Written by hand, usable from the first notebook on. Each file is a `DataFile` pinned by
its sha256 and its size; `downloads.fetch` gets it (from the data folder, a mirror or
the web: see transformer_lib/downloads.py). Here: the pinned list (`ALL_FILES`), the
loaders the notebooks call, `pack` (every pinned file into a mirror folder, with a
manifest) and notebook 09's clean translation corpus (Simplified characters, the public
test's sentences kept out).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from transformer_lib.downloads import (
    MIRROR_ENV,
    DataFile,
    DataUnavailableError,
    copy_verified,
    data_dir,
    fetch,
)
from transformer_lib.files import atomic_write

TINY_SHAKESPEARE = DataFile(
    "tinyshakespeare/input.txt",
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
    "tinyshakespeare/input.txt",
    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    1_115_394,
    licence="Shakespeare's text: public domain; distributed by karpathy/char-rnn "
    "(MIT licence)",
)
TATOEBA_CMN_ENG = DataFile(
    "cmn-eng/cmn.txt",
    "http://www.manythings.org/anki/cmn-eng.zip",
    "d766002332a8f21099afd7427138d44f06bed7486a18f7f0f26f217092667d73",
    4_565_695,
    archive_sha256="d606361aa7312dcdfb15ef4fc51cb1e7ed8bc2dc608a7b192626cd36e8403106",
    member="cmn.txt",
    licence="www.manythings.org/anki and tatoeba.org, CC-BY 2.0 (France); the third "
    "column of each line credits the sentences' authors and must be kept",
)
# tiktoken caches each URL under sha1(url); these are the two files of the GPT-2
# encoding.
GPT2_VOCAB_BPE = DataFile(
    "tiktoken/6d1cbeee0f20b3d9449abfede4726ed8212e3aee",
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
    "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    456_318,
    licence="GPT-2 vocab.bpe, OpenAI's modified MIT licence "
    "(https://github.com/openai/gpt-2/blob/master/LICENSE)",
)
# The Tatoeba Translation Challenge's English-Chinese test (Helsinki-NLP), on which
# OPUS-MT reports its eng-zho scores, at a pinned commit; only its Mandarin lines are
# kept (data/README.md, section 4).
TATOEBA_TEST = DataFile(
    "tatoeba-test/eng-cmn.tsv",
    "https://raw.githubusercontent.com/Helsinki-NLP/Tatoeba-Challenge/"
    "17a1b96a8a23970e031178905133db334e0dff8c/"
    "data/test/eng-zho/test.txt",
    "5b6e83605f770bdaa866461c5a36278290302428a9df1cf60d326433f6d19f4d",
    722_335,
    keep_labels=("cmn_Hans", "cmn_Hant"),
    licence="Tatoeba sentences (CC-BY 2.0 France) selected by Helsinki-NLP's Tatoeba "
    "Translation Challenge; its Mandarin lines only",
)
GPT2_ENCODER_JSON = DataFile(
    "tiktoken/6c7ea1a7e38e3a7f062df639a5b80947f075ffe6",
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
    "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    1_042_301,
    licence="GPT-2 encoder.json, OpenAI's modified MIT licence "
    "(https://github.com/openai/gpt-2/blob/master/LICENSE)",
)


def load_tiny_shakespeare() -> str:
    """The whole Tiny Shakespeare corpus (1,115,394 ASCII characters) as one string."""
    return fetch(TINY_SHAKESPEARE).read_text(encoding="utf-8")


def load_tatoeba_pairs() -> list[tuple[str, str]]:
    """English-Chinese sentence pairs from Tatoeba via manythings.org, in file order.

    The file's third column (the CC-BY 2.0 attribution of each pair) is dropped here;
    see data/README.md for the licence, which asks that the attribution be kept when
    redistributing. Zero-width spaces found in a few Chinese sentences are removed.
    """
    pairs = []
    for line in fetch(TATOEBA_CMN_ENG).read_text(encoding="utf-8").splitlines():
        english, chinese, _attribution = line.split("\t")
        pairs.append((english.strip(), chinese.replace("\u200b", "").strip()))
    return pairs


def load_tatoeba_test() -> list[tuple[str, str]]:
    """The public English-Mandarin test pairs (Tatoeba Translation Challenge), in file
    order.

    Simplified and Traditional lines both, as upstream; one English sentence may have
    several lines (several references). Zero-width spaces are removed, as in
    `load_tatoeba_pairs`.
    """
    pairs = []
    for line in fetch(TATOEBA_TEST).read_text(encoding="utf-8").splitlines():
        _, _label, english, chinese = line.split("\t")
        pairs.append((english.strip(), chinese.replace("\u200b", "").strip()))
    return pairs


def gpt2_encoding():
    """tiktoken's GPT-2 encoding, its two files fetched like the corpora (so it works
    offline)."""
    import tiktoken

    for spec in (GPT2_VOCAB_BPE, GPT2_ENCODER_JSON):
        fetch(spec)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(data_dir() / "tiktoken")
    return tiktoken.get_encoding("gpt2")


ALL_FILES = (
    TINY_SHAKESPEARE,
    TATOEBA_CMN_ENG,
    TATOEBA_TEST,
    GPT2_VOCAB_BPE,
    GPT2_ENCODER_JSON,
)


MANIFEST = "SHA256SUMS"  # `sha256sum -c SHA256SUMS` checks a packed mirror


def pack(out_dir: str | os.PathLike) -> list[Path]:
    """Copy every pinned file, verified, into `out_dir` under its path, with a manifest
    (`SHA256SUMS`) and a README of sources and licences: a mirror to publish as it is.

    `out_dir` must be new, empty, or an earlier pack: it then holds exactly these files.
    Returns the paths written.
    """
    out = Path(out_dir).expanduser()
    names = {s.relpath for s in ALL_FILES} | {MANIFEST, "README.md"}
    if out.exists() and not out.is_dir():
        raise DataUnavailableError(f"{out} is a file; give a folder for the mirror")
    if out.resolve() == data_dir().resolve():
        raise DataUnavailableError(
            f"{out} is the data folder itself; give another folder for the mirror"
        )
    if out.is_dir():
        others = [
            p
            for p in sorted(out.rglob("*"))
            if p.relative_to(out).as_posix() not in names and not p.is_dir()
        ]
        if others:
            raise DataUnavailableError(
                f"{out} holds other files ({others[0]}); give a new or empty folder"
            )
    written = []
    for spec in ALL_FILES:
        # verified again while copied: it may have changed since fetch() checked it
        written.append(copy_verified(fetch(spec), out / spec.relpath, spec))
    manifest = "".join(f"{s.sha256}  {s.relpath}\n" for s in ALL_FILES)
    readme = (
        "# Data mirror of the course 'Building a Transformer from Scratch'\n\n"
        f"Made by `python -m transformer_lib pack-data`. Point `{MIRROR_ENV}` at this "
        "folder, or at the URL it is served from, and run "
        "`python -m transformer_lib fetch-data`. Check it with "
        f"`sha256sum -c {MANIFEST}`.\n\n"
        "| path | bytes | sha256 | source | licence |\n"
        "| --- | --- | --- | --- | --- |\n"
        + "".join(
            f"| `{s.relpath}` | {s.size} | `{s.sha256}` | {s.url}"
            + (f" (`{s.member}` inside)" if s.member else "")
            + (f" (lines labelled {', '.join(s.keep_labels)})" if s.keep_labels else "")
            + f" | {s.licence} |\n"
            for s in ALL_FILES
        )
    )
    for name, text in ((MANIFEST, manifest), ("README.md", readme)):
        try:
            written.append(
                atomic_write(out / name, lambda f, t=text: f.write(t.encode()))
            )
        except OSError as e:
            raise DataUnavailableError(f"cannot write {out / name}: {e.strerror or e}")
    return written


__all__ = [
    "MANIFEST",
    "ALL_FILES",
    "TINY_SHAKESPEARE",
    "TATOEBA_CMN_ENG",
    "TATOEBA_TEST",
    "GPT2_VOCAB_BPE",
    "GPT2_ENCODER_JSON",
    "gpt2_encoding",
    "load_tatoeba_pairs",
    "load_tatoeba_test",
    "load_tiny_shakespeare",
    "pack",
]


# ------------------------------------------------------------------------------------
# The translation corpus made clean (notebook 09): one script, the public test kept out.
# ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def opencc_converter(config: str):
    """An OpenCC converter ("t2s": Traditional to Simplified characters, "s2t": back),
    made once."""
    import opencc

    return opencc.OpenCC(config)


def to_simplified(text: str) -> str:
    """Chinese text in Simplified characters (OpenCC t2s: the characters change, the
    words do not)."""
    return opencc_converter("t2s").convert(text)


def to_traditional(text: str) -> str:
    """Chinese text in Traditional characters (OpenCC s2t), for readers who want
    them."""
    return opencc_converter("s2t").convert(text)


def simplify_pairs(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Every Chinese side in Simplified characters; pairs that became identical are kept
    once, in order."""
    seen, out = set(), []
    for en, zh in pairs:
        pair = (en, to_simplified(zh))
        if pair not in seen:
            seen.add(pair)
            out.append(pair)
    return out


def english_key(sentence: str) -> str:
    """An English sentence with case and spacing normalised: 'Hi  there.' and 'hi
    there.' match."""
    return " ".join(sentence.lower().split())


def drop_test_sentences(
    pairs: list[tuple[str, str]], test_pairs: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The pairs whose English sentence (case and spacing normalised) is not in
    `test_pairs`."""
    test = {english_key(en) for en, _ in test_pairs}
    return [(en, zh) for en, zh in pairs if english_key(en) not in test]


def public_test_pairs() -> list[tuple[str, str]]:
    """The Tatoeba Challenge's English-Mandarin test pairs, references in Simplified
    characters."""
    return [(en, to_simplified(zh)) for en, zh in load_tatoeba_test()]


def course_pairs(pairs: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """The corpus the course trains on: Tatoeba's pairs (or `pairs`) in Simplified,
    without the public test's sentences."""
    return drop_test_sentences(
        simplify_pairs(load_tatoeba_pairs() if pairs is None else pairs),
        public_test_pairs(),
    )


__all__ += [
    "course_pairs",
    "drop_test_sentences",
    "english_key",
    "opencc_converter",
    "public_test_pairs",
    "simplify_pairs",
    "to_simplified",
    "to_traditional",
]
