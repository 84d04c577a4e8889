"""The book as a reader meets it: build it, open every page in headless Chromium, and
check what shows.

Both editions: the English pages (_toc.yml) and the Chinese edition's (zh/_toc.yml,
built into _build/html/zh/). Fails on a build warning, math left as raw TeX, a
missing image, a broken internal link, Chinese text or labels that rendered as
missing-glyph boxes, an image without alt text (or with a path for one), notebook
plumbing visible on a page (NBVAL, default_exp, google.colab), a display equation or
code cell wider than its column at 1280 px, a page without a working language switch,
or prose of a Chinese page left in English. Screenshots of key
pages at 1280 px and at 390 px (a phone) land in _build/screenshots/ to be looked at.
Skipped when no Chromium is installed, unless REQUIRE_BROWSER=1 (CI sets it, so there
the test always runs).
"""

from __future__ import annotations

import functools
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
    "notebooks/10_decoding",
    "notebooks/12_gpt_language_model",
    "zh/book/intro",
    "zh/notebooks/05_multi_head_attention",
]
WIDTHS = {"desktop": 1280, "phone": 390}
# must run (or, # @title, name a folded cell in Colab), never show
PLUMBING = ("NBVAL", "default_exp", "google.colab", "@title")
# Appended to a copy of a page: after MathJax, report into <pre id="layout-report">
# - "wide": each code cell, printed output, command block (a fenced block of a book
#   page) and display equation whose content is wider than its box (it would scroll);
# - "page_width": how wide the document is (wider than the window: the page pans);
# - "hidden_tables": each table wider than the box it scrolls in whose box shows no cue
#   that there is more to the right (wide_tables.js fades the box's edge with a mask);
# - "missing_glyphs": the CJK characters that the page's font draws as the missing-glyph
#   box (each is drawn on a canvas and compared with a code point no font has).
LAYOUT_JS = """<script>
window.addEventListener("load", function () {
  var mj = window.MathJax && MathJax.startup && MathJax.startup.promise;
  (mj || Promise.resolve()).then(function () {
    var wide = [];
    var sel = "div.cell_input pre, div.cell_output pre, div.highlight pre, " +
      "div.math, mjx-container[display='true']";
    var kindOf = function (el) {
      if (el.closest("div.cell_input")) { return "code"; }
      if (el.closest("div.cell_output")) { return "output"; }
      if (el.closest("div.highlight")) { return "command"; }
      return "math";
    };
    document.querySelectorAll(sel).forEach(function (el) {
      if (el.offsetParent !== null && el.scrollWidth > el.clientWidth + 1) {
        var text = el.textContent.trim().replace(/\\s+/g, " ");
        wide.push([kindOf(el), text.slice(0, 70)]);
      }
    });
    var hidden = [];
    document.querySelectorAll("main table").forEach(function (table) {
      var box = table.parentElement;
      var scrolls = function (el) {
        return /(auto|scroll)/.test(getComputedStyle(el).overflowX);
      };
      while (box && box !== document.body && !scrolls(box)) {
        box = box.parentElement;
      }
      if (!box || box === document.body) { box = table.parentElement; }
      var style = getComputedStyle(box);
      var cue = /gradient/.test(style.maskImage || style.webkitMaskImage);
      if (table.offsetWidth > box.clientWidth + 1 && !cue) {
        hidden.push(table.textContent.trim().replace(/\\s+/g, " ").slice(0, 70));
      }
    });
    var main = document.querySelector("main") || document.body;
    var font = getComputedStyle(main).fontFamily;
    var canvas = document.createElement("canvas");
    canvas.width = canvas.height = 40;
    var ctx = canvas.getContext("2d", {willReadFrequently: true});
    ctx.font = "32px " + font;
    var draw = function (ch) {
      ctx.clearRect(0, 0, 40, 40);
      ctx.fillText(ch, 2, 32);
      return ctx.getImageData(0, 0, 40, 40).data.join(",");
    };
    var nothing = draw(String.fromCodePoint(0x10fffd));
    var cjk = /[\\u2e80-\\u9fff\\uff00-\\uffef]/g;
    var chars = Array.from(new Set(document.body.innerText.match(cjk)));
    var missing = chars.filter(function (ch) { return draw(ch) === nothing; });
    var out = document.createElement("pre");
    out.id = "layout-report";
    out.textContent = JSON.stringify({
      wide: wide,
      page_width: document.documentElement.scrollWidth,
      window_width: window.innerWidth,
      hidden_tables: hidden,
      missing_glyphs: missing.join("")
    });
    document.body.appendChild(out);
    if (window.parent !== window) { window.parent.postMessage(out.textContent, "*"); }
  });
});
</script>"""

