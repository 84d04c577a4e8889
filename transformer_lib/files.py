"""Durable files: a write leaves the old file or the whole new one, never a part.

Written by hand (not exported from a notebook), like `data.py`, so that any module may
use it, from notebook 00 on; appendix A1 shows it and explains it.
- `atomic_write`: a temporary file beside the destination, flushed to the disk, given
  the usual mode of a new file and renamed over it; removed on any failure;
- `DiskFullError`, `check_free_space`, `save_patiently`: a full disk said in one line,
  and a save that waits for space while the trained work stays in memory;
- `stale_temporaries`, `being_written`: the temporary files that killed writes left
  (`.NAME.*.tmp`), told from one a live write still holds;
- `lock_run`, `unlock_run`, `releasing_lock`: one process at a time trains into a
  checkpoint (an OS lock, `.NAME.lock` beside it, dropped when the process ends);
- `check_writable`: a path that cannot be written is refused before any work.
A symbolic link is followed everywhere: the lock, the temporary files and the write are
those of the file it points to.
"""

import contextlib
import errno
import os
import platform
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "SAVE_WAITS",
    "atomic_write",
    "current_umask",
    "DiskFullError",
    "check_free_space",
    "save_patiently",
    "stale_temporaries",
    "being_written",
    "RunLockedError",
    "lock_run",
    "unlock_run",
    "releasing_lock",
    "check_writable",
]


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Write `path` through `write(file)` so that it is the old file or the whole new
    one, never a part.

    A temporary file beside `path` is filled, flushed to the disk, given the mode of any
    new file (0666 minus the umask) and renamed over `path`. If anything fails, even
    Ctrl-C, it is removed; a full disk raises DiskFullError. A symbolic link is
    followed: its target is replaced and the link stays (no folder is made for it).
    """
    if Path(path).is_symlink():
        path = Path(os.path.realpath(path))
    else:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        _hold(fd)  # while it is being written: see being_written
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600
        os.replace(tmp, path)  # atomic: readers see the old file or the new one
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(path) from None
        raise
    return path


def current_umask() -> int:
    """The process's umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


class DiskFullError(OSError):
    """A file could not be written for lack of space; the message names the path, the
    free space and, when known, the space needed. `too_small`: the whole disk is
    smaller than the file, so freeing space cannot help."""

    def __init__(self, path: Path, needed: int | None = None):
        usage = shutil.disk_usage(path.parent)
        self.too_small = bool(needed) and needed > usage.total
        if self.too_small:
            super().__init__(
                f"cannot write {path}: it needs {needed / 1e6:.3g} MB and its disk "
                f"holds {usage.total / 1e6:.3g} MB in all; the file there before is "
                "kept: choose a path on a larger disk"
            )
        else:
            need = f", {needed / 1e6:.3g} MB needed" if needed else ""
            super().__init__(
                f"cannot write {path}: the disk is full ({usage.free / 1e6:.3g} MB "
                f"free{need}); the file there before is kept: free some space or "
                "choose another path"
            )
        self.errno = errno.ENOSPC


def check_free_space(path: str | os.PathLike, needed: int) -> None:
    """Raise DiskFullError when the folder of `path` has not `needed` bytes free (and
    64 kB to spare)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(path.parent).free < needed + 2**16:
        raise DiskFullError(path, needed)


# seconds to wait before each new try of a save that found the disk full
SAVE_WAITS = (10, 30, 60, 120)


def save_patiently(save: Callable[[], object], log=print, waits=None) -> None:
    """Call `save()`; while the disk is full, say so and try again after each wait
    (SAVE_WAITS), keeping the trained work in memory; then raise the DiskFullError (at
    once when the whole disk is smaller than the file)."""
    for wait in (*(SAVE_WAITS if waits is None else waits), None):
        try:
            save()
            return
        except DiskFullError as e:
            if wait is None or e.too_small:
                raise
            log(f"{e}; trying again in {wait} s (the new weights are kept in memory)")
            time.sleep(wait)


def stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Temporary files that killed writes of `path` left beside it (`.NAME.*.tmp`);
    for a symbolic link, those beside the file it points to."""
    path = Path(os.path.realpath(path))
    found = path.parent.glob(f".{path.name}.*.tmp") if path.parent.is_dir() else []
    return sorted(p for p in found if p.is_file())


