"""Attention heatmaps (viz.py, notebook 04): labels, one colour map, readable sizes,
label checks, CJK fonts."""

import io
import json
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import matplotlib
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from transformer_lib.stored import REPOSITORY_RAW, load_result  # noqa: E402
from transformer_lib.viz import (  # noqa: E402
    ATTENTION_CMAP,
    load_stored_attention,
    plot_attention,
    plot_heads,
    use_cjk_fallback_fonts,
)


def test_plot_attention_labels_and_colour_map():
    ax = plot_attention(
        torch.rand(3, 4), ["a", "b", "c"], ["w", "x", "y", "z"], "a title"
    )
    assert ax.get_title() == "a title"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert ax.get_xlabel() and ax.get_ylabel()
    assert ax.collections[0].get_cmap().name == ATTENTION_CMAP
    plt.close("all")


def test_plot_heads_one_panel_per_head_and_label_checks():
    fig = plot_heads(torch.rand(6, 3, 3), list("abc"), list("abc"), "heads")
    titled = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titled == [f"head {h}" for h in range(6)]
    with pytest.raises(ValueError, match="2 key labels for 3 key positions"):
        plot_attention(torch.rand(3, 3), list("abc"), list("ab"))
    with pytest.raises(ValueError, match=r"\(H, T_q, T_k\)"):
        plot_heads(torch.rand(3, 3))
    plt.close("all")


def test_long_sequences_give_figures_of_readable_width():
    """Panels shrink with the sequence: 4 heads of 64 tokens once made a figure 100
    inches wide."""
    fig = plot_heads(torch.rand(4, 64, 64))
    assert fig.get_figwidth() <= 15
    ax = plot_attention(torch.rand(100, 100))
    assert ax.figure.get_figwidth() <= 12
    small = plot_attention(torch.rand(3, 3))  # short sequences keep their roomy cells
    assert small.figure.get_figwidth() == pytest.approx(2.4 + 0.45 * 3)
    plt.close("all")


def test_colour_bar_label_names_what_is_drawn():
    ax = plot_attention(torch.ones(2, 2), value_label="1 = may attend")
    assert ax.figure.axes[-1].get_ylabel() == "1 = may attend"
    plt.close("all")


def test_cjk_font_fallback():
    fonts = use_cjk_fallback_fonts()
    assert (
        fonts[0] == "DejaVu Sans" and plt.rcParams["font.family"][: len(fonts)] == fonts
    )
    if len(fonts) == 1:
        pytest.skip(
            "no CJK font installed: Chinese labels render as boxes, without failing"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing glyph would warn
        ax = plot_attention(torch.rand(2, 2), ["我", "猫"], ["我", "猫"], "中文")
        ax.figure.canvas.draw()
    plt.close("all")


def test_load_stored_attention_finds_the_export_from_a_notebook_folder(tmp_path):
    """From notebooks/ (or zh/notebooks/) the loader walks up to _static/explorer."""
    root = Path(__file__).resolve().parents[1]
    for start in (root / "notebooks", root / "zh" / "notebooks"):
        stored = load_stored_attention("translator", start=start)
        s = stored["sentences"][0]
        n_layers, n_heads = stored["config"]["n_layers"], stored["config"]["n_heads"]
        assert (
            torch.tensor(s["enc_self"]).shape
            == (n_layers, n_heads) + (len(s["src_tokens"]),) * 2
        )
    assert (
        load_stored_attention("translator", start=tmp_path) is None
    )  # a lone notebook


class _Response(io.BytesIO):
    """What urlopen gives, enough for load_stored_attention."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_load_stored_attention_downloads_where_no_repository_is(tmp_path, monkeypatch):
    """A notebook opened alone (Colab) gets the export from the course's repository;
    without a network, or with a file that is not an export, it gets None."""
    asked = []

    def served(body: bytes):
        def urlopen(url, timeout):
            asked.append(url)
            return _Response(body)

        return urlopen

    export = {"command": "python tools/export_attention.py", "samples": []}
    monkeypatch.setattr(urllib.request, "urlopen", served(json.dumps(export).encode()))
    assert load_stored_attention("gpt", start=tmp_path, online=True) == export
    assert asked == [REPOSITORY_RAW + "_static/explorer/gpt.json"]
    assert load_stored_attention("gpt", start=tmp_path) is None  # not on Colab: offline
    assert len(asked) == 1
    monkeypatch.setattr(urllib.request, "urlopen", served(b"<html>404</html>"))
    assert load_stored_attention("gpt", start=tmp_path, online=True) is None

    def offline(url, timeout):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    assert load_stored_attention("gpt", start=tmp_path, online=True) is None


def test_a_benchmark_result_is_found_from_a_notebook_folder_or_downloaded(
    tmp_path, monkeypatch
):
    """Notebooks 15-19 and A2 read benchmarks/results/ through load_result: from a
    checkout's notebook folder the file itself; from a lone notebook (Colab) the
    repository's copy; offline and alone, None (the notebook says what is missing)."""
    root = Path(__file__).resolve().parents[1]
    on_disk = json.loads((root / "benchmarks/results/part5_lora.json").read_text())
    for start in (root / "notebooks", root / "zh" / "notebooks"):
        assert load_result("part5_lora.json", start=start) == on_disk
    assert load_result("part5_lora.json", start=tmp_path) is None
    asked = []

    def urlopen(url, timeout):
        asked.append(url)
        return _Response(json.dumps(on_disk).encode())

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    assert load_result("part5_lora.json", start=tmp_path, online=True) == on_disk
    assert asked == [REPOSITORY_RAW + "benchmarks/results/part5_lora.json"]


def test_the_download_address_is_the_configured_repository():
    """REPOSITORY_RAW is the raw address of the repository set in _config.yml (the
    notebooks' diagrams use it too, tools/repo_images.py)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from repo_images import raw_prefix

    assert REPOSITORY_RAW == raw_prefix()
