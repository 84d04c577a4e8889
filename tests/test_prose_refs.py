"""What the prose names exists: the exercises it points to, the notebooks and sections
it links, the `transformer_lib` names and the repository's files it quotes (issue 33,
item 7). Over the notebooks, book pages and READMEs of both editions (练习 N,
笔记本 NN).
Numbers quoted in the prose are test_prose_numbers.py's; unlinked notebook mentions are
test_book.py's. Section names are always cited as links (`NN_name.ipynb#anchor`), whose
anchors are checked here with MyST's own slugs (`myst_heading_anchors` in _config.yml).
"""

import dataclasses
import functools
import importlib
import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from mdit_py_plugins.anchors import anchors_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin
from test_book import markdown_of

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    p
    for edition in (ROOT, ROOT / "zh")
    for p in sorted((edition / "notebooks").glob("[0-9A][0-9]_*.ipynb"))
    + sorted((edition / "book").glob("*.md"))
] + [ROOT / "README.md", ROOT / "README.zh-CN.md"]


def prose(path: Path) -> str:
    """The markdown of a notebook (its markdown cells) or of a book page."""
    if path.suffix == ".ipynb":
        return "\n\n".join(markdown_of(path))
    return path.read_text(encoding="utf-8")


def no_code(text: str) -> str:
    """The text without fenced code blocks and inline code."""
    return re.sub(r"```.*?```|`[^`\n]*`", "", text, flags=re.S)


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


# ----------------------------------------------------------------------------------
# 1. Exercises: "exercise 2", "Exercises 1 and 2", "练习 1 和 2" name numbered items of
# the notebook's Exercises section (or of the notebook linked just before: "[notebook
# 14](14_making_it_fast.ipynb)'s exercise 3").

EXERCISE = re.compile(
    r"(?:(\[[^\]]*\]\((?P<nb>[0-9A][0-9]_[\w]+\.ipynb)[^)]*\)(?:'s|\s*的)\s*))?"
    r"(?:[Ee]xercises?|练习)\s*(?P<n>\d+)(?P<more>(?:\s*(?:,|and|or|to|和|与|或|、|至)\s*\d+)*)"
)


def exercises(path: Path) -> set[int]:
    """The numbers of the exercises in a notebook's `## Exercises` (`## 练习`) section:
    its numbered items before the folded answers."""
    text = prose(path)
    section = re.split(r"\n## (?:Exercises|练习)\s*\n", "\n" + text, maxsplit=1)
    if len(section) < 2:
        return set()
    questions = re.split(r"\n## |<details>", section[1])[0]
    return {int(n) for n in re.findall(r"^(\d+)\. ", questions, flags=re.M)}


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_every_exercise_named_exists(path):
    wrong = []
    for m in EXERCISE.finditer(no_code(prose(path))):
        target = path.parent / m["nb"] if m["nb"] else path
        numbers = {int(m["n"])} | {int(n) for n in re.findall(r"\d+", m["more"])}
        have = exercises(target) if target.suffix == ".ipynb" else set()
        if not numbers <= have:
            wrong.append(f"{m[0]!r}: {target.name} has exercises {sorted(have)}")
    assert not wrong, f"{page_id(path)}: exercises that do not exist:\n" + "\n".join(
        wrong
    )


# ----------------------------------------------------------------------------------
# 2. Links: a relative link reaches a file, its #anchor a heading there, and a link
# whose text names a notebook ("notebook 05", "[07 The encoder]", "appendix A1")
# points at that notebook.

LINK = re.compile(r"(?<!!)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")
MD = MarkdownIt("commonmark").use(dollarmath_plugin).use(anchors_plugin, max_level=3)


def anchors(path: Path) -> set[str]:
    """The heading anchors MyST makes for a page (levels 1-3, unique per page)."""
    return {
        t.attrs["id"]
        for t in MD.parse(prose(path))
        if t.type == "heading_open" and "id" in t.attrs
    }


NAMED = re.compile(
    r"^(?:[Nn]otebooks?\s+|[Aa]ppendix\s+|笔记本\s*|附录\s*)?([0-9A][0-9])\b(?!\.\d|\s*%)"
)


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_every_link_reaches_its_page_and_section(path):
    wrong = []
    text = re.sub(r"```.*?```", "", prose(path), flags=re.S)
    for m in LINK.finditer(text):
        label, target = m.groups()
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file, _, anchor = target.partition("#")
        page = (path.parent / file).resolve() if file else path
        if not page.exists():
            wrong.append(f"{m[0]!r}: no file {file}")
            continue
        if anchor and page.suffix in (".md", ".ipynb") and anchor not in anchors(page):
            wrong.append(f"{m[0]!r}: no section #{anchor} in {page.name}")
        named = NAMED.match(label.strip("*_ "))
        if named and page.suffix == ".ipynb" and named[1] != page.name[:2]:
            wrong.append(f"{m[0]!r}: the text names {named[1]}, the link {page.name}")
    assert not wrong, f"{page_id(path)}: broken links:\n" + "\n".join(wrong)


