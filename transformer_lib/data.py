"""Corpus loaders: download once, verify by sha256, work offline or from mirrors.

Every file the course reads is pinned by its sha256 and its size. A file is taken from
1. the data folder (`data/` in a checkout, or `$TRANSFORMER_DATA_DIR`), if it is there
   and verifies; otherwise, trying each in order until one gives the pinned bytes,
2. `$TRANSFORMER_DATA_MIRROR`: a folder laid out like `data/`, or an http(s) URL under
   which the files sit at the same paths (what `python -m transformer_lib pack-data`
   makes);
3. its canonical URL;
4. the project's own mirrors, `PROJECT_MIRRORS` (the same layout), used when the
   canonical host is unreachable or serves another file (manythings.org republishes its
   zip).
Every copy is read as a stream, capped at the size it should have and given
`DOWNLOAD_SECONDS` to arrive; it goes into a temporary file that is renamed into place
only once its checksum matches, so a half-written, oversized or corrupted file is never
used. A FIFO or a device where a file should be is refused at once, never read. When
every source fails, the error lists why for each and says in one line what to do.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import http.client
import io
import os
import re
import shutil
import stat
import tempfile
import time
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MIRROR_ENV = "TRANSFORMER_DATA_MIRROR"  # a folder or http(s) URL laid out like data/
DATA_DIR_ENV = "TRANSFORMER_DATA_DIR"  # where files land (default: data/ in a checkout)

# The project's own copies of the files, laid out like data/ (a folder made by
# `python -m transformer_lib pack-data`), tried after the canonical URLs. To be
# published: a ModelScope dataset, reachable from mainland China. Nothing is online yet,
# so the list is empty rather than naming an address that serves nothing; add the base
# URL here (and to book/setup.md and zh/book/setup_china.md) once it is.
PROJECT_MIRRORS: tuple[str, ...] = ()

CHUNK = 1 << 16  # bytes read at a time: a copy never sits whole in memory
STALL_SECONDS = 30.0  # a connection silent this long is dropped
DOWNLOAD_SECONDS = 300.0  # the most one file may take (a trickle never ends otherwise)
UPSTREAM_CAP = 64 << 20  # an archive or upstream file whose own size is not pinned
STALE_SECONDS = 3600.0  # a temporary file this old belongs to a killed fetch


# The data loaders are core (every notebook imports them), so they do not import the
# atomic write that appendix A1 teaches (transformer_lib/files.py): this small private
# copy does the same for a downloaded file. A temporary file beside `path` is filled,
# flushed to the disk and renamed over `path` (atomic: readers see no part file); on
# any error, Ctrl-C included, it is removed.
def _write_atomically(path: Path, write: Callable[[BinaryIO], None]) -> Path:
    """Write `path` through `write(file)`: the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        mask = os.umask(0)  # reading the umask means setting it: set straight back
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; a new file's usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _temporaries(path: Path) -> list[Path]:
    """The temporary files that killed writes of `path` left beside it."""
    found = path.parent.glob(f".{path.name}.*.tmp") if path.parent.is_dir() else []
    return sorted(p for p in found if p.is_file())


@dataclass(frozen=True)
class DataFile:
    """One pinned file: where it lives under the data folder and where it comes from."""

    relpath: str  # path under the data folder, the same in a mirror
    url: str  # canonical source
    sha256: str  # of the file itself (not of the archive it may come in)
    size: int  # in bytes: a larger copy is refused before it is read
    archive_sha256: str | None = None  # set when `url` serves a zip holding the file
    member: str | None = None  # the file's name inside that zip
    keep_labels: tuple[str, ...] | None = None  # keep lines whose 2nd field is one
    licence: str = ""  # one line, copied into a packed mirror's README


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


class DataUnavailableError(RuntimeError):
    """A pinned file could not be found, copied or downloaded with the right
    checksum."""


class _SourceFailed(Exception):
    """One source (a mirror, a URL) did not give the pinned file; the next is tried."""


class _TooLarge(_SourceFailed):
    """A file larger than the pinned one: not the right file, so it is never read."""


class _Republished(_SourceFailed):
    """The canonical archive changed: downloading it again cannot help."""


