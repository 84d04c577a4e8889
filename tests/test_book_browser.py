"""The book as a reader meets it: build it, open every page in headless Chromium, and
check what shows.

Fails on a build warning, math left as raw TeX, a missing image, a broken internal link,
Chinese labels that rendered as missing-glyph boxes, an image without alt text (or with
a path for one), notebook plumbing visible on a page (NBVAL, default_exp, google.colab),
or a display equation or code cell wider than its column at 1280 px. Screenshots of key
pages at 1280 px and at 390 px (a phone) land in _build/screenshots/ to be looked at.
Skipped when no Chromium is installed, unless REQUIRE_BROWSER=1 (CI sets it, so there
the test always runs).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote, urldefrag

import pytest
import yaml
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = next(
    (
        p
        for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))
        if p
    ),
    None,
)
# headless, and no background traffic: the machine may have no network
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
KEY_PAGES = [
    "book/intro",
    "notebooks/05_multi_head_attention",
    "notebooks/10_decoding_and_evaluation",
    "notebooks/11_gpt_language_model",
]
WIDTHS = {"desktop": 1280, "phone": 390}
PLUMBING = ("NBVAL", "default_exp", "google.colab")  # must run, never show
# Appended to a copy of a page: after MathJax, list the code cells and display equations
# whose content is wider than their box (they would scroll sideways), into <pre
# id="layout-report">.
LAYOUT_JS = """<script>
window.addEventListener("load", function () {
  var mj = window.MathJax && MathJax.startup && MathJax.startup.promise;
  (mj || Promise.resolve()).then(function () {
    var wide = [];
    var sel = "div.cell_input pre, div.math, mjx-container[display='true']";
    document.querySelectorAll(sel).forEach(function (el) {
      if (el.scrollWidth > el.clientWidth + 1) {
        var kind = el.closest("div.cell_input") ? "code" : "math";
        wide.push([kind, el.textContent.trim().replace(/\\s+/g, " ").slice(0, 70)]);
      }
    });
    var out = document.createElement("pre");
    out.id = "layout-report";
    out.textContent = JSON.stringify(wide);
    document.body.appendChild(out);
  });
});
</script>"""

pytestmark = pytest.mark.skipif(
    CHROMIUM is None and os.environ.get("REQUIRE_BROWSER") != "1",
    reason="no Chromium found (Debian: apt-get install chromium); set "
    "REQUIRE_BROWSER=1 to make this fail instead",
)


def toc_pages() -> list[str]:
    """Every page of the book, as paths without suffix, in reading order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [
        c["file"] for part in toc["parts"] for c in part["chapters"]
    ]


def chromium(*args: str, timeout: int = 120) -> str:
    """Run headless Chromium with a fresh profile and return what it printed."""
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return done.stdout


