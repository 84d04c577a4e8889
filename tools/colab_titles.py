"""The `# @title` line of a folded cell, which is for Colab alone, left out of the book.

Colab folds a code cell into a form (its code hidden, its title shown) only when the
code starts with a `# @title Some title` line, so every cell the book folds (tag
`hide-input` or `remove-input`) starts with one (tools/tidy_notebooks.py sees to it).
In the book the fold is the "Show code" button, and the title would be one more line of
Colab syntax at the top of the code it shows: the text around the fold already says
what the cell does.

As a Sphinx extension (`local_extensions` in `_config.yml` and `zh/_config.yml`), this
module drops that line from each code cell of a notebook when Sphinx reads it. The
notebooks themselves keep it.
"""

from __future__ import annotations

import json
import re

TITLE = re.compile(r"\A#\s*@title\b.*(?:\n|\Z)")  # `# @title Some title`, first line


def untitled(source: str) -> str:
    """A notebook's text (its JSON) with each code cell's `# @title` line dropped;
    any other text as it is."""
    if not source.lstrip().startswith("{"):
        return source  # a Markdown page
    nb = json.loads(source)
    changed = False
    for cell in nb.get("cells", []):
        code = "".join(cell["source"])
        if cell["cell_type"] == "code" and TITLE.match(code):
            cell["source"] = TITLE.sub("", code, count=1).splitlines(keepends=True)
            changed = True
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n" if changed else source


def on_source_read(app, docname: str, source: list[str]) -> None:
    """Sphinx's source-read: a notebook's titles dropped."""
    source[0] = untitled(source[0])


def setup(app) -> dict:
    app.connect("source-read", on_source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
