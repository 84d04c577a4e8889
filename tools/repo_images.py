"""The notebooks' diagrams, at an address that Jupyter, Colab and GitHub all display.

Colab opens a notebook alone, so a diagram linked by a relative path
(`../book/images/x.svg`) is a broken image there, and Colab shows neither a cell
attachment nor an SVG data URI. So the notebooks link each diagram at the repository's
raw address, `https://raw.githubusercontent.com/OWNER/REPO/BRANCH/book/images/x.svg`
(`raw_prefix()`, from the repository set once in `_config.yml`), with `SVG_QUERY`
after an SVG: without it GitHub serves the file as text/plain with nosniff, which a
browser refuses to draw in an `<img>`; with it, as image/svg+xml.

The book is read offline. As a Sphinx extension (`local_extensions` in `_config.yml`
and `zh/_config.yml`), this module rewrites that prefix, when Sphinx reads a page, to
the page's relative path to the repository root; MyST's `html_image` then copies the
file into the build as it does any local image, so the built book links nothing online.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SVG_QUERY = "?sanitize=true"


def raw_prefix(config: Path = ROOT / "_config.yml") -> str:
    """The raw address of the repository's files on its branch, ending in "/"."""
    repository = yaml.safe_load(config.read_text(encoding="utf-8"))["repository"]
    owner_repo = repository["url"].removeprefix("https://github.com/").strip("/")
    return f"https://raw.githubusercontent.com/{owner_repo}/{repository['branch']}/"


def localise(app, docname: str, source: list[str]) -> None:
    """Sphinx's source-read: the raw address becomes the page's path to the root."""
    page = Path(app.env.doc2path(docname)).parent
    here = os.path.relpath(ROOT, page) + "/"
    address = re.escape(raw_prefix()) + r"([\w./-]+)(?:" + re.escape(SVG_QUERY) + ")?"
    source[0] = re.sub(address, lambda m: here + m[1], source[0])


def setup(app) -> dict:
    app.connect("source-read", localise)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
