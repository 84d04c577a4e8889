"""The checkers of Part I's build-its (notebooks 00-06): a file's checksum, BPE
encoding with learnt merges, an output layer tied to the embedding, a position's
encoding moved k positions on, attention with a mask, multi-head attention, a
sliding-window mask and attention with a distance penalty (ALiBi). Written by hand."""

from __future__ import annotations

import copy
import hashlib
import itertools
import math
import re
import tempfile
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from transformer_lib.exercises.framework import (
    ExerciseError,
    checker,
    compare,
    compare_grads,
    compare_input_grads,
    first_line,
    first_output,
    is_close,
    learner_line,
    load_weights,
    name_unused,
    own_state,
)

# 00 · a file's checksum ---------------------------------------------------------------


@checker("sha256_file")
def check_sha256(fn: Callable[[Path], str]) -> str:
    """fn(path) -> the file's sha256 as 64 lowercase hex characters, read in chunks."""
    sizes = (0, 1, 3 * 2**20 + 7)  # empty, one byte, more than any sensible chunk
    g = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            path = Path(d) / f"file_{n}.bin"
            data = torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
            path.write_bytes(data.numpy().tobytes())
            try:
                got, peak = _run_traced(fn, path)
            except UnboundLocalError as e:
                raise ExerciseError(
                    f"a {n}-byte file: UnboundLocalError ({e}): no chunk was read, so "
                    "the hash was never made: create the hash before the loop and "
                    "update it with every chunk"
                ) from None
            except TypeError as e:
                if "not 'bytes'" not in str(e):
                    raise
                raise ExerciseError(
                    f"a {n}-byte file: TypeError ({first_line(e)}): f.read was given "
                    "bytes as its size: the size's name (chunk) was reused for the "
                    "data read, so the next read got the data; give the data its "
                    "own name, while data := f.read(chunk)"
                ) from None
            except UnicodeDecodeError as e:
                raise ExerciseError(
                    f"a {n}-byte file: UnicodeDecodeError ({e.reason} at byte "
                    f"{e.start}): the file was opened as text; open it in binary "
                    "mode, open(path, 'rb'), and hash the bytes as they are"
                ) from None
            want = hashlib.sha256(path.read_bytes()).hexdigest()
            if not isinstance(got, str):
                raise ExerciseError(
                    f"a {n}-byte file: expected a str, got {type(got).__name__} "
                    "(hexdigest(), not digest())"
                )
            if got == hashlib.sha256(path.read_bytes()[: 2**20]).hexdigest() != want:
                raise ExerciseError(
                    f"a {n}-byte file: only its first MiB was hashed: update with "
                    "every chunk, until read() returns b''"
                )
            if got != want and got in _other_digests(path.read_bytes()):
                raise ExerciseError(
                    f"a {n}-byte file: got {got[:8]}..., the file's "
                    f"{_other_digests(path.read_bytes())[got]}, not its sha256: use "
                    "hashlib.sha256()"
                )
            if got != want and got.lower() == want:
                raise ExerciseError(
                    f"a {n}-byte file: the digest is in uppercase hex ({got[:8]}...): "
                    "hexdigest() gives the lowercase one, as sha256sum prints it"
                )
            if got != want and got in _sha256_text(path):
                raise ExerciseError(
                    f"a {n}-byte file: the file was read as text: open it in binary "
                    "mode, open(path, 'rb'), and hash the bytes as they are"
                )
            if got != want and got in _last_chunk_digests(path.read_bytes()):
                raise ExerciseError(
                    f"a {n}-byte file: only its last chunk was hashed: create the "
                    "hash once, before the loop, and update it with every chunk"
                )
            if got != want and got in _path_digests(path):
                raise ExerciseError(
                    f"a {n}-byte file: the path was hashed, not the file: open it, "
                    "open(path, 'rb'), and hash the bytes it reads"
                )
            if got != want and n and got == hashlib.sha256(b"").hexdigest():
                _ascii_probe(fn)
                raise ExerciseError(
                    f"a {n}-byte file: got the sha256 of no bytes at all: its only "
                    "chunk was read but not hashed (a read before the loop whose data "
                    "is never hashed, or a loop that stops at a chunk shorter than a "
                    "full one); loop until read() returns b'' and update the hash "
                    "with every chunk, the first and the short last one"
                )
            if got != want and got in _full_chunk_digests(path.read_bytes()):
                raise ExerciseError(
                    f"a {n}-byte file: its last chunk, shorter than a full one, was "
                    "not hashed: loop until read() returns b'' and update the hash "
                    "with every chunk, the short last one too"
                )
            if got != want and got in _chained_digests(path.read_bytes()):
                raise ExerciseError(
                    f"a {n}-byte file: each chunk was hashed with the hexdigest so far "
                    "(a new sha256 per chunk, chained): one hash, h = "
                    "hashlib.sha256() before the loop, and h.update(chunk) for every "
                    "chunk, the digest read once at the end"
                )
            if got != want and got in _digest_of_digests(path.read_bytes()):
                raise ExerciseError(
                    f"a {n}-byte file: the hash was updated with each chunk's own "
                    "digest, a hash of hashes: update it with the chunk itself, "
                    "h.update(chunk)"
                )
            if isinstance(got, str) and 0 < len(got) < 64 and want.startswith(got):
                raise ExerciseError(
                    f"a {n}-byte file: the digest was cut to {len(got)} hex "
                    "characters: return all 64, h.hexdigest()"
                )
            if got == "":
                raise ExerciseError(
                    f"a {n}-byte file: got an empty string: return h.hexdigest() of "
                    "one hash, created before the loop and updated with every chunk"
                )
            if got != want:
                raise ExerciseError(f"a {n}-byte file: got {got!r}, expected {want!r}")
            if n > 2**21 and peak > 2**21 + 2**20:
                raise ExerciseError(
                    f"a {n}-byte file: the digest is right, but {peak / 2**20:.1f} MiB "
                    "were held in memory at once: the whole file was read in one go; "
                    "read it 1 MiB at a time (f.read(2**20) in a loop) and update the "
                    "hash with each chunk"
                )
    _check_chunk_argument(fn)
    return f"files of {', '.join(map(str, sizes))} bytes, read in chunks"


def _full_chunk_digests(data: bytes) -> set[str]:
    """The sha256 of data's full chunks only, for the usual chunk sizes: the short
    last chunk dropped."""
    return {
        hashlib.sha256(data[: len(data) - len(data) % size]).hexdigest()
        for size in (2**20, 2**16, 8192, 4096)
        if len(data) % size
    }


