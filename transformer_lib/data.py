"""Corpus loaders: download once, verify by sha256, work offline from a mirror folder.

Every file the course reads is pinned by its sha256. A file is fetched, in this order,
from
1. the data folder (`data/` in a checkout, or `$TRANSFORMER_DATA_DIR`), if it is there
   and verifies;
2. a mirror folder named by `$TRANSFORMER_DATA_MIRROR` (same layout as `data/`), copied
   in;
3. its canonical URL.
Each copy is written to a temporary file and renamed into place only once its checksum
matches, so a half-written or corrupted file is never used: a file that fails the check
is replaced. Offline with no mirror, the error names the URL, the path to put the file
at and its checksum.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import os
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from transformer_lib.files import atomic_write

MIRROR_ENV = (
    "TRANSFORMER_DATA_MIRROR"  # a folder laid out like data/, e.g. a shared copy for CI
)
DATA_DIR_ENV = (
    "TRANSFORMER_DATA_DIR"  # where downloads land (default: data/ in the checkout)
)


@dataclass(frozen=True)
class DataFile:
    """One pinned file: where it lives under the data folder and where it comes from."""

    relpath: str  # path under the data folder, the same in a mirror
    url: str  # canonical source
    sha256: str  # of the file itself (not of the archive it may come in)
    archive_sha256: str | None = None  # set when `url` serves a zip holding the file
    member: str | None = None  # the file's name inside that zip
    keep_labels: tuple[str, ...] | None = (
        None  # keep only the lines whose 2nd tab field is one of these
    )


TINY_SHAKESPEARE = DataFile(
    "tinyshakespeare/input.txt",
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
    "tinyshakespeare/input.txt",
    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
)
TATOEBA_CMN_ENG = DataFile(
    "cmn-eng/cmn.txt",
    "http://www.manythings.org/anki/cmn-eng.zip",
    "d766002332a8f21099afd7427138d44f06bed7486a18f7f0f26f217092667d73",
    archive_sha256="d606361aa7312dcdfb15ef4fc51cb1e7ed8bc2dc608a7b192626cd36e8403106",
    member="cmn.txt",
)
# tiktoken caches each URL under sha1(url); these are the two files of the GPT-2
# encoding.
GPT2_VOCAB_BPE = DataFile(
    "tiktoken/6d1cbeee0f20b3d9449abfede4726ed8212e3aee",
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
    "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
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
    keep_labels=("cmn_Hans", "cmn_Hant"),
)
GPT2_ENCODER_JSON = DataFile(
    "tiktoken/6c7ea1a7e38e3a7f062df639a5b80947f075ffe6",
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
    "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
)


class DataUnavailableError(RuntimeError):
    """A pinned file could not be found, copied or downloaded with the right
    checksum."""


def data_dir() -> Path:
    """The folder downloads land in: `$TRANSFORMER_DATA_DIR`, else `data/` beside the
    package."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    checkout = Path(__file__).resolve().parent.parent
    if (
        checkout / "pyproject.toml"
    ).exists():  # an editable install or a plain checkout
        return checkout / "data"
    return Path.home() / ".cache" / "transformer_lib" / "data"


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_verified(
    dest: Path, payload: bytes, expected_sha256: str, source: str
) -> None:
    """Check `payload` against its checksum, then write it to `dest` atomically
    (files.atomic_write)."""
    got = hashlib.sha256(payload).hexdigest()
    if got != expected_sha256:
        raise DataUnavailableError(
            f"{source} gave a file with sha256 {got}, expected {expected_sha256}; "
            f"it was not used. The source may have changed or the copy is damaged."
        )
    try:
        atomic_write(dest, lambda f: f.write(payload))
    except OSError as e:
        raise DataUnavailableError(
            f"cannot write {dest}: {e.strerror or e}; set {DATA_DIR_ENV} to a folder "
            f"you can write to"
        ) from None


def _download(spec: DataFile, timeout: float = 60.0) -> bytes:
    """The file's bytes from its canonical URL (extracted from the zip when it comes in
    one)."""
    request = urllib.request.Request(
        spec.url, headers={"User-Agent": "transformer-course/1.0"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        payload = response.read()
    if (
        spec.keep_labels is not None
    ):  # whole lines, in upstream order, as data/README.md describes
        lines = payload.decode("utf-8").splitlines(keepends=True)
        return "".join(
            ln
            for ln in lines
            if ln.split("\t")[1:2] and ln.split("\t")[1] in spec.keep_labels
        ).encode("utf-8")
    if spec.member is None:
        return payload
    got = hashlib.sha256(payload).hexdigest()
    if got != spec.archive_sha256:
        raise DataUnavailableError(
            f"{spec.url} served an archive with sha256 {got}, expected "
            f"{spec.archive_sha256} "
            f"(the publisher updates this file from time to time)."
        )
    with zipfile.ZipFile(io.BytesIO(payload)) as archive:
        return archive.read(spec.member)


def fetch(spec: DataFile) -> Path:
    """Return the path of a verified local copy of `spec`, copying or downloading it if
    needed."""
    dest = data_dir() / spec.relpath
    if dest.is_dir():
        raise DataUnavailableError(
            f"{dest} is a folder where the file {spec.relpath} belongs; "
            f"remove it and run again"
        )
    if dest.exists():
        if sha256_of(dest) == spec.sha256:
            return dest
        print(
            f"{dest} fails its sha256 check (truncated or edited?); fetching "
            "a fresh copy."
        )
    problems = []
    mirror = os.environ.get(MIRROR_ENV)
    if mirror:
        src = Path(mirror).expanduser() / spec.relpath
        try:
            payload = src.read_bytes()
        except OSError as e:
            problems.append(f"mirror: cannot read {src}: {e.strerror or e}")
        else:
            try:
                _write_verified(dest, payload, spec.sha256, f"mirror file {src}")
                return dest
            except DataUnavailableError as e:
                if str(e).startswith("cannot write"):
                    raise
                problems.append(f"mirror: {e}")
    try:
        _write_verified(dest, _download(spec), spec.sha256, spec.url)
        return dest
    except DataUnavailableError as e:
        if str(e).startswith("cannot write"):
            raise
        problems.append(f"download: {e}")
    except (OSError, http.client.HTTPException, zipfile.BadZipFile, KeyError) as e:
        problems.append(f"download: {e}")
    how = f"download {spec.url}" + (
        f" and extract {spec.member!r} from it" if spec.member else ""
    )
    raise DataUnavailableError(
        f"Could not get {spec.relpath}.\n  " + "\n  ".join(problems) + "\n"
        f"To fix: {how}, put it at {dest} (sha256 {spec.sha256}),\n"
        f"or set {MIRROR_ENV} to a folder that holds {spec.relpath}."
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


def fetch_all() -> list[Path]:
    """Fetch every pinned file now (for example before going offline)."""
    return [fetch(s) for s in ALL_FILES]


__all__ = [
    "ALL_FILES",
    "DataFile",
    "DataUnavailableError",
    "TINY_SHAKESPEARE",
    "TATOEBA_CMN_ENG",
    "data_dir",
    "TATOEBA_TEST",
    "fetch",
    "fetch_all",
    "gpt2_encoding",
    "load_tatoeba_pairs",
    "load_tatoeba_test",
    "load_tiny_shakespeare",
    "sha256_of",
]