def data_dir() -> Path:
    """The folder downloads land in: `$TRANSFORMER_DATA_DIR`, else `data/` beside the
    package."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").exists():  # an editable install or a checkout
        return checkout / "data"
    return Path.home() / ".cache" / "transformer_lib" / "data"


def _what_is(mode: int) -> str:
    """'a folder', 'a FIFO (named pipe)', ... for a file mode that is not a file."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def _open_regular(path: Path, max_size: int) -> BinaryIO:
    """Open `path` for reading if it is a regular file of at most `max_size` bytes.

    It is opened without blocking, so a FIFO with no writer cannot hang the opening,
    and it is refused, as are devices such as /dev/zero, before anything is read.
    Raises _SourceFailed saying why.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise _SourceFailed(f"cannot read {path}: {e.strerror or e}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _SourceFailed(f"{path} is {_what_is(info.st_mode)}, not a file")
    if info.st_size > max_size:
        os.close(fd)
        raise _TooLarge(
            f"{path} has {info.st_size:,} bytes, more than the {max_size:,} expected: "
            "not the right file"
        )
    return os.fdopen(fd, "rb")  # O_NONBLOCK does not apply to regular files


def _stream(
    read: Callable[[int], bytes], source: str, cap: int, deadline: float
) -> Iterator[bytes]:
    """The chunks `read` gives until the end, or _SourceFailed once more than `cap`
    bytes came, the `deadline` (time.monotonic) passed, or the read failed."""
    total = 0
    while True:
        if time.monotonic() > deadline:
            raise _SourceFailed(
                f"{source}: only {total:,} bytes arrived in {DOWNLOAD_SECONDS:.0f} s "
                "(stalled or too slow)"
            )
        try:
            chunk = read(CHUNK)
        except TimeoutError:
            raise _SourceFailed(
                f"{source}: nothing arrived for {STALL_SECONDS:.0f} s"
            ) from None
        except (OSError, http.client.HTTPException) as e:
            raise _SourceFailed(f"{source}: {_reason(e)}") from None
        if not chunk:
            return
        total += len(chunk)
        if total > cap:
            raise _TooLarge(
                f"{source} is larger than the {cap:,} bytes expected: not the file"
            )
        yield chunk


def _reason(e: BaseException) -> str:
    """A short reason for a failed request or read."""
    if isinstance(e, urllib.request.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.request.URLError):
        return str(e.reason)
    return str(e) or type(e).__name__


def _open_url(url: str, cap: int) -> http.client.HTTPResponse:
    """A response for `url`, refused at once if it announces more than `cap` bytes."""
    request = urllib.request.Request(
        url, headers={"User-Agent": "transformer-course/1.0"}
    )
    try:
        response = urllib.request.urlopen(request, timeout=STALL_SECONDS)
    except TimeoutError:
        raise _SourceFailed(f"{url}: no answer in {STALL_SECONDS:.0f} s") from None
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise _SourceFailed(f"{url}: {_reason(e)}") from None
    announced = response.headers.get("Content-Length", "")
    if announced.isdigit() and int(announced) > cap:
        response.close()
        raise _SourceFailed(
            f"{url} announces {int(announced):,} bytes, more than the {cap:,} expected"
        )
    return response


def _free_bytes(folder: Path) -> int:
    """Free space on the disk that holds `folder` (or its nearest existing parent)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def _no_space(dest: Path, needed: int) -> DataUnavailableError:
    return DataUnavailableError(
        f"cannot write {dest}: the disk is full ({_free_bytes(dest.parent):,} bytes "
        f"free, {needed:,} needed); free some space or set {DATA_DIR_ENV} to a folder "
        "on another disk"
    )


def _save(dest: Path, chunks: Iterator[bytes], spec: DataFile, source: str) -> None:
    """Write `chunks` to `dest` through a temporary file, renamed into place only if
    they hash to `spec.sha256` (otherwise _SourceFailed and nothing is left)."""
    if _free_bytes(dest.parent) < spec.size:
        raise _no_space(dest, spec.size)

    def write(f: BinaryIO) -> None:
        h = hashlib.sha256()
        for chunk in chunks:
            h.update(chunk)
            f.write(chunk)
        if h.hexdigest() != spec.sha256:
            raise _SourceFailed(
                f"{source} gave a file with sha256 {h.hexdigest()}, expected "
                f"{spec.sha256}; it was not used (changed upstream or damaged)"
            )

    try:
        _write_atomically(dest, write)  # on any error the temporary file is removed
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _no_space(dest, spec.size) from None
        raise DataUnavailableError(
            f"cannot write {dest}: {e.strerror or e}; set {DATA_DIR_ENV} to a folder "
            "you can write to"
        ) from None


def _is_url(location: str) -> bool:
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", location) is not None


def _from_mirror(location: str, spec: DataFile, dest: Path) -> None:
    """Copy `spec` from a mirror: a folder laid out like data/, or an http(s) URL."""
    deadline = time.monotonic() + DOWNLOAD_SECONDS
    if not _is_url(location):
        src = Path(location).expanduser() / spec.relpath
        with _open_regular(src, spec.size) as f:
            _save(dest, _stream(f.read, str(src), spec.size, deadline), spec, str(src))
        return
    scheme = urllib.parse.urlsplit(location).scheme.lower()
    if scheme not in ("http", "https"):
        raise _SourceFailed(
            f"{location}: {scheme}:// is not supported; give a folder or an "
            "http(s):// URL"
        )
    url = location.rstrip("/") + "/" + urllib.parse.quote(spec.relpath)
    with _open_url(url, spec.size) as response:
        _save(dest, _stream(response.read1, url, spec.size, deadline), spec, url)


