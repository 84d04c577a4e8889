"""The notebook -> library export: in sync now, and a hand edit is caught and named."""

import importlib.util
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("export_notebooks", ROOT / "tools" / "export_notebooks.py")
export_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(export_notebooks)


def test_library_matches_notebooks():
    assert export_notebooks.check() == 0


def test_hand_edit_is_caught_and_named(tmp_path, capsys):
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copytree(ROOT / "transformer_lib", tmp_path / "transformer_lib")
    module = tmp_path / "transformer_lib" / "runtime.py"
    module.write_text(module.read_text() + "\nSECRET_FIX = 1\n")
    assert export_notebooks.check(tmp_path / "notebooks", tmp_path / "transformer_lib") == 1
    report = capsys.readouterr().err
    assert "transformer_lib/runtime.py differs from its notebook" in report
    assert "00_introduction_and_setup.ipynb" in report


def test_every_generated_module_names_its_notebook():
    generated = export_notebooks.generated_modules(ROOT / "transformer_lib")
    assert "runtime.py" in generated
    for name, text in generated.items():
        notebook = text.splitlines()[0].split("File to edit: ../")[1].rstrip(".")
        assert (ROOT / notebook).exists(), f"{name} names {notebook}, which does not exist"


def test_secondary_module_is_generated_and_named():
    """`#| export viz` cells of notebook 04 make transformer_lib/viz.py, headed by that notebook."""
    viz = export_notebooks.generated_modules(ROOT / "transformer_lib")["viz.py"]
    assert "File to edit: ../notebooks/04_scaled_dot_product_attention.ipynb" in viz.splitlines()[0]
    assert "def plot_attention(" in viz
