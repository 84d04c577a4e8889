"""The Chinese edition shares the English edition's code: its notebooks are generated
from the English ones and the translation files (tools/zh_edition.py). These tests fail
when an English prose cell changed after its translation was made (and name the
translation), when a cell has no translation, and when a Chinese notebook's code or
outputs differ from its English source."""

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import zh_edition  # noqa: E402


def test_the_chinese_edition_is_current():
    problems = zh_edition.run(update=False, check=True)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "english", sorted((ROOT / "notebooks").glob("[0-9A]*.ipynb")), ids=lambda p: p.stem
)
def test_code_and_outputs_are_the_english_ones(english):
    chinese = ROOT / "zh" / "notebooks" / english.name
    en = json.loads(english.read_text(encoding="utf-8"))["cells"]
    zh = json.loads(chinese.read_text(encoding="utf-8"))["cells"]
    assert [c["id"] for c in zh] == [c["id"] for c in en]
    titles = zh_edition.colab_titles()
    for a, b in zip(en, zh):
        if a["cell_type"] == "code":
            code = [zh_edition.TITLE_LINE.sub("", "".join(c["source"])) for c in (a, b)]
            assert (code[1], b["outputs"]) == (code[0], a["outputs"]), (
                f"{chinese.name}: code cell {a['id']} differs from English"
            )
            title = zh_edition.title_of(a)  # a folded cell's Colab title, translated
            assert zh_edition.title_of(b) == titles.get(title, title)