SECTION = re.compile(r"\b(?:the|its)\s+((?:[^\s\[\]()]+\s+){1,3})sections?\b")
# "the next section", "the order of the sections", "the paper, section 5.4": no name
RELATIVE = {"next", "last", "previous", "following", "this", "same", "of", "paper,"}


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_sections_named_are_links(path):
    """ "the Muon section" is a link to it, so that the anchor test checks it exists."""
    text = LINK.sub("", re.sub(r"```.*?```", "", prose(path), flags=re.S))
    unlinked = [
        m[0] for m in SECTION.finditer(text) if not set(m[1].lower().split()) & RELATIVE
    ]
    assert not unlinked, f"{page_id(path)}: link these to their section: {unlinked}"


UNLINKED = re.compile(
    r"(?:\b[Aa]ppendix|附录)\s*(A\d)\b|(?:\b[Nn]otebooks?|笔记本)\s*(\d\d)\b"
)


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_every_notebook_named_exists(path):
    numbers = {p.name[:2] for p in (ROOT / "notebooks").glob("*.ipynb")}
    named = {a or b for a, b in UNLINKED.findall(no_code(prose(path)))}
    assert named <= numbers, f"{page_id(path)}: no notebook {sorted(named - numbers)}"


# ----------------------------------------------------------------------------------
# 3. `transformer_lib.x.y` and `x.y` (x a module of the library) resolve.

LIB = ROOT / "transformer_lib"
MODULES = {p.stem for p in LIB.glob("*.py") if p.stem != "__init__"} | {
    p.name for p in LIB.iterdir() if (p / "__init__.py").exists()
}
DOTTED = re.compile(r"`(?:python -m )?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?=[(`\[ ])")
# Backticked dotted names whose head is a library module's name but that are not the
# library's: the name, and why.
NOT_THE_LIBRARY = {
    "encoder.json": "GPT-2's vocabulary file",
    "encoder.py": "OpenAI's GPT-2 tokenizer source",
}
IMPORT = re.compile(r"`from (transformer_lib\.[\w.]+) import ([\w, ]+)`")


def resolves(dotted: str) -> bool:
    """Does `dotted` name a module of the library or an attribute of one (a dataclass
    field counts as an attribute of its class)?"""
    parts = dotted.split(".")
    if parts[0] != "transformer_lib":
        parts = ["transformer_lib"] + parts
    for i in range(len(parts), 0, -1):
        try:
            thing = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            fields = (
                {f.name for f in dataclasses.fields(thing)}
                if dataclasses.is_dataclass(thing)
                else set()
            )
            if name in fields:
                return name == parts[-1]
            if not hasattr(thing, name):
                return False
            thing = getattr(thing, name)
        return True
    return False


def library_names(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", prose(path), flags=re.S)
    return {
        name
        for name in DOTTED.findall(text)
        if name.split(".")[0] in MODULES | {"transformer_lib"}
        and name not in NOT_THE_LIBRARY
    } | {
        f"{module}.{name.strip()}"
        for module, names in IMPORT.findall(text)
        for name in names.split(",")
    }


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_every_library_name_quoted_resolves(path):
    missing = sorted(n for n in library_names(path) if not resolves(n))
    assert not missing, f"{page_id(path)}: names the library does not have: {missing}"


PATH = re.compile(
    r"`((?:transformer_lib|tests|tools|benchmarks|notebooks|book|solutions)/[^`\s]*)`"
)


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_every_repository_path_quoted_exists(path):
    """`transformer_lib/files.py`, `tests/test_lm_train.py`, `benchmarks/results/`."""
    missing = [
        p for p in PATH.findall(prose(path)) if not list(ROOT.glob(p.rstrip("/")))
    ]
    assert not missing, f"{page_id(path)}: no such files: {missing}"


# ----------------------------------------------------------------------------------
# Bare names are too ambiguous to import, but a backticked snake_case name or flag
# (`resume_run`, `--time-budget`) that no code of the course contains was renamed or
# removed. Names from elsewhere that the course's code does not spell out, and why:
NOT_IN_THE_CODE = {
    "huggingface_hub": "a package (the mirror's setup in China)",
    "index-url": "pip's flag",
    "non_blocking": "an argument of torch's Tensor.to",
    "profile_memory": "an argument of torch.profiler.profile",
    "the-loop": "a cell tag (tests/test_structure.py)",
    "fonts-wqy-zenhei": "a Debian package (the setup pages)",
    "xcode-select": "macOS's command",
}
BARE = re.compile(r"`(?:--)?([a-z][a-z0-9]*(?:[_-][a-z0-9]+)+)(?=[(`=\[ ])")


@functools.cache
def code_words() -> set[str]:
    """Every word and --flag of the library, the tools, the benchmarks and the
    notebooks' code."""
    files = [*(ROOT / "transformer_lib").rglob("*.py"), *(ROOT / "tools").glob("*.py")]
    texts = [f.read_text() for f in files + list((ROOT / "benchmarks").glob("*.py"))]
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        cells = json.loads(nb.read_text())["cells"]
        texts += ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return set(re.findall(r"(?<=--)[\w-]+|\w+", "\n".join(texts)))


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_every_snake_case_name_quoted_is_in_the_code(path):
    words = code_words()
    text = re.sub(r"```.*?```", "", prose(path), flags=re.S)
    missing = sorted(
        {
            n
            for n in BARE.findall(text)
            if not {n, n.replace("-", "_")} & words and n not in NOT_IN_THE_CODE
        }
    )
    assert not missing, f"{page_id(path)}: names no code has: {missing}"