@pytest.fixture(scope="module")
def book() -> Path:
    """Build the book exactly as `make book` does, and insist that the build is
    clean."""
    build = subprocess.run(
        [
            str(Path(sys.executable).parent / "jupyter-book"),
            "build",
            "-W",
            "-n",
            "--keep-going",
            ".",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = build.stdout + build.stderr
    warnings = [
        line for line in log.splitlines() if "WARNING" in line or "ERROR" in line
    ]
    assert build.returncode == 0 and not warnings, (
        "book build not clean:\n" + "\n".join(warnings or log.splitlines()[-30:])
    )
    return HTML


@pytest.fixture(scope="module")
def rendered(book: Path) -> dict[str, BeautifulSoup]:
    """The DOM of every page after its scripts (MathJax) ran in Chromium."""
    assert CHROMIUM, "REQUIRE_BROWSER=1 but no Chromium is installed"
    doms = {}
    for page in toc_pages():
        dom = chromium(
            "--virtual-time-budget=10000",
            "--dump-dom",
            (book / f"{page}.html").as_uri(),
        )
        assert "<body" in dom, f"{page}: Chromium returned no page"
        doms[page] = BeautifulSoup(dom, "html.parser")
    return doms


def prose_text(soup: BeautifulSoup) -> str:
    """The page's visible text outside code, outputs and MathJax's own markup."""
    soup = BeautifulSoup(str(soup.select_one("main") or soup), "html.parser")
    for tag in soup.select("pre, code, script, style, mjx-container, .cell_output"):
        tag.decompose()
    return soup.get_text(" ")


def test_math_is_typeset(rendered):
    for page, soup in rendered.items():
        maths = soup.select(".math")
        raw = [m.get_text()[:60] for m in maths if not m.find("mjx-container")]
        assert not raw, f"{page}: math left as raw TeX: {raw[:3]}"
        leftovers = re.findall(
            r"\$[^$\n]*\\[A-Za-z]+[^$\n]*\$|\\\(.+?\\\)", prose_text(soup)
        )
        assert not leftovers, (
            f"{page}: TeX that was never parsed as math: {leftovers[:3]}"
        )


def test_images_exist_and_load(book, rendered):
    for page, soup in rendered.items():
        for img in soup.select("main img"):
            src = img.get("src", "")
            if src.startswith(("http:", "https:", "data:")):
                continue
            target = (book / page).parent / unquote(src)
            assert target.is_file(), f"{page}: image {src} is missing"


def test_internal_links_resolve(book, rendered):
    for page, soup in rendered.items():
        here = (book / f"{page}.html").parent
        for a in soup.select("main a[href]"):
            href = a["href"]
            if href.startswith(("http:", "https:", "mailto:", "javascript:")):
                continue
            path, fragment = urldefrag(href)
            target = (
                (here / unquote(path)).resolve()
                if path
                else (book / f"{page}.html").resolve()
            )
            assert target.is_file(), f"{page}: link {href} points at a missing page"
            if fragment and target.suffix == ".html":
                ids = {
                    t.get("id")
                    for t in BeautifulSoup(target.read_text(), "html.parser").select(
                        "[id]"
                    )
                }
                assert fragment in ids, (
                    f"{page}: link {href} points at a missing anchor"
                )


def test_no_missing_glyphs(rendered):
    """Matplotlib warns 'Glyph N (...) missing from font(s)' when it draws a box instead
    of a character."""
    for page, soup in rendered.items():
        text = soup.get_text(" ")
        assert (
            "missing from font" not in text and "missing from current font" not in text
        ), (
            f"{page}: a figure drew missing-glyph boxes (install a CJK font, "
            "e.g. fonts-noto-cjk)"
        )


def test_screenshots_of_key_pages(book):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    taken = []
    for page in (p for p in KEY_PAGES if p in toc_pages()):
        for device, width in WIDTHS.items():
            shot = SCREENSHOTS / f"{page.replace('/', '__')}-{width}px.png"
            shot.unlink(missing_ok=True)
            chromium(
                "--virtual-time-budget=10000",
                f"--window-size={width},2400",
                f"--screenshot={shot}",
                (book / f"{page}.html").as_uri(),
            )
            assert shot.is_file() and shot.stat().st_size > 20_000, (
                f"no {device} screenshot of {page}"
            )
            taken.append(shot)
    assert taken


def notebooks_formatted() -> bool:
    """True once ruff formats the notebooks (pyproject's extend-exclude no longer lists
    them)."""
    text = (ROOT / "pyproject.toml").read_text()
    return not re.search(r'^\s*"notebooks/\*\.ipynb"', text, re.MULTILINE)


def too_wide(book: Path, page: str, width: int = 1280) -> list[list[str]]:
    """[kind, start of text] of each code cell or display equation wider than its
    box."""
    source = book / f"{page}.html"
    probe = source.with_name(source.stem + ".layout-probe.html")
    probe.write_text(source.read_text().replace("</body>", LAYOUT_JS + "</body>"))
    try:
        dom = chromium(
            "--virtual-time-budget=15000",
            f"--window-size={width},900",
            "--dump-dom",
            probe.as_uri(),
        )
    finally:
        probe.unlink()
    report = BeautifulSoup(dom, "html.parser").select_one("#layout-report")
    assert report is not None, f"{page}: the layout probe did not run"
    return json.loads(report.get_text())


def test_nothing_scrolls_sideways_at_1280(book):
    """No display equation is cut at 1280 px; nor any code cell, once the notebooks are
    formatted."""
    problems = []
    for page in toc_pages():
        for kind, text in too_wide(book, page):
            if (
                kind == "math"
                or notebooks_formatted()
                or not page.startswith("notebooks/")
            ):
                problems.append(f"{page}: {kind} wider than its column: {text}")
    assert not problems, "\n".join(problems)


def test_images_have_real_alt_text(rendered):
    for page, soup in rendered.items():
        for img in soup.select("main img"):
            alt = (img.get("alt") or "").strip()
            src = img.get("src", "")
            assert alt, f"{page}: image {src} has no alt text"
            pathlike = re.search(r"\.(png|svg|jpe?g|gif)$", alt) or alt.startswith(
                ("../", "_images", "/")
            )
            assert not pathlike, f"{page}: image {src} has a path for alt text: {alt}"


def test_plumbing_is_off_the_page(rendered):
    """Colab installs, nbdev directives and nbval markers run but no code cell or output
    shows them (prose that teaches them, in inline code, is fine)."""
    for page, soup in rendered.items():
        text = " ".join(cell.get_text(" ") for cell in soup.select("main div.cell"))
        shown = [word for word in PLUMBING if word in text]
        assert not shown, f"{page}: plumbing visible on the page: {shown}"
