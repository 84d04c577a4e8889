"""The Chinese edition (中文版): Chinese notebooks generated from the English ones.

Only prose is translated. Each English notebook `notebooks/NN_name.ipynb` has one
translation file `zh/translations/NN_name.md`: one entry per markdown cell, keyed by the
cell's id, with a hash of the English text the translation was made from:

    <!-- cell 96de56b4 en 3f2a9c0d1e4b -->
    ## 成为库的代码
    ...

`python tools/zh_edition.py` writes `zh/notebooks/NN_name.ipynb`: a copy of the
English notebook (code, outputs, figures, metadata) with each markdown cell's text
replaced by its translation. Links to a section of a notebook
(`06_masks.ipynb#the-padding-mask`) are rewritten to the Chinese heading's anchor, and
a link to a book page on GitHub (`.../blob/main/book/results.md`, as the English
notebooks write it, tools/repo_images.py) to the Chinese page
(`.../zh/book/results.md`). A folded cell's Colab title (its `# @title` line,
tools/tidy_notebooks.py) is the Chinese one of zh/colab_titles.yml, the only change
to the code.

The book pages `zh/book/*.md` are translated whole; each starts with
`<!-- source book/intro.md en <hash> -->`.

`--check` changes nothing and exits 1 with one line per problem: an English prose
cell changed after its translation was made (stale), a cell with no translation, a
translation still in English, a number of the English text missing from the
translation (a number may be written the Chinese way: "4.4M" as 440 万, "26.9k" as
2.69 万, "0.04" as 1/25), headings that do not match, or a Chinese notebook whose code
differs from its English source. `--update` adds the entries of new markdown cells
(English text, to be translated) to the translation files and drops entries of cells
that no longer exist.

`term_problems()` (run by tests/test_zh_edition.py) finds a variant of a term that
zh/terms.yml forbids, a parenthesis inside a parenthesis and two back to back;
`comparative_problems()` a comparative with 倍 or × (「大 3 倍」, read as four times);
`bold_problems()` a bold run closed after full-width punctuation, which shows its **.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import sys
import unicodedata
from decimal import Decimal
from pathlib import Path

import yaml
from myst_parser.mdit_to_docutils.base import default_slugify

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from repo_images import blob_prefix, raw_prefix  # noqa: E402  (tools/, beside this)

from transformer_lib.files import atomic_write  # noqa: E402  (stdlib only, no torch)

NOTEBOOKS = ROOT / "notebooks"
ZH = ROOT / "zh"
TRANSLATIONS = ZH / "translations"
ZH_NOTEBOOKS = ZH / "notebooks"
PAGES = ["intro", "setup", "notation", "results", "references"]  # book/*.md
ZH_PAGES = ["glossary", "setup_china"]  # only in the Chinese edition

ENTRY = re.compile(r"^<!-- (cell|figure) (\S+) en ([0-9a-f]{12}) -->[ \t]*$", re.M)
SOURCE = re.compile(r"\A<!-- source (\S+) en ([0-9a-f]{12}) -->[ \t]*\n")
CJK = re.compile(r"[\u4e00-\u9fff]")
NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:[.,]\d+)*")
# a number of the English with its scale: 4.4M, 26.9k, 6.7B, 38 million
SCALED = re.compile(
    r"(?<![A-Za-z0-9_.])(\d+(?:[.,]\d+)*)"
    r"(?:([kKMB])(?![A-Za-z0-9_])| (thousand|million|billion)\b)?"
)
SCALES = {"k": 3, "K": 3, "M": 6, "B": 9, "thousand": 3, "million": 6, "billion": 9}
# a number written the Chinese way: 440 万, 67 亿, 2.69 万, or a fraction 1/25.6
CHINESE_FORM = re.compile(
    r"(?<![A-Za-z0-9_.])(\d+(?:[.,]\d+)*)(?:/(\d+(?:\.\d+)?)| ?([千万亿]))"
)
CHINESE_SCALES = {"千": 3, "万": 4, "亿": 8}
HEADING = re.compile(r"^(#{1,6}) +(.+?)\s*$", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
SECTION_LINK = re.compile(r"\]\(([\w./-]*?)#([^)\s]+)\)")
IMAGE = re.compile(re.escape(raw_prefix()) + r"book/images/([\w.-]+)")  # in notebooks
PAGE = re.compile(re.escape(blob_prefix()) + r"(book/[\w.-]+\.md)")  # in notebooks
PAGE_IMAGE = re.compile(r"(?<![\w/.])images/([\w.-]+)")  # from zh/book/
GLOSSARY = ZH / "book" / "glossary.md"
TERMS = ZH / "terms.yml"
DIAGRAM_LABELS = ZH / "diagram_labels.yml"
COLAB_TITLES = ZH / "colab_titles.yml"  # a folded cell's `# @title`: English -> Chinese
TITLE_LINE = re.compile(r"\A#\s*@title\s+(.*?)\s*(?:\n|\Z)")
SEARCH_TERMS = ZH / "search_terms.txt"


def digest(text: str) -> str:
    """The first 12 hex digits of the sha256 of an English text."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def shown(path: Path) -> str:
    """`path` as a message names it: from the repository root when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def read_text(path: Path) -> str:
    """The text of `path`; one that is not UTF-8 (a file cut inside a character, say)
    is refused in one line that names it."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{shown(path)}: not UTF-8 at byte {e.start:,} ({e.reason}; a file cut "
            "inside a character?)"
        ) from None