def being_written(tmp: str | os.PathLike) -> bool:
    """True while a live `atomic_write` fills the temporary file `tmp` (it holds an OS
    lock on it), False for one that a killed write left. True where it cannot be told
    (no such locks here, as on Windows)."""
    try:
        import fcntl
    except ImportError:
        return True
    try:
        with open(tmp, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
    except FileNotFoundError:
        return False  # gone already: finished or removed
    except OSError:
        return True  # held by its writer, or no locks on this file system


def _hold(fd: int) -> None:
    """Lock the open temporary file `fd` for its writer, where the OS can."""
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (ImportError, OSError):
        pass  # then only its age tells a killed write's file (see downloads)


class RunLockedError(OSError):
    """Another process holds the lock of this checkpoint: it is training into it."""


_held: dict[str, BinaryIO] = {}  # the lock files this process holds, by checkpoint


def lock_run(path: str | os.PathLike) -> None:
    """Take the lock `.NAME.lock` beside `path` for this process, or raise
    RunLockedError naming the process that holds it.

    It is an OS lock: the kernel drops it when its process ends, even killed, so a
    crash never leaves a stale one. Taking it again in the same process does nothing.
    A symbolic link is followed: a run that names the file through a link and one that
    names it directly take the same lock.
    """
    key = os.path.realpath(path)
    if key in _held:
        return
    real = Path(key)
    f = open(real.parent / f".{real.name}.lock", "a+")
    if not _try_lock(f):
        holder = _read_holder(f)
        f.close()
        raise RunLockedError(
            f"{path} is in use by another run ({holder}); wait until it ends, or "
            "choose another path"
        )
    f.seek(0)
    f.truncate()
    f.write(f"process {os.getpid()} on {platform.node()}, since {time.ctime()}")
    f.flush()
    _held[key] = f


def unlock_run(path: str | os.PathLike) -> None:
    """Release the lock of `path` if this process holds it."""
    f = _held.pop(os.path.realpath(path), None)
    if f is not None:
        f.close()  # closing the file drops the lock


@contextlib.contextmanager
def releasing_lock(path: str | os.PathLike | None):
    """A `with` block at whose end, however it ends, the lock of `path` is released
    (nothing for None)."""
    try:
        yield
    finally:
        if path:
            unlock_run(path)


def _try_lock(f) -> bool:
    """Lock the open file `f` without waiting: False when another process holds it.

    fcntl.flock on Linux and macOS, msvcrt.locking on Windows; where neither works, a
    warning says that two runs on one path are not prevented.
    """
    f.seek(0)
    try:
        import fcntl

        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except ImportError:
        import msvcrt

        try:
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        warnings.warn(
            f"cannot lock {f.name} ({e.strerror}): nothing stops another run from "
            "writing the same checkpoint"
        )
        return True


def _read_holder(f) -> str:
    """What the lock file says about its holder ('another process' if unreadable)."""
    try:
        f.seek(0)
        return f.read().strip()[:200] or "another process"
    except OSError:  # Windows: the locked byte cannot be read
        return "another process"


def check_writable(path: str | os.PathLike) -> Path:
    """Make sure `path` can be written, before any work is spent: raise OSError saying
    why not.

    The folder is created if needed and a probe file is written and removed in it. A
    symbolic link must point into a folder that exists: none is made elsewhere.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(
            f"{path} is a folder; give a file name, e.g. {path / 'model.pt'}"
        )
    real = Path(os.path.realpath(path))
    try:
        if path.is_symlink() and not real.parent.is_dir():
            raise FileNotFoundError(
                errno.ENOENT,
                f"a symbolic link into {real.parent}, which does not exist",
            )
        real.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(
            dir=real.parent, prefix=f".{real.name}.", suffix=".tmp"
        )
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise PermissionError(
            f"cannot write {path}: {e.strerror or e} (choose another path)"
        ) from None
    return path
