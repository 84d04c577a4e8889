"""Attention heatmaps: the one way every notebook draws weights.

Written by hand (not exported from a notebook), like `files.py` and `data.py`: plotting
is plumbing, not the lesson. Notebook 04 imports it in one line, says what it does and
folds this code for the curious. Every stored figure of the book was drawn by this code:
a change to what it draws makes them stale, so keep its behaviour as it is.
- `plot_attention`: a heatmap of weights (T_q, T_k), one row per query and one column
  per key, labelled with the tokens, one colour map (`ATTENTION_CMAP`) starting at 0, so
  a masked key is always the darkest colour;
- `plot_heads`: a grid of such heatmaps, a head each, on one colour scale;
- `load_stored_attention`: the attention weights a trained run stored for the book
  (`_static/explorer/*.json`), so a notebook can draw trained heads without training;
- `use_cjk_fallback_fonts`: DejaVu Sans, then the fonts of `CJK_FONTS` found on the
  system, so that Chinese labels draw; called at import, with the course's theme.
"""

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib import font_manager
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from transformer_lib.stored import load_stored

__all__ = [
    "ATTENTION_CMAP",
    "CJK_FONTS",
    "use_cjk_fallback_fonts",
    "plot_attention",
    "plot_heads",
    "load_stored_attention",
]

ATTENTION_CMAP = "viridis"  # the one colour map of every attention heatmap
# Chinese labels in later notebooks need one of these
CJK_FONTS = ["Noto Sans CJK SC", "Noto Sans CJK JP", "WenQuanYi Zen Hei", "SimHei"]
CJK_FONTS += ["Microsoft YaHei", "PingFang SC", "Source Han Sans SC"]  # Windows, macOS
CJK_FONTS += ["Hiragino Sans GB", "Arial Unicode MS"]  # macOS, where PingFang is hidden


def _add_system_cjk_fonts() -> None:
    """Register the system's CJK fonts missing from matplotlib's older font cache."""
    for path in font_manager.findSystemFonts():
        names = ("cjk", "wqy", "simhei", "msyh", "pingfang", "sourcehan", "hiragino")
        names += ("arial unicode",)
        if any(part in path.lower() for part in names):
            try:
                font_manager.fontManager.addfont(path)
            except (OSError, RuntimeError, ValueError):  # an unreadable file is skipped
                pass


def use_cjk_fallback_fonts() -> list[str]:
    """Set matplotlib's fonts: DejaVu Sans, then the CJK fonts found; return them."""
    if not {f.name for f in font_manager.fontManager.ttflist} & set(CJK_FONTS):
        _add_system_cjk_fonts()
    known = {f.name for f in font_manager.fontManager.ttflist}
    fonts = ["DejaVu Sans"] + [name for name in CJK_FONTS if name in known]
    # a list of families: matplotlib falls back glyph by glyph
    plt.rcParams["font.family"] = fonts
    return fonts


sns.set_theme(context="notebook", style="white")  # the course's one theme
_ = use_cjk_fallback_fonts()  # at import, so every later notebook gets the fonts


def _as_array(weights) -> np.ndarray:
    """A NumPy float array from a tensor (any device, with grad or not) or an array."""
    if hasattr(weights, "detach"):
        weights = weights.detach().float().cpu().numpy()
    return np.asarray(weights, dtype=float)


def _labels(labels, n: int, axis: str) -> list[str]:
    """`labels` as strings (positions 0..n-1 when None), checked to number n."""
    labels = [str(i) for i in range(n)] if labels is None else [str(t) for t in labels]
    if len(labels) != n:
        raise ValueError(f"{len(labels)} {axis} labels for {n} {axis} positions")
    return labels


def _cell_size(n: int, budget: float, largest: float) -> tuple[float, float]:
    """Inches per token so that n tokens fit in `budget` inches, and a font size."""
    cell = min(largest, budget / max(n, 1))
    return cell, min(10.0, max(6.0, 0.8 * 72 * cell))


def _heatmap(ax: Axes, w, queries, keys, vmax, colorbar, value_label, fontsize) -> None:
    """Draw `w` into `ax`: the course's colours from 0 (masked: darkest), labels."""
    kws = {"label": value_label, "fraction": 0.046, "pad": 0.04}
    style = dict(cmap=ATTENTION_CMAP, vmin=0.0, vmax=vmax, cbar=colorbar, cbar_kws=kws)
    sns.heatmap(w, ax=ax, xticklabels=keys, yticklabels=queries, **style)
    # long labels would overlap
    crowded = len(keys) > 12 or len(keys) * max(len(t) for t in keys) > 40
    ax.set_xticklabels(keys, rotation=90 if crowded else 0, fontsize=fontsize)
    ax.set_yticklabels(queries, rotation=0, fontsize=fontsize)