def read_yaml(path: Path):
    """A YAML file; a malformed one is refused in one line that names it."""
    try:
        return yaml.safe_load(read_text(path))
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}" if where else ""
        raise ValueError(f"{shown(path)}: not valid YAML{at}") from None


def read_notebook(path: Path) -> dict:
    """A notebook; one that is not a notebook's JSON is refused naming the file."""
    try:
        nb = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{shown(path)}: not a notebook (bad JSON: {e})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError(f"{shown(path)}: not a notebook (no list of cells)")
    return nb


def write_text(path: Path, text: str) -> None:
    """Write `path` atomically: a full disk or a kill leaves the old file, never a
    part of the new one."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def write_notebook(path: Path, nb: dict) -> None:
    write_text(path, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def figure_title(cell: dict) -> str | None:
    """The title of the figure a code cell draws (its alt text, set by
    tools/tidy_notebooks.py from the plot's titles), or None."""
    alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")
    return alt.removeprefix("Figure: ") if alt else None


def units(nb: dict) -> list[tuple[str, str, dict]]:
    """(key, English text, cell) of everything translated in a notebook, in order: each
    markdown cell (key: its id) and each figure's title (key: figure:<cell id>)."""
    out = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            out.append((cell["id"], source(cell), cell))
        elif figure_title(cell):
            out.append((f"figure:{cell['id']}", figure_title(cell), cell))
    return out


def read_translations(path: Path) -> dict[str, tuple[str, str]]:
    """{key: (hash of the English text, Chinese text)} from a translation file."""
    text = read_text(path)
    marks = list(ENTRY.finditer(text))
    entries = {}
    for mark, nxt in zip(marks, marks[1:] + [None]):
        body = text[mark.end() : nxt.start() if nxt else len(text)]
        key = mark[2] if mark[1] == "cell" else f"figure:{mark[2]}"
        entries[key] = (mark[3], body.strip("\n"))
    return entries


def write_translations(path: Path, nb: dict, entries: dict) -> None:
    """One entry per markdown cell and per figure title, in notebook order."""
    parts = []
    for key, _, _ in units(nb):
        if key in entries:
            sha, text = entries[key]
            kind, _, cell_id = key.rpartition(":")
            parts.append(f"<!-- {kind or 'cell'} {cell_id} en {sha} -->\n{text}\n")
    write_text(path, "\n".join(parts))


def prose(text: str) -> str:
    """Text without code blocks, inline code, math, links' targets and HTML tags."""
    text = FENCE.sub("", text)
    # inline math may run over a line break, never over a blank line
    text = re.sub(
        r"\$\$.*?\$\$|\$(?:[^$\n]|\n(?!\n))+\$|`[^`\n]*`", "", text, flags=re.S
    )
    text = re.sub(r"\]\([^)]*\)|<[^>]+>|https?://\S+", "", text)
    return text


def headings(text: str) -> list[tuple[int, str]]:
    return [(len(m[1]), m[2]) for m in HEADING.finditer(FENCE.sub("", text))]


def slugify(title: str) -> str:
    """The anchor MyST gives a heading: its default slug of the heading's text (links,
    emphasis and code marks removed; inline math dropped whole, as MyST's slug does:
    "The $\\sqrt{d}$ scale" is the--scale)."""
    title = re.sub(r"[*_`]", "", re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title))
    return default_slugify(re.sub(r"\$[^$]*\$", "", title))


