"""What the course's stored runs left in the repository, for a notebook anywhere.

Written by hand. The attention exports (`_static/explorer/*.json`, written by
tools/export_attention.py) and the benchmark results (`benchmarks/results/*.json`,
written by the scripts in benchmarks/) are files of the repository. A notebook in a
checkout finds them in the folders above the one it runs in (notebooks/ or
zh/notebooks/). On Colab a notebook is opened alone, with no checkout beside it: there
`load_stored` downloads the file from the repository instead (`REPOSITORY_RAW`), so the
tables and figures that read it still show.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["REPOSITORY_RAW", "load_result", "load_stored"]

# the repository's files on its main branch (its URL is set in _config.yml)
REPOSITORY_RAW = "https://raw.githubusercontent.com/transformer-course/transformer-from-scratch/main/"


def load_stored(
    path: str,
    start: Path | None = None,
    online: bool | None = None,
    max_bytes: int = 4_000_000,
) -> Any | None:
    """The JSON file at `path` in the repository ("benchmarks/results/x.json"), parsed.

    Looked for under `start` (default: the working directory) and the folders above
    it; else, when `online` (default: on Colab), downloaded from `REPOSITORY_RAW`.
    None when neither finds it: the caller says what is missing and how to make it.
    """
    here = Path.cwd() if start is None else Path(start)
    for folder in (here, *here.parents):
        if (folder / path).is_file():
            return json.loads((folder / path).read_text(encoding="utf-8"))
    if online is None:
        online = "google.colab" in sys.modules
    return _download(path, max_bytes) if online else None


def load_result(name: str, **kw) -> Any | None:
    """A benchmark's saved result, `benchmarks/results/<name>`, parsed, or None."""
    return load_stored(f"benchmarks/results/{name}", **kw)


def _download(path: str, max_bytes: int) -> Any | None:
    """The repository's file `path`, parsed, or None when the network or file fails."""
    try:
        with urllib.request.urlopen(REPOSITORY_RAW + path, timeout=30) as response:
            data = response.read(max_bytes + 1)
        if len(data) > max_bytes:
            return None  # not a file of ours
        return json.loads(data.decode("utf-8"))
    except (OSError, ValueError):  # no network, an HTTP error, not JSON
        return None