def plot_attention(
    weights,
    query_labels=None,
    key_labels=None,
    title: str = "attention weights",
    ax: Axes | None = None,
    vmax: float | None = None,
    colorbar: bool = True,
    value_label: str = "weight",
    fontsize: float | None = None,
) -> Axes:
    """Heatmap of weights (T_q, T_k): a row per query, a column per key, labelled."""
    w = _as_array(weights)
    if w.ndim != 2:
        raise ValueError(
            f"plot_attention needs weights of shape (T_q, T_k), got "
            f"{w.shape}; use plot_heads for (H, T_q, T_k)"
        )
    T_q, T_k = w.shape
    # at most about 11 inches wide
    cell, auto_size = _cell_size(max(T_q, T_k), budget=9.0, largest=0.45)
    if ax is None:
        size = (2.4 + cell * T_k, 1.4 + cell * T_q)
        _, ax = plt.subplots(figsize=size, layout="constrained")
    keys, queries = _labels(key_labels, T_k, "key"), _labels(query_labels, T_q, "query")
    _heatmap(ax, w, queries, keys, vmax, colorbar, value_label, fontsize or auto_size)
    ax.set(title=title, xlabel="key (attended to)", ylabel="query (attending)")
    return ax


def _head_grid(H: int, T_q: int, T_k: int, n_cols: int | None):
    """Figure, panels and label font size for H heads of (T_q, T_k): two panels a row,
    one past 20 tokens, so that on a page (about 700 px) the labels stay readable."""
    n_cols = min(n_cols or (1 if max(T_q, T_k) > 20 else 2), H)
    n_rows = math.ceil(H / n_cols)
    cell, fontsize = _cell_size(n_cols * max(T_q, T_k), budget=7.0, largest=0.4)
    size = (1.5 + n_cols * (0.9 + cell * T_k), 0.8 + n_rows * (1.0 + cell * T_q))
    fig, axes = plt.subplots(
        n_rows, n_cols, squeeze=False, layout="constrained", figsize=size
    )
    return fig, axes, fontsize


def _draw_heads(axes, w, query_labels, key_labels, size: float) -> None:
    """One heatmap per head of w (H, T_q, T_k) on `axes`, on one colour scale."""
    H, n_cols, vmax = w.shape[0], axes.shape[1], float(w.max())
    for ax in axes.flat[H:]:
        ax.axis("off")
    for h, ax in enumerate(axes.flat[:H]):
        labels = query_labels, key_labels, f"head {h}"
        plot_attention(w[h], *labels, ax=ax, vmax=vmax, colorbar=False, fontsize=size)
        if h % n_cols:  # axis titles only on the outer panels
            ax.set_ylabel("")
        if h + n_cols < H:
            ax.set_xlabel("")


def plot_heads(
    weights,
    query_labels=None,
    key_labels=None,
    title: str = "attention weights per head",
    n_cols: int | None = None,
) -> Figure:
    """A grid of heatmaps of weights (H, T_q, T_k), a head each, one colour bar."""
    w = _as_array(weights)
    if w.ndim != 3:
        raise ValueError(f"plot_heads needs weights (H, T_q, T_k), got {w.shape}")
    fig, axes, fontsize = _head_grid(*w.shape, n_cols)
    _draw_heads(axes, w, query_labels, key_labels, fontsize)
    cbar = axes.flat[0].collections[0]
    fig.colorbar(cbar, ax=axes, fraction=0.02, pad=0.02, label="weight")
    fig.suptitle(title)
    return fig


def load_stored_attention(
    name: str = "translator", start: Path | None = None, online: bool | None = None
) -> dict | None:
    """The stored export `_static/explorer/<name>.json` of a trained run, or None.

    tools/export_attention.py wrote it ("translator": notebook 09's translator;
    "gpt": appendix A2's Part IV speedrun). Each of its `sentences` holds the tokens
    and, as nested lists, the weights (layer, head, query, key), e.g. the
    translator's `enc_self` (N, H, T_src, T_src). Found as `stored.load_stored` finds
    a file of the repository: in the folders above `start`, or on Colab downloaded.
    """
    stored = load_stored(f"_static/explorer/{name}.json", start, online)
    return stored if isinstance(stored, dict) and "command" in stored else None
