"""Trim a built edition of the book (`_build/html`, `_build/zh/_build/html`) to what its
pages load. `make book` runs it on both editions after building them.

- MathJax: sphinx-mathjax-offline copies the whole distribution (24 MB); a page loads
  `tex-chtml.js`, its CHTML fonts, and a TeX package from `input/tex/extensions/` when
  an equation uses one. The rest (other bundles, SVG output, speech) is removed.
- Source maps (`*.map`) are for debugging the theme's own bundles; they are removed, and
  so is the `sourceMappingURL` comment that names them.
- Two extensions add the same inline `<script>` to every page (sphinx-thebe's
  `const THEBE_JS_URL`, declared twice: a console error); the second copy is removed.

Usage: python tools/ship_book.py _build/html [_build/zh/_build/html ...]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

MATHJAX_KEPT = (
    "tex-chtml.js",
    "output/chtml/fonts/woff-v2",
    "input/tex/extensions",
)
SOURCE_MAP_COMMENT = re.compile(r"\n?(//|/\*)# sourceMappingURL=\S+?(\s*\*/)?\s*$")
INLINE_SCRIPT = re.compile(r"^\s*<script>[^<]*</script>\s*$")


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
    for html in parser.parse_args().html:
        ship(html)


if __name__ == "__main__":
    main()