def problems_of_entry(
    name: str, key: str, english: str, entry: tuple[str, str] | None
) -> list:
    """What is wrong with the translation of one English markdown cell or figure
    title."""
    kind, _, cell_id = key.rpartition(":")
    where = f"zh/translations/{name}.md: {kind or 'cell'} {cell_id}"
    if entry is None:
        return [f"{where} has no translation (run tools/zh_edition.py --update)"]
    sha, chinese = entry
    if sha != digest(english):
        return [
            f"{where} is stale: its English text changed since it was translated "
            f"(hash {sha}, now {digest(english)}); translate the new text, set the hash"
        ]
    out = []
    english_prose = prose(english)
    if not CJK.search(english_prose) and re.search("[A-Za-z]{3}", english_prose):
        if not CJK.search(chinese):
            out.append(f"{where} is still in English")
    missing = missing_numbers(english_prose, prose(chinese))
    if missing:
        out.append(f"{where} lacks numbers of the English text: {', '.join(missing)}")
    en_levels = [level for level, _ in headings(english)]
    zh_levels = [level for level, _ in headings(chinese)]
    if en_levels != zh_levels:
        out.append(f"{where} has headings of levels {zh_levels}, English {en_levels}")
    return out


def value(number: str) -> Decimal:
    return Decimal(number.replace(",", ""))


def missing_numbers(english: str, chinese: str) -> list[str]:
    """The numbers of an English text that its Chinese translation lacks. A number is
    there when the Chinese has it as written, or has its value written the Chinese way:
    with 千/万/亿 (4.4M as 440 万, 26.9k tokens as 2.69 万个), or as a fraction (0.04 as
    1/25). An English number with a scale (4.4M) may also be written out (4,400,000)."""
    written = set(NUMBER.findall(chinese))
    chinese_forms = set()
    for number, denominator, scale in CHINESE_FORM.findall(chinese):
        if denominator:
            if value(denominator):
                chinese_forms.add(value(number) / value(denominator))
        else:
            chinese_forms.add(value(number).scaleb(CHINESE_SCALES[scale]))
    plain = {value(n) for n in written}
    missing = set()
    for number, letter, word in SCALED.findall(english):
        if number in written:
            continue
        scale = SCALES.get(letter or word, 0)
        amount = value(number).scaleb(scale)
        if amount in chinese_forms or (scale and amount in plain):
            continue
        missing.add(number)
    return sorted(missing)


def anchor_map(nb: dict, entries: dict) -> dict[str, str]:
    """{English heading anchor: Chinese heading anchor} of one notebook."""
    mapping = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown" or cell["id"] not in entries:
            continue
        en, zh = headings(source(cell)), headings(entries[cell["id"]][1])
        for (_, en_title), (_, zh_title) in zip(en, zh):
            mapping.setdefault(slugify(en_title), slugify(zh_title))
    return mapping


def relink(text: str, anchors: dict, here: str = "") -> str:
    """Links to a notebook's section (`06_masks.ipynb#the-padding-mask`, or `#...`
    within notebook `here`) pointed at the anchor of the Chinese heading."""

    def chinese(match: re.Match) -> str:
        target = match[1].rsplit("/", 1)[-1].removesuffix(".ipynb") or here
        return f"]({match[1]}#{anchors.get(target, {}).get(match[2], match[2])})"

    return SECTION_LINK.sub(chinese, text)


def localise_images(text: str, pattern: re.Pattern) -> str:
    """A diagram drawn in Chinese (zh/book/images/) is used from there; any other image
    from the English edition's book/images/."""

    def path(match: re.Match) -> str:
        drawn = (ZH / "book" / "images" / match[1]).exists()
        if pattern is IMAGE:  # the repository's raw address (tools/repo_images.py)
            return f"{raw_prefix()}{'zh/' if drawn else ''}book/images/{match[1]}"
        return match[0] if drawn else f"../../book/images/{match[1]}"

    return pattern.sub(path, text)


def localise_pages(text: str) -> str:
    """A link to a book page on GitHub points at the Chinese page (zh/book/), where
    there is one."""

    def chinese(match: re.Match) -> str:
        translated = (ZH / match[1]).exists()
        return f"{blob_prefix()}{'zh/' if translated else ''}{match[1]}"

    return PAGE.sub(chinese, text)


