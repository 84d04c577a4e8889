"""The notebooks' diagrams and links to the book's pages, at addresses that work in
Jupyter, Colab and on GitHub; the offline book points them back at its own files.

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

A notebook's link to a page of the book has the same trouble: Colab resolves
`../book/results.md` against its own address (colab.research.google.com/github/...),
where there is no such page; it maps only a link to a sibling notebook
(`06_masks.ipynb#...`) to that notebook. So the notebooks link a page at its address on
GitHub, `https://github.com/OWNER/REPO/blob/BRANCH/book/results.md` (`blob_prefix()`),
which GitHub renders (the Chinese notebooks: `.../zh/book/results.md`, the Chinese
page, tools/zh_edition.py). When Sphinx reads a page, a link at that prefix to a page
the build reads becomes the relative link from the page to it (`../book/results.md`),
so the book links its own page, as before; a link to any other file of the repository
(a module's source, say) stays on GitHub.
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


def blob_prefix(config: Path = ROOT / "_config.yml") -> str:
    """The address at which GitHub shows the repository's files on its branch (a
    Markdown page rendered), ending in "/"."""
    repository = yaml.safe_load(config.read_text(encoding="utf-8"))["repository"]
    url = repository["url"].rstrip("/")
    return f"{url}/blob/{repository['branch']}/"


def page_link(prefix: str = "") -> re.Pattern:
    """A Markdown link's target at `prefix` (default: `blob_prefix()`) to a file:
    group 1 the file's path in the repository, group 2 an anchor (or None)."""
    prefix = re.escape(prefix or blob_prefix())
    return re.compile(r"(?<=\]\()" + prefix + r"([\w./-]+)(#[^)\s\\\"]*)?(?=\))")


def localised(text: str, page: Path, srcdir: Path, pages: set[str]) -> str:
    """The text of the page at `page` (a file under the build's source folder
    `srcdir`) with each raw address of a file made a path relative to the root, and
    each link to a page of the build (a docname in `pages`) made a relative link."""
    here = os.path.relpath(ROOT, page.parent) + "/"
    address = re.escape(raw_prefix()) + r"([\w./-]+)(?:" + re.escape(SVG_QUERY) + ")?"
    text = re.sub(address, lambda m: here + m[1], text)

    def relative(match: re.Match) -> str:
        target = ROOT / match[1]
        if not target.is_relative_to(srcdir):
            return match[0]
        docname = target.relative_to(srcdir).with_suffix("").as_posix()
        if docname not in pages:
            return match[0]  # not a page of this book: GitHub shows it
        return os.path.relpath(target, page.parent) + (match[2] or "")

    return page_link().sub(relative, text)


def localise(app, docname: str, source: list[str]) -> None:
    """Sphinx's source-read: the raw address becomes the page's path to the root, a
    link to a page of the book on GitHub the relative link to it."""
    page = Path(app.env.doc2path(docname))
    pages = set(app.env.found_docs)
    source[0] = localised(source[0], page, Path(app.srcdir), pages)


def setup(app) -> dict:
    app.connect("source-read", localise)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
