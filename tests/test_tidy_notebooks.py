"""tools/tidy_notebooks.py: `--check` reports and writes nothing (not even the file back
as it was); without it, the notebook is tidied in place."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "tidy_notebooks", ROOT / "tools" / "tidy_notebooks.py"
)
tidy_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tidy_notebooks)

UNTIDY = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "a1",
            "metadata": {},
            "outputs": [],
            "source": ["# NBVAL_IGNORE_OUTPUT\n", "print(1)"],
        }
    ],
    "metadata": {},
    "nbformat": 4,
    "nbformat_minor": 5,
}


@pytest.fixture
def untidy(tmp_path, monkeypatch):
    """A folder of one notebook that tidying would change; the tool pointed at it."""
    path = tmp_path / "01_x.ipynb"
    path.write_text(json.dumps(UNTIDY, indent=1) + "\n", encoding="utf-8")
    os.utime(path, (1_000_000, 1_000_000))
    monkeypatch.setattr(tidy_notebooks, "NOTEBOOKS", tmp_path)
    return path


def test_check_writes_nothing(untidy, monkeypatch, capsys):
    before = untidy.read_bytes()

    def no_writes(*args, **kwargs):
        raise AssertionError("--check wrote a file")

    monkeypatch.setattr(Path, "write_text", no_writes)
    monkeypatch.setattr(Path, "write_bytes", no_writes)
    with pytest.raises(SystemExit) as done:
        tidy_notebooks.main(["--check"])
    assert done.value.code == 1
    assert capsys.readouterr().out.strip() == "would change: 01_x.ipynb"
    assert untidy.read_bytes() == before
    assert untidy.stat().st_mtime == 1_000_000  # not even written back unchanged


def test_without_check_it_tidies_in_place(untidy, capsys):
    with pytest.raises(SystemExit) as done:
        tidy_notebooks.main([])
    assert done.value.code == 0
    cell = json.loads(untidy.read_text(encoding="utf-8"))["cells"][0]
    assert cell["source"] == ["print(1)"]
    assert cell["metadata"]["tags"] == ["nbval-ignore-output"]
    with pytest.raises(SystemExit) as again:  # idempotent: nothing left to do
        tidy_notebooks.main(["--check"])
    assert again.value.code == 0


@pytest.mark.parametrize("tag", ["hide-input", "remove-input"])
def test_a_cell_the_book_folds_is_folded_in_jupyter_and_colab_too(tag):
    cell = {
        "cell_type": "code",
        "metadata": {"tags": [tag]},
        "source": ["x = 1"],
    }
    tidy_notebooks.tidy_cell(cell)
    assert cell["metadata"]["jupyter"] == {"source_hidden": True}
    assert cell["metadata"]["cellView"] == "form"
    shown = {"cell_type": "code", "metadata": {}, "source": ["x = 1"]}
    tidy_notebooks.tidy_cell(shown)
    assert "jupyter" not in shown["metadata"] and "cellView" not in shown["metadata"]


def test_every_notebook_is_valid_nbformat():
    """nbconvert refuses a notebook the schema rejects (two equal tags, for one), so the
    Colab check and `make execute` would stop on it; nbval does not validate."""
    import nbformat

    root = Path(__file__).resolve().parent.parent
    for path in sorted(root.glob("notebooks/*.ipynb")) + sorted(
        root.glob("zh/notebooks/*.ipynb")
    ):
        nbformat.validate(nbformat.read(path, as_version=4))


def folded(source: str, tag: str = "hide-input") -> dict:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": "f1",
        "metadata": {"tags": [tag]},
        "outputs": [],
        "source": source.splitlines(keepends=True),
    }


@pytest.mark.parametrize("tag", ["hide-input", "remove-input"])
def test_a_folded_cell_without_a_title_fails_the_check(
    tmp_path, monkeypatch, capsys, tag
):
    """Colab shows a folded cell (cellView "form") as a form only when its code starts
    with `# @title`: without one it shows the code in full, so --check refuses it, and
    so does tidying (which cannot make a title up), naming the notebook and the cell."""
    nb = dict(UNTIDY, cells=[folded("x = 1", tag)])
    tidy_notebooks.tidy_cell(nb["cells"][0])  # tidy but for the title
    path = tmp_path / "02_x.ipynb"
    path.write_text(json.dumps(nb, indent=1) + "\n", encoding="utf-8")
    monkeypatch.setattr(tidy_notebooks, "NOTEBOOKS", tmp_path)
    for argv in (["--check"], []):
        with pytest.raises(SystemExit) as done:
            tidy_notebooks.main(argv)
        assert done.value.code == 1
        err = capsys.readouterr().err
        assert "02_x.ipynb cell f1: a folded cell without a `# @title` line" in err
    nb["cells"][0]["source"] = ["# @title Set x\n", "x = 1"]
    path.write_text(json.dumps(nb, indent=1) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit) as done:
        tidy_notebooks.main(["--check"])
    assert done.value.code == 0 and capsys.readouterr().err == ""


def test_a_title_below_the_export_directive_is_moved_to_the_top():
    """Colab reads `# @title` on the first line only; the exporter drops it there."""
    cell = folded("#| export\n# @title Library: f()\ndef f():\n    return 1")
    tidy_notebooks.tidy_cell(cell)
    assert cell["source"] == [
        "# @title Library: f()\n",
        "#| export\n",
        "def f():\n",
        "    return 1",
    ]
    assert tidy_notebooks.colab_title("x = 1\n# @title late") is None  # not a title


def test_every_folded_cell_has_a_title():
    """Each cell the book folds starts with Colab's `# @title` line."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        missing = set(tidy_notebooks.untitled(nb))
        assert not missing, f"{path.name}: folded cells without # @title: {missing}"
        for cell in nb["cells"]:
            title = tidy_notebooks.colab_title("".join(cell["source"]))
            if tidy_notebooks.is_folded(cell) and title:
                assert cell["source"][0] == title + "\n", f"{path.name} {cell['id']}"
                assert len(title.removeprefix("# @title ")) >= 5, (path.name, title)
