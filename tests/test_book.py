"""The book's structure: every notebook is in the table of contents, and Colab installs from the repo."""

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def toc_files() -> set[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return {chapter["file"] for part in toc["parts"] for chapter in part["chapters"]} | {toc["root"]}


def test_every_notebook_and_page_is_in_the_toc():
    pages = {f"notebooks/{p.stem}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    pages |= {f"book/{p.stem}" for p in (ROOT / "book").glob("*.md")}
    assert pages - toc_files() == set(), "pages missing from _toc.yml"
    assert {f for f in toc_files() if not list(ROOT.glob(f + ".*"))} == set(), "_toc.yml names missing files"


def test_colab_cells_install_from_the_configured_repository():
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        install = next(c for c in cells if c["cell_type"] == "code")
        source = "".join(install["source"])
        assert "google.colab" in source and f"git+{url}" in source, f"{path.name}: first code cell"