pytestmark = pytest.mark.skipif(
    CHROMIUM is None and os.environ.get("REQUIRE_BROWSER") != "1",
    reason="no Chromium found (Debian: apt-get install chromium); set "
    "REQUIRE_BROWSER=1 to make this fail instead",
)


def toc_pages() -> list[str]:
    """Every page of both editions, as paths without suffix, in reading order: the
    English book, then the Chinese edition's pages under zh/."""
    pages = []
    for prefix in ("", "zh/"):
        toc = yaml.safe_load((ROOT / prefix / "_toc.yml").read_text())
        pages += [prefix + toc["root"]] + [
            prefix + c["file"] for part in toc["parts"] for c in part["chapters"]
        ]
    return pages


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


def build(*args: str) -> None:
    """One `jupyter-book build` of `make book`; a warning fails it."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", "-W", "-n"]
        + ["--keep-going", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = done.stdout + done.stderr
    warnings = [
        line for line in log.splitlines() if "WARNING" in line or "ERROR" in line
    ]
    assert done.returncode == 0 and not warnings, (
        f"book build {args} not clean:\n"
        + "\n".join(warnings or log.splitlines()[-30:])
    )


@pytest.fixture(scope="module")
def book() -> Path:
    """Build and trim both editions exactly as `make book` does (from the Chinese
    notebooks as committed: tests/test_zh_edition.py checks that they are current), and
    insist that the builds are clean."""
    build(".")
    build("zh", "--path-output", "_build/zh")
    shutil.rmtree(HTML / "zh", ignore_errors=True)
    shutil.copytree(ROOT / "_build" / "zh" / "_build" / "html", HTML / "zh")
    subprocess.run(
        [sys.executable, "tools/ship_book.py", str(HTML), str(HTML / "zh")],
        cwd=ROOT,
        check=True,
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


@functools.cache
def ids_of(page: Path) -> set[str]:
    """The ids (link targets) of a built page; parsed once per page."""
    soup = BeautifulSoup(page.read_text(), "html.parser")
    return {t.get("id") for t in soup.select("[id]")}


def test_internal_links_resolve(book, rendered):
    for page, soup in rendered.items():
        here = (book / f"{page}.html").parent
        for a in soup.select("main a[href]:not(.language-switch)"):
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
                assert fragment in ids_of(target), (
                    f"{page}: link {href} points at a missing anchor"
                )


def test_links_to_the_books_pages_stay_in_the_book(rendered):
    """A notebook links a book page at its GitHub address, for Colab; the book links
    its own page instead (tools/repo_images.py), so it reads offline."""
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    online = re.compile(re.escape(url) + r"/blob/[^/]+/(zh/)?book/")
    for page, soup in rendered.items():
        for a in soup.select("main a[href]"):
            assert not online.match(a["href"]), f"{page}: {a['href']} is online"


def test_no_missing_glyphs(book, rendered):
    """Every CJK character of a page has a glyph in the page's fonts (a Chinese page
    without a CJK font would show boxes); matplotlib warns 'Glyph N (...) missing from
    font(s)' when a figure drew a box instead of a character."""
    for page in toc_pages():
        missing = probe(book, page)["missing_glyphs"]
        assert not missing, (
            f"{page}: no font has a glyph for {missing[:20]} (install a CJK font, "
            "e.g. fonts-noto-cjk)"
        )
    for page, soup in rendered.items():
        text = soup.get_text(" ")
        assert (
            "missing from font" not in text and "missing from current font" not in text
        ), (
            f"{page}: a figure drew missing-glyph boxes (install a CJK font, "
            "e.g. fonts-noto-cjk)"
        )