def _from_canonical(spec: DataFile, dest: Path) -> None:
    """Download `spec` from its canonical URL, extracting or selecting it as pinned."""
    deadline = time.monotonic() + DOWNLOAD_SECONDS
    if spec.member is None and spec.keep_labels is None:  # the file itself
        with _open_url(spec.url, spec.size) as response:
            chunks = _stream(response.read1, spec.url, spec.size, deadline)
            _save(dest, chunks, spec, spec.url)
        return
    with _open_url(spec.url, UPSTREAM_CAP) as response:
        payload = b"".join(_stream(response.read1, spec.url, UPSTREAM_CAP, deadline))
    if spec.keep_labels is not None:  # whole lines, in upstream order (data/README.md)
        lines = payload.decode("utf-8", errors="replace").splitlines(keepends=True)
        payload = "".join(
            ln
            for ln in lines
            if ln.split("\t")[1:2] and ln.split("\t")[1] in spec.keep_labels
        ).encode("utf-8")
    else:
        got = hashlib.sha256(payload).hexdigest()
        if got != spec.archive_sha256:
            raise _Republished(
                f"{spec.url} now serves another archive (sha256 {got}, expected "
                f"{spec.archive_sha256}): its publisher has republished it, so the "
                f"pinned {spec.member} must come from a mirror"
            )
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:  # pinned, so no bomb
            payload = archive.read(spec.member)
    _save(dest, iter([payload]), spec, spec.url)


def _check_local(dest: Path, spec: DataFile) -> bool:
    """True if `dest` holds the pinned file; False if it is missing or damaged (to be
    replaced). Raises DataUnavailableError for what must not be replaced silently."""
    if not os.path.lexists(dest):
        return False
    try:
        with _open_regular(dest, spec.size) as f:
            h = hashlib.sha256()
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except _TooLarge:
        print(f"{dest} is larger than it should be; fetching a fresh copy.")
        return False
    except _SourceFailed as e:
        if not dest.exists():  # a link to nothing: replaced like a missing file
            return False
        raise DataUnavailableError(f"{e}; fix or remove it, then run again") from None
    if h.hexdigest() == spec.sha256:
        return True
    print(
        f"{dest} fails its sha256 check (truncated or edited?); fetching a fresh copy."
    )
    return False


def _remove_stale_temporaries(dest: Path) -> None:
    """Remove the temporary files a killed fetch left beside `dest` (only old ones: a
    recent one may be another fetch's, still being written)."""
    for tmp in _temporaries(dest):
        try:
            if time.time() - tmp.stat().st_mtime > STALE_SECONDS:
                tmp.unlink()
        except OSError:
            pass  # gone already, or not ours to remove


def fetch(spec: DataFile) -> Path:
    """Return the path of a verified local copy of `spec`, copying or downloading it if
    needed."""
    dest = data_dir() / spec.relpath
    _remove_stale_temporaries(dest)
    if _check_local(dest, spec):
        return dest
    mirror = os.environ.get(MIRROR_ENV, "").strip()
    sources: list[tuple[str, Callable[[], None]]] = []
    if mirror:
        sources.append(("mirror", lambda: _from_mirror(mirror, spec, dest)))
    sources.append(("download", lambda: _from_canonical(spec, dest)))
    for base in PROJECT_MIRRORS:
        sources.append(("project mirror", lambda b=base: _from_mirror(b, spec, dest)))
    problems, republished = [], False
    for name, get in sources:
        try:
            get()
            return dest
        except _SourceFailed as e:
            problems.append(f"{name}: {e}")
            republished |= isinstance(e, _Republished)
    how = f"put {spec.relpath} (sha256 {spec.sha256}) at {dest}"
    if not republished:
        how = (
            f"download {spec.url}"
            + (f", extract {spec.member!r} from it" if spec.member else "")
            + f" and put it at {dest} (sha256 {spec.sha256})"
        )
    raise DataUnavailableError(
        f"Could not get {spec.relpath}.\n  " + "\n  ".join(problems) + "\n"
        f"To fix: set {MIRROR_ENV} to a folder or an http(s) URL holding "
        f"{spec.relpath} (a copy made by `python -m transformer_lib pack-data` on a "
        f"machine that has the files), or {how}."
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
        src, dest = fetch(spec), out / spec.relpath
        deadline = time.monotonic() + DOWNLOAD_SECONDS
        try:
            with _open_regular(src, spec.size) as f:
                _save(
                    dest, _stream(f.read, str(src), spec.size, deadline), spec, str(src)
                )
        except _SourceFailed as e:  # changed since fetch() checked it
            raise DataUnavailableError(str(e)) from None
        written.append(dest)
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
                _write_atomically(out / name, lambda f, t=text: f.write(t.encode()))
            )
        except OSError as e:
            raise DataUnavailableError(f"cannot write {out / name}: {e.strerror or e}")
    return written


__all__ = [
    "ALL_FILES",
    "DataFile",
    "DataUnavailableError",
    "PROJECT_MIRRORS",
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
