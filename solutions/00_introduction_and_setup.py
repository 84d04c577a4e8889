"""Solution of notebook 00's build-it (checked by tests/test_exercises.py)."""

import hashlib
from pathlib import Path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """The file's sha256 as 64 hex characters, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
