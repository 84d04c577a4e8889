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
