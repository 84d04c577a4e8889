"""The notebook -> library export: in sync now, a hand edit is caught and named, and
several notebooks can export into one module without wiping each other."""

import importlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location(
    "export_notebooks", ROOT / "tools" / "export_notebooks.py"
)
export_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(export_notebooks)


def test_library_matches_notebooks():
    assert export_notebooks.check() == 0


def test_hand_edit_is_caught_and_named(tmp_path, capsys):
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copytree(ROOT / "transformer_lib", tmp_path / "transformer_lib")
    module = tmp_path / "transformer_lib" / "runtime.py"
    module.write_text(module.read_text() + "\nSECRET_FIX = 1\n")
    assert (
        export_notebooks.check(tmp_path / "notebooks", tmp_path / "transformer_lib")
        == 1
    )
    report = capsys.readouterr().err
    assert "transformer_lib/runtime.py differs from its notebook" in report
    assert "00_introduction_and_setup.ipynb" in report


def test_every_generated_module_names_its_notebook():
    generated = export_notebooks.generated_modules(ROOT / "transformer_lib")
    assert "runtime.py" in generated
    for name, text in generated.items():
        notebooks = export_notebooks.source_notebooks(text)
        assert notebooks, f"{name} names no notebook on its first line"
        for notebook in notebooks:
            assert (ROOT / notebook).exists(), (
                f"{name} names {notebook}, which does not exist"
            )
        cells_from = {
            f"notebooks/{nb}" for nb in export_notebooks.CELL_MARK.findall(text)
        }
        assert cells_from == set(notebooks), (
            f"{name}: header {notebooks}, cells from {sorted(cells_from)}"
        )


def test_viz_is_written_by_hand_and_shown_in_04():
    """The heatmaps are plumbing: transformer_lib/viz.py is written by hand, no notebook
    exports it, and notebook 04 imports it and folds its code for the curious."""
    assert "viz.py" not in export_notebooks.generated_modules(ROOT / "transformer_lib")
    assert "def plot_attention(" in (ROOT / "transformer_lib" / "viz.py").read_text()
    nb = (ROOT / "notebooks" / "04_scaled_dot_product_attention.ipynb").read_text()
    assert "export viz" not in nb
    assert "from transformer_lib.viz import plot_attention, plot_heads" in nb
    assert "<!-- literalinclude ../transformer_lib/viz.py" in nb


def test_torch_reference_comes_from_notebooks_07_and_08():
    """The weight-copy helpers of the reference checks live in one module, apart from
    the models."""
    generated = export_notebooks.generated_modules(ROOT / "transformer_lib")
    text = generated["torch_reference.py"]
    assert export_notebooks.source_notebooks(text) == [
        "notebooks/07_encoder.ipynb",
        "notebooks/08_decoder_and_model.ipynb",
    ]
    assert text.index("def load_torch_encoder_layer(") < text.index(
        "def load_torch_decoder_layer("
    )
    for model in ("encoder.py", "seq2seq.py"):
        assert (
            "torch_attention" not in generated[model]
            and "load_torch" not in generated[model]
        )


# Three tiny notebooks, exported in name order: a and b both export into `shared`; b
# adds to a's default module `alpha` (a later notebook into an earlier one's module) and
# a adds to b's default module `beta` (an earlier notebook into a later one's module,
# which b then starts). b's cell for alpha starts with Colab's `# @title` line, above
# its directive, as a folded cell does: it is exported all the same, without the title.
NOTEBOOKS = {
    "a.ipynb": [
        "#| default_exp alpha",
        "#| export\ndef from_a():\n    return 'a'",
        "#| export shared\ndef shared_from_a():\n    return 'shared a'",
        "#| export beta\ndef beta_from_a():\n    return 'beta a'",
        "print('not exported')",
    ],
    "b.ipynb": [
        "#| default_exp beta",
        "#| export\ndef from_b():\n    return 'b'",
        "#| export shared\nimport math\n\ndef shared_from_b():\n    return math.tau",
        "# @title Library: alpha_from_b()\n#| export alpha\n"
        "def alpha_from_b():\n    return 'alpha b'",
    ],
    "c.ipynb": [
        "#| default_exp gamma",
        "#| export\nfrom tmplib.shared import shared_from_a\n\nGAMMA = 3",
    ],
}


