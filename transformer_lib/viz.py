"""The one attention-heatmap helper of the course: `from transformer_lib.viz import plot_attention, plot_heads`.

The code is written, explained and exported in notebooks/04_scaled_dot_product_attention.ipynb (into
transformer_lib/attention.py); this module only re-exports it, so that plotting has a home of its own.
"""

from transformer_lib.attention import (
    ATTENTION_CMAP,
    CJK_FONTS,
    plot_attention,
    plot_heads,
    use_cjk_fallback_fonts,
)

__all__ = ["ATTENTION_CMAP", "CJK_FONTS", "plot_attention", "plot_heads", "use_cjk_fallback_fonts"]
