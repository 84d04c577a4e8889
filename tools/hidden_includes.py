"""Code the book includes from a file, which Jupyter and Colab do not show as raw text.

A build-it's solution, or a folded module, is shown in the book by MyST's
`{literalinclude}`, which reads it from `solutions/` or `transformer_lib/`. Jupyter
and Colab render no MyST directive: a directive in a notebook's markdown would show
there as a code block of its own source. So a notebook writes the include as an HTML
comment, which they do not display, beside a link to the file on GitHub:

    <!-- literalinclude ../solutions/04_scaled_dot_product_attention.py :pyobject: f -->

As a Sphinx extension (`local_extensions` in `_config.yml` and `zh/_config.yml`), this
module turns each such comment, when Sphinx reads a page, into the MyST directive it
stands for, so the built book shows the code.
"""

from __future__ import annotations

import re

# <!-- literalinclude PATH :option: value ... -->, options without spaces in values
MARKER = re.compile(r"<!-- literalinclude (\S+)((?: :\w+: \S+)*) -->")
OPTION = re.compile(r":(\w+): (\S+)")


def directive(match: re.Match, newline: str = "\n") -> str:
    """The MyST `{literalinclude}` block a marker stands for; `newline` as written in
    the page's source (an escaped one inside a notebook's JSON strings)."""
    lines = [f"```{{literalinclude}} {match[1]}"]
    lines += [f":{key}: {value}" for key, value in OPTION.findall(match[2])]
    return newline.join(lines + ["```"])


def expand(source: str) -> str:
    """A page's source with every marker turned into its directive."""
    newline = "\\n" if source.lstrip().startswith("{") else "\n"  # a notebook: JSON
    return MARKER.sub(lambda m: directive(m, newline), source)


def on_source_read(app, docname: str, source: list[str]) -> None:
    """Sphinx's source-read: the markers of the page become directives."""
    source[0] = expand(source[0])


def setup(app) -> dict:
    app.connect("source-read", on_source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