def write_notebooks(folder: Path) -> None:
    folder.mkdir()
    for name, sources in NOTEBOOKS.items():
        cells = [
            {
                "cell_type": "code",
                "id": f"{name[0]}{i}",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": source,
            }
            for i, source in enumerate(sources)
        ]
        nb = {
            "cells": cells,
            "metadata": {"kernelspec": {"name": "python3", "language": "python"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        (folder / name).write_text(json.dumps(nb), encoding="utf-8")


def test_several_notebooks_export_into_one_module(tmp_path, monkeypatch):
    write_notebooks(tmp_path / "notebooks")
    lib = tmp_path / "tmplib"
    lib.mkdir()
    export_notebooks.export_to(lib, tmp_path / "notebooks")
    export_notebooks.export_to(
        lib, tmp_path / "notebooks"
    )  # a second run starts afresh, repeats nothing
    shared = (lib / "shared.py").read_text()
    assert shared.splitlines()[0] == (
        "# AUTOGENERATED! DO NOT EDIT! "
        "Files to edit: ../notebooks/a.ipynb, ../notebooks/b.ipynb."
    )
    assert shared.count("def shared_from_a(") == shared.count("def shared_from_b(") == 1
    assert shared.index("# %% ../notebooks/a.ipynb #a2") < shared.index(
        "# %% ../notebooks/b.ipynb #b2"
    )
    assert "__all__ = ['shared_from_a', 'shared_from_b']" in shared
    assert shared.endswith("return math.tau\n")

    alpha, beta = (lib / "alpha.py").read_text(), (lib / "beta.py").read_text()
    assert alpha.index("def from_a(") < alpha.index(
        "def alpha_from_b("
    )  # b added to a's module
    assert beta.index("def beta_from_a(") < beta.index(
        "def from_b("
    )  # b's own export did not wipe a's
    assert "'beta_from_a', 'from_b'" in beta
    assert "not exported" not in alpha + beta + shared
    assert "@title" not in alpha  # Colab's, not the module's
    assert (
        "from .shared import shared_from_a" in (lib / "gamma.py").read_text()
    )  # imports made relative
    assert (
        (lib / "gamma.py")
        .read_text()
        .splitlines()[0]
        .endswith("File to edit: ../notebooks/c.ipynb.")
    )

    monkeypatch.syspath_prepend(str(tmp_path))  # the modules import and run
    for name in ("alpha", "beta", "shared", "gamma"):
        monkeypatch.delitem(sys.modules, f"tmplib.{name}", raising=False)
    assert importlib.import_module("tmplib.alpha").alpha_from_b() == "alpha b"
    assert importlib.import_module("tmplib.beta").beta_from_a() == "beta a"
    assert importlib.import_module("tmplib.shared").__all__ == [
        "shared_from_a",
        "shared_from_b",
    ]
    assert importlib.import_module("tmplib.gamma").GAMMA == 3


def test_check_names_the_notebook_of_the_edited_part(tmp_path, capsys):
    write_notebooks(tmp_path / "notebooks")
    lib = tmp_path / "tmplib"
    lib.mkdir()
    export_notebooks.export_to(lib, tmp_path / "notebooks")
    assert export_notebooks.check(tmp_path / "notebooks", lib) == 0
    assert "4 modules match" in capsys.readouterr().out

    shared = lib / "shared.py"
    shared.write_text(
        shared.read_text().replace("math.tau", "math.pi")
    )  # a hand edit in b's part
    assert export_notebooks.check(tmp_path / "notebooks", lib) == 1
    report = capsys.readouterr().err
    assert "tmplib/shared.py differs from its notebook notebooks/b.ipynb." in report
    assert "a.ipynb." not in report
    assert "+    return math.pi" in report  # and shows the edit

    shared.write_text(
        shared.read_text().replace("__all__ = [", "__all__ = ['extra', ")
    )  # above all cells
    assert export_notebooks.check(tmp_path / "notebooks", lib) == 1
    assert (
        "differs from its notebooks notebooks/a.ipynb, notebooks/b.ipynb."
        in capsys.readouterr().err
    )

    (lib / "beta.py").unlink()
    assert export_notebooks.check(tmp_path / "notebooks", lib) == 1
    assert "tmplib/beta.py is missing" in capsys.readouterr().err
