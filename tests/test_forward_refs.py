"""No forward references in the library: code a notebook exports uses only what the same
or an earlier notebook exported, and the modules import one another without a circle.

The generated modules say, above each cell, which notebook the cell came from
(`# %% ../notebooks/NB.ipynb #id`). Each import of a `transformer_lib` name, at the top
of a module or inside a function, is checked against the notebook that defines the
name. Notebooks are read in book order: 00-19, then the appendices A1, A2, ... So a
core or Part V notebook never imports an appendix, and appendices import anything
before them. Hand-written modules are the data loader and the durable files (usable
from the first notebook on), the heatmaps (from notebook 04 on, which shows them) and
the command line, the exercise checkers and the package's `__init__` (which come after
everything and are not checked).
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "transformer_lib"
CELL = re.compile(r"^# %% \.\./notebooks/(\S+)\.ipynb", flags=re.M)
# Written by hand: the loader and the durable files are there from notebook 00 on, the
# tokenizers' kit from 01, the heatmaps from 04 (each shows its own); the rest sit on
# top of all.
EARLIEST = {"data": "00", "downloads": "00", "files": "00", "tokenizer_kit": "01"}
EARLIEST |= {"viz": "04"}
NOT_CHECKED = {"__init__", "__main__", "cli_args", "lm_cli", "mt_cli", "exercises"}


def order(notebook: str) -> tuple[int, str]:
    """Book order of a notebook stem: numbered ones first, then the appendices."""
    return (1 if notebook[0].isalpha() else 0, notebook[:2])


def cells(module: Path) -> list[tuple[str, str]]:
    """[(notebook stem, source of the cells it exported)] in file order."""
    text = module.read_text()
    marks = list(CELL.finditer(text))
    return [
        (
            m.group(1),
            text[m.end() : marks[i + 1].start() if i + 1 < len(marks) else None],
        )
        for i, m in enumerate(marks)
    ]


def definitions() -> dict[tuple[str, str], str]:
    """{(module, name): notebook that defines it}, for every generated module."""
    where = {}
    for path in sorted(LIB.glob("*.py")):
        if path.stem in EARLIEST:
            for node in ast.parse(path.read_text()).body:
                for name in defined(node):
                    where[path.stem, name] = EARLIEST[path.stem]
        for notebook, source in cells(path):
            for node in ast.parse(source).body:
                for name in defined(node):
                    where.setdefault((path.stem, name), notebook)
    return where


def defined(node: ast.stmt) -> list[str]:
    """The top-level names one statement defines (`a, b = ...` too), or imports into
    its module (a re-export: tokenization's PAD, from the tokenizers' kit)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        targets = [e for t in targets for e in getattr(t, "elts", [t])]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.ImportFrom):
        return [a.asname or a.name for a in node.names]
    return []


def library_imports(source: str) -> list[tuple[str, str | None]]:
    """[(module, name, or None for `import transformer_lib.module`)] in source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                module = node.module
            elif (node.module or "").startswith("transformer_lib."):
                module = node.module.split(".", 1)[1]
            else:
                continue
            found += [(module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [
                (a.name.split(".", 1)[1], None)
                for a in node.names
                if a.name.startswith("transformer_lib.")
            ]
    return found


def forward_references() -> list[str]:
    where = definitions()
    found = []
    for path in sorted(LIB.glob("*.py")):
        if path.stem in NOT_CHECKED or path.stem in EARLIEST:
            continue
        for notebook, source in cells(path):
            for module, name in library_imports(source):
                if name is None:
                    source_nb = min(
                        (nb for (m, _), nb in where.items() if m == module), key=order
                    )
                else:
                    source_nb = where.get((module, name))
                if source_nb is None:
                    found.append(
                        f"{path.name} ({notebook}) imports {module}.{name}, "
                        "which no notebook defines"
                    )
                elif order(source_nb) > order(notebook):
                    found.append(
                        f"{path.name}: a cell of notebook {notebook} imports "
                        f"{module}.{name or ''}, defined later by notebook {source_nb}"
                    )
    return found


def test_no_notebook_imports_what_a_later_notebook_defines():
    found = forward_references()
    assert not found, "forward references:\n" + "\n".join(found)


def test_the_library_has_no_import_circle():
    graph = {
        path.stem: {m for m, _ in library_imports(path.read_text())}
        for path in LIB.glob("*.py")
    }

    def reach(start: str) -> set[str]:
        seen, todo = set(), list(graph.get(start, ()))
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo += graph.get(module, ())
        return seen

    reachable = {module: reach(module) for module in graph}
    circles = {
        " <-> ".join(sorted(m for m in reachable[module] if module in reachable[m]))
        for module in graph
        if module in reachable[module]
    }
    assert not circles, "import circles:\n" + "\n".join(sorted(circles))


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from .gpt import GPT\n", [("gpt", "GPT")]),
        (
            "def f():\n    from transformer_lib.modern import SwiGLU\n",
            [("modern", "SwiGLU")],
        ),
        ("import transformer_lib.data\nimport torch\n", [("data", None)]),
        ("from torch import nn\n", []),
    ],
)
def test_imports_are_found_at_any_depth(source, expected):
    assert library_imports(source) == expected
