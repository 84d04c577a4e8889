"""Keep notebook plumbing off the rendered page, while it still runs.

Idempotent; run after merging notebook changes: `python tools/tidy_notebooks.py`.
- the Colab install cells and the `#| default_exp` cell get the tag `remove-cell`
  (Jupyter Book drops them from the page; Colab and the exporter still see them);
- a `# NBVAL_IGNORE_OUTPUT` comment line (and a `# (why ...)` line right after it)
  becomes the cell tag `nbval-ignore-output`, which nbval reads just like the comment;
- a cell that draws a figure gets alt text from the titles its code sets (cell metadata
  `mystnb.image.alt`, which the book puts on the image) unless it has alt text already,
  and a numbered caption with the same text (`mystnb.figure.caption`; the Chinese
  edition puts the translated title there);
- a code cell whose code the book folds or leaves out (tag `hide-input` or
  `remove-input`) is folded in JupyterLab and Notebook 7 too (`jupyter.source_hidden`)
  and in Colab (`cellView: "form"`, Colab's "hide code"), so the plumbing stays off the
  path where learners run. Colab folds a cell into a form only when its code starts
  with a `# @title` line, which names the cell on the folded form: every folded cell
  needs one, written by hand (`# @title Plot: the loss curves`, `# @title Library:
  check_mask(), ...`). A `# @title` line among a cell's first comment lines (after
  `#| export`, say) is moved to the top; a folded cell without one is refused, naming
  it. The exporter (tools/export_notebooks.py) and the book (tools/colab_titles.py)
  drop the line: it is for Colab alone. The Chinese notebooks carry the Chinese title
  that zh/colab_titles.yml gives (tools/zh_edition.py).
`--check` exits 1 if any notebook would change or a folded cell has no title.
"""

import argparse
import json
import re
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def _add_tag(cell: dict, tag: str) -> None:
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


FOLDED = {"hide-input", "remove-input"}  # tags of the cells whose code is folded
COLAB_TITLE = re.compile(r"#\s*@title\b")  # Colab's form title: `# @title Some title`


def is_folded(cell: dict) -> bool:
    return cell["cell_type"] == "code" and bool(
        FOLDED & set(cell["metadata"].get("tags", []))
    )


def colab_title(source: str) -> str | None:
    """The `# @title` line of a cell's code, if it has one among its first comment
    lines (blank lines and `#| export` directives included), else None."""
    for line in source.splitlines():
        if COLAB_TITLE.match(line.strip()):
            return line.strip()
        if line.strip() and not line.lstrip().startswith("#"):
            return None
    return None


def _title_first(cell: dict) -> None:
    """The cell's `# @title` line, if it has one, moved to be its first line."""
    source = "".join(cell["source"])
    title = colab_title(source)
    if title is None or source.startswith(title + "\n"):
        return
    rest = [line for line in source.splitlines(keepends=True) if line.strip() != title]
    cell["source"] = [title + "\n"] + rest
    cell["source"][-1] = cell["source"][-1].rstrip("\n")


TITLE = re.compile(r"""(?:title|suptitle|set_title)\s*[=(]\s*f?(["'])(.+?)\1""")
HEATMAP_TITLE = re.compile(r'"([^"]* [^"]*)"')  # plot_attention(w, q, k, "a title")


def figure_alt(source: str) -> str | None:
    """'Figure: ' and the titles the cell's code gives its plots (f-string fields by
    name)."""
    titles = [m[2] for m in TITLE.finditer(source)]
    for line in source.splitlines():
        if re.search(r"plot_(attention|heads)\(", line):
            titles += HEATMAP_TITLE.findall(line)[-1:]
    titles = list(dict.fromkeys(re.sub(r"\{(\w+)[^}]*\}", r"\1", s) for s in titles))
    return "Figure: " + "; ".join(titles) if titles else None


def _set_alt(cell: dict) -> None:
    if not any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
        return
    image = (
        cell.setdefault("metadata", {}).setdefault("mystnb", {}).setdefault("image", {})
    )
    alt = figure_alt("".join(cell["source"]))
    if alt and not image.get("alt"):
        image["alt"] = alt
    if not image:
        del cell["metadata"]["mystnb"]
        return
    # the caption is Markdown: <pad> must not become an HTML tag
    caption = image["alt"].removeprefix("Figure: ").replace("<", "\\<")
    cell["metadata"]["mystnb"]["figure"] = {"caption": caption}


def tidy_cell(cell: dict) -> None:
    """Move the plumbing of one code cell into its tags."""
    if cell["cell_type"] != "code":
        return
    _set_alt(cell)
    if is_folded(cell):
        cell["metadata"].setdefault("jupyter", {})["source_hidden"] = True
        cell["metadata"]["cellView"] = "form"
        _title_first(cell)
    lines = "".join(cell["source"]).splitlines(keepends=True)
    text = "".join(lines).strip()
    if text.startswith("# On Colab:") or (
        text.startswith("#| default_exp") and len(text.splitlines()) == 1
    ):
        _add_tag(cell, "remove-cell")
    kept, skip_why = [], False
    for line in lines:
        if line.strip() == "# NBVAL_IGNORE_OUTPUT":
            _add_tag(cell, "nbval-ignore-output")
            skip_why = True
            continue
        if skip_why and line.lstrip().startswith("# ("):
            skip_why = False
            continue
        skip_why = False
        kept.append(line)
    if len(kept) != len(lines):
        if kept:
            kept[-1] = kept[-1].rstrip("\n")
        cell["source"] = kept


def untitled(nb: dict) -> list[str]:
    """The ids of the folded cells of a notebook that have no `# @title` line."""
    return [
        cell.get("id", "?")
        for cell in nb["cells"]
        if is_folded(cell) and colab_title("".join(cell["source"])) is None
    ]


def tidied(raw: str) -> str:
    """The text of a notebook (its JSON), tidied."""
    nb = json.loads(raw)
    for cell in nb["cells"]:
        tidy_cell(cell)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def tidy(path: Path, write: bool = True) -> bool:
    """Whether tidying would change the notebook at `path`; tidies it in place if
    `write` (--check reads only: nothing is written, not even back)."""
    raw = path.read_text(encoding="utf-8")
    new = tidied(raw)
    if new == raw:
        return False
    if write:
        path.write_text(new, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report, change nothing")
    args = parser.parse_args(argv)
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    changed = [path.name for path in paths if tidy(path, write=not args.check)]
    print(
        ("would change: " if args.check else "tidied: ")
        + (", ".join(changed) or "none")
    )
    missing = [
        f"{path.name} cell {cell_id}"
        for path in paths
        for cell_id in untitled(json.loads(path.read_text(encoding="utf-8")))
    ]
    for where in missing:  # Colab shows such a cell's code in full, not as a form
        print(
            f"{where}: a folded cell without a `# @title` line; start its code with "
            "one that says what it does (# @title Plot: the loss curves)",
            file=sys.stderr,
        )
    sys.exit(1 if missing or (args.check and changed) else 0)


if __name__ == "__main__":
    main()
