"""A few SVG primitives in the book's one diagram style (used by tools/diagrams.py).

One palette, one font, one arrow, so every concept diagram looks like the others:
attention orange, feed-forward blue, norm and residual yellow, embeddings green,
output purple, data grey.
"""

import re
from html import escape

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
# The Chinese edition's diagrams: the same drawing with every text looked up here
# (English -> Chinese, from zh/diagram_labels.yml); a text with letters and no entry
# lands in MISSING, and tools/diagrams.py refuses to write a half-translated diagram.
LABELS: dict[str, str] = {}
MISSING: list[str] = []
CJK_FONT = "Noto Sans CJK SC, PingFang SC, Microsoft YaHei, " + FONT
# The book's text column is 672 px wide, and a wider diagram is scaled down to it: a
# text is drawn about this many px tall at 1x there (subscripts at 70% of that).
COLUMN_PX, MIN_TEXT_PX = 672, 10


def translate(text: str) -> str:
    """`text` in the diagrams' language: itself unless a translation table is loaded."""
    if not LABELS or text in LABELS:
        return LABELS.get(text, text)
    if any(c.isalpha() and c.isascii() for c in text):
        MISSING.append(text)
    return text


SCRIPT = re.compile(r"([_^])\{([^{}]*)\}")


def scripts(text: str, size: float) -> str:
    """Escaped SVG text with `_{...}` as a subscript and `^{...}` as a superscript
    (tspans at 70% of the size), so that `k_{j}` reads as math, not as code."""
    out, end = [], 0
    for m in SCRIPT.finditer(text):
        shift = 0.25 * size if m[1] == "_" else -0.4 * size
        out.append(escape(text[end : m.start()]))
        out.append(
            f'<tspan dy="{shift:.1f}" font-size="{0.7 * size:.1f}">{escape(m[2])}'
            f'</tspan><tspan dy="{-shift:.1f}">\u200b</tspan>'
        )
        end = m.end()
    return "".join(out) + escape(text[end:])


MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"
INK = "#263238"
MUTED = "#607d8b"
# kind -> (fill, stroke)
PALETTE = {
    "attn": ("#fde3c8", "#d9822b"),
    "ffn": ("#d4e9f7", "#2b7bb9"),
    "norm": ("#fff3b0", "#b89a00"),
    "embed": ("#dff0d8", "#4a9a3d"),
    "out": ("#ebe0f5", "#7d4fa6"),
    "data": ("#f1f3f4", "#78909c"),
    "hot": ("#c8e6c9", "#2e7d32"),
    "off": ("#ffffff", "#b0bec5"),
    "pad": ("#eceff1", "#b0bec5"),
}


class Svg:
    """An SVG canvas: add shapes, then `str(svg)`."""

    def __init__(
        self, width: int, height: int, title: str, desc: str, min_text_px=MIN_TEXT_PX
    ):
        self.w, self.h, self.items = width, height, []
        self.title, self.desc = title, desc
        # the smallest font size that shows at min_text_px once scaled into the column
        self.min_size = round(min_text_px * max(width, COLUMN_PX) / COLUMN_PX)

    def add(self, item: str) -> None:
        self.items.append(item)

    def text(
        self,
        x,
        y,
        s,
        size=14,
        anchor="middle",
        weight="normal",
        color=INK,
        mono=False,
        italic=False,
    ):
        """A line of text; `_{j}` and `^{m−m′}` in it are set as subscript and
        superscript."""
        font = MONO if mono else (CJK_FONT if LABELS else FONT)
        s, size = translate(str(s)), max(size, self.min_size)
        style = ' font-style="italic"' if italic else ""
        self.add(
            f'<text x="{x:.1f}" y="{y:.1f}" font-family="{font}" font-size="{size}" '
            f'font-weight="{weight}" fill="{color}" text-anchor="{anchor}"{style}>'
            f"{scripts(s, size)}</text>"
        )

    def box(
        self, x, y, w, h, label="", kind="data", size=14, sub=None, rx=7, dash=False
    ):
        fill, stroke = PALETTE[kind]
        dash_attr = ' stroke-dasharray="5 4"' if dash else ""
        self.add(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx}" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="1.6"{dash_attr}/>'
        )
        if label:
            cy = y + h / 2 + size * 0.35 - (size * 0.55 if sub else 0)
            self.text(x + w / 2, cy, label, size=size)
            if sub:
                self.text(x + w / 2, cy + size * 1.15, sub, size=size - 2, color=MUTED)

    def frame(self, x, y, w, h, label="", color=MUTED):
        self.add(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="12" '
            f'fill="none" stroke="{color}" stroke-width="1.4" stroke-dasharray="6 4"/>'
        )
        if label:
            self.text(x + 10, y + 18, label, size=13, anchor="start", color=color)

    def circle(self, x, y, r=11, label="+", kind="norm"):
        fill, stroke = PALETTE[kind]
        self.add(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="1.6"/>'
        )
        self.text(x, y + 5, label, size=15, weight="bold")

    def line(self, points, arrow=True, color=INK, width=1.5, dash=False):
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        head = ' marker-end="url(#arrow)"' if arrow else ""
        dash_attr = ' stroke-dasharray="5 4"' if dash else ""
        self.add(
            f'<polyline points="{pts}" fill="none" stroke="{color}" '
            f'stroke-width="{width}"{head}{dash_attr}/>'
        )

    def arrow(self, x1, y1, x2, y2, **kw):
        self.line([(x1, y1), (x2, y2)], **kw)

    def __str__(self) -> str:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.w} {self.h}" '
            f'width="{self.w}" height="{self.h}" role="img" '
            f'aria-labelledby="title desc">\n'
            f'<title id="title">{escape(translate(self.title))}</title>\n'
            f'<desc id="desc">{escape(translate(self.desc))}</desc>\n'
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" '
            'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
            f'<path d="M0,0 L10,5 L0,10 z" fill="{INK}"/></marker></defs>\n'
            f'<rect width="{self.w}" height="{self.h}" fill="#ffffff"/>\n'
            + "\n".join(self.items)
            + "\n</svg>\n"
        )