def colab_titles() -> dict[str, str]:
    """zh/colab_titles.yml: {English `# @title` text: Chinese}."""
    return read_yaml(COLAB_TITLES) or {} if COLAB_TITLES.exists() else {}


def title_of(cell: dict) -> str | None:
    """The text of a code cell's first-line `# @title`, or None."""
    match = TITLE_LINE.match(source(cell)) if cell["cell_type"] == "code" else None
    return match[1] if match else None


def chinese_notebook(
    nb: dict, name: str, entries: dict, anchors: dict, titles: dict | None = None
) -> dict:
    """The English notebook `name` with each markdown cell's text replaced by its
    translation, links to sections pointing at the Chinese headings, each figure
    captioned with its translated title, and each folded cell's Colab title the
    Chinese one of `titles` (default: zh/colab_titles.yml)."""
    titles = colab_titles() if titles is None else titles
    out = copy.deepcopy(nb)
    for cell in out["cells"]:
        if title_of(cell) in titles:
            rest = TITLE_LINE.sub("", source(cell), count=1)
            text = f"# @title {titles[title_of(cell)]}\n{rest}"
            cell["source"] = text.splitlines(keepends=True)
        caption = entries.get(f"figure:{cell['id']}")
        if cell["cell_type"] == "code" and caption:
            mystnb = cell["metadata"]["mystnb"]
            mystnb["image"]["alt"] = "图：" + caption[1]
            # the caption is Markdown: <pad> must not become an HTML tag
            mystnb["figure"] = {"caption": caption[1].replace("<", "\\<")}
        if cell["cell_type"] == "markdown" and cell["id"] in entries:
            text = relink(entries[cell["id"]][1], anchors, name)
            text = localise_pages(localise_images(join_lines(text), IMAGE))
            cell["source"] = text.splitlines(keepends=True)
    return out


WIDE = "\u2e80-\u9fff\uff00-\uffef\u3000-\u303f“”‘’"  # CJK and full-width punctuation
ENDS_WIDE = re.compile(rf"[{WIDE}]$")
STARTS_WIDE = re.compile(rf"^\s*(\*{{0,2}}\[?[{WIDE}]|\[)")
BLOCK = re.compile(r"^\s*(#|[-*+] |\d+\. |>|\||:::|\$\$|<|```|~~~)")


def join_lines(text: str) -> str:
    """Join a paragraph's lines where Chinese meets Chinese: a line break inside a
    paragraph renders as a space, which Chinese text does not have. Headings, code
    blocks and lines that start a block are left as they are."""
    out, fenced = [], False
    for line in text.split("\n"):
        joinable = (
            out
            and not fenced
            and ENDS_WIDE.search(out[-1])
            and not out[-1].lstrip().startswith("#")
            and STARTS_WIDE.match(line)
            and not BLOCK.match(line)
        )
        if joinable:
            out[-1] += line.lstrip()
        else:
            out.append(line)
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
    return "\n".join(out)


def search_terms() -> str:
    """The glossary's Chinese terms, one per line: jieba (the search index's word
    splitter) keeps each as one word, so searching for 束搜索 finds beam search."""
    terms = []
    for line in read_text(GLOSSARY).splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and cells[0] != "中文" and CJK.search(cells[0]):
            terms += re.split(r"[、，,]\s*", cells[0])
    return "".join(f"{t} 1000\n" for t in dict.fromkeys(terms) if CJK.search(t))


def code_of(nb: dict) -> list:
    """(id, type, code) of each cell; the code without its `# @title` line, which the
    Chinese edition translates."""
    return [
        (
            c["id"],
            c["cell_type"],
            TITLE_LINE.sub("", source(c)) if c["cell_type"] == "code" else "",
        )
        for c in nb["cells"]
    ]


def incomplete(english: dict[str, dict]) -> list[str]:
    """What would make a half-translated book: a translation file missing, an entry
    missing (a file cut short) or given twice. Nothing is written while any is left."""
    out = []
    for name, nb in english.items():
        path = TRANSLATIONS / f"{name}.md"
        if not path.exists():
            out.append(f"zh/translations/{name}.md is missing")
            continue
        keys = [
            m[2] if m[1] == "cell" else f"figure:{m[2]}"
            for m in ENTRY.finditer(read_text(path))
        ]
        out += [
            f"zh/translations/{name}.md: {key} has two entries"
            for key in sorted({k for k in keys if keys.count(k) > 1})
        ]
        out += [
            f"zh/translations/{name}.md: {key} has no entry (a cut file?)"
            for key, _, _ in units(nb)
            if key not in keys
        ]
    return out


