"""The answers of the question exercises are out of sight where the learner works.

Jupyter and Colab render no MyST admonition: an answer in a `:::{admonition} ...
:class: dropdown` is plain text right under its question there. An HTML `<details>`
block is folded in Jupyter, in Colab and in the book alike (MyST passes it through and
renders the markdown and the math inside, given a blank line after `<summary>` and
before `</details>`). So each notebook's Exercises section, in both editions, holds its
answers in one `<details>` block after the questions, and any MyST dropdown left there
holds only a `{literalinclude}` of `solutions/`. A build-it's solution is folded the
same way, in its own `<details>` block ("Solution: ..."): the book shows the code, which
a `<!-- literalinclude ... -->` comment reads from `solutions/` (made the MyST directive
by tools/hidden_includes.py); Jupyter and Colab show only a link to the file on GitHub
(they cannot include a file, and they show no HTML comment)."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9A][0-9]_*.ipynb")) + sorted(
    (ROOT / "zh" / "notebooks").glob("[0-9A][0-9]_*.ipynb")
)
HEADING = re.compile(r"^## (Exercises|练习)\s*$", re.M)
ANSWERS = re.compile(
    r"^<details>\n<summary>(Answers|参考答案)</summary>\n\n(.*?)\n\n</details>$",
    re.M | re.S,
)
SOLUTION = re.compile(
    r"^<details>\n<summary>(?:Solution|参考答案)：?:? ?<code>\w+</code></summary>\n\n"
    r"(?:On GitHub|GitHub 上的文件)[:：] ?\[`(solutions/[\w.]+)`\]\(https://github\.com/\S+/blob/\S+/\1\)[.。]\n\n"
    r"<!-- literalinclude (?:\.\./)+\1(?: :\w+: \S+)* -->\n\n</details>$",
    re.M,
)
DROPDOWN = re.compile(r"^:::\{(?:admonition|dropdown)\}[^\n]*\n(.*?)^:::$", re.M | re.S)
ITEM = re.compile(r"^(\d+)\. ", re.M)


def exercise_cells(path: Path) -> list[str]:
    """The markdown of the Exercises section: from its heading to the notebook's end."""
    texts, inside = [], False
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        heading = HEADING.search(text)
        if heading:
            inside, text = True, text[heading.start() :]
        if inside:
            texts.append(text)
    return texts


def label(path: Path) -> str:
    return f"{path.parent.parent.name}/{path.name}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=label)
def test_the_answers_are_folded_in_jupyter_colab_and_the_book(path):
    cells = exercise_cells(path)
    assert cells, f"{label(path)}: no Exercises section"
    folded = [m for text in cells for m in ANSWERS.finditer(text)]
    assert len(folded) == 1, f"{label(path)}: one <details> block of answers expected"
    for text in cells:
        outside = SOLUTION.sub("", ANSWERS.sub("", text))
        assert "<details>" not in outside and "</details>" not in outside, (
            f"{label(path)}: a <details> block without its blank lines or its summary"
        )
        for body in DROPDOWN.findall(outside):
            assert re.fullmatch(r"(:\w+:.*\n)*```\{literalinclude\}[^`]*```\n", body), (
                f"{label(path)}: a MyST dropdown in the Exercises holds text, which "
                f"Jupyter and Colab show unfolded: {body[:80]!r}"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=label)
def test_each_question_has_its_answer(path):
    """The numbers answered are the numbers asked just above the block."""
    for text in exercise_cells(path):
        for m in ANSWERS.finditer(text):
            asked = [int(n) for n in ITEM.findall(text[: m.start()])]
            answered = [int(n) for n in ITEM.findall(m[2])]
            assert asked and answered == asked, (label(path), asked, answered)
