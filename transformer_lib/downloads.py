"""Downloads of pinned files, verified by sha256: from the data folder, a mirror or the
web.

Written by hand, as `data.py` is (which lists the files the course reads and loads
them). A `DataFile` is pinned by its sha256 and its size. `fetch(spec)` takes it from
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
`DOWNLOAD_SECONDS` to arrive; it goes into a temporary file (`files.atomic_write`) that
is renamed into place only once its checksum matches, so a half-written, oversized or
corrupted file is never used. A FIFO or a device where a file should be is refused at
once, never read. When every source fails, the error lists why for each and says in one
line what to do.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import io
import os
import re
import shutil
import stat
import time
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from transformer_lib.files import atomic_write, being_written, stale_temporaries

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
GRACE_SECONDS = 10.0  # a younger one, even unlocked, may be a fetch just starting


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
        h, head = hashlib.sha256(), b""
        for chunk in chunks:
            h.update(chunk)
            f.write(chunk)
            head += chunk[: 512 - len(head)]
        if h.hexdigest() != spec.sha256 and _web_page(head):
            raise _SourceFailed(_served_a_page(source))
        if h.hexdigest() != spec.sha256:
            raise _SourceFailed(
                f"{source} gave a file with sha256 {h.hexdigest()}, expected "
                f"{spec.sha256}; it was not used (changed upstream or damaged)"
            )

    try:
        atomic_write(dest, write)  # on any error the temporary file is removed
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _no_space(dest, spec.size) from None
        raise DataUnavailableError(
            f"cannot write {dest}: {e.strerror or e}; set {DATA_DIR_ENV} to a folder "
            "you can write to"
        ) from None


def _web_page(head: bytes) -> bool:
    """True when the first bytes of a download are an HTML page: what a network's login
    portal or a block page serves in place of any file."""
    return head.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html"))


def _served_a_page(source: str) -> str:
    return (
        f"{source} answered with a web page, not the file: a network's login page "
        "(a hotel's, a campus's) or a block page? sign in to the network, or use a "
        "mirror"
    )


def _is_url(location: str) -> bool:
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", location) is not None


def _from_mirror(location: str, spec: DataFile, dest: Path) -> None:
    """Copy `spec` from a mirror: a folder laid out like data/, or an http(s) URL."""
    deadline = time.monotonic() + DOWNLOAD_SECONDS
    if not _is_url(location):
        _copy(Path(location).expanduser() / spec.relpath, dest, spec)
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


def _copy(src: Path, dest: Path, spec: DataFile) -> None:
    """Copy the local file `src` to `dest` if it is `spec`'s pinned file (else
    _SourceFailed, and `dest` is left as it was)."""
    deadline = time.monotonic() + DOWNLOAD_SECONDS
    with _open_regular(src, spec.size) as f:
        _save(dest, _stream(f.read, str(src), spec.size, deadline), spec, str(src))


def copy_verified(src: Path, dest: Path, spec: DataFile) -> Path:
    """Copy the local file `src` to `dest`, verified against `spec` while it is read;
    DataUnavailableError if it is not the pinned file. Returns `dest`."""
    try:
        _copy(src, dest, spec)
    except _SourceFailed as e:
        raise DataUnavailableError(str(e)) from None
    return dest


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
        if got != spec.archive_sha256 and _web_page(payload):
            raise _SourceFailed(_served_a_page(spec.url))
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
    """Remove the temporary files a killed fetch left beside `dest`: those no live
    fetch holds (`being_written`), or, where that cannot be told, those an hour old. A
    few seconds' grace covers a fetch between creating its file and locking it."""
    for tmp in stale_temporaries(dest):
        try:
            age = time.time() - tmp.stat().st_mtime
            if age > STALE_SECONDS or (age > GRACE_SECONDS and not being_written(tmp)):
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
    if dest.is_symlink():  # a link that fails the check is replaced, never written to
        dest.unlink()
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


__all__ = [
    "DATA_DIR_ENV",
    "MIRROR_ENV",
    "PROJECT_MIRRORS",
    "DataFile",
    "DataUnavailableError",
    "copy_verified",
    "data_dir",
    "fetch",
]