def run(update: bool, check: bool) -> list[str]:
    problems = []
    english = {
        p.stem: read_notebook(p) for p in sorted(NOTEBOOKS.glob("[0-9A]*.ipynb"))
    }
    if not update:
        missing = incomplete(english)
        if missing and not check:
            raise IncompleteTranslations(missing)
        problems += [line for line in missing if line.endswith("two entries")]
    entries = {}
    for name, nb in english.items():
        path = TRANSLATIONS / f"{name}.md"
        found = read_translations(path) if path.exists() else {}
        texts = {key: text for key, text, _ in units(nb)}
        if update:
            found = {k: v for k, v in found.items() if k in texts}
            for key, english_text in texts.items():
                found.setdefault(key, (digest(english_text), english_text))
            TRANSLATIONS.mkdir(parents=True, exist_ok=True)
            write_translations(path, nb, found)
        entries[name] = found
        for extra in sorted(set(found) - set(texts)):
            problems.append(
                f"zh/translations/{name}.md: {extra} is not in {name}.ipynb "
                "(run tools/zh_edition.py --update to drop it)"
            )
        for key, english_text in texts.items():
            problems += problems_of_entry(name, key, english_text, found.get(key))
    anchors = {n: anchor_map(nb, entries[n]) for n, nb in english.items()}
    titles = colab_titles()
    for name, nb in english.items():
        problems += [
            f"zh/colab_titles.yml has no Chinese for {title!r} (the `# @title` of "
            f"notebooks/{name}.ipynb cell {cell['id']})"
            for cell in nb["cells"]
            if (title := title_of(cell)) is not None and title not in titles
        ]
        target = ZH_NOTEBOOKS / f"{name}.ipynb"
        made = chinese_notebook(nb, name, entries[name], anchors, titles)
        if check:
            if not target.exists():
                problems.append(f"zh/notebooks/{name}.ipynb is missing")
                continue
            committed = read_notebook(target)
            if code_of(committed) != code_of(nb):
                problems.append(
                    f"zh/notebooks/{name}.ipynb: its code differs from "
                    f"notebooks/{name}.ipynb (run tools/zh_edition.py)"
                )
            elif committed != made:
                problems.append(
                    f"zh/notebooks/{name}.ipynb is out of date with its English "
                    "notebook or translation (run tools/zh_edition.py)"
                )
        else:
            ZH_NOTEBOOKS.mkdir(parents=True, exist_ok=True)
            write_notebook(target, made)
    for page in PAGES:
        problems += page_problems(page)
    for page in PAGES + ZH_PAGES:
        problems += fix_page(ZH / "book" / f"{page}.md", anchors, check)
    if not check:
        write_text(SEARCH_TERMS, search_terms())
    elif not SEARCH_TERMS.exists() or read_text(SEARCH_TERMS) != search_terms():
        problems.append("zh/search_terms.txt is out of date (run tools/zh_edition.py)")
    return problems


def fix_page(path: Path, anchors: dict, check: bool) -> list[str]:
    """A Chinese book page as the notebooks are made: links to a notebook's section
    point at its Chinese heading, a paragraph's Chinese lines joined, an image not
    drawn in Chinese taken from book/images/. Rewritten in place (or, with check,
    reported)."""
    if not path.exists():
        return []
    text = read_text(path)
    fixed = localise_images(join_lines(relink(text, anchors)), PAGE_IMAGE)
    problems = dangling_links(f"zh/{path.relative_to(ZH)}", fixed, anchors)
    if fixed == text:
        return problems
    if check:
        return problems + [
            f"zh/{path.relative_to(ZH)} needs its links fixed: run tools/zh_edition.py"
        ]
    write_text(path, fixed)
    return problems


def dangling_links(where: str, text: str, anchors: dict) -> list[str]:
    """Links to a notebook's section that no heading of its Chinese edition has (a
    page keeps the Chinese anchor once written, so renaming a heading breaks it)."""
    out = []
    for match in SECTION_LINK.finditer(text):
        name = match[1].rsplit("/", 1)[-1].removesuffix(".ipynb")
        known = set(anchors.get(name, {}).values())
        if match[1].endswith(".ipynb") and known and match[2] not in known:
            out.append(
                f"{where} links to {match[1]}#{match[2]}, which no heading of the "
                f"Chinese {name} has: link to its English anchor or its new heading"
            )
    return out