def _check_chunk_argument(fn: Callable) -> None:
    """fn(path, chunk=4096) on a 3 MiB file must hold about one chunk at a time."""
    chunk, n = 4096, 3 * 2**20
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "file.bin"
        no_newline = bytes(b for b in range(256) if b != ord("\n"))  # no "lines"
        path.write_bytes(no_newline * (n // 255))
        try:
            got, peak = _run_traced(lambda p: fn(p, chunk=chunk), path)
        except TypeError as e:
            raise ExerciseError(
                f"fn(path, chunk={chunk}): TypeError ({e}): keep the argument "
                "chunk and read that many bytes at a time"
            ) from None
        if got != hashlib.sha256(path.read_bytes()).hexdigest():
            raise ExerciseError(
                f"fn(path, chunk={chunk}) on a {n}-byte file: got "
                f"{got!r}, expected the file's sha256"
            )
        if peak > 64 * chunk:
            why = (
                "the file was read in pieces of a size of its own, not chunk bytes"
                if peak < n
                else "a loop over the file's lines reads up to each b'\\n', here the "
                "whole file"
            )
            raise ExerciseError(
                f"fn(path, chunk={chunk}): {peak / 2**10:.0f} KiB were held at once, "
                f"expected about {chunk // 2**10} KiB: the argument chunk is ignored "
                f"({why}); read chunk bytes at a time, f.read(chunk)"
            )


def _run_traced(fn: Callable, *args) -> tuple:
    """fn(*args) and the peak of the Python memory it allocated, in bytes; a loop that
    goes on reading past the end of the file is stopped (_counting_open)."""
    import tracemalloc

    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        with _counting_open():
            out = fn(*args)
        return out, tracemalloc.get_traced_memory()[1] - start
    finally:
        if not was_tracing:
            tracemalloc.stop()


_PAST_EOF = (
    "read() returned b'' (the end of the file) {n} times and the loop went on: in "
    "binary mode the end is b'' (bytes), which never equals the str '': stop on b'', "
    "iter(lambda: f.read(chunk), b'') or while data := f.read(chunk)"
)


def _past_eof(cls: type) -> type:
    """A subclass of a binary file class whose reads stop a loop that never ends:
    the hundredth empty read raises ExerciseError."""

    class Counting(cls):
        empty = 0

        def _count(self, got):
            if not got and got is not None:
                self.empty += 1
                if self.empty >= 100:
                    raise ExerciseError(_PAST_EOF.format(n=self.empty))
            return got

        def read(self, *a):
            return self._count(super().read(*a))

        def read1(self, *a):
            return self._count(super().read1(*a))

        def readline(self, *a):
            return self._count(super().readline(*a))

    return Counting


@contextmanager
def _counting_open():
    """open (and io.open, which Path.open calls) give binary readers that count their
    empty reads: a sentinel '' in binary mode never matches, and the checker would
    wait for ever."""
    import builtins
    import io

    real = builtins.open, io.open
    raw, buffered = _past_eof(io.FileIO), _past_eof(io.BufferedReader)

    def counting(file, mode="r", buffering=-1, *args, opener=None, **kwargs):
        rest = [*args, *kwargs.values()]  # encoding, errors, newline, closefd
        if sorted(mode) != ["b", "r"] or any(a not in (None, True) for a in rest):
            return real[0](file, mode, buffering, *args, opener=opener, **kwargs)
        if buffering == 0:
            return raw(file, "r", opener=opener)
        size = buffering if buffering > 1 else io.DEFAULT_BUFFER_SIZE
        return buffered(io.FileIO(file, "r", opener=opener), size)

    builtins.open = io.open = counting
    try:
        yield
    finally:
        builtins.open, io.open = real


def _last_chunk_digests(data: bytes) -> set[str]:
    """The digests of the last chunk alone, for chunks of 1 KiB to 16 MiB."""
    return {
        hashlib.sha256(data[(len(data) - 1) // 2**k * 2**k :]).hexdigest()
        for k in range(10, 25)
        if data
    }


def _chained_digests(data: bytes) -> set[str]:
    """The digests of sha256(previous hexdigest + chunk), chunk after chunk, for chunks
    of 4 KiB to 1 MiB (a new hash per chunk, chained by its hex digest)."""
    out = set()
    for k in (12, 13, 14, 16, 20):
        h = hashlib.sha256()
        for i in range(0, len(data), 2**k):
            h = hashlib.sha256(h.hexdigest().encode() + data[i : i + 2**k])
        out.add(h.hexdigest())
    return out


def _digest_of_digests(data: bytes) -> set[str]:
    """The sha256 of each chunk's digest (raw or hex), one after the other, for chunks
    of 4 KiB to 1 MiB: a hash of the chunks' hashes, not of the file."""
    out = set()
    for k in (12, 13, 14, 16, 20):
        for hexed in (False, True):
            h = hashlib.sha256()
            for i in range(0, len(data), 2**k):
                d = hashlib.sha256(data[i : i + 2**k])
                h.update(d.hexdigest().encode() if hexed else d.digest())
            out.add(h.hexdigest())
    return out


def _other_digests(data: bytes) -> dict[str, str]:
    """The data's digests by algorithms other than sha256 (a slip of the name)."""
    names = ("md5", "sha1", "sha224", "sha384", "sha512", "sha3_256", "blake2b")
    names += ("blake2s", "sha3_224", "sha3_384", "sha3_512", "sha512_256")
    return {hashlib.new(name, data).hexdigest(): name for name in names}


def _path_digests(path: Path) -> set[str]:
    """The digests of the path's text and of the file's name, a typical mistake."""
    return {hashlib.sha256(str(t).encode()).hexdigest() for t in (path, path.name)}


def _sha256_text(path: Path) -> set[str]:
    """The digests of a file read as text and encoded again, a typical mistake: as
    UTF-8 (bad bytes replaced or escaped) or latin-1, with and without the universal
    newlines of text mode (\r\n read as \n)."""
    texts = []
    for encoding, errors in (
        ("utf-8", "replace"),
        ("utf-8", "ignore"),
        ("latin-1", None),
    ):
        for newline in ("", None):  # as they are; text mode's default translation
            with open(path, encoding=encoding, errors=errors, newline=newline) as f:
                texts.append(f.read().encode())
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        texts.append(f.read().encode("utf-8", "surrogateescape"))
    return {hashlib.sha256(text).hexdigest() for text in texts if text}


def _ascii_probe(fn: Callable) -> None:
    """fn gave a 1-byte file the sha256 of no bytes: if it hashes a file of one ASCII
    byte right, it read text and dropped the bytes UTF-8 refuses (errors='ignore')."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "a.txt"
        path.write_bytes(b"a")
        try:
            right = fn(path) == hashlib.sha256(b"a").hexdigest()
        except Exception:  # noqa: BLE001 - another mistake: the caller names it
            right = False
    if right:
        raise ExerciseError(
            "a 1-byte file: got the sha256 of no bytes at all, yet a file "
            "of one ASCII byte hashes right: the file was read as text and the bytes "
            "UTF-8 refuses dropped (errors='ignore'); open it in binary mode, "
            "open(path, 'rb'), and hash the bytes as they are"
        )


# 01 · BPE encoding with learnt merges ------------------------------------------------

_BPE_TRAIN = (
    "the lowest lower newer newest widest wider low low lower, the newest\n" * 3
)
_BPE_TEXTS = [
    "westhether deweewe",  # made-up words: the leftmost pair and the most frequent
    # one go wrong in different places
    "the lowest, the widest",
    "thou know'st the newest",  # a contraction is a chunk of its own
    "slower and newer: the lowlands",  # words never seen whole
    "caf\u00e9 na\u00efve \u6c49\u5b57",  # several bytes per character
    "low  low\n\nlow",  # runs of spaces and newlines
    "",
]


def _bpe_encode_variant(text: str, merges: list, how: str) -> list[int]:
    """Typical wrong encoders: `whole` (no chunks), `leftmost` (the leftmost known pair
    first), `frequent` (the most frequent known pair first), `chars` (ord, not
    bytes), `offset` and `low` (merge k gets the id 257 + k or 255 + k), `once` (one
    merge per chunk), `highest` (the last-learnt pair first), `onepass` (only the
    pairs found at the start), `latin1` (Latin-1 bytes), `smallest` (the pair of
    smallest ids first, min(pairs) without the ranks), `runs` (split into runs of
    non-space and space characters, not with CHUNK_PATTERN)."""
    from transformer_lib.tokenization import CHUNK_PATTERN, merge

    ranks = {pair: 256 + k for k, pair in enumerate(merges)}
    chunks = [text] if how == "whole" else CHUNK_PATTERN.findall(text)
    chunks = text.split(" ") if how == "spaces" else chunks
    chunks = re.findall(r"\S+|\s+", text) if how == "runs" else chunks
    chunks = chunks[-1:] if how == "last" else chunks
    out = []
    for chunk in chunks:
        ids = [ord(c) for c in chunk] if how == "chars" else list(chunk.encode())
        if how == "latin1":
            ids = list(chunk.encode("latin-1", errors="replace"))
        if how == "onepass":  # the pairs found at the start, each merged once
            for pair in sorted(
                {p for p in zip(ids, ids[1:]) if p in ranks}, key=ranks.get
            ):
                ids = merge(ids, pair, ranks[pair])
        while len(ids) > (2 if how == "two" else 1) and how not in ("onepass", "raw"):
            known = [p for p in zip(ids, ids[1:]) if p in ranks]
            if not known:
                break
            if how == "leftmost":
                pair = known[0]
            elif how == "frequent":  # ties: the first seen, as Counter.most_common
                pair = max(known, key=known.count)
            elif how == "highest":
                pair = max(known, key=ranks.get)
            elif how == "smallest":  # min over the pairs themselves, not their ranks
                pair = min(known)
            else:
                pair = min(known, key=ranks.get)
            ids = merge(ids, pair, ranks[pair] + (how == "offset") - (how == "low"))
            if how == "once":
                break
        out += ids
    return out


_BPE_MISTAKES = {
    "whole": "merges pairs across chunks: split the text with CHUNK_PATTERN first, "
    "then merge inside each chunk",
    "leftmost": "merges the leftmost known pair first: take the pair of lowest rank "
    "(learnt first) wherever it is in the chunk",
    "frequent": "merges the most frequent known pair first: take the pair of lowest "
    "rank (learnt first), however often it occurs in the chunk",
    "chars": "starts from characters (ord), not UTF-8 bytes: ids 0-255 are bytes, "
    "use chunk.encode()",
    "offset": "gives merge k the id 257 + k, one too many: ids 0-255 are the bytes, "
    "so merge k (counted from 0) makes id 256 + k",
    "once": "merges only one pair per chunk: repeat, merging the known pair of "
    "lowest rank, until no known pair is left",
    "highest": "merges the pair of highest rank (learnt last) first: the lowest "
    "rank goes first, the order in which the merges were learnt",
    "onepass": "merges only the pairs present at the start: a merge makes new pairs; "
    "look again after each merge, until no known pair is left",
    "low": "gives merge k the id 255 + k, one too few: ids 0-255 are the bytes, so "
    "merge k (counted from 0) makes id 256 + k",
    "spaces": "split the text at spaces, which drops them: split it with "
    "CHUNK_PATTERN, whose chunks keep the space before each word",
    "latin1": "encodes the text as Latin-1, not UTF-8: ids 0-255 are UTF-8 bytes, "
    "chunk.encode() (utf-8) gives them",
    "smallest": "merges the pair of smallest ids first (min over the pairs): take the "
    "pair of lowest rank, learnt first, min(pairs, key=ranks.get)",
    "raw": "made no merge at all: the ids are the text's bytes. Does an unknown pair "
    "rank first? ranks.get(pair, 0) (or any number below the ranks) makes min() pick "
    "a pair that is not in the merges and stop; rank it last, float('inf')",
    "two": "stops when a chunk is two tokens long: its last two are never merged; "
    "loop while len(ids) >= 2",
    "last": "returned only the last chunk's ids: extend the output inside the loop "
    "over the chunks, not after it",
    "runs": "split the text into runs of spaces and of other characters, so the "
    "space before a word is a chunk of its own: split with CHUNK_PATTERN, whose "
    "chunks keep the space before each word (' lowest')",
}


@checker("BPE encoding")
def check_bpe_encode(fn: Callable[[str, list], list]) -> str:
    """fn(text, merges) -> the ids of `text` under the learnt `merges`, as
    BPETokenizer(merges).encode(text) gives them."""
    from transformer_lib.tokenization import BPETokenizer

    tok = BPETokenizer().train(_BPE_TRAIN, 256 + 30)
    merges = list(tok.merges)
    for text in _BPE_TEXTS:
        want = tok.encode(text)
        given, call = list(merges), f"my_bpe_encode({text!r}, merges)"
        got = fn(text, given)
        if given != merges:
            raise ExerciseError(
                f"{call} changed the merges list it was given (pop, remove, sort, "
                "...): the caller's list must stay as it was (its next call needs "
                "it); read it, or work on a copy, list(merges)"
            )
        if not isinstance(got, (list, tuple)):
            raise ExerciseError(
                f"{call}: expected a list of ids, got {type(got).__name__}"
            )
        if any(isinstance(i, (list, tuple)) for i in got):
            raise ExerciseError(
                f"{call}: got a list per chunk: return one flat list of ids for the "
                "whole text (ids += ... for each chunk)"
            )
        got = [int(i) for i in got]
        if got == want:
            continue
        hows = [h for h in _BPE_MISTAKES if got == _bpe_encode_variant(text, merges, h)]
        if not hows and sorted(got) == sorted(want):
            raise ExerciseError(
                f"{call}: the right ids in another order ({got[:6]}..., expected "
                f"{want[:6]}...): encode the chunks in the order of the text (a set "
                "loses it); cache distinct chunks if you like, but emit every chunk "
                "where it is"
            )
        for other in _BPE_TEXTS if len(hows) > 1 else []:  # the others may tell them
            out = [int(i) for i in fn(other, list(merges))]
            same = [h for h in hows if out == _bpe_encode_variant(other, merges, h)]
            hows = same or hows
        if hows == ["leftmost", "frequent"]:  # this text cannot tell them apart
            raise ExerciseError(
                f"{call} merges the leftmost or the most frequent known pair first: "
                "take the pair of lowest rank (learnt first), wherever it is and "
                "however often it occurs in the chunk"
            )
        if hows:
            raise ExerciseError(f"{call} {_BPE_MISTAKES[hows[0]]}")
        i = next((j for j, (x, y) in enumerate(zip(got, want)) if x != y), None)
        if i is None:
            raise ExerciseError(f"{call} gave {len(got)} ids, expected {len(want)}")
        raise ExerciseError(
            f"{call}: id {i} is {got[i]}, expected {want[i]} "
            f"({tok.vocab[want[i]]!r}); got {got}, expected {want}"
        )
    _check_overlapping_pairs(fn)
    _check_other_merges(fn, tok)
    return (
        f"{len(_BPE_TEXTS)} texts equal BPETokenizer.encode with {len(merges)} merges: "
        "unseen words, multi-byte characters, whitespace runs, the empty text; a run "
        "of one byte"
    )


def _check_overlapping_pairs(fn: Callable) -> None:
    """A run of one byte, "aaaaa", whose pairs overlap: merged left to right."""
    from transformer_lib.tokenization import BPETokenizer

    tok = BPETokenizer().train("aaaa aaa aa " * 8, 256 + 1)  # one merge: (a, a)
    got, want = fn("aaaaa", list(tok.merges)), tok.encode("aaaaa")
    if isinstance(got, (list, tuple)) and [int(i) for i in got] != want:
        raise ExerciseError(
            f"my_bpe_encode('aaaaa', [(97, 97)]) gave {list(got)}, expected {want}: a "
            "run of one pair overlaps; merge from the left, as merge() does "
            "('aaaaa' is aa, aa, a)"
        )


def _check_other_merges(fn: Callable, tok) -> None:
    """A text already encoded, again with the first 3 merges only: nothing kept
    between calls (a cache keyed by the chunk alone) may answer for other merges."""
    from transformer_lib.tokenization import BPETokenizer

    text, few = _BPE_TEXTS[1], list(tok.merges[:3])
    got, want = fn(text, list(few)), BPETokenizer(few).encode(text)
    if isinstance(got, (list, tuple)) and [int(i) for i in got] != want:
        stale = [int(i) for i in got] == tok.encode(text)
        raise ExerciseError(
            f"my_bpe_encode({text!r}, merges[:3]) gave "
            + (
                "the ids of the earlier call with all the merges: something kept "
                "between calls (a cache keyed by the chunk alone) answered for other "
                "merges; keep caches inside the function, or key them by the merges"
                if stale
                else f"{list(got)}, expected {want}"
            )
        )


# 02 · weight tying --------------------------------------------------------------------


@checker("tied output layer")
def check_tied_output(cls: type) -> str:
    """cls(embedding) -> a module whose forward(h (B, T, C)) gives the logits h @ W^T,
    W = embedding.weight, shared (not copied), so that both uses train W."""
    from transformer_lib.embeddings import TokenEmbedding

    torch.manual_seed(0)
    V, C = 50, 8
    emb = TokenEmbedding(V, C)
    mix = nn.Linear(C, C)  # the checker's own model: embed, mix, score
    head = cls(emb)
    if not isinstance(head, nn.Module):
        raise ExerciseError(f"expected an nn.Module, got {type(head).__name__}")
    model = nn.ModuleList([emb, mix, head])
    n, want_n = sum(p.numel() for p in model.parameters()), V * C + C * C + C
    table = emb.weight.data_ptr()
    twin = [
        m
        for m, p in head.named_parameters()
        if p is not emb.weight and p.data_ptr() == table
    ]
    if n != want_n and twin:
        raise ExerciseError(
            f"the output layer's {twin[0]} shares the table's memory but is a new "
            "parameter (nn.Parameter(embedding.weight) makes one, trained on its "
            "own): keep the embedding itself, self.embedding = embedding, and read "
            "embedding.weight in forward"
        )
    if n != want_n:
        raise ExerciseError(
            f"embedding, a ({C}, {C}) layer and the output layer hold {n} parameters, "
            f"expected {want_n}: the output layer has {n - want_n} of its own, "
            "not 0; use embedding.weight itself (no copy, no nn.Linear of its own)"
        )
    linear = next(
        (n for n, m in head.named_modules() if isinstance(m, nn.Linear)), None
    )
    if linear is not None:
        raise ExerciseError(
            f"the output layer holds an nn.Linear ({linear or 'itself'}), even with "
            "the embedding's weight tied in: the docstring says no nn.Linear; "
            "compute h @ W.T with "
            "W = embedding.weight"
        )
    buffers = [name for name, b in head.named_buffers() if b.numel() == V * C]
    if buffers:
        raise ExerciseError(
            f"the table is registered as a buffer ({buffers[0]}): .to() and .double() "
            "convert buffers apart from parameters, which breaks the tie, and the "
            "state_dict holds it twice; keep the embedding (self.embedding = "
            "embedding) and read embedding.weight in forward"
        )
    model.double()  # as .to(device) or .half() would: W gets new storage
    ids = torch.tensor([[3, 1, 4, 1], [5, 9, 2, 6]])
    h = torch.tanh(mix(emb(ids)))  # (2, 4, C)
    try:
        logits = head(h)
    except RuntimeError as e:
        if "dtype" in str(e) or "scalar type" in str(e):
            raise ExerciseError(
                f"RuntimeError ({first_line(e)}) after model.double(): the "
                "layer keeps a copy of W made in __init__ (embedding.weight.T, .data "
                "or a clone), which .double() and .to(device) leave behind; keep the "
                "embedding (self.embedding = embedding) and read embedding.weight in "
                "forward"
            ) from None
        if "shape" not in str(e):
            raise
        raise ExerciseError(
            f"RuntimeError ({first_line(e)}): W = embedding.weight is "
            f"(n_vocab, C) = {tuple(emb.weight.shape)}: use h @ W.T"
        ) from None
    want = h @ emb.weight.T  # (2, 4, V)
    if isinstance(logits, Tensor) and logits.shape == want.shape[:-1]:
        raise ExerciseError(
            f"the output is {tuple(logits.shape)}, one number per position, not the "
            f"logits (B, T, n_vocab) = {tuple(want.shape)}: an argmax (or a max)? "
            "return the scores h @ W.T themselves"
        )
    if isinstance(logits, Tensor) and logits.dtype != h.dtype:
        raise ExerciseError(
            f"the logits are {logits.dtype} for {h.dtype} inputs (after "
            "model.double()): a cast (.float()) in forward; drop it, h @ W.T keeps "
            "the model's dtype"
        )
    if is_close(logits, want * math.sqrt(C)):
        raise ExerciseError(
            "the logits are multiplied by sqrt(d_model): that scale belongs to the "
            "lookup, the logits are h @ W^T"
        )
    if is_close(logits, want / math.sqrt(C)):
        raise ExerciseError(
            "the logits are divided by sqrt(d_model), attention's scale: the output "
            "layer has no scale, the logits are h @ W^T"
        )
    if is_close(logits, want.softmax(-1)) or is_close(logits, want.log_softmax(-1)):
        raise ExerciseError(
            "the output is a softmax of the logits: return the logits themselves, "
            "h @ W^T; the loss (cross_entropy) and sampling apply the softmax"
        )
    if is_close(logits, want.transpose(1, 2)):
        raise ExerciseError(
            f"the logits are (B, n_vocab, T) = {tuple(logits.shape)}: h @ W.T is "
            "already (B, T, n_vocab), one score per token of the vocabulary at each "
            "position; do not transpose it"
        )
    cosines = F.normalize(h, dim=-1) @ F.normalize(emb.weight, dim=-1).T
    if is_close(logits, cosines):
        raise ExerciseError(
            "the logits are the cosines of h and the rows of W (h and W were "
            "normalised): the logits are h @ W^T, with no normalisation"
        )
    compare("MyTiedOutput(embedding)(h)", logits, want)
    if not logits.requires_grad:
        raise ExerciseError(
            "the logits carry no gradient (computed under torch.no_grad(), or from a "
            "detached table): compute h @ W.T with autograd on, so that both uses "
            "train W"
        )
    g = torch.randn_like(logits)
    (grad_w,) = torch.autograd.grad((want * g).sum(), emb.weight, retain_graph=True)
    (logits * g).sum().backward()
    if emb.weight.grad is None:
        raise ExerciseError("no gradient reached embedding.weight: is it detached?")
    if torch.allclose(emb.weight.grad[7], torch.zeros(C, dtype=torch.float64)):
        raise ExerciseError(
            "token 7 is never looked up, yet the logits' gradient should reach its row "
            "of embedding.weight: the output use sends none (detached, or a copy?)"
        )
    compare("the gradient of embedding.weight (both uses)", emb.weight.grad, grad_w)
    with torch.no_grad():  # an optimizer step changes W: the logits must follow
        emb.weight.add_(0.5 * torch.randn_like(emb.weight))
        if not is_close(head(h), h @ emb.weight.T):
            raise ExerciseError(
                "after embedding.weight changed (as an optimizer step changes it), the "
                "logits did not follow: the layer keeps a copy of W made in __init__ "
                "(clone, or a tensor of its own); read embedding.weight in forward"
            )
    _check_own_embedding(cls, head, emb)
    return (
        f"no parameters of its own ({want_n} in all, not {want_n + V * C}); logits "
        "h @ W^T; W's gradient sums the lookup's and the output's"
    )


def _check_own_embedding(cls: type, head: nn.Module, emb: nn.Module) -> None:
    """A second output layer, built on another embedding, must leave the first one
    scoring with its own table (nothing kept on the class)."""
    other = type(emb)(*emb.weight.shape).to(emb.weight.dtype)
    cls(other)
    h = torch.randn(1, 3, emb.weight.size(1), dtype=emb.weight.dtype)
    with torch.no_grad():
        got = head(h)
        if not is_close(got, h @ emb.weight.T) and is_close(got, h @ other.weight.T):
            raise ExerciseError(
                "once a second output layer was built on another embedding, the first "
                "one scored with the second's table: the embedding was stored on the "
                "class, shared by every instance; store it on self"
            )


# 03 · positions -----------------------------------------------------------------------


# Angles built in float32, as the library builds its table, are off by up to about 6e-5
# at k * w_i = 1000 radians: right, and accepted; every slip below is off by far more.
SHIFT_ATOL = 2e-4


def shift_reference(x: Tensor, k: int) -> Tensor:
    """x (..., C) -> R_k x, notebook 03's shift: each pair (x[2i], x[2i+1]), a sine
    and a cosine, turned by the angle k * w_i, w_i = 10000^(-2i/C), so that a row
    PE(p) of the table becomes PE(p + k)."""
    return _turn_pairs(x, _shift_angles(x, k))


def _shift_angles(x: Tensor, k: int, exponent: float = -2.0) -> Tensor:
    """k * 10000^(exponent * i / C) for the C/2 pairs of x (..., C), in x's dtype."""
    C = x.size(-1)
    pairs = torch.arange(C // 2, dtype=torch.float64)
    return (k * 10000.0 ** (exponent * pairs / C)).to(x.dtype)  # (C/2,)


def _turn_pairs(x: Tensor, angle: Tensor, sign: int = 1) -> Tensor:
    """Each (a, b) = (x[2i], x[2i+1]) to (a cos + b sin, -a sin + b cos) of angle[i]
    (sign=-1: the other way)."""
    a, b = x[..., 0::2], x[..., 1::2]  # (..., C/2) each
    c, s = angle.cos(), sign * angle.sin()
    return torch.stack([a * c + b * s, -a * s + b * c], -1).flatten(-2)  # (..., C)


def _sinusoids(d_model: int, n: int) -> Tensor:
    """Notebook 03's table PE (n, C) in float64: sin and cos of pos * w_i."""
    angle = torch.arange(n, dtype=torch.float64)[:, None] * _shift_angles(
        torch.zeros(d_model, dtype=torch.float64), 1
    )  # (n, C/2)
    return torch.stack([angle.sin(), angle.cos()], -1).flatten(-2)  # (n, C)


def _shift_hint(x: Tensor, k: int, got: Tensor) -> str | None:
    """Name the usual mistake that turned x (..., 16) into `got`, if any."""
    C = x.size(-1)
    halves = torch.stack([x[..., : C // 2], x[..., C // 2 :]], -1).flatten(-2)
    turned_halves = shift_reference(halves, k)
    a, b = x[..., 0::2], x[..., 1::2]
    angle = _shift_angles(x, k)
    first = a * angle.cos() + b * angle.sin()
    second = -first * angle.sin() + b * angle.cos()  # from the new first coordinate
    hints = (
        (
            x,
            "my_shift_encoding returned x unchanged: turn each pair by the angle k * "
            "w_i",
        ),
        (
            _turn_pairs(x, angle, sign=-1),
            f"each pair was turned the other way: my_shift_encoding(pe[p], {k}) gave "
            f"pe[p - {k}]; the table stores the sine first, so R_k turns (a, b) = "
            "(sine, cosine) into (a cos + b sin, -a sin + b cos), with the cos and "
            "sin of k * w_i",
        ),
        (
            torch.cat([turned_halves[..., 0::2], turned_halves[..., 1::2]], -1),
            "feature i was paired with feature i + C/2 (a layout some RoPE code "
            "uses, not the table's): the table interleaves, pair i is (x[2i], "
            "x[2i+1]), its sine and its cosine",
        ),
        (
            torch.cat(
                [shift_reference(x, k)[..., 0::2], shift_reference(x, k)[..., 1::2]], -1
            ),
            "the turned pairs were concatenated, all sines then all cosines: "
            "interleave them back, torch.stack([...], -1).flatten(-2), so that pair "
            "i stays at x[2i], x[2i+1]",
        ),
        (
            torch.stack([first, second], -1).flatten(-2),
            "the cosine was computed from the sine already turned: both new values "
            "come from the old pair (a, b), a cos + b sin and -a sin + b cos "
            "(compute both, then write them)",
        ),
        (
            _turn_pairs(x, _shift_angles(x, k, exponent=-1.0)),
            "pair i turns at w = 10000^(-i/C), expected 10000^(-2i/C): the exponent "
            "counts the dimension 2i, not the pair i",
        ),
        (
            _turn_pairs(x, _shift_angles(x, k, exponent=-4.0)),
            "pair i turns at 10000^(-4i/C): the exponent is -2i/C, and "
            "torch.arange(0, C, 2) already counts 2i (do not double it)",
        ),
        (
            _turn_pairs(x, _shift_angles(x, k, exponent=2.0)),
            "pair i turns at 10000^(+2i/C), faster and faster: the exponent is "
            "negative, 10000^(-2i/C), so that pair 0 turns fastest",
        ),
        (
            _turn_pairs(x, angle * 180 / math.pi),
            "the angle was used in degrees: torch.cos and torch.sin take radians, "
            "k * w_i as it is",
        ),
    )
    for variant, hint in hints:  # loose: angles in float32 drift by up to 1e-3 rad
        if is_close(got, variant, atol=1e-2):
            return hint
    return None


class _NoSquareMatrix(TorchFunctionMode):
    """Refuse any (C, C) tensor, C the width of x: the build-it turns the pairs, the
    notebook's shift_matrix builds the matrix."""

    def __init__(self, width: int):
        super().__init__()
        self.width = width

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for arg in tree_flatten((args, kwargs))[0]:
            if isinstance(arg, Tensor) and tuple(arg.shape[-2:]) == (self.width,) * 2:
                raise ExerciseError(
                    f"my_shift_encoding built a ({self.width}, {self.width}) matrix, "
                    "R_k itself (shift_matrix above does that): turn each pair "
                    "(x[2i], x[2i+1]) directly, 2C multiplications, not C^2"
                )
        return func(*args, **kwargs)


@checker("shift an encoding by k")
def check_shift_encoding(fn: Callable[[Tensor, int], Tensor]) -> str:
    """fn(x (..., C), k) -> R_k x: a row of the table moves k positions on; random
    vectors turn by the same rotation; no (C, C) matrix is built."""
    table = _sinusoids(16, 64)  # (N, C)
    given = table[:40].clone()
    with _NoSquareMatrix(16):
        got = fn(given, 7)
    if not torch.equal(given, table[:40]):
        raise ExerciseError(
            "my_shift_encoding wrote into its input x: return a new tensor "
            "(torch.stack, then flatten) and leave the caller's x as it was"
        )
    if (
        isinstance(got, Tensor)
        and got.shape == given.shape
        and not is_close(got, table[7:47], atol=SHIFT_ATOL)
    ):
        hint = _shift_hint(given, 7, got)
        if hint:
            raise ExerciseError(hint)
    compare(
        "my_shift_encoding(pe[:40], 7) against pe[7:47]",
        got,
        table[7:47],
        atol=SHIFT_ATOL,
    )
    g = torch.Generator().manual_seed(0)
    for shape, k in [((2, 3, 16), 5), ((4, 8), -3), ((2, 64), 1000), ((3, 16), 0)]:
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        got, want = fn(x.clone(), k), shift_reference(x, k)
        if (
            isinstance(got, Tensor)
            and got.shape == x.shape
            and not is_close(got, want, atol=SHIFT_ATOL)
        ):
            if is_close(got, shift_reference(x, 7), atol=SHIFT_ATOL):
                raise ExerciseError(
                    f"my_shift_encoding(x, {k}) turned by the angles of k = 7, the "
                    "first call's: something kept between calls (a cache keyed by C "
                    "alone) answered; key it by C and k, or compute it each call"
                )
            hint = _shift_hint(x, k, got) if x.size(-1) == 16 else None
            raise ExerciseError(
                hint
                or f"my_shift_encoding(x, {k}) for a random x {tuple(shape)}: right "
                "on the table's rows, wrong here; R_k turns whatever pairs x holds "
                "(did it look the table up, or rebuild it?), so turn x's own pairs"
            )
        compare(f"my_shift_encoding(x {tuple(shape)}, {k})", got, want, atol=SHIFT_ATOL)
    x = table[:5].float()
    got = fn(x.clone(), 3)
    if isinstance(got, Tensor) and got.dtype != x.dtype:
        raise ExerciseError(
            f"my_shift_encoding: a float32 x gave a {str(got.dtype)[6:]} result: "
            "return x's dtype (cast cos and sin to x.dtype before turning)"
        )
    compare(
        "my_shift_encoding(pe[:5] in float32, 3)", got, table[3:8].float(), atol=1e-5
    )
    return (
        "pe[p] turns into pe[p + 7], and random vectors of widths 8, 16 and 64 by "
        "R_k for k = 5, -3, 1000 and 0"
    )


# 04 · attention with a mask ----------------------------------------------------------


def masked_attention_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor,
    scale: float | None = None,
    fill: float = -math.inf,
    dim: int = -1,
    slip: str = "",
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d_k), -inf where allowed is False) v -> (output, weights).
    With an argument set, a usual mistake (to recognise it): another scale, fill 0 (a
    blocked score of 0), dim (the softmax over another axis), slip "inverted" (-inf
    where allowed is True), "ignored" (no mask) or "after" (the weights zeroed after the
    softmax)."""
    root = math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) / root  # (..., T_q, T_k)
    if slip == "after":
        w = scores.softmax(-1).masked_fill(~allowed, 0.0)
        return w @ v, w
    if slip != "ignored":
        scores = scores.masked_fill(allowed if slip == "inverted" else ~allowed, fill)
    w = scores.softmax(dim)
    return w @ v, w


_MASK_MISTAKES = (
    (
        {"slip": "inverted"},
        "allowed was read the wrong way round: True means the query may see the key; "
        "fill -inf where allowed is False, masked_fill(~allowed, float('-inf'))",
    ),
    (
        {"fill": 0.0},
        "the blocked scores were set to 0, not -inf: e^0 = 1, so a blocked key still "
        "gets weight; masked_fill(~allowed, float('-inf'))",
    ),
    (
        {"slip": "after"},
        "the weights were zeroed after the softmax, so a row no longer sums to 1: "
        "fill the scores with -inf before the softmax, which then shares the row "
        "among the allowed keys",
    ),
    (
        {"slip": "ignored"},
        "allowed was ignored: every query saw every key; fill the scores of the "
        "blocked keys with -inf before the softmax",
    ),
    (
        {"dim": -2},
        "the softmax ran over the queries (dim=-2, or dim=0 of a (T_q, T_k) matrix): "
        "each query's weights over the keys sum to 1, softmax(dim=-1)",
    ),
    ({"scale": 1.0}, "the scores q k^T were not divided by sqrt(d_k)"),
)


def _mask_hint(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, w) -> str | None:
    """Name the usual mistake that gives the weights `w`, if any."""
    if not isinstance(w, Tensor):
        return None
    w = w.detach()
    mistakes = list(_MASK_MISTAKES)
    if q.dim() == 3:
        mistakes.append(
            (
                {"dim": 0},
                "the softmax ran over the batch (dim=0): each query's weights over "
                "the keys sum to 1, softmax(dim=-1)",
            )
        )
    d_k, d_v, T_k = q.size(-1), v.size(-1), k.size(-2)
    for scale, message in (
        (d_k, "the scores were divided by d_k, not by its square root, sqrt(d_k)"),
        (
            math.sqrt(d_v),
            "the scores were divided by sqrt(d_v), the values' width: the scale is "
            "sqrt(d_k), the width of q and k, q.size(-1)",
        ),
        (
            math.sqrt(T_k),
            "the scores were divided by sqrt(T_k), the number of keys: the scale is "
            "sqrt(d_k), the width of q and k, q.size(-1)",
        ),
    ):
        if scale != math.sqrt(d_k):
            mistakes.append(({"scale": scale}, message))
    for kwargs, message in mistakes:
        want = masked_attention_reference(q, k, v, allowed, **kwargs)[1]
        if is_close(w, want, equal_nan=True):
            return message
    return None


def _mask_case(fn: Callable, label: str, q: Tensor, k: Tensor, v: Tensor, allowed):
    """One call of the learner's function on float64 inputs, its weights and output
    compared with the reference's, the usual mistake named."""
    mine = q.clone(), k.clone(), v.clone(), allowed.clone()
    try:
        got = fn(*mine)
    except (RuntimeError, IndexError) as e:
        if q.dim() == 2:
            raise
        if "shape of the mask" in str(e):
            raise ExerciseError(
                f"{label}: {type(e).__name__} ({first_line(e)}): scores[~allowed] "
                "needs a mask of the scores' full shape; masked_fill(~allowed, ...) "
                "broadcasts a (T_q, T_k) mask over the batch"
            ) from None
        raise ExerciseError(
            f"{label}: {type(e).__name__} ({first_line(e)}): it ran on (T, d) inputs "
            "but not on a batch (B, T, d); transpose only the last two axes of k, "
            "k.transpose(-2, -1) (k.T and k.transpose(0, 1) move the batch axis)"
        ) from None
    for name, given, kept in zip(("q", "k", "v", "allowed"), (q, k, v, allowed), mine):
        if not torch.equal(given, kept):
            raise ExerciseError(
                f"{name} was changed in place ({name} /= ..., masked_fill_?): the "
                f"caller's {name} must stay as it was; compute into a new tensor"
            )
    if not (isinstance(got, tuple) and len(got) == 2):
        raise ExerciseError("return a pair (output, weights)")
    out, w = got
    want_out, want_w = masked_attention_reference(q, k, v, allowed)
    if (
        want_out.shape != want_w.shape
        and getattr(out, "shape", None) == want_w.shape
        and getattr(w, "shape", None) == want_out.shape
    ):
        raise ExerciseError(
            "the pair came back as (weights, output): return (output, weights), the "
            "output first"
        )
    if not is_close(w, want_w):
        hint = _mask_hint(q, k, v, allowed, w)
        if hint:
            raise ExerciseError(f"{hint} ({label})")
    compare(f"weights for {label}", w, want_w, atol=1e-9)
    compare(f"output for {label}", out, want_out, atol=1e-9)


def _random_allowed(shape: tuple[int, ...], g: torch.Generator) -> Tensor:
    """A random bool mask of `shape` (..., T_q, T_k) in which every query may see at
    least one key."""
    allowed = torch.rand(shape, generator=g) < 0.5
    one = torch.randint(shape[-1], (*shape[:-1], 1), generator=g)  # a key per query
    return allowed.scatter(-1, one, True)


def _weights_carry_gradient(w: object) -> None:
    """Refuse attention weights returned detached: a loss on them could not train."""
    if not (isinstance(w, Tensor) and w.requires_grad):
        raise ExerciseError(
            "the weights returned carry no gradient (detached): return them as "
            "computed; detach only where you plot them"
        )


def _same_qkv_gradients(mine: Sequence[Tensor], ref: Sequence[Tensor]) -> None:
    """After one backward pass through the answer and one through the reference, the
    gradients of q, k and v must reach them and be equal."""
    for name, a, b in zip("qkv", mine, ref):
        if a.grad is None:
            raise ExerciseError(
                f"no gradient reached {name}: the output was detached (or computed "
                "under torch.no_grad()); attention must let q, k and v train"
            )
        compare(f"the gradient of {name}", a.grad, b.grad, atol=1e-9)


def _check_mask_backward(fn: Callable, q: Tensor, k: Tensor, v, allowed) -> None:
    """One backward pass through the answer: the gradients of q, k and v equal the
    reference's."""
    mine = [t.clone().requires_grad_() for t in (q, k, v)]
    out, w = fn(*mine, allowed)
    _weights_carry_gradient(w)
    ((out * out).sum() + (w * w).sum()).backward()
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    want_out, want_w = masked_attention_reference(*ref, allowed)
    ((want_out * want_out).sum() + (want_w * want_w).sum()).backward()
    _same_qkv_gradients(mine, ref)


@checker("attention with a mask")
def check_attention_with_mask(fn: Callable[..., tuple[Tensor, Tensor]]) -> str:
    """fn(q, k, v, allowed) -> (output (..., T_q, d_v), weights (..., T_q, T_k)):
    softmax(q k^T / sqrt(d_k)) v, with the scores of the keys that `allowed` (bool,
    True = may see) blocks set to -inf."""
    g = torch.Generator().manual_seed(0)
    # (batch, T_q, T_k, d_k, d_v, one mask per sentence): widths differ, so that a
    # scale or an axis taken from the wrong size shows
    cases = (
        ((), 4, 5, 3, 2, False),
        ((2,), 3, 6, 4, 5, True),
        ((3,), 4, 4, 2, 3, False),
    )
    for lead, T_q, T_k, d_k, d_v, per_sentence in cases:
        q = torch.randn(*lead, T_q, d_k, generator=g, dtype=torch.float64)
        k = torch.randn(*lead, T_k, d_k, generator=g, dtype=torch.float64)
        v = torch.randn(*lead, T_k, d_v, generator=g, dtype=torch.float64)
        allowed = _random_allowed((*lead, T_q, T_k) if per_sentence else (T_q, T_k), g)
        label = f"q {tuple(q.shape)}, allowed {tuple(allowed.shape)}"
        _mask_case(fn, label, q, k, v, allowed)
    # the docstring's example last: with q = k = 0 a missing scale does not show, and
    # a blocked score of 0 looks like no mask at all
    zeros = torch.zeros(3, 2, dtype=torch.float64)
    triangle = torch.ones(3, 3, dtype=torch.bool).tril()
    example = "the docstring's example (q = k = 0, allowed a lower triangle)"
    _mask_case(fn, example, zeros, zeros, torch.eye(3, dtype=torch.float64), triangle)
    _check_mask_backward(fn, q, k, v, allowed)
    out32, w32 = fn(q.float(), k.float(), v.float(), allowed)
    if out32.dtype != torch.float32 or w32.dtype != torch.float32:
        raise ExerciseError(
            f"float32 q, k, v gave a {out32.dtype} output and {w32.dtype} weights: "
            "keep q's dtype (no .double(), no tensors made in another dtype)"
        )
    return (
        "(4, 3) queries on 5 keys, a batch of 2 with a mask each, a batch of 3 sharing "
        "one mask, the docstring's example: weights, outputs and gradients"
    )


# 05 · multi-head attention ------------------------------------------------------------


def _mha_variant(
    m, query, key, value, mask, scale=None, split_wrong="", mix=True, **wrong
):
    """MultiHeadAttention's forward with a usual mistake, to recognise it (wrong:
    split_wrong="qkv", or "k" etc.: those projections split with a plain reshape;
    merge_wrong, the merge without the transpose back, by default when all three are
    split wrong; mask_after, mask_inverted or mask_multiplied=True; heads=1, no split
    into heads)."""
    B, T, C = query.shape
    H = wrong.get("heads", m.n_heads)
    D = C // H
    scale = scale or C // m.n_heads  # sqrt(d_head) of the heads asked for

    def split(x: Tensor, name: str) -> Tensor:  # (B, T, C) -> (B, H, T, D)
        if name in split_wrong:
            return x.reshape(B, H, x.size(1), D)
        return x.view(B, x.size(1), H, D).transpose(1, 2)

    q, k = split(m.q_proj(query), "q"), split(m.k_proj(key), "k")
    v = split(m.v_proj(value), "v")
    s = q @ k.transpose(-2, -1) / math.sqrt(scale)
    if mask is not None and wrong.get("mask_after"):
        y = (s.softmax(-1) * mask) @ v  # weights zeroed after the softmax
    else:
        if mask is not None and wrong.get("mask_multiplied"):
            s = s * mask  # a masked score of 0, not -inf
        elif mask is not None:
            s = s.masked_fill(mask if wrong.get("mask_inverted") else ~mask, -math.inf)
        y = s.softmax(-2 if wrong.get("softmax_queries") else -1) @ v  # (B, H, T, D)
    merge_wrong = wrong.get("merge_wrong", split_wrong == "qkv")
    merged = y.reshape(B, T, C) if merge_wrong else y.transpose(1, 2).reshape(B, T, C)
    return m.out_proj(merged) if mix else merged


def _close_where_finite(got, wrong: Tensor) -> bool:
    """Whether `got` is `wrong` at every position where `wrong` is finite (some, not
    all): a row with every key hidden is NaN there, and -1e9 or nan_to_num makes it
    something else."""
    if not (isinstance(got, Tensor) and got.shape == wrong.shape):
        return False
    finite = wrong.isfinite()
    if finite.all() or not finite.any():
        return is_close(got, wrong, equal_nan=True)
    return is_close(got.detach()[finite], wrong[finite])


def _wrong_split_of_one(name: str, got, ref, x: Tensor, kv: Tensor, mask) -> None:
    """Raise ExerciseError if one or two of q, k, v were split with a plain reshape
    (the others right), naming them."""
    projections = ("q", "k", "v", "qk", "qv", "kv")
    for wrong in projections:
        if is_close(got, _mha_variant(ref, x, kv, kv, mask, split_wrong=wrong)):
            which = " and ".join(f"{p}_proj" for p in wrong)
            right = " and ".join(f"{p}_proj" for p in "qkv" if p not in wrong)
            raise ExerciseError(
                f"{name}: the output of {which} was split into heads with "
                "reshape(B, H, T, D), which mixes positions and heads: "
                f"view(B, T, H, D), then transpose(1, 2), as for {right}"
            )


@checker("multi-head attention")
def check_multi_head_attention(cls: type) -> str:
    """cls(d_model, n_heads) with q_proj, k_proj, v_proj, out_proj; forward(query,
    key=None, value=None, mask=None) -> (B, T_q, C)."""
    from transformer_lib.multi_head import MultiHeadAttention

    torch.manual_seed(0)
    # 2 heads of 8: the head count and the head width differ, so sqrt(n_heads) shows
    ref = MultiHeadAttention(16, 2).double().eval()
    mine = cls(16, 2)
    layers = [
        getattr(mine, n, None) for n in ("q_proj", "k_proj", "v_proj", "out_proj")
    ]
    shared = [
        f"{a}_proj and {b}_proj"
        for (a, la), (b, lb) in itertools.combinations(zip("qkvo", layers), 2)
        if la is not None and la is lb
    ]
    if shared:
        raise ExerciseError(
            f"{shared[0]} are one nn.Linear under two names (a = b = nn.Linear(...) "
            "makes one layer): build each projection as its own nn.Linear, with its "
            "own weights"
        )
    load_weights(mine, ref.state_dict(), "MyMultiHeadAttention")
    mine.double().eval()
    x, mem = torch.randn(2, 5, 16).double(), torch.randn(2, 7, 16).double()
    pad = torch.tensor([[1] * 7, [1] * 4 + [0] * 3], dtype=torch.bool)[:, None, None]
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    cases = (
        ("self-attention", (x,), None),
        ("self-attention, causal mask", (x,), causal),
        ("cross-attention, padded keys", (x, mem, mem), pad),
    )
    for name, args, mask in cases:
        try:
            got = first_output(mine(*args, mask=mask))
        except RuntimeError as e:
            said = f"{name}: RuntimeError ({first_line(e)})"
            if "Boolean value of Tensor" in str(e):
                line = learner_line(e)
                raise ExerciseError(
                    f"{said}: `{line}` asks a tensor whether it is true; test "
                    + (
                        "for None: if mask is not None"
                        if "mask" in line
                        else "for None: key = query if key is None else key"
                    )
                ) from None
            if len(args) == 1 and mask is not None and "must match" in str(e):
                raise ExerciseError(
                    f"{said} with a mask of shape {tuple(mask.shape)}: was the mask "
                    "reshaped (mask.unsqueeze(1))? It comes broadcastable to (B, H, "
                    "T_q, T_k), as the docstring says: (T, T) here, (B, 1, 1, T_k) "
                    "for padding; use it as given, scores.masked_fill(~mask, -inf)"
                ) from None
            if len(args) == 1 or "size" not in str(e):
                raise
            raise ExerciseError(
                f"{name}: RuntimeError ({first_line(e)}) with 5 queries and 7 "
                "keys: the keys and values come from key and value, k_proj(key) and "
                "v_proj(value), not from query"
            ) from None
        kv = args[1] if len(args) > 1 else x
        want = ref(x, kv, kv, mask=mask)[0]
        if is_close(got, want):
            continue
        with torch.no_grad():
            _mha_more_hints(name, got, ref, x, kv, mask, causal)
            if is_close(got, _mha_variant(ref, x, kv, kv, mask, scale=16)):
                raise ExerciseError(
                    f"{name}: scores divided by sqrt(d_model) = sqrt(16), expected "
                    "sqrt(d_head) = sqrt(8): each head has width d_model / n_heads"
                )
            T_k = kv.size(1)
            if is_close(got, _mha_variant(ref, x, kv, kv, mask, scale=T_k)):
                raise ExerciseError(
                    f"{name}: scores divided by sqrt({T_k}), the number of keys "
                    "(k.size(-2)), expected sqrt(d_head) = sqrt(8): the scale is one "
                    "head's width, q.size(-1), whatever the sequence's length"
                )
            if is_close(got, _mha_variant(ref, x, kv, kv, mask, scale=2)):
                raise ExerciseError(
                    f"{name}: scores divided by sqrt(n_heads) = sqrt(2), expected "
                    "sqrt(d_head) = sqrt(8): the scale is one head's width, "
                    "d_model / n_heads"
                )
            if any(
                is_close(got, _mha_variant(ref, x, kv, kv, mask, scale=c, heads=1))
                for c in (8, 16)
            ):
                raise ExerciseError(
                    f"{name}: one head of width d_model = 16, not split: split q, k "
                    "and v into n_heads = 2 heads of d_head = 8, view(B, T, H, D)"
                    ".transpose(1, 2), attend in each, and merge them back"
                )
            if is_close(got, _mha_variant(ref, x, kv, kv, mask, scale=1)):
                raise ExerciseError(
                    f"{name}: the scores q k^T were not scaled: divide them by "
                    "sqrt(d_head) = sqrt(8), d_head = d_model / n_heads"
                )
            if any(
                is_close(
                    got,
                    _mha_variant(
                        ref, x, kv, kv, mask, split_wrong="qkv", merge_wrong=w
                    ),
                )
                for w in (True, False)
            ):
                raise ExerciseError(
                    f"{name}: heads split with reshape(B, H, T, D), which mixes "
                    "positions: view(B, T, H, D), then transpose(1, 2)"
                )
            _wrong_split_of_one(name, got, ref, x, kv, mask)
            if is_close(got, _mha_variant(ref, x, kv, kv, mask, merge_wrong=True)):
                raise ExerciseError(
                    f"{name}: the heads (B, H, T, D) were merged with reshape(B, T, C) "
                    "alone, which mixes positions: transpose(1, 2) back first"
                )
            if is_close(got, _mha_variant(ref, x, kv, kv, mask, softmax_queries=True)):
                raise ExerciseError(
                    f"{name}: the softmax ran over the queries (dim -2): each query's "
                    "weights over the keys sum to 1, softmax(dim=-1)"
                )
            if is_close(got, _mha_variant(ref, x, kv, kv, mask, mix=False)):
                raise ExerciseError(
                    f"{name}: the merged heads were not mixed by out_proj (W_O)"
                )
            if mask is not None and is_close(
                got, _mha_variant(ref, x, kv, kv, mask, mask_after=True)
            ):
                raise ExerciseError(
                    f"{name}: the mask was applied after the softmax: fill the masked "
                    "scores with -inf before it, so that each row's weights sum to 1"
                )
            if mask is not None and is_close(got, ref(x, kv, kv)[0]):
                raise ExerciseError(f"{name}: the mask was ignored")
            if mask is not None and _close_where_finite(
                got, _mha_variant(ref, x, kv, kv, mask, mask_inverted=True)
            ):
                raise ExerciseError(
                    f"{name}: the mask is inverted: True means may attend, so fill "
                    "the scores where it is False, masked_fill(~mask, float('-inf'))"
                )
            if (
                mask is not None
                and mask.size(-1) == mask.size(-2)
                and is_close(got, _mha_variant(ref, x, kv, kv, mask.mT))
            ):
                raise ExerciseError(
                    f"{name}: the mask is transposed (mask.mT, or triu()): query t saw "
                    "itself and the later keys; mask[..., t, s] says whether query t "
                    "may see key s, use it as given, masked_fill(~mask, "
                    "float('-inf'))"
                )
            if mask is not None and is_close(
                got, _mha_variant(ref, x, kv, kv, mask, mask_multiplied=True)
            ):
                raise ExerciseError(
                    f"{name}: the scores were multiplied by the mask: a masked score "
                    "becomes 0, not -inf, and still gets weight; masked_fill(~mask, "
                    "float('-inf'))"
                )
        name_unused(name, got, mine)
        compare(name, got, want)
    try:  # forward(query, key): the values are the keys' sequence
        got = first_output(mine(x, mem, mask=pad))
    except RuntimeError:
        got = None
    if got is None or not is_close(got, ref(x, mem, mem, mask=pad)[0]):
        raise ExerciseError(
            "cross-attention called as forward(query, key): value=None must default "
            "to key (keys and values come from the same sequence), not to query"
        )
    _key_defaults_to_query(mine, ref, x)
    from transformer_lib.exercises.part2 import _no_dropout

    got = first_output(mine(x, mem, mem, mask=pad))
    # a pair (output, weights), as the library's layer returns, is accepted
    _no_dropout(mine, lambda: first_output(mine(x, mem, mem, mask=pad)), got)
    first_output(mine(x, mem, mem, mask=pad)).pow(2).sum().backward()
    ref(x, mem, mem, mask=pad)[0].pow(2).sum().backward()
    compare_grads(mine, ref, "MyMultiHeadAttention")
    compare_input_grads(
        "MyMultiHeadAttention",
        lambda query, key, value: mine(query, key, value, mask=pad),
        lambda query, key, value: ref(query, key, value, mask=pad),
        query=x,
        key=mem,
        value=mem,
    )
    mine.eval()
    own_state(
        "MyMultiHeadAttention",
        mine,
        lambda: cls(16, 4),
        lambda: first_output(mine(x, mem, mem, mask=pad)),
    )
    return (
        "equals MultiHeadAttention: self-attention, causal, cross-attention with "
        "padding; gradients"
    )


def _mha_more_hints(name, got, ref, x, kv, mask, causal) -> None:
    """A causal mask applied when none is given, the output projection applied to the
    values, the head width given as the number of heads."""
    if mask is None and kv is x and is_close(got, ref(x, x, x, mask=causal)[0]):
        raise ExerciseError(
            f"{name}: a causal mask was applied though none was given: apply only "
            "the mask passed (mask=None: every query sees every key)"
        )
    early = copy.deepcopy(ref)
    early.v_proj = nn.Sequential(ref.v_proj, ref.out_proj)
    if is_close(got, _mha_variant(early, x, kv, kv, mask, mix=False)):
        raise ExerciseError(
            f"{name}: out_proj was applied to the values, before attention: it "
            "comes last, on the merged heads, out_proj(merge(heads))"
        )
    D = x.size(-1) // ref.n_heads
    if D != ref.n_heads and is_close(
        got, _mha_variant(ref, x, kv, kv, mask, heads=D, scale=ref.n_heads)
    ):
        raise ExerciseError(
            f"{name}: the heads were split into {D} heads of width {ref.n_heads}: "
            f"the head width d_head = {D} was passed where the number of heads "
            f"n_heads = {ref.n_heads} goes"
        )


def _key_defaults_to_query(mine: nn.Module, ref: nn.Module, x: Tensor) -> None:
    """forward(query, value=v): key=None defaults to query, whatever value is."""
    v = torch.randn_like(x)
    with torch.no_grad():
        try:
            got = first_output(mine(x, value=v))
        except RuntimeError:
            got = None
        if got is None or not is_close(got, ref(x, x, v)[0]):
            raise ExerciseError(
                "forward(query, value=v): key=None must default to query, as the "
                "docstring says, even when value is given (not to value): key = "
                "query if key is None else key"
            )


# 06 · a sliding-window mask with padding ----------------------------------------------


def sliding_window_reference(ids: Tensor, pad_id: int, window: int) -> Tensor:
    """The mask (B, 1, T, T) built entry by entry: query t may see key s when
    t - window < s <= t and ids[b, s] is not pad_id."""
    B, T = ids.shape
    mask = torch.zeros(B, 1, T, T, dtype=torch.bool)
    for b in range(B):
        for t in range(T):
            for s in range(T):
                mask[b, 0, t, s] = t - window < s <= t and ids[b, s] != pad_id
    return mask


def _window_hint(got: Tensor, ids: Tensor, pad_id: int, window: int) -> str | None:
    """Name the usual mistake that gives the mask `got`, if any."""
    want = sliding_window_reference(ids, pad_id, window)
    if got.shape == want.shape and torch.equal(got, want.transpose(-1, -2)):
        return (
            "the mask is transposed: rows are queries and columns keys, "
            "mask[b, 0, t, s] says whether query t may see key s"
        )
    T = ids.size(1)
    if got.shape == want.shape and torch.equal(
        got, sliding_window_reference(ids, pad_id, T)
    ):
        return (
            "the window is missing: this is the causal mask with padding; query t "
            f"sees only the keys t - {window} + 1 .. t"
        )
    eye = torch.eye(T, dtype=torch.bool)
    if got.shape == want.shape and torch.equal(got, want & ~eye):
        return (
            "query t cannot see key t: the window t - window + 1 .. t includes the "
            "query's own position (the diagonal)"
        )
    band = sliding_window_reference(torch.ones_like(ids), 0, window)  # no padding
    if torch.equal(got, band & (ids == pad_id)[:, None, None, :]):
        return (
            "only the <pad> keys may be seen: the padding term is reversed; keep the "
            "keys where ids != pad_id"
        )
    shifted = sliding_window_reference(ids, pad_id, window + 1) & ~eye
    if torch.equal(got, shifted):
        return (
            f"the band is one step early: query t sees keys t - {window} .. t - 1, "
            f"not itself; the window is keys t - {window} + 1 .. t, the query's own "
            "position included"
        )
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    precedence = ((ids != pad_id)[:, None, None, :] & (j <= i) & (i - j)) < window
    if torch.equal(got, precedence):
        return (
            "& binds tighter than <, so a & b & (i - j) < window reads as "
            "(a & b & (i - j)) < window: put each comparison in parentheses, "
            "((i - j) < window)"
        )
    if torch.equal(got, band | (ids != pad_id)[:, None, None, :]):
        return (
            "the band and the padding were combined with + (or |), which for bools "
            "is OR: a key is then visible if either allows it; combine them with &"
        )
    later = got[:, 0].triu(1)  # (B, T, T): keys after their query
    if later.any():
        b, t, s = later.nonzero()[0].tolist()
        return f"query {t} may see key {s}, a later token (row {b}): keep it causal"
    for w, size, by in (
        (window + 1, "window + 1", "one"),
        (window - 1, "window - 1", "one"),
        (window + 2, "window + 2", "two"),
    ):
        if w > 0 and torch.equal(got, sliding_window_reference(ids, pad_id, w)):
            return (
                f"off by {by}: each query sees {size} positions; query t sees the "
                f"{window} keys t - {window} + 1 .. t"
            )
    zero = sliding_window_reference(ids, pad_id, window) & (ids != 0)[:, None, None]
    if pad_id != 0 and torch.equal(got, zero):
        return (
            f"token 0 was masked as well as <pad> ({pad_id}): 0 is a token here; "
            "mask the keys where ids == pad_id only"
        )
    pads = ids == pad_id
    first = torch.where(pads.any(1), pads.int().argmax(1), T)  # (B,)
    before = (torch.arange(T)[None, :] < first[:, None])[:, None, None]  # (B, 1, 1, T)
    if torch.equal(got, band & before):
        return (
            "every key from the first <pad> on was masked, as if the padding were "
            "always at the end: <pad> may come first or in the middle too; mask "
            "exactly the keys where ids == pad_id"
        )
    keep = ids != pad_id  # (B, T)
    k = torch.arange(T)
    causal = (k[None, :] <= k[:, None])[None]  # (1, T, T)
    if torch.equal(got[:, 0], causal & (k < window) & keep[:, None, :]):
        return (
            f"the window was counted from the sequence's start: every query sees "
            f"keys 0 .. {window - 1} only; it slides with the query, keys "
            f"t - {window} + 1 .. t"
        )
    n = keep.cumsum(1) - 1  # each token's place among the non-<pad> ones
    if torch.equal(
        got[:, 0], causal & (n[:, None, :] > n[:, :, None] - window) & keep[:, None, :]
    ):
        return (
            f"the window was counted over the non-<pad> tokens, so it reaches past "
            f"the <pad> keys: it counts positions, keys t - {window} + 1 .. t, "
            "<pad> ones included (and hidden)"
        )
    no_pad = sliding_window_reference(torch.ones_like(ids), 0, window)
    if torch.equal(got, no_pad):
        return (
            "the padding is missing: queries may see <pad> keys (if you wrote a "
            "padding term: ~ on an integer tensor is a bitwise not, ~0 = -1 and ~1 = "
            "-2, both true; write ids != pad_id)"
        )
    rows = no_pad & (ids != pad_id)[:, None, :, None]
    if torch.equal(got, rows):
        return "padding masks the query rows; it must mask the key columns (last dim)"
    if torch.equal(got, rows & (ids != pad_id)[:, None, None, :]):
        return (
            "padding masks the query rows as well as the key columns: mask the key "
            "columns (last dim) only; the outputs at <pad> positions are never used"
        )
    return None


@checker("sliding-window mask")
def check_sliding_window_mask(fn: Callable[[Tensor, int, int], Tensor]) -> str:
    """fn(ids (B, T), pad_id, window) -> (B, 1, T, T) bool, True = may attend: query t
    sees the non-<pad> keys t - window + 1 .. t."""
    ids0 = torch.tensor([[5, 6, 7, 8, 9, 3, 0, 0], [0, 0, 6, 2, 2, 7, 1, 4]])
    ids1 = torch.tensor([[5, 0, 7, 8, 0, 3, 1, 1], [1, 1, 0, 2, 2, 7, 0, 4]])
    # window 8 = T: plain causal with padding; pad_id 1, where 0 is a token
    cases = ((ids0, 0, 3), (ids0, 0, 1), (ids0, 0, 8), (ids1, 1, 3))
    for ids, pad_id, window in cases:
        given = ids.clone()
        try:
            got = fn(given, pad_id, window)
        except RuntimeError as e:
            if "Boolean value of Tensor" in str(e):
                raise ExerciseError(
                    f"RuntimeError ({first_line(e)}): `and`, `or` and `not` ask a "
                    "whole tensor for one truth value; combine masks entry by entry "
                    "with &, | and ~"
                ) from None
            if "(2) must match the size of tensor b (8)" not in str(e):
                raise
            raise ExerciseError(
                f"RuntimeError ({first_line(e)}) for ids (2, 8): is the band (B, B) = "
                "(2, 2)? ids is (B, T): T is ids.size(1), the band (T, T)"
            ) from None
        if not torch.equal(given, ids):
            raise ExerciseError(
                "my_sliding_window_mask changed the ids it was given (ne_, "
                "masked_fill_, ... in place): the caller's ids must stay as they "
                "were; build the mask as a new tensor, ids != pad_id"
            )
        want = sliding_window_reference(ids, pad_id, window)
        _window_shape_hint(got, want, ids, window)
        if isinstance(got, Tensor) and pad_id and got.shape == want.shape:
            if torch.equal(got, sliding_window_reference(ids, 0, window)):
                raise ExerciseError(
                    f"pad_id={pad_id}, window={window}: token 0 was masked as <pad> "
                    "and <pad> was not: compare ids with pad_id, not with 0"
                )
        if isinstance(got, Tensor) and got.shape == want.shape[:1] + want.shape[2:]:
            raise ExerciseError(
                f"window={window}: shape {tuple(got.shape)}, expected "
                f"{tuple(want.shape)}: the head axis is missing; with it, (B, 1, T, "
                "T), the mask broadcasts over the heads: mask[:, None]"
            )
        same_kind = isinstance(got, Tensor) and got.shape == want.shape
        if same_kind and got.dtype == want.dtype and not torch.equal(got, want):
            hint = _window_hint(got, ids, pad_id, window)
            if hint:
                raise ExerciseError(f"pad_id={pad_id}, window={window}: {hint}")
        compare(f"the mask for pad_id={pad_id}, window={window}", got, want)
    _window_fresh_each_call(fn)
    return (
        "(2, 8) ids padded on the right and on the left; windows 3, 1 and 8; "
        "pad_id 0, and 1 where 0 is a token"
    )


def _window_fresh_each_call(fn: Callable) -> None:
    """Two calls of one (T, window) with other padding: each mask right, and the first
    one unchanged by the second call (a mask kept between calls and edited in place
    would change both)."""
    a = torch.tensor([[5, 6, 7, 8, 9, 3, 0, 0], [5, 6, 7, 8, 9, 3, 4, 2]])
    b = torch.tensor([[0, 0, 7, 8, 9, 3, 4, 2], [0, 6, 7, 0, 9, 3, 4, 2]])
    first = fn(a, 0, 3)
    kept = first.clone() if isinstance(first, Tensor) else first
    second = fn(b, 0, 3)
    if isinstance(first, Tensor) and not torch.equal(first, kept):
        raise ExerciseError(
            "a second call (same T and window, other padding) changed the mask the "
            "first call returned: a tensor kept between calls was edited in place "
            "(&=, masked_fill_); build each mask fresh, or combine out of place (a & b)"
        )
    want = sliding_window_reference(b, 0, 3)
    if isinstance(second, Tensor) and torch.equal(
        second, want & sliding_window_reference(a, 0, 3)
    ):
        raise ExerciseError(
            "a second call (same T and window, other padding) kept the first call's "
            "padding: a mask kept between calls (a cache keyed by T and window) "
            "was combined in place; build each mask fresh from its own ids"
        )
    compare("the mask for other padding, same T and window", second, want)


def _window_shape_hint(got, want: Tensor, ids: Tensor, window: int) -> None:
    """A mask of another shape that broadcasts to the one without padding."""
    if not isinstance(got, Tensor) or got.shape == want.shape:
        return
    no_pad = sliding_window_reference(torch.ones_like(ids), 0, window)
    try:
        same = torch.equal(got.to(torch.bool).expand_as(want), no_pad)
    except RuntimeError:
        return
    if same and not torch.equal(no_pad, want):
        raise ExerciseError(
            f"window={window}: shape {tuple(got.shape)}, expected {tuple(want.shape)}: "
            "the padding is missing: the mask must also hide each row's <pad> keys, "
            "so it has one (T, T) per sequence: (B, 1, T, T)"
        )


# 06 · attention with a linear distance penalty (ALiBi) --------------------------------


def alibi_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    slopes: Tensor,
    sign=-1.0,
    scaled=False,
    scale=None,
    slip="",
) -> tuple[Tensor, Tensor]:
    """Causal attention whose score (i, j) of head h has slopes[h] * (i - j) subtracted;
    with sign, scaled, scale or slip set, a usual mistake (to recognise it): slip
    "inverted" (the causal mask inverted), "multiply" (the scores multiplied by it),
    "dim-2" (the softmax over the queries) or "after" (the penalty added to the
    weights). slopes (H,), or (T,) spread over the
    keys by mistake when given as (1, 1, T)."""
    T = q.size(-2)
    pos = torch.arange(T, dtype=q.dtype)
    slopes = slopes[:, None, None] if slopes.dim() == 1 else slopes
    bias = sign * slopes * (pos[:, None] - pos)  # (H, T, T): slopes[h] * (i - j)
    root = math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1)
    scores = (scores + bias) / root if scaled else scores / root
    if not scaled and slip != "after":
        scores = scores + bias
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    keep = ~causal if slip == "inverted" else causal
    if slip == "multiply":
        scores = scores * keep  # a masked score of 0, not -inf
    else:
        scores = scores.masked_fill(~keep, -math.inf)
    w = scores.softmax(-2 if slip == "dim-2" else -1)
    w = w + bias if slip == "after" else w  # (B, H, T, T)
    return w @ v, w


_ALIBI_MISTAKES = (
    (
        {"slip": "inverted"},
        "the causal mask is inverted: query i saw the later keys j > i, and the last "
        "query none (a row of NaN); fill the scores of j > i with -inf",
    ),
    (
        {"slip": "multiply"},
        "the scores were multiplied by the causal mask: a later key's score becomes "
        "0, not -inf, and still gets weight; masked_fill(~causal, -inf)",
    ),
    (
        {"slip": "dim-2"},
        "the softmax ran over the queries (dim=-2): each query's weights over the keys "
        "sum to 1, softmax(dim=-1)",
    ),
    (
        {"slip": "after"},
        "the penalty was added to the weights, after the softmax: add it to the "
        "scores, before the softmax",
    ),
    (
        {"sign": 1.0},
        "the penalty has the wrong sign: far keys gain; the score must lose "
        "slopes[h] * (i - j), where i - j >= 0 for the keys query i sees (written "
        "j - i, the subtraction adds)",
    ),
    (
        {"scaled": True},
        "the penalty was divided by sqrt(d_k) too: add it after scaling",
    ),
    ({"scale": 1.0}, "the scores q k^T were not divided by sqrt(d_k)"),
)


def _alibi_hint(q: Tensor, k: Tensor, v: Tensor, slopes: Tensor, w) -> str | None:
    """Name the usual mistake that gives the weights `w` (B, H, T, T), if any."""
    if not (isinstance(w, Tensor) and w.shape == q.shape[:-1] + q.shape[-2:-1]):
        return None
    w = w.detach()
    for kwargs, message in _ALIBI_MISTAKES:
        if is_close(w, alibi_reference(q, k, v, slopes, **kwargs)[1], equal_nan=True):
            return message
    if is_close(w, alibi_reference(q, k, v, slopes, scale=q.size(-1))[1]):
        return "the scores were divided by d_k, not by its square root, sqrt(d_k)"
    T = q.size(-2)
    if T != q.size(-1) and is_close(
        w, alibi_reference(q, k, v, slopes, scale=math.sqrt(T))[1]
    ):
        return (
            "the scores were divided by sqrt(T), the number of positions (q.size(-2)): "
            "the scale is sqrt(d_k), the width of q and k, q.size(-1)"
        )
    pos = torch.arange(T, dtype=q.dtype)
    whole = (slopes[:, None, None] * (pos[:, None] - pos)).trunc()  # (H, T, T)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) - whole
    later = torch.ones(T, T, dtype=torch.bool).triu(1)
    if is_close(w, scores.masked_fill(later, -math.inf).softmax(-1)):
        return (
            "the penalty was rounded to whole numbers (.long() or int): keep "
            "slopes[h] * (i - j) in q's float dtype"
        )
    root_v = math.sqrt(v.size(-1))
    if v.size(-1) != q.size(-1) and is_close(
        w, alibi_reference(q, k, v, slopes, scale=root_v)[1]
    ):
        return (
            "the scores were divided by sqrt(D_v), the values' width: the scale is "
            "sqrt(d_k), the width of q and k"
        )
    if len(slopes) > 1 and is_close(
        w, alibi_reference(q, k, v, slopes[:1].expand(len(slopes)))[1]
    ):
        return "every head used slopes[0]: head h subtracts slopes[h] * (i - j)"
    for wrong, message in (
        (slopes * 0, "no penalty at all: subtract slopes[h] * (i - j) from the scores"),
        (
            slopes.mean().expand(len(slopes)),
            "every head used one slope, the slopes' mean: head h subtracts its own "
            "slopes[h] * (i - j)",
        ),
        (
            slopes.flip(0),
            "the slopes were reversed: head 0 takes slopes[0] = 1/2, the steepest",
        ),
    ):
        if len(slopes) > 1 and is_close(w, alibi_reference(q, k, v, wrong)[1]):
            return message
    T = w.size(-1)
    i, j = torch.ones(T, T, dtype=torch.bool).tril(-1).nonzero().T
    earlier = w[..., i, j]  # the weights of the keys before each query
    if ((earlier == 0) | earlier.isnan()).all() and (w.triu(1) > 0).any():
        return (
            "query i gives no weight to the earlier keys j < i and weight to the "
            "later ones: the mask is reversed; -inf where j > i (triu(1)), keep j <= i"
        )
    diagonal = w[..., range(T), range(T)]
    if ((diagonal == 0) | diagonal.isnan()).all():
        return (
            "query i gives no weight to key i: query i must see key i (the "
            "diagonal); mask only the later keys, j > i (triu(1))"
        )
    if not torch.allclose(w.sum(-1), torch.ones_like(w[..., 0])):
        if (w.triu(1) == 0).all():
            return (
                "the rows of the weights do not sum to 1, and the later keys have no "
                "weight: the weights were masked after the softmax; fill the scores "
                "with -inf before it"
            )
        return (
            "the rows of the weights do not sum to 1: each row is a softmax over the "
            "keys (dim=-1) of the penalised, masked scores"
        )
    later = w[0, 0].triu(1) != 0  # (T, T)
    if later.any():
        i, j = later.nonzero()[0].tolist()
        return f"query {i} gives weight to key {j}, a later one: keep the causal mask"
    if is_close(w, alibi_reference(q, k, v, slopes[None, None, :])[1]):  # H == T
        return (
            "slopes[h] must multiply head h: the slopes were spread over the keys; use "
            "slopes[:, None, None] against the (T, T) distances"
        )
    if w.size(1) == w.size(-1) and is_close(
        w, alibi_reference(q, k, v, slopes[None, :, None])[1]
    ):
        return (
            "slopes[h] must multiply head h: the slopes were spread over the queries "
            "(slopes[:, None]); use slopes[:, None, None] against the (T, T) distances"
        )
    return None


def _check_alibi_backward(fn: Callable, *given: Tensor) -> None:
    """One backward pass through the answer, as training runs it: the gradients of q,
    k and v equal the reference's."""
    q, k, v, slopes = (t.clone().requires_grad_(i < 3) for i, t in enumerate(given))
    try:
        out, w = fn(q, k, v, slopes)
        ((out * out).sum() + (w * w).sum()).backward()
    except RuntimeError as e:
        if "inplace" not in str(e):
            raise
        raise ExerciseError(
            "the backward pass failed: a tensor autograd needed was changed in place "
            "(masked_fill_ on the softmax's output, or *=, +=): the -inf fill before "
            "the softmax already gives the later keys 0; use out-of-place operations "
            "(masked_fill, no underscore)"
        ) from None
    ref = [t.detach().clone().requires_grad_() for t in given[:3]]
    want_out, want_w = alibi_reference(*ref, given[3])
    ((want_out * want_out).sum() + (want_w * want_w).sum()).backward()
    _weights_carry_gradient(w)
    _same_qkv_gradients((q, k, v), ref)


@checker("attention with ALiBi")
def check_alibi_attention(fn: Callable[..., tuple[Tensor, Tensor]]) -> str:
    """fn(q, k, v, slopes) -> (out (B, H, T, D_v), weights (B, H, T, T)): causal
    attention whose score of query i and key j <= i in head h is q.k / sqrt(d_k) -
    slopes[h] * (i - j)."""
    g = torch.Generator().manual_seed(0)
    for shape in ((2, 5, 5, 8), (1, 2, 7, 4)):  # H == T first: the slopes' axis shows
        B, H, T, _ = shape
        q, k = (torch.randn(shape, generator=g, dtype=torch.float64) for _ in "qk")
        v = torch.randn(B, H, T, 3, generator=g, dtype=torch.float64)
        slopes = 2.0 ** -torch.arange(1, H + 1, dtype=torch.float64)  # 1/2, 1/4, ...
        mine = q.clone(), k.clone(), v.clone(), slopes.clone()
        try:
            got = fn(*mine)
        except RuntimeError as e:
            if "must match the size" not in str(e):
                raise
            raise ExerciseError(
                f"q {shape}: RuntimeError ({first_line(e)}): do the "
                "penalty's axes line up with the scores (B, H, T, T)? slopes[:, None, "
                "None], (H, 1, 1), times the (T, T) distances gives (H, T, T)"
            ) from None
        for name, given, kept in zip(
            ("q", "k", "v", "slopes"), (q, k, v, slopes), mine
        ):
            if not torch.equal(given, kept):
                raise ExerciseError(
                    f"{name} was changed in place (q /= ...?): the caller's {name} "
                    f"must stay as it was; write {name} / ... into a new tensor"
                )
        if not (isinstance(got, tuple) and len(got) == 2):
            raise ExerciseError("return a pair (output, weights)")
        out, w = got
        if (
            isinstance(out, Tensor)
            and out.shape == (B, H, T, T)
            and getattr(w, "shape", None) == (B, H, T, 3)
        ):
            raise ExerciseError(
                "the pair came back as (weights, output): return (output, weights), "
                "the output first"
            )
        want_out, want_w = alibi_reference(q, k, v, slopes)
        hint = None if is_close(w, want_w) else _alibi_hint(q, k, v, slopes, w)
        if hint:
            raise ExerciseError(f"{hint} (q {shape})")
        if isinstance(w, Tensor) and not is_close(w, want_w):
            w2 = fn(q.clone(), k.clone(), v.clone(), 2 * slopes)[1]
            if is_close(w2, w):
                raise ExerciseError(
                    f"q {shape}: the weights stayed the same when the slopes were "
                    "doubled: the argument slopes is ignored (slopes of your own?); "
                    "head h subtracts the slopes[h] it is given"
                )
        compare(f"weights for q {shape}", w, want_w, atol=1e-9)
        compare(f"output for q {shape}", out, want_out, atol=1e-9)
    _check_alibi_backward(fn, q, k, v, slopes)
    out32, w32 = fn(q.float(), k.float(), v.float(), slopes.float())
    if out32.dtype != torch.float32 or w32.dtype != torch.float32:
        raise ExerciseError(
            f"float32 q, k, v gave a {out32.dtype} output and {w32.dtype} weights: "
            "keep q's dtype (no .double(), no tensors made in another dtype)"
        )
    return "q (2, 5, 5, 8) and (1, 2, 7, 4), slopes 1/2, 1/4, ...: weights and outputs"