@pytest.fixture
def edition(tmp_path, monkeypatch):
    """A copy of the notebooks and their translations, where the tool looks for them;
    returns notebook 02's path."""
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=IGNORE)
    for sub in ("translations", "notebooks"):
        shutil.copytree(ROOT / "zh" / sub, tmp_path / "zh" / sub, ignore=IGNORE)
    shutil.copy(ROOT / "zh" / "search_terms.txt", tmp_path / "zh")
    monkeypatch.setattr(zh_edition, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(zh_edition, "TRANSLATIONS", tmp_path / "zh" / "translations")
    monkeypatch.setattr(zh_edition, "ZH_NOTEBOOKS", tmp_path / "zh" / "notebooks")
    monkeypatch.setattr(
        zh_edition, "SEARCH_TERMS", tmp_path / "zh" / "search_terms.txt"
    )
    monkeypatch.setattr(zh_edition, "PAGES", [])
    assert zh_edition.run(update=False, check=True) == []
    return tmp_path / "notebooks" / "02_embeddings.ipynb"


IGNORE = shutil.ignore_patterns("runs", ".ipynb_checkpoints", "*.pt")


def edit(path: Path, change) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell_id = change(nb["cells"])
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", "utf-8")
    return cell_id


def test_a_changed_english_cell_makes_its_translation_stale(edition):
    def change(cells):
        cell = next(c for c in cells if c["cell_type"] == "markdown")
        cell["source"][-1] += " One more sentence."
        return cell["id"]

    cell_id = edit(edition, change)
    problems = zh_edition.run(update=False, check=True)
    assert any(
        f"zh/translations/02_embeddings.md: cell {cell_id} is stale" in p
        for p in problems
    ), problems


def test_a_new_english_cell_needs_a_translation(edition):
    def change(cells):
        cells.insert(
            1,
            {
                "cell_type": "markdown",
                "id": "new00001",
                "metadata": {},
                "source": ["A new paragraph about embeddings."],
            },
        )
        return "new00001"

    edit(edition, change)
    problems = zh_edition.run(update=False, check=True)
    assert any("cell new00001 has no translation" in p for p in problems), problems


def test_changed_english_code_makes_the_chinese_notebook_differ(edition):
    def change(cells):
        cell = next(c for c in cells if c["cell_type"] == "code")
        cell["source"].append("\nprint('changed')")
        return cell["id"]

    edit(edition, change)
    problems = zh_edition.run(update=False, check=True)
    assert any("its code differs from notebooks/02" in p for p in problems), problems


def test_a_translation_must_keep_numbers_and_headings():
    english = "## Sizes\n\nA table of 50,000 rows and 512 columns."
    sha = zh_edition.digest(english)

    def problems(chinese):
        return zh_edition.problems_of_entry("x", "abc", english, (sha, chinese))

    assert problems("## 大小\n\n一张 50,000 行、512 列的表。") == []
    bad = problems("一张 50000 行、512 列的表。")
    assert any("lacks numbers of the English text: 50,000" in p for p in bad)
    assert any("headings of levels [], English [2]" in p for p in bad)
    assert any("still in English" in p for p in problems(english))


def test_links_to_sections_follow_the_chinese_headings():
    nb = {
        "cells": [
            {"cell_type": "markdown", "id": "a", "source": ["## The padding mask\n"]},
            {
                "cell_type": "markdown",
                "id": "b",
                "source": ["See [it](#the-padding-mask)."],
            },
        ],
    }
    entries = {"a": ("", "## 填充掩码"), "b": ("", "见[这里](#the-padding-mask)。")}
    anchors = {"06_masks": zh_edition.anchor_map(nb, entries)}
    out = zh_edition.chinese_notebook(nb, "06_masks", entries, anchors)
    assert "".join(out["cells"][1]["source"]) == "见[这里](#填充掩码)。"


def test_the_chinese_diagrams_are_current(monkeypatch):
    """zh/book/images/ is what `python tools/diagrams.py --lang zh` draws now: every
    label translated (zh/diagram_labels.yml), nothing stale."""
    import diagrams
    import svg
    import yaml

    labels = yaml.safe_load((ROOT / "zh" / "diagram_labels.yml").read_text("utf-8"))
    monkeypatch.setattr(svg, "LABELS", labels)
    monkeypatch.setattr(svg, "MISSING", [])
    drawn = {name: str(fn()) for name, fn in diagrams.DIAGRAMS.items()}
    drawn["beam_tree"] = diagrams.beam_tree_zh()
    assert not svg.MISSING, f"labels with no Chinese: {sorted(set(svg.MISSING))}"
    for name, text in drawn.items():
        committed = ROOT / "zh" / "book" / "images" / f"{name}.svg"
        assert committed.read_text("utf-8") == text, (
            f"zh/book/images/{name}.svg is stale: run tools/diagrams.py --lang zh"
        )


def test_chinese_lines_of_a_paragraph_are_joined_without_a_space():
    text = (
        "## 标题\n正文在\n每个注意力，\n[笔记本 03](x) 加的\nGPT 的\n```\n代码\n行\n```"
    )
    assert zh_edition.join_lines(text) == (
        "## 标题\n正文在每个注意力，[笔记本 03](x) 加的\nGPT 的\n```\n代码\n行\n```"
    )


@pytest.mark.parametrize(
    "english, chinese",
    [
        ("4.4M parameters", "440 万个参数"),
        ("26.9k tokens/s", "每秒 2.69 万个词元"),
        ("38M of them", "约 3800 万个"),
        ("6.7B parameters", "67 亿个参数"),
        ("1.2 million pairs", "120 万个句对"),
        ("3x faster", "快到 3 倍"),
        ("18.4x less memory", "内存只有 1/18.4"),
        ("a share of 0.04", "占 1/25"),
        ("4.4M parameters", "4,400,000 个参数"),
        ("50,000 rows", "5 万行"),
    ],
)
def test_a_number_may_be_written_the_chinese_way(english, chinese):
    assert zh_edition.missing_numbers(english, chinese) == []


@pytest.mark.parametrize(
    "english, chinese, missing",
    [
        ("4.4M parameters", "450 万个参数", "4.4"),
        ("26.9k tokens/s", "每秒 2.96 万个词元", "26.9"),
        ("38M of them", "约 380 万个", "38"),
        ("6.7B parameters", "76 亿个参数", "6.7"),
        ("3x faster", "快到 4 倍", "3"),
        ("a share of 0.04", "占 1/24", "0.04"),
        ("50,000 rows", "50000 行", "50,000"),
        ("50,000 rows", "5 千行", "50,000"),
    ],
)
def test_a_number_that_differs_still_fails(english, chinese, missing):
    assert zh_edition.missing_numbers(english, chinese) == [missing]
    sha = zh_edition.digest(english)
    problems = zh_edition.problems_of_entry("x", "abc", english, (sha, chinese))
    assert problems == [
        f"zh/translations/x.md: cell abc lacks numbers of the English text: {missing}"
    ]


def test_the_term_check_names_the_file_the_cell_and_the_variant():
    texts = [
        ("zh/translations/x.md", "cell abc", "与 PyTorch 对照检验。"),
        ("zh/translations/x.md", "cell def", "每个块有一个 MLP 和 `MLP` 类。"),
        ("zh/book/y.md", "line 3", "被遮住的位置"),
        ("zh/diagram_labels.yml", "label 'x'", "相加 & LayerNorm"),
        ("zh/translations/x.md", "cell ghi", "（**自注意力**（self-attention））"),
        ("zh/translations/x.md", "cell jkl", "词元（token）（见下）"),
    ]
    assert zh_edition.term_problems(texts) == [
        "zh/translations/x.md: cell abc writes '检验'; write '检查'",
        "zh/translations/x.md: cell def writes 'MLP'; write '前馈网络'",
        "zh/book/y.md: line 3 writes '遮住'; write '屏蔽'",
        "zh/diagram_labels.yml: label 'x' writes 'LayerNorm'; write '层归一化'",
        "zh/translations/x.md: cell ghi has a parenthesis inside a parenthesis: "
        "…（**自注意力**（self-attention））…",
        "zh/translations/x.md: cell jkl has two parentheses back to back: "
        "…词元（token）（见下）…",
    ]


def test_code_names_and_formulas_are_not_terms():
    texts = [
        (
            "zh/translations/x.md",
            "cell a",
            "`nn.LayerNorm` 与 `GatedMLP`，$\\text{FFN}$",
        ),
        ("zh/diagram_labels.yml", "label 'f'", "x ← LayerNorm(x + Sublayer(x))"),
        ("zh/translations/x.md", "cell b", "[层归一化](07_encoder.ipynb#layernorm)"),
        ("zh/translations/x.md", "cell c", "校验 sha256；MLPs 不是 MLP_ 也不是 xMLP"),
    ]
    assert zh_edition.term_problems(texts) == []


def test_zh_terms_lists_each_variant_once():
    terms = zh_edition.load_terms()
    preferred = [t["preferred"] for t in terms]
    variants = [v for t in terms for v in t["forbidden"]]
    assert len(set(variants)) == len(variants)
    assert not set(preferred) & set(variants)


def by_file() -> dict[str, list[str]]:
    problems: dict[str, list[str]] = {}
    for line in zh_edition.term_problems():
        problems.setdefault(line.split(":")[0], []).append(line)
    return problems


@pytest.mark.parametrize(
    "file",
    sorted({file for file, _, _ in zh_edition.chinese_texts()}),
)
def test_one_term_each_and_no_nested_glosses(file):
    """Each concept has one Chinese term (zh/terms.yml); a gloss is never inside
    another parenthesis or right after one."""
    problems = by_file().get(file, [])
    assert not problems, "\n".join(problems)


def test_a_link_to_a_heading_that_is_gone_is_reported(tmp_path):
    """A book page keeps the Chinese anchor once written; after the heading is renamed
    the check names the link instead of letting the book build fail on it."""
    anchors = {"01_tokenization": {"padding-a-batch": "把一个批量补齐"}}
    page = tmp_path / "notation.md"
    page.write_text(
        "[01](../notebooks/01_tokenization.ipynb#填充一个批量)\n"
        "[01](../notebooks/01_tokenization.ipynb#padding-a-batch)\n",
        encoding="utf-8",
    )
    text = zh_edition.relink(page.read_text(encoding="utf-8"), anchors)
    problems = zh_edition.dangling_links("zh/book/notation.md", text, anchors)
    assert problems == [
        "zh/book/notation.md links to ../notebooks/01_tokenization.ipynb#填充一个批量, "
        "which no heading of the Chinese 01_tokenization has: link to its English "
        "anchor or its new heading"
    ]


@pytest.mark.parametrize(
    "chinese, said",
    [
        ("翻译器大三倍", "大三倍"),
        ("相同时间里步数多 1.8 倍", "多 1.8 倍"),
        ("AdamW 状态小 42 倍和 10 倍", "小 42 倍"),
        ("优化器状态小 42×", "小 42×"),
        ("快了 1.41x", "快了 1.41x"),
        ("嵌入表也大\n8 倍", "大8 倍"),
        ("内存 42× 小", "42× 小"),
        ("额外内存 18.4 倍少", "18.4 倍少"),
        ("训练速度提升 3 倍", "提升 3 倍"),
        ("字符多一倍", "多一倍"),
        ("生成 500 个词元：快 **5.3** 倍", "快 **5.3** 倍"),
        ("快 *5.3×*", "快 *5.3×"),
    ],
)
def test_a_comparative_with_bei_is_reported(chinese, said):
    """「大 3 倍」 reads as four times the size; the check names it and says what to
    write instead."""
    problems = zh_edition.comparative_problems([("zh/book/x.md", "line 3", chinese)])
    assert problems == [
        f"zh/book/x.md: line 3 writes {said!r}, which a Chinese reader takes as one "
        f"time more than meant; {zh_edition.COMPARATIVE_RULE}"
    ]
    assert "是…的 N 倍" in problems[0] and "只有…的 1/N" in problems[0]


@pytest.mark.parametrize(
    "chinese",
    [
        "参数量约是它的三倍",
        "相同时间里的步数是后者的 1.8 倍",
        "AdamW 状态只有全量微调的 1/42 和 1/10",
        "速度为 5.3 倍，融合注意力：1.24 倍",
        "是它的三倍多，至多 3 倍，最多 2 倍，差不多 2 倍",
        "快到 1.35 倍；内存增长到四倍；$T$ 翻倍",
        "`speedup = 3x` 与 $3\\times$ 大",
    ],
)
def test_the_right_forms_pass_the_comparative_check(chinese):
    assert zh_edition.comparative_problems([("zh/book/x.md", "line 1", chinese)]) == []


def test_no_comparative_with_bei_in_the_edition():
    """Translations, book pages, README.zh-CN.md, zh/README.md and diagram labels."""
    problems = zh_edition.comparative_problems()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "chinese, broken",
    [
        ("**这说明：**采用后置归一化", True),
        ("**这说明**：采用", False),
        ("**a。** b", False),
    ],
)
def test_a_bold_run_closed_after_punctuation_is_reported(chinese, broken):
    """CommonMark does not close ** after punctuation when a character follows, so
    **这说明：**采用 shows its asterisks on the page."""
    problems = zh_edition.bold_problems([("zh/book/x.md", "line 2", chinese)])
    assert bool(problems) == broken, problems


def test_no_bold_left_open_in_the_edition():
    problems = zh_edition.bold_problems()
    assert not problems, "\n".join(problems)


def test_a_folded_cells_colab_title_is_chinese_in_the_chinese_edition():
    """zh/colab_titles.yml gives each `# @title` of a folded cell its Chinese, which the
    Chinese notebook's cell starts with (its only change to the code); a title with
    no Chinese there is a problem of --check."""
    cell = {"cell_type": "code", "id": "c1", "metadata": {}, "outputs": []}
    nb = {"cells": [dict(cell, source=["# @title Plot: x\n", "x = 1"])]}
    out = zh_edition.chinese_notebook(nb, "99_x", {}, {}, {"Plot: x": "作图：x"})
    assert out["cells"][0]["source"] == ["# @title 作图：x\n", "x = 1"]
    assert zh_edition.code_of(out) == zh_edition.code_of(nb)
    titles = zh_edition.colab_titles()
    for path in sorted((ROOT / "notebooks").glob("[0-9A]*.ipynb")):
        for c in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            title = zh_edition.title_of(c)
            assert title is None or title in titles, f"{path.name} {c['id']}: {title}"
