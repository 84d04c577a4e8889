"""Mirrors and limits of the data loaders, offline: a local HTTP server on 127.0.0.1
stands in for the canonical hosts and the mirrors (issues 27 and 23)."""

import errno
import hashlib
import io
import os
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from posix_only import needs_dev_zero, needs_fifo

from transformer_lib import data, downloads, files
from transformer_lib.__main__ import main
from transformer_lib.downloads import DataFile, DataUnavailableError, fetch

CONTENT = "Hi.\t嗨。\tCC-BY 2.0 (France) Attribution: tatoeba.org #538123\n".encode()
SPEC = DataFile(
    "cmn-eng/cmn.txt",
    "http://127.0.0.1:1/unused",  # replaced per test by the local server's URL
    hashlib.sha256(CONTENT).hexdigest(),
    len(CONTENT),
)
OTHER = b"A second file.\n"
SPEC2 = DataFile(
    "other/file.txt", "http://127.0.0.1:1/unused", hashlib.sha256(OTHER).hexdigest(), 15
)


def zipped(member: str, payload: bytes) -> bytes:
    """A zip archive holding `payload` as `member`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr(member, payload)
    return buffer.getvalue()


class Handler(BaseHTTPRequestHandler):
    """Serves `server.routes`: bytes, "trickle" (a byte every 0.1 s, no end) or
    "endless" (zeros, no end); anything else is a 404. Records each path asked for."""

    def do_GET(self):
        self.server.asked.append(self.path)
        body = self.server.routes.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        if isinstance(body, bytes):
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.end_headers()  # no length: the body ends when the connection closes
        try:
            while True:
                if body == "trickle":
                    self.wfile.write(b"x")
                    time.sleep(0.1)
                else:
                    self.wfile.write(bytes(1 << 16))
                self.wfile.flush()
        except OSError:  # the client gave up, as it should
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    """A server on 127.0.0.1 with no routes yet; `server.url(path)` names one."""
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # never through a proxy a user set
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads, httpd.block_on_close = True, False
    httpd.routes, httpd.asked = {}, []
    httpd.url = lambda path="": f"http://127.0.0.1:{httpd.server_port}{path}"
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """An empty data folder; no mirror set; no project mirror."""
    monkeypatch.setenv(downloads.DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.delenv(downloads.MIRROR_ENV, raising=False)
    monkeypatch.setattr(downloads, "PROJECT_MIRRORS", ())
    return tmp_path / "data"


def finishes(seconds, function, *args):
    """`function(*args)`'s result or exception, failing the test if it takes longer
    than `seconds` (a hang would otherwise stop the whole suite)."""
    box = {}

    def run():
        try:
            box["result"] = function(*args)
        except BaseException as e:  # handed to the test below
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["result"]


def test_url_mirror_serves_the_files(folders, server, monkeypatch):
    server.routes["/mirror/cmn-eng/cmn.txt"] = CONTENT
    monkeypatch.setenv(downloads.MIRROR_ENV, server.url("/mirror/"))
    assert fetch(SPEC).read_bytes() == CONTENT
    assert server.asked == ["/mirror/cmn-eng/cmn.txt"]  # the canonical URL untouched
    assert [p.name for p in (folders / "cmn-eng").iterdir()] == ["cmn.txt"]


def test_sources_are_tried_in_order_until_one_verifies(folders, server, monkeypatch):
    spec = DataFile(SPEC.relpath, server.url("/canonical.txt"), SPEC.sha256, SPEC.size)
    server.routes["/canonical.txt"] = CONTENT.replace(b"Hi", b"Ho")  # changed upstream
    server.routes["/second/cmn-eng/cmn.txt"] = CONTENT
    monkeypatch.setenv(downloads.MIRROR_ENV, server.url("/first"))  # 404 for every file
    monkeypatch.setattr(
        downloads, "PROJECT_MIRRORS", (server.url("/gone"), server.url("/second"))
    )
    assert fetch(spec).read_bytes() == CONTENT
    assert server.asked == [
        "/first/cmn-eng/cmn.txt",
        "/canonical.txt",
        "/gone/cmn-eng/cmn.txt",
        "/second/cmn-eng/cmn.txt",
    ]


def test_republished_zip_falls_back_to_the_mirrors(folders, server, monkeypatch):
    """manythings.org republishes cmn-eng.zip: the pinned archive checksum fails."""
    pinned = zipped("cmn.txt", CONTENT)
    republished = zipped("cmn.txt", CONTENT + "New.\t新的。\tCC-BY 2.0\n".encode())
    server.routes["/anki/cmn-eng.zip"] = republished
    spec = DataFile(
        SPEC.relpath,
        server.url("/anki/cmn-eng.zip"),
        SPEC.sha256,
        SPEC.size,
        archive_sha256=hashlib.sha256(pinned).hexdigest(),
        member="cmn.txt",
    )
    monkeypatch.setattr(downloads, "PROJECT_MIRRORS", (server.url("/project"),))
    with pytest.raises(DataUnavailableError) as err:  # the mirror is not up yet
        fetch(spec)
    message = str(err.value)
    assert "republished" in message
    fix = [line for line in message.splitlines() if line.startswith("To fix")]
    assert len(fix) == 1  # what to do, in one line
    for needed in (downloads.MIRROR_ENV, "pack-data", spec.relpath, spec.sha256):
        assert needed in fix[0]
    assert "download" not in fix[0]  # downloading the zip again cannot help
    assert not (folders / spec.relpath).exists()

    server.routes["/project/cmn-eng/cmn.txt"] = CONTENT  # same file, same checksum
    assert fetch(spec).read_bytes() == CONTENT


def test_a_login_portal_page_is_named_as_a_web_page(folders, server):
    """A hotel's or campus's network answers every address with its login page."""
    page = b"\n<!DOCTYPE html><html><body>Please sign in</body></html>\n"
    server.routes["/anki/cmn-eng.zip"] = server.routes["/cmn.txt"] = page
    zipped_spec = DataFile(
        SPEC.relpath,
        server.url("/anki/cmn-eng.zip"),
        SPEC.sha256,
        SPEC.size,
        archive_sha256=hashlib.sha256(zipped("cmn.txt", CONTENT)).hexdigest(),
        member="cmn.txt",
    )
    plain_spec = DataFile(SPEC.relpath, server.url("/cmn.txt"), SPEC.sha256, SPEC.size)
    for spec in (zipped_spec, plain_spec):
        with pytest.raises(DataUnavailableError) as err:
            fetch(spec)
        assert f"{spec.url} answered with a web page" in str(err.value)
        assert "republished" not in str(err.value)
        assert not (folders / spec.relpath).exists()


def test_pack_data_makes_a_mirror_that_serves_over_http(
    folders, tmp_path, server, monkeypatch, capsys
):
    source = tmp_path / "copy"
    for spec, payload in ((SPEC, CONTENT), (SPEC2, OTHER)):
        (source / spec.relpath).parent.mkdir(parents=True)
        (source / spec.relpath).write_bytes(payload)
    (source / "cmn-eng" / "_about.txt").write_text("not a data file")
    monkeypatch.setattr(data, "ALL_FILES", (SPEC, SPEC2))
    monkeypatch.setenv(downloads.MIRROR_ENV, str(source))

    out = tmp_path / "pack"
    assert main(["pack-data", str(out)]) == 0
    files = [p for p in out.rglob("*") if p.is_file()]
    packed = sorted(p.relative_to(out).as_posix() for p in files)
    assert packed == sorted([SPEC.relpath, SPEC2.relpath, "SHA256SUMS", "README.md"])
    assert (out / "SHA256SUMS").read_text() == (
        f"{SPEC.sha256}  {SPEC.relpath}\n{SPEC2.sha256}  {SPEC2.relpath}\n"
    )
    assert main(["pack-data", str(out)]) == 0  # an earlier pack may be refreshed

    for path in packed:  # serve the pack as a static site would
        server.routes[f"/pub/{path}"] = (out / path).read_bytes()
    monkeypatch.setenv(downloads.DATA_DIR_ENV, str(tmp_path / "learner"))
    monkeypatch.setenv(downloads.MIRROR_ENV, server.url("/pub"))
    assert main(["fetch-data"]) == 0
    assert (tmp_path / "learner" / SPEC2.relpath).read_bytes() == OTHER


def test_pack_data_refuses_a_folder_with_other_files(folders, tmp_path, capsys):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "mine.txt").write_text("my notes")
    assert main(["pack-data", str(out)]) == 1
    assert "holds other files" in capsys.readouterr().err
    assert main(["pack-data", str(folders)]) == 1
    assert "the data folder itself" in capsys.readouterr().err


def test_unsupported_mirror_scheme_is_named(folders, monkeypatch):
    monkeypatch.setenv(downloads.MIRROR_ENV, "ftp://example.invalid/data")
    monkeypatch.setattr(downloads.urllib.request, "urlopen", _offline)
    with pytest.raises(DataUnavailableError, match=r"ftp:// is not supported"):
        fetch(SPEC)


def _offline(*args, **kwargs):
    raise downloads.urllib.error.URLError("no network in this test")


@pytest.mark.parametrize(
    "kind",
    [
        "huge",
        pytest.param("dev-zero", marks=needs_dev_zero),
        pytest.param("fifo", marks=needs_fifo),
    ],
)
def test_mirror_file_that_cannot_be_it_is_refused_unread(
    folders, tmp_path, monkeypatch, kind
):
    """A 3 GB file, /dev/zero or a FIFO in the mirror: refused at once, no memory."""
    mirror = tmp_path / "mirror"
    bad = mirror / SPEC.relpath
    bad.parent.mkdir(parents=True)
    if kind == "huge":
        with open(bad, "wb") as f:
            f.truncate(3 << 30)  # sparse: takes no disk
    elif kind == "dev-zero":
        bad.symlink_to("/dev/zero")
    else:
        os.mkfifo(bad)
    monkeypatch.setenv(downloads.MIRROR_ENV, str(mirror))
    monkeypatch.setattr(downloads.urllib.request, "urlopen", _offline)
    with pytest.raises(DataUnavailableError) as err:
        finishes(10, fetch, SPEC)
    expected = {"huge": "3,221,225,472 bytes", "dev-zero": "a device", "fifo": "FIFO"}
    assert expected[kind] in str(err.value)
    assert not (folders / SPEC.relpath).exists()


@needs_fifo
def test_fifo_in_place_of_a_data_file_is_refused(folders, capsys, monkeypatch):
    (folders / "cmn-eng").mkdir(parents=True)
    os.mkfifo(folders / SPEC.relpath)
    monkeypatch.setattr(data, "ALL_FILES", (SPEC,))
    assert finishes(10, main, ["fetch-data"]) == 1
    err = capsys.readouterr().err
    assert "FIFO" in err and "remove it" in err and "Traceback" not in err


def test_endless_download_stops_at_the_cap(folders, server, monkeypatch):
    """A body with no end (as /dev/zero served over HTTP): stopped at the size cap."""
    import tracemalloc

    server.routes["/m/cmn-eng/cmn.txt"] = "endless"
    server.routes["/cmn-eng.zip"] = "endless"
    monkeypatch.setenv(downloads.MIRROR_ENV, server.url("/m"))
    monkeypatch.setattr(downloads, "UPSTREAM_CAP", 4 << 20)
    spec = DataFile(
        SPEC.relpath,
        server.url("/cmn-eng.zip"),
        SPEC.sha256,
        SPEC.size,
        archive_sha256="0" * 64,
        member="cmn.txt",
    )
    tracemalloc.start()
    try:
        with pytest.raises(DataUnavailableError) as err:
            finishes(20, fetch, spec)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(err.value)
    assert f"larger than the {SPEC.size:,} bytes" in message  # the mirror
    assert "larger than the 4,194,304 bytes" in message  # the canonical zip
    assert peak < 16 << 20
    assert not list(folders.rglob("*.*"))  # neither a file nor a temporary file


def test_trickling_download_times_out_with_a_message(folders, server, monkeypatch):
    """One byte every 0.1 s never trips the socket's timeout; the file's deadline
    stops it."""
    server.routes["/slow.txt"] = "trickle"
    spec = DataFile(SPEC.relpath, server.url("/slow.txt"), SPEC.sha256, SPEC.size)
    monkeypatch.setattr(downloads, "DOWNLOAD_SECONDS", 1.0)
    started = time.monotonic()
    with pytest.raises(DataUnavailableError, match=r"bytes arrived in 1 s"):
        finishes(20, fetch, spec)
    assert time.monotonic() - started < 10
    assert not list(folders.rglob("*.*"))


def test_full_disk_says_path_and_space_needed_before_writing(
    folders, tmp_path, monkeypatch, capsys
):
    mirror = tmp_path / "mirror"
    (mirror / "cmn-eng").mkdir(parents=True)
    (mirror / SPEC.relpath).write_bytes(CONTENT)
    monkeypatch.setenv(downloads.MIRROR_ENV, str(mirror))
    monkeypatch.setattr(data, "ALL_FILES", (SPEC,))
    usage = downloads.shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        downloads.shutil, "disk_usage", lambda p: usage._replace(free=10)
    )
    assert main(["fetch-data"]) == 1
    err = capsys.readouterr().err
    dest = folders / SPEC.relpath
    assert f"cannot write {dest}: the disk is full (10 bytes free, 63 needed)" in err
    assert "Traceback" not in err
    assert not dest.exists()


def test_disk_full_during_the_write_leaves_nothing_half_written(
    folders, tmp_path, monkeypatch
):
    mirror = tmp_path / "mirror"
    (mirror / "cmn-eng").mkdir(parents=True)
    (mirror / SPEC.relpath).write_bytes(CONTENT)
    monkeypatch.setenv(downloads.MIRROR_ENV, str(mirror))
    real_write = downloads.atomic_write

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def write(self, chunk):
            self.f.write(chunk[:5])  # the first bytes fit, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(
        downloads,
        "atomic_write",
        lambda path, write: real_write(path, lambda f: write(FullDisk(f))),
    )
    with pytest.raises(DataUnavailableError, match=r"the disk is full .* needed\)"):
        fetch(SPEC)
    assert list((folders / "cmn-eng").iterdir()) == []  # no file, no temporary file


def test_unreadable_data_file_is_one_line(folders, monkeypatch, capsys):
    dest = folders / SPEC.relpath
    dest.parent.mkdir(parents=True)
    dest.write_bytes(CONTENT)
    dest.chmod(0)
    if os.access(dest, os.R_OK):  # root reads anything: refuse it the way chmod would
        real_open = downloads.os.open

        def refusing_open(path, *args, **kwargs):
            if Path(path) == dest:
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(downloads.os, "open", refusing_open)
    monkeypatch.setattr(data, "ALL_FILES", (SPEC,))
    try:
        assert main(["fetch-data"]) == 1
    finally:
        dest.chmod(0o644)
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (
        f"missing {SPEC.relpath}: cannot read {dest}: Permission denied; "
        "fix or remove it, then run again"
    )
    assert "Traceback" not in err


def test_old_temporaries_of_a_killed_fetch_are_removed(folders, tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    (mirror / "cmn-eng").mkdir(parents=True)
    (mirror / SPEC.relpath).write_bytes(CONTENT)
    monkeypatch.setenv(downloads.MIRROR_ENV, str(mirror))
    (folders / "cmn-eng").mkdir(parents=True)
    old, recent = (folders / "cmn-eng" / f".cmn.txt.{n}.tmp" for n in ("old", "new"))
    for tmp in (old, recent):
        tmp.write_bytes(CONTENT[:5])
    os.utime(old, (time.time() - 2 * downloads.STALE_SECONDS,) * 2)
    fetch(SPEC)
    assert not old.exists()
    assert recent.exists()  # maybe another fetch's, still being written


@pytest.mark.skipif(os.name == "nt", reason="no flock: only the age counts there")
def test_a_killed_fetch_leaves_nothing_at_the_next_start(
    folders, tmp_path, monkeypatch
):
    """A minute-old temporary file that no live fetch holds is a killed fetch's; one
    that a fetch holds (atomic_write locks its own) is kept, whatever its age."""
    import fcntl

    mirror = tmp_path / "mirror"
    (mirror / "cmn-eng").mkdir(parents=True)
    (mirror / SPEC.relpath).write_bytes(CONTENT)
    monkeypatch.setenv(downloads.MIRROR_ENV, str(mirror))
    (folders / "cmn-eng").mkdir(parents=True)
    killed, alive = (folders / "cmn-eng" / f".cmn.txt.{n}.tmp" for n in "ka")
    for tmp in (killed, alive):
        tmp.write_bytes(CONTENT[:5])
        os.utime(tmp, (time.time() - 60,) * 2)
    with open(alive, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # a fetch still writing it
        fetch(SPEC)
        assert not killed.exists() and alive.exists()
    assert files.being_written(alive) is False  # its writer has gone
    out, seen = folders / "x.bin", []
    temporaries = lambda: files.stale_temporaries(out)  # noqa: E731
    files.atomic_write(
        out, lambda f: seen.extend(map(files.being_written, temporaries()))
    )
    assert seen == [True]  # atomic_write holds its own temporary file