def page_problems(page: str) -> list[str]:
    """A book page's translation is stale when the English page changed after it."""
    path = ZH / "book" / f"{page}.md"
    english = read_text(ROOT / "book" / f"{page}.md")
    if not path.exists():
        return [f"zh/book/{page}.md is missing (translate book/{page}.md)"]
    mark = SOURCE.match(read_text(path))
    if not mark or mark[1] != f"book/{page}.md":
        return [
            f"zh/book/{page}.md must start with <!-- source book/{page}.md en HASH -->"
        ]
    if mark[2] != digest(english):
        return [
            f"zh/book/{page}.md is stale: book/{page}.md changed since its translation "
            f"(hash {mark[2]}, now {digest(english)})"
        ]
    return []


def load_terms() -> list[dict]:
    """zh/terms.yml: one Chinese term per concept, with the variants it forbids."""
    return read_yaml(TERMS)["terms"]


def variant_pattern(variant: str) -> re.Pattern:
    """A Latin variant (MLP, LayerNorm) is one as a whole word, and not when a "("
    follows it (a formula: LayerNorm(x)); a Chinese one anywhere."""
    if re.fullmatch(r"[A-Za-z][\w ]*", variant):
        return re.compile(rf"(?<![\w.]){re.escape(variant)}(?![\w(])")
    return re.compile(re.escape(variant))


NESTED = re.compile(r"（[^（）]*（")
BACK_TO_BACK = re.compile(r"）\s*（")


def chinese_texts() -> list[tuple[str, str, str]]:
    """(file, place, text) of every Chinese text of the edition a reader sees: each
    translation entry, each line of a Chinese book page (not the glossary, which names
    each term's English) and each Chinese diagram label."""
    out = []
    for path in sorted(TRANSLATIONS.glob("*.md")):
        for key, (_, text) in read_translations(path).items():
            kind, _, cell_id = key.rpartition(":")
            out.append(
                (f"zh/translations/{path.name}", f"{kind or 'cell'} {cell_id}", text)
            )
    for path in sorted((ZH / "book").glob("*.md")):
        if path == GLOSSARY:
            continue
        lines = FENCE.sub(lambda m: "\n" * m[0].count("\n"), read_text(path))
        for number, line in enumerate(lines.splitlines(), 1):
            out.append((f"zh/book/{path.name}", f"line {number}", line))
    for english, chinese in colab_titles().items():
        out.append(("zh/colab_titles.yml", f"title {english[:40]!r}", chinese))
    if DIAGRAM_LABELS.exists():
        labels = read_yaml(DIAGRAM_LABELS)
        for english, chinese in labels.items():
            out.append(("zh/diagram_labels.yml", f"label {english[:40]!r}", chinese))
    return out


def term_problems(texts: list[tuple[str, str, str]] | None = None) -> list[str]:
    """One line per forbidden variant of a term (zh/terms.yml), per parenthesis inside
    a parenthesis and per two parentheses back to back, in the edition's Chinese
    prose (code, math and link targets are not read)."""
    patterns = [
        (term["preferred"], variant, variant_pattern(variant))
        for term in load_terms()
        for variant in term["forbidden"]
    ]
    out = []
    for file, place, text in chinese_texts() if texts is None else texts:
        text = prose(text)
        for preferred, variant, pattern in patterns:
            if pattern.search(text):
                out.append(f"{file}: {place} writes {variant!r}; write {preferred!r}")
        for pattern, what in (
            (NESTED, "a parenthesis inside a parenthesis"),
            (BACK_TO_BACK, "two parentheses back to back"),
        ):
            for match in pattern.finditer(text):
                inner = match.end() - 1  # the second "（"
                near = text[max(inner - 12, 0) : inner + 18].replace("\n", "")
                out.append(f"{file}: {place} has {what}: …{near}…")
    return out