def test_screenshots_of_key_pages(book):
    """Screenshots to look at; a phone's (390 px) shows the page in a frame at the left
    of a wider window (see `framed`)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    taken = []
    for page in (p for p in KEY_PAGES if p in toc_pages()):
        for device, width in WIDTHS.items():
            shot = SCREENSHOTS / f"{page.replace('/', '__')}-{width}px.png"
            shot.unlink(missing_ok=True)
            shown, window = framed(book / f"{page}.html", width, 2400)
            try:
                chromium(
                    "--virtual-time-budget=10000",
                    f"--window-size={window},2400",
                    f"--screenshot={shot}",
                    shown.as_uri(),
                )
            finally:
                if shown.name.endswith(f".frame-{width}.html"):
                    shown.unlink()
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


# Headless Chromium lays a window out at least 500 px wide, so a phone's width is given
# to a frame: the page runs in an <iframe> of that width, its media queries see the
# phone, and the layout report reaches the outer page as a message.
FRAME = """<!DOCTYPE html><html><body style="margin:0">
<iframe src="{src}" style="border:0;width:{width}px;height:{height}px"></iframe>
<script>
window.addEventListener("message", function (event) {{
  var out = document.createElement("pre");
  out.id = "layout-report";
  out.textContent = event.data;
  document.body.appendChild(out);
}});
</script></body></html>"""
WINDOW_MIN = 500


def framed(page: Path, width: int, height: int) -> tuple[Path, int]:
    """A page to load and the window width to load it in: `page` itself when the window
    can be `width` wide, else a wrapper beside it showing `page` in a frame of `width`
    by `height` (the caller deletes it)."""
    if width >= WINDOW_MIN:
        return page, width
    wrapper = page.with_name(f"{page.stem}.frame-{width}.html")
    wrapper.write_text(FRAME.format(src=page.name, width=width, height=height))
    return wrapper, WINDOW_MIN


@functools.cache
def probe(book: Path, page: str, width: int = 1280) -> dict:
    """The layout report of LAYOUT_JS for `page` at `width` px: the blocks wider than
    their box, the page's width, the tables hidden without a cue, the CJK characters
    drawn as missing-glyph boxes."""
    source = book / f"{page}.html"
    copy = source.with_name(f"{source.stem}.layout-probe-{width}.html")
    copy.write_text(source.read_text().replace("</body>", LAYOUT_JS + "</body>"))
    shown, window = framed(copy, width, 900)
    try:
        dom = chromium(
            "--virtual-time-budget=15000",
            f"--window-size={window},900",
            "--dump-dom",
            shown.as_uri(),
        )
    finally:
        copy.unlink()
        if shown != copy:
            shown.unlink()
    report = BeautifulSoup(dom, "html.parser").select_one("#layout-report")
    assert report is not None, f"{page}: the layout probe did not run at {width} px"
    return json.loads(report.get_text())


def test_nothing_scrolls_sideways_at_1280(book):
    """At 1280 px no display equation, printed output or command block is wider than
    its column (outputs and commands wrap: custom.css); nor any code cell, once the
    notebooks are formatted."""
    problems = []
    for page in toc_pages():
        for kind, text in probe(book, page)["wide"]:
            if kind != "code" or notebooks_formatted():
                problems.append(f"{page}: {kind} wider than its column: {text}")
    assert not problems, "\n".join(problems)


def test_pages_fit_a_phone(book):
    """At 390 px (a phone) no page of either edition is wider than the screen (the
    header's buttons fit, a long name in a heading breaks), and no table hides columns
    past the right edge without a cue: it fits, or its box fades out there."""
    problems = []
    for page in toc_pages():
        report = probe(book, page, WIDTHS["phone"])
        if report["page_width"] > report["window_width"]:
            problems.append(
                f"{page}: {report['page_width']} px wide on a "
                f"{report['window_width']} px screen"
            )
        problems += [
            f"{page}: a table hides columns: {t}" for t in report["hidden_tables"]
        ]
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


def test_every_page_links_to_itself_in_the_other_language(book, rendered):
    """The language switch (_static/language_switch.js) of each page opens the same page
    of the other edition (the Chinese-only glossary and setup page: the nearest English
    page)."""
    for page, soup in rendered.items():
        switch = soup.select_one("a.language-switch")
        assert switch is not None, f"{page}: no language switch"
        target = Path(unquote(switch["href"].removeprefix("file://")))
        assert target.is_file(), f"{page}: language switch to missing {target}"
        other = target.relative_to(book).with_suffix("").as_posix()
        if page.startswith("zh/"):
            assert not other.startswith("zh/"), f"{page}: switch stays in Chinese"
            assert other == page.removeprefix("zh/") or page in (
                "zh/book/glossary",
                "zh/book/setup_china",
            ), f"{page}: switch opens {other}"
        else:
            assert other == f"zh/{page}", f"{page}: switch opens {other}"


CJK = re.compile(r"[\u4e00-\u9fff]")
ENGLISH_RUN = re.compile(r"(?:\b[A-Za-z]{2,}\b[\s,;:'’-]+){4}\b[A-Za-z]{2,}\b")


def english_left(soup: BeautifulSoup) -> list[str]:
    """Paragraphs, list items, headings, table rows and admonition titles of a page's
    prose with five English words in a row and no Chinese character. Code, math,
    outputs and titles of cited works (<em>, <cite>) do not count; a table row counts
    as a whole (the glossary's rows pair a Chinese term with its English one)."""
    main = BeautifulSoup(str(soup.select_one("main") or soup), "html.parser")
    for tag in main.select(
        "pre, code, script, style, mjx-container, .math, .cell_output, em, cite"
    ):
        tag.decompose()
    left = []
    for el in main.select("p, li, h1, h2, h3, h4, tr, dt, dd, .admonition-title"):
        if el.find(["p", "li", "table"]) or el.find_parent(["td", "th"]):
            continue  # judged by its own paragraphs
        text = " ".join(el.get_text(" ").split())
        if ENGLISH_RUN.search(text) and not CJK.search(text):
            left.append(text[:80])
    return left


def test_chinese_pages_have_no_prose_left_in_english(rendered):
    for page, soup in rendered.items():
        if page.startswith("zh/"):
            left = english_left(soup)
            assert not left, f"{page}: prose left in English: {left[:3]}"


@pytest.mark.parametrize(
    "query, page",
    [
        ("束搜索", "zh/notebooks/10_decoding"),
        ("多头注意力", "zh/notebooks/05_multi_head_attention"),
        ("beam search", "notebooks/10_decoding"),
    ],
)
def test_search_finds_pages_in_each_language(book, query, page):
    """The search box of each edition (the Chinese index split into words by jieba,
    with the glossary's terms as words) finds the page that teaches a term."""
    root = book / "zh" if page.startswith("zh/") else book
    dom = chromium(
        "--virtual-time-budget=15000",
        "--dump-dom",
        (root / "search.html").as_uri() + "?q=" + query,
    )
    found = [
        a["href"] for a in BeautifulSoup(dom, "html.parser").select("#search-results a")
    ]
    wanted = page.removeprefix("zh/")
    assert any(wanted in unquote(href) for href in found), (
        f"searching {query!r} did not find {page}: {found[:5]}"
    )


# The attention explorer (_static/attention_explorer.js) of notebooks 10 and 11, in both
# editions, opened from the files with no network: the script below (appended to a copy
# of the page) picks a sentence, a kind, a layer and a head with the page's own selects,
# hovers a token of the upper row, and reports what the page then shows: the weights of
# the lines to every key and of the heatmap's row, each cell's data-weight.
EXPLORER_JS = """<script>
window.addEventListener("load", function () {
  var pick = %s;
  var tries = 0;
  var timer = setInterval(function () {
    var sel = ".attention-explorer[data-src='" + pick.src + "']";
    var root = document.querySelector(sel);
    if (!root || root.getAttribute("data-ready") !== "1") {
      if (++tries < 100) { return; }
    }
    clearInterval(timer);
    var report = {ready: root && root.getAttribute("data-ready")};
    if (report.ready === "1") {
      ["item", "kind", "layer", "head"].forEach(function (k) {
        var select = root.querySelector("select[data-pick='" + k + "']");
        if (select && pick[k] !== undefined) {
          select.value = String(pick[k]);
          select.dispatchEvent(new Event("change", {bubbles: true}));
        }
      });
      var token = root.querySelector(".ae-q[data-query='" + pick.query + "']");
      token.dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
      var weights = function (sel) {
        return Array.from(root.querySelectorAll(sel)).map(function (e) {
          return Number(e.getAttribute("data-weight"));
        });
      };
      report.state = ["item", "kind", "layer", "head", "query"].map(function (k) {
        return root.getAttribute("data-" + k);
      });
      report.lines = weights(".ae-k");
      report.row = weights(".ae-row[data-query='" + pick.query + "'] .ae-cell");
      report.active = root.querySelector(".ae-q.ae-active").getAttribute("data-query");
      report.readout = root.querySelector(".ae-readout").textContent;
      report.width = [root.scrollWidth, root.clientWidth];
    }
    var out = document.createElement("pre");
    out.id = "explorer-report";
    out.textContent = JSON.stringify(report);
    document.body.appendChild(out);
  }, 100);
});
</script>"""
EXPLORER_PAGES = {
    "notebooks/11_evaluation": {
        "src": "translator",
        "item": 1,
        "kind": "cross",
        "layer": 0,
        "head": 1,
        "query": 1,
    },
    "notebooks/12_gpt_language_model": {
        "src": "gpt",
        "item": 0,
        "layer": 1,
        "head": 2,
        "query": 5,
    },
}


def explorer_report(book: Path, page: str, pick: dict, server: str = "") -> dict:
    """What the explorer of `page` shows after the choices of `pick` and a hover; the
    page opened as a file, or from `server` (http://host:port/, serving `book`)."""
    source = book / f"{page}.html"
    copy = source.with_name(f"{source.stem}.explorer-probe.html")
    script = EXPLORER_JS % json.dumps(pick)
    copy.write_text(source.read_text().replace("</body>", script + "</body>"))
    try:  # no host resolves: the page must need no network
        dom = chromium(
            "--virtual-time-budget=20000",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--window-size=1280,900",
            "--dump-dom",
            server + copy.relative_to(book).as_posix() if server else copy.as_uri(),
        )
    finally:
        copy.unlink()
    report = BeautifulSoup(dom, "html.parser").select_one("#explorer-report")
    assert report is not None, f"{page}: the explorer probe did not run"
    return json.loads(report.get_text())


@pytest.mark.parametrize("edition", ["", "zh/"])
@pytest.mark.parametrize("page", sorted(EXPLORER_PAGES))
def test_attention_explorer_shows_the_exported_weights(book, page, edition):
    pick = dict(EXPLORER_PAGES[page])
    data = json.loads(
        (ROOT / "_static" / "explorer" / f"{pick['src']}.json").read_text()
    )
    kind = pick.get("kind", "self")
    item = (data["lines"] if pick["src"] == "gpt" else data["sentences"])[pick["item"]]
    heads = item[kind][pick["layer"]]  # (H, T_q, T_k)
    q = pick["query"] = min(pick["query"], len(heads[0]) - 1)  # a short translation
    want = heads[pick["head"]][q]
    report = explorer_report(book, edition + page, pick)
    assert report["ready"] == "1", (
        f"{edition}{page}: the explorer did not load its data"
    )
    assert report["state"] == [
        str(pick["item"]),
        kind,
        str(pick["layer"]),
        str(pick["head"]),
        str(q),
    ]
    assert report["active"] == str(q)
    assert report["lines"] == want, f"{edition}{page}: the lines show other weights"
    assert report["row"] == want, f"{edition}{page}: the heatmap shows other weights"
    assert f"{max(want):.3f}" in report["readout"]
    assert report["width"][0] <= report["width"][1], (
        "the explorer is wider than its box"
    )


def test_attention_explorer_fetches_its_data_over_http(book):
    """Served over http (as by a web host) the explorer fetches NAME.json; from the
    files it reads NAME.html (the test above)."""
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(book), **kwargs)

        def log_message(self, format, *args):
            asked.append(self.path)

    asked: list[str] = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        page = "zh/notebooks/11_evaluation"
        pick = {"src": "translator", "item": 0, "kind": "enc_self", "layer": 0}
        report = explorer_report(book, page, {**pick, "head": 0, "query": 0}, url)
    finally:
        server.shutdown()
        server.server_close()
    data = json.loads((ROOT / "_static" / "explorer" / "translator.json").read_text())
    assert report["ready"] == "1", "over http the explorer did not load its data"
    assert report["row"] == data["sentences"][0]["enc_self"][0][0][0]
    # the zh pages load the English edition's _static (tools/ship_book.py), and the
    # explorer finds its data beside its script
    assert "/_static/explorer/translator.json" in asked, asked
