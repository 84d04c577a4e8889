"""The book's structure: every notebook is in the table of contents, and Colab installs
from the repo."""

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9A][0-9]_*.ipynb"))
ZH = ROOT / "zh"
ZH_NOTEBOOKS = sorted((ZH / "notebooks").glob("[0-9A][0-9]_*.ipynb"))


def toc_files() -> set[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return {
        chapter["file"] for part in toc["parts"] for chapter in part["chapters"]
    } | {toc["root"]}


def test_every_notebook_and_page_is_in_the_toc():
    pages = {f"notebooks/{p.stem}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    pages |= {f"book/{p.stem}" for p in (ROOT / "book").glob("*.md")}
    assert pages - toc_files() == set(), "pages missing from _toc.yml"
    assert {f for f in toc_files() if not list(ROOT.glob(f + ".*"))} == set(), (
        "_toc.yml names missing files"
    )


def test_colab_cells_install_from_the_configured_repository():
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        install = next(c for c in cells if c["cell_type"] == "code")
        source = "".join(install["source"])
        assert "google.colab" in source and f"git+{url}" in source, (
            f"{path.name}: first code cell"
        )


def box(title: str) -> str:
    """The head of a box as the notebooks write it: HTML, which Jupyter and Colab
    render too (a MyST admonition shows there as its raw text), styled by the book's
    theme as an admonition."""
    return f'<p class="admonition-title"><strong>{title}</strong></p>'


IMAGE_SRC = re.compile(r'<img src="([^"]+)"')


def test_a_hidden_include_becomes_the_myst_directive():
    """tools/hidden_includes.py: the comment Jupyter and Colab do not show becomes, in
    the book, the `{literalinclude}` it stands for, in a page and in a notebook."""
    sys.path.insert(0, str(ROOT / "tools"))
    from hidden_includes import expand

    marker = "<!-- literalinclude ../solutions/x.py :pyobject: f -->"
    want = "```{literalinclude} ../solutions/x.py\n:pyobject: f\n```"
    assert expand(f"a\n\n{marker}\n") == f"a\n\n{want}\n"
    cell = json.dumps({"cells": [{"source": [marker + "\n", "</details>"]}]})
    source = json.loads(expand(cell))["cells"][0]["source"]
    assert "".join(source) == want + "\n</details>"
    assert expand("<!-- a comment -->") == "<!-- a comment -->"


@pytest.mark.parametrize(
    "path",
    NOTEBOOKS + ZH_NOTEBOOKS,
    ids=lambda p: f"{p.parent.parent.name}/{p.stem[:2]}",
)
def test_every_hidden_include_reads_a_file_that_exists(path):
    """Each `<!-- literalinclude PATH :pyobject: NAME -->` of a notebook names a file
    beside it and, with :pyobject:, a function or class that file defines."""
    sys.path.insert(0, str(ROOT / "tools"))
    from hidden_includes import MARKER, OPTION

    for match in MARKER.finditer("\n".join(markdown_of(path))):
        file = (path.parent / match[1]).resolve()
        assert file.is_file(), f"{path.name}: {match[1]} does not exist"
        name = dict(OPTION.findall(match[2])).get("pyobject")
        if name:
            pattern = rf"^(def|class) {name}\b"
            assert re.search(pattern, file.read_text(encoding="utf-8"), re.M), (
                f"{path.name}: {match[1]} defines no {name}"
            )


@pytest.mark.parametrize(
    "path",
    NOTEBOOKS + ZH_NOTEBOOKS,
    ids=lambda p: f"{p.parent.parent.name}/{p.stem[:2]}",
)
def test_notebook_markdown_renders_in_jupyter_and_colab(path):
    """Colab shows no MyST directive and opens a notebook alone: its boxes are HTML, a
    file the book includes is an HTML comment (tools/hidden_includes.py), and its
    diagrams are at the repository's raw address (tools/repo_images.py), which the
    book rewrites to the files themselves."""
    sys.path.insert(0, str(ROOT / "tools"))
    from repo_images import SVG_QUERY, raw_prefix

    text = "\n".join(markdown_of(path))
    directive = re.search(r"^(```|:::)\{.*$", text, re.M)
    assert directive is None, (
        f"{path.name}: {directive and directive[0]!r}, a MyST directive Jupyter and "
        "Colab show as raw text"
    )
    for src in IMAGE_SRC.findall(text):
        assert src.startswith(raw_prefix()), f"{path.name}: {src} is not on Colab"
        file, _, query = src.removeprefix(raw_prefix()).partition("?")
        assert (ROOT / file).is_file(), f"{path.name}: {src}"
        # GitHub serves a raw SVG as text/plain unless asked to sanitise it
        svg = file.endswith(".svg")
        assert ("?" + query == SVG_QUERY) == svg, f"{path.name}: {src}"


def markdown_of(path: Path) -> list[str]:
    return [
        "".join(c["source"])
        for c in json.loads(path.read_text())["cells"]
        if c["cell_type"] == "markdown"
    ]


UNLINKED = re.compile(
    r"(?<!\[)\b[Nn]otebooks?\s+\d\d\b(?![^\[]*\]\()"
)  # "notebook 05" outside a [link](...)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_every_notebook_page_has_the_same_frame(path):
    """A what-you-will-learn box at the top, a Summary, and links to where its concepts
    are used next."""
    cells = markdown_of(path)
    assert box("What you will learn") in cells[0], f"{path.name}: first markdown cell"
    summary = next((c for c in cells if "\n## Summary" in "\n" + c), None)
    assert summary is not None, f"{path.name}: no '## Summary' section"
    used_next = summary.split("**Used next**", 1)
    assert len(used_next) == 2, f"{path.name}: the Summary has no '**Used next**' list"
    later = [
        m
        for m in re.findall(r"\]\(([^)#]+)", used_next[1].split("\n## ")[0])
        if m.startswith("../book/") or m[:2] > path.stem[:2]
    ]
    assert later, f"{path.name}: 'Used next' links to no later page"


@pytest.mark.parametrize(
    "path", NOTEBOOKS + sorted((ROOT / "book").glob("*.md")), ids=lambda p: p.name
)
def test_mentions_of_other_notebooks_are_links(path):
    text = "\n".join(markdown_of(path)) if path.suffix == ".ipynb" else path.read_text()
    text = re.sub(
        r"`[^`]*`|```.*?```", "", text, flags=re.S
    )  # code may name notebooks freely
    assert UNLINKED.findall(text) == [], (
        f"{path.name}: link these mentions to their notebook"
    )


FIGURE_HELPERS = (
    "plot_attention(",
    "plot_heads(",
)  # set their own titles and axis labels


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_every_figure_has_a_title_and_labelled_axes(path):
    """Each code cell that stores a picture sets a title and both axis labels (or draws
    with a helper that does)."""
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] != "code" or not any(
            "image/png" in o.get("data", {}) for o in cell["outputs"]
        ):
            continue
        source = "".join(cell["source"])
        if (
            any(helper in source for helper in FIGURE_HELPERS)
            and "imshow" not in source
        ):
            continue
        for part in ("title", "xlabel", "ylabel"):
            assert part in source, f"{path.name}, cell {i}: a figure without a {part}"


def test_heatmaps_use_the_course_colour_maps():
    """viridis from 0 for weights (`plot_attention` uses it), RdBu for signed values:
    see book/notation.md."""
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            for call in re.findall(r"imshow\([^\n]*", "".join(cell["source"])):
                cmap = re.search(r"cmap=([\w\"]+)", call)
                assert cmap and cmap.group(1) in (
                    '"viridis"',
                    '"RdBu"',
                    "ATTENTION_CMAP",
                ), f"{path.name}: {call}"


def test_the_chinese_edition_has_every_page_of_the_english_one():
    """zh/_toc.yml lists the English book's pages in the same order (plus the glossary
    and the setup page for mainland China), and every file it names exists."""
    zh = yaml.safe_load((ZH / "_toc.yml").read_text())
    zh_files = [zh["root"]] + [c["file"] for p in zh["parts"] for c in p["chapters"]]
    en = yaml.safe_load((ROOT / "_toc.yml").read_text())
    en_files = [en["root"]] + [c["file"] for p in en["parts"] for c in p["chapters"]]
    extra = {"book/glossary", "book/setup_china"}
    assert [f for f in zh_files if f not in extra] == en_files
    assert set(zh_files) >= extra
    assert [f for f in zh_files if not list(ZH.glob(f + ".*"))] == []


UNLINKED_ZH = re.compile(r"(?<!\[)笔记本\s*\d\d(?![^\[]*\]\()")  # 笔记本 05, not linked


@pytest.mark.parametrize(
    "path", ZH_NOTEBOOKS + sorted((ZH / "book").glob("*.md")), ids=lambda p: p.name
)
def test_chinese_mentions_of_other_notebooks_are_links(path):
    text = "\n".join(markdown_of(path)) if path.suffix == ".ipynb" else path.read_text()
    text = re.sub(r"`[^`]*`|```.*?```", "", text, flags=re.S)
    assert UNLINKED_ZH.findall(text) == [], (
        f"zh/{path.parent.name}/{path.name}: link these mentions to their notebook"
    )


@pytest.mark.parametrize("path", ZH_NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_every_chinese_notebook_page_has_the_same_frame(path):
    """The English frame in Chinese: 你将学到 at the top, a 小结 with 后续用到."""
    cells = markdown_of(path)
    assert box("你将学到") in cells[0], f"zh/notebooks/{path.name}"
    summary = next((c for c in cells if "\n## 小结" in "\n" + c), "")
    assert "**后续用到**" in summary, f"zh/notebooks/{path.name}: no 小结 with 后续用到"


def test_the_inner_edition_loads_the_static_files_both_share(tmp_path, monkeypatch):
    """tools/ship_book.py: the Chinese edition (zh/ inside the English one) points its
    pages at the English copy of each static file the two have alike and drops its
    own; a file of its own (its language's options) stays and is still loaded."""
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    from ship_book import share_static

    outer, inner = tmp_path, tmp_path / "zh"
    for edition, options in ((outer, "en"), (inner, "zh")):
        (edition / "_static" / "scripts").mkdir(parents=True)
        (edition / "_static" / "scripts" / "theme.js").write_text("same")
        (edition / "_static" / "options.js").write_text(options)
    (inner / "notebooks").mkdir()
    page = inner / "notebooks" / "04.html"
    page.write_text(
        '<script src="../_static/scripts/theme.js?digest=1"></script>'
        '<script src="../_static/options.js?v=2"></script><p>_static/options.js</p>'
    )
    share_static(outer, inner)
    assert page.read_text() == (
        '<script src="../../_static/scripts/theme.js?digest=1"></script>'
        '<script src="../_static/options.js?v=2"></script><p>_static/options.js</p>'
    )
    assert not (inner / "_static" / "scripts").exists()
    assert (inner / "_static" / "options.js").read_text() == "zh"


RELATIVE_PAGE_LINK = re.compile(r"\]\((?:\.\./)+(?:zh/)?book/[^)]*\)")


@pytest.mark.parametrize(
    "path",
    NOTEBOOKS + ZH_NOTEBOOKS,
    ids=lambda p: f"{p.parent.parent.name}/{p.stem[:2]}",
)
def test_a_notebook_links_the_books_pages_at_their_github_address(path):
    """Colab resolves `../book/results.md` against its own address, where no page is:
    a notebook links a book page at its GitHub address (tools/repo_images.py), which
    Jupyter, Colab and GitHub all open; a Chinese notebook the Chinese page."""
    sys.path.insert(0, str(ROOT / "tools"))
    from repo_images import blob_prefix, page_link

    text = "\n".join(markdown_of(path))
    relative = RELATIVE_PAGE_LINK.findall(text)
    assert not relative, f"{path.name}: {relative} does not open on Colab"
    chinese = path.parent.parent.name == "zh"
    for match in page_link().finditer(text):
        file = match[1]
        if not file.endswith(".md"):
            continue  # a module's source, say: GitHub shows it
        assert (ROOT / file).is_file(), f"{path.name}: {blob_prefix()}{file}"
        assert file.startswith("zh/book/" if chinese else "book/"), (
            f"{path.name}: {file} is not a page of its edition"
        )


def test_a_link_to_a_book_page_on_github_is_the_local_page_in_the_book():
    """tools/repo_images.py, as Sphinx reads a page: a link to a page of the build at
    its GitHub address becomes the relative link to it, in either edition (the Chinese
    one is built from zh/), anchor kept; a link to another file stays on GitHub."""
    sys.path.insert(0, str(ROOT / "tools"))
    from repo_images import blob_prefix, localised

    github = blob_prefix()
    pages = {"book/results", "book/references", "notebooks/11_evaluation"}
    en = f"see [the results]({github}book/results.md#bleu) and [it]({github}tools/x.py)"
    page = ROOT / "notebooks" / "11_evaluation.ipynb"
    assert localised(en, page, ROOT, pages) == (
        f"see [the results](../book/results.md#bleu) and [it]({github}tools/x.py)"
    )
    zh = json.dumps({"cells": [{"source": [f"见[结果]({github}zh/book/results.md)"]}]})
    page = ROOT / "zh" / "notebooks" / "11_evaluation.ipynb"
    cell = json.loads(localised(zh, page, ROOT / "zh", pages))["cells"][0]
    assert cell["source"] == ["见[结果](../book/results.md)"]
    # a page the build does not read (the Chinese page, in the English book) stays
    en_to_zh = f"[结果]({github}zh/book/results.md)"
    assert localised(en_to_zh, page, ROOT, pages) == en_to_zh


def test_the_colab_title_of_a_folded_cell_is_left_out_of_the_book():
    """tools/colab_titles.py drops a code cell's first-line `# @title` (Colab's) from
    a notebook as Sphinx reads it; a page, and a cell without one, are left as they
    are."""
    sys.path.insert(0, str(ROOT / "tools"))
    from colab_titles import untitled

    cells = [
        {"cell_type": "code", "source": ["# @title Plot: x\n", "#| export\n", "x = 1"]},
        {"cell_type": "code", "source": ["#@title Plot: y\n", "y = 1"]},  # unformatted
        {"cell_type": "code", "source": ["y = 2  # @title not a title"]},
        {"cell_type": "markdown", "source": ["# @title in prose"]},
    ]
    nb = json.loads(untitled(json.dumps({"cells": cells})))
    assert [c["source"] for c in nb["cells"]] == [
        ["#| export\n", "x = 1"],
        ["y = 1"],
        ["y = 2  # @title not a title"],
        ["# @title in prose"],
    ]
    assert untitled("# A page\n\n# @title x\n") == "# A page\n\n# @title x\n"