# A comparative with 倍 or ×: 「大 3 倍」, 「小 42×」, 「3 倍小」. A Chinese reader
# takes 「大 3 倍」 as "3 times more", four times the size, whatever the English meant.
# Bold or italic markup around the number (「快 **5.3** 倍」) does not hide it.
NUMERAL = r"(?:\d+(?:\.\d+)?|[一二两三四五六七八九十百千]+)"
COMPARATIVE = re.compile(
    rf"(?<![至最差许不])(?:[多大小少快慢高低]|增加|增长|提升)[了出]?\s*\**{NUMERAL}\**\s*"
    rf"(?:倍|×|[xX](?!\w))|{NUMERAL}\**\s*(?:倍|×|[xX])\s*\**[大小少快慢高低](?!于)"
)
COMPARATIVE_RULE = (
    "write 「是…的 N 倍」 for larger, more or faster, 「只有…的 1/N」 for smaller, "
    "fewer or slower"
)
README_ZH = [ROOT / "README.zh-CN.md", ZH / "README.md"]


def paragraphs(path: Path) -> list[tuple[str, str]]:
    """("line N", text) of each paragraph of a page, code blocks blanked, so that a
    phrase broken over two lines is still read whole."""
    text = FENCE.sub(lambda m: "\n" * m[0].count("\n"), read_text(path))
    out, start, lines = [], 1, []
    for number, line in enumerate(text.split("\n") + [""], 1):
        if line.strip():
            start = start if lines else number
            lines.append(line)
        elif lines:
            out.append((f"line {start}", "\n".join(lines)))
            lines = []
    return out


def edition_texts() -> list[tuple[str, str, str]]:
    """(file, place, text) of the edition's Chinese: translations, book pages (the
    glossary too), README.zh-CN.md and zh/README.md, diagram labels."""
    texts = [t for t in chinese_texts() if not t[0].startswith("zh/book/")]
    for path in sorted((ZH / "book").glob("*.md")) + README_ZH:
        name = path.relative_to(ROOT).as_posix()
        texts += [(name, place, text) for place, text in paragraphs(path)]
    return texts


def comparative_problems(texts: list[tuple[str, str, str]] | None = None) -> list[str]:
    """One line per comparative with 倍 or × (「大 3 倍」, 「小 42×」) in the edition's
    Chinese (`edition_texts`)."""
    out = []
    for file, place, text in edition_texts() if texts is None else texts:
        for match in COMPARATIVE.finditer(prose(text)):
            said = re.sub(r"\s*\n\s*", "", match[0])
            out.append(
                f"{file}: {place} writes {said!r}, which a Chinese reader takes as "
                f"one time more than meant; {COMPARATIVE_RULE}"
            )
    return out


def _punctuation(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def bold_problems(texts: list[tuple[str, str, str]] | None = None) -> list[str]:
    """One line per bold run that Markdown leaves open: a closing ** right after
    punctuation and right before a character (**这说明：**采用) is not a closing
    delimiter in CommonMark, so the page shows the asterisks (**这说明**：采用
    closes)."""
    out = []
    for file, place, text in edition_texts() if texts is None else texts:
        plain = prose(text) + " "
        for i in [m.start() for m in re.finditer(r"\*\*", plain)][1::2]:
            before, after = plain[i - 1], plain[i + 2]
            if _punctuation(before) and not (after.isspace() or _punctuation(after)):
                out.append(
                    f"{file}: {place} closes bold with {before}** before {after!r}, "
                    f"which Markdown does not read as closing: put the {before} after "
                    "the **"
                )
    return out


class IncompleteTranslations(Exception):
    """Translations are missing or given twice: no Chinese notebook is written."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; report")
    parser.add_argument("--update", action="store_true", help="add new cells' entries")
    args = parser.parse_args()
    try:
        problems = run(update=args.update, check=args.check)
    except IncompleteTranslations as e:
        for line in e.args[0]:
            print(line, file=sys.stderr)
        sys.exit(
            f"zh_edition: nothing written: {len(e.args[0])} translation(s) missing or "
            "doubled (run tools/zh_edition.py --update, then translate)"
        )
    except (OSError, ValueError) as e:  # unreadable, not UTF-8, not JSON, disk full
        sys.exit(f"zh_edition: {e}")
    for line in problems:  # warnings: on standard error, as every refusal
        print(line, file=sys.stderr)
    if args.check and problems:
        sys.exit(f"{len(problems)} problem(s) in the Chinese edition")
    if problems:  # written anyway (a stale entry keeps its old text): --check fails
        print(
            f"zh_edition: written with {len(problems)} problem(s) above; "
            "tools/zh_edition.py --check fails until they are fixed",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
