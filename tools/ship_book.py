"""Trim a built edition of the book (`_build/html`, `_build/zh/_build/html`) to what its
pages load. `make book` runs it on both editions after building them.

- MathJax: sphinx-mathjax-offline copies the whole distribution (24 MB); a page loads
  `tex-chtml.js`, its CHTML fonts, and a TeX package from `input/tex/extensions/` when
  an equation uses one. The rest (other bundles, SVG output, speech) is removed.
- Source maps (`*.map`) are for debugging the theme's own bundles; they are removed, and
  so is the `sourceMappingURL` comment that names them.
- Two extensions add the same inline `<script>` to every page (sphinx-thebe's
  `const THEBE_JS_URL`, declared twice: a console error); the second copy is removed.
- An edition built inside another (the Chinese one, in zh/ of the English one) loads
  the outer edition's copy of each static file the two have byte for byte the same (the
  theme, MathJax, fonts: all but the language's options and translations), by relative
  paths, so offline reading still works and the build holds one copy.

Usage: python tools/ship_book.py _build/html [_build/html/zh ...]
"""

from __future__ import annotations

import argparse
import filecmp
import re
from pathlib import Path

MATHJAX_KEPT = (
    "tex-chtml.js",
    "output/chtml/fonts/woff-v2",
    "input/tex/extensions",
)
SOURCE_MAP_COMMENT = re.compile(r"\n?(//|/\*)# sourceMappingURL=\S+?(\s*\*/)?\s*$")
INLINE_SCRIPT = re.compile(r"^\s*<script>[^<]*</script>\s*$")
# a page's reference to a static file: src="../_static/x.js?digest=..."
STATIC_REF = re.compile(r'((?:src|href)=")((?:\.\./)*)(_static/)([^"?#]+)')


def trim_mathjax(mathjax: Path) -> None:
    """Remove every file of the MathJax distribution outside MATHJAX_KEPT."""
    kept = [mathjax / k for k in MATHJAX_KEPT]
    missing = [str(k) for k in kept if not k.exists()]
    if missing:
        raise SystemExit(f"MathJax files the pages load are missing: {missing}")
    for path in sorted(mathjax.rglob("*"), reverse=True):
        if any(path == k or k in path.parents for k in kept):
            continue
        if path.is_file():
            path.unlink()
        elif not any(path.iterdir()):
            path.rmdir()


def drop_source_maps(static: Path) -> None:
    """Delete the source maps and the comments that point at them."""
    for path in static.rglob("*.map"):
        path.unlink()
    for path in [*static.rglob("*.js"), *static.rglob("*.css")]:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        trimmed = SOURCE_MAP_COMMENT.sub("", text)
        if trimmed != text:
            path.write_text(trimmed, encoding="utf-8", errors="surrogateescape")


def drop_repeated_inline_scripts(html: Path) -> None:
    """In each page's <head>, keep the first of identical one-line inline scripts."""
    for page in html.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        head, sep, body = text.partition("</head>")
        seen: set[str] = set()
        lines = []
        for line in head.splitlines(keepends=True):
            if INLINE_SCRIPT.match(line):
                if line.strip() in seen:
                    continue
                seen.add(line.strip())
            lines.append(line)
        trimmed = "".join(lines) + sep + body
        if trimmed != text:
            page.write_text(trimmed, encoding="utf-8")


def share_static(outer: Path, inner: Path) -> None:
    """Point `inner`'s pages at `outer`'s copy of every static file both have alike
    (`inner` lies inside `outer`, one folder down), and delete `inner`'s copies."""
    mine, theirs = inner / "_static", outer / "_static"
    shared = {
        p.relative_to(mine).as_posix()
        for p in mine.rglob("*")
        if p.is_file()
        and (theirs / p.relative_to(mine)).is_file()
        and filecmp.cmp(p, theirs / p.relative_to(mine), shallow=False)
    }

    def up_one(m: re.Match) -> str:
        return m[1] + "../" * (m[4] in shared) + m[2] + m[3] + m[4]

    for page in inner.rglob("*.html"):
        if mine in page.parents:
            continue
        text = page.read_text(encoding="utf-8")
        pointed = STATIC_REF.sub(up_one, text)
        if pointed != text:
            page.write_text(pointed, encoding="utf-8")
    for name in shared:
        (mine / name).unlink()
    for folder in sorted(mine.rglob("*"), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def ship(html: Path) -> None:
    """Trim one built edition in place."""
    static = html / "_static"
    if not static.is_dir():
        raise SystemExit(f"{html} is not a built book (no _static/): run make book")
    if (static / "mathjax").is_dir():
        trim_mathjax(static / "mathjax")
    drop_source_maps(static)
    drop_repeated_inline_scripts(html)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html", nargs="+", type=Path, help="a built edition's html/")
    editions = [html.resolve() for html in parser.parse_args().html]
    for html in editions:
        ship(html)
    for outer in editions:
        for inner in editions:
            if inner.parent == outer:
                share_static(outer, inner)


if __name__ == "__main__":
    main()
