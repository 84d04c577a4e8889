"""Draw the book's concept diagrams as SVG into book/images/ (one style: tools/svg.py).

    python tools/diagrams.py            # all of them
    python tools/diagrams.py masks kv   # those whose name contains a word
    python tools/diagrams.py --lang zh  # the Chinese edition's, into zh/book/images/

Numbers on a diagram come from running the course library (masks, head shapes) or from
the computation in this file (one query attending); the beam-search tree is drawn by
tools/beam_tree.py from a trained translator.
"""

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import svg  # noqa: E402
from svg import INK, MUTED, PALETTE, Svg  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "book" / "images"
DIAGRAMS = {}


def diagram(fn):
    """Register a function returning an Svg; it is saved as book/images/<name>.svg."""
    DIAGRAMS[fn.__name__] = fn
    return fn


def _stack(s, x, y_bottom, w, parts, h=34, gap=14):
    """Boxes stacked upward from y_bottom, joined by arrows; returns their (x, y, w,
    h)."""
    boxes, y = [], y_bottom
    for label, kind, *sub in parts:
        y -= h
        s.box(x, y, w, h, label, kind, sub=sub[0] if sub else None, size=13)
        if boxes:
            px, py, pw, ph = boxes[-1]
            s.arrow(x + w / 2, py, x + w / 2, y + h)
        boxes.append((x, y, w, h))
        y -= gap
    return boxes


def _block_frame(s, x, y, w, h, *lines):
    """A dashed frame around a block, its label right of the centre line, where the
    arrow between the blocks runs."""
    s.frame(x, y, w, h)
    for k, line in enumerate(lines):
        s.text(
            x + w / 2 + 10, y + 16 + 14 * k, line, size=12, anchor="start", color=MUTED
        )


@diagram
def course_map():
    s = Svg(
        960,
        670,
        "Map of the course",
        "Left, the encoder-decoder translator of Part II (its blocks drawn "
        "post-norm, as in the paper; notebook 09 trains them pre-norm); right, the "
        "decoder-only GPT of "
        "Part III; between them, Part V, which adapts them. Each part is "
        "labelled with the notebook that builds it: "
        "tokens (01), "
        "embeddings (02), positional encoding (03), attention (04, 05), masks "
        "(06), encoder "
        "block (07), decoder block with cross-attention and the whole model "
        "(08), training "
        "(09), decoding (10) and evaluation with BLEU (11), GPT block with RMSNorm, "
        "GELU and residual additions (12) and what it learned (13), KV cache (12), "
        "fused attention and DDP (14), "
        "and today's variants: RoPE, grouped-query attention and QK-norm (15), "
        "SwiGLU (16); then the two adapted: the GPT as "
        "a translator with a prompt and a loss mask (17), LoRA (18), and the "
        "translator tuned with preferences, DPO (19).",
        min_text_px=7,  # the whole course in one figure: its notes are small print
    )
    s.text(
        270, 28, "Part II · the translator (encoder-decoder)", size=17, weight="bold"
    )
    s.text(
        270,
        48,
        "blocks drawn post-norm, as in the paper; 09 trains them pre-norm (07)",
        size=11,
        color=MUTED,
    )
    s.text(770, 28, "Parts III-IV · the GPT, decoder only", size=17, weight="bold")
    w = 200
    # encoder
    enc_in = _stack(
        s,
        40,
        630,
        w,
        [
            ("English tokens", "data", "01 tokenization"),
            ("embedding + positions", "embed", "02, 03"),
        ],
    )
    _block_frame(s, 30, 310, w + 20, 226, "encoder block", "× L · 07")
    enc = _stack(
        s,
        40,
        524,
        w,
        [
            ("self-attention", "attn", "04, 05, 06 (padding)"),
            ("add & LayerNorm", "norm"),
            ("feed-forward", "ffn"),
            ("add & LayerNorm", "norm"),
        ],
        gap=12,
    )
    s.arrow(140, enc_in[-1][1], 140, enc[0][1] + enc[0][3])
    s.box(40, 262, w, 34, "memory", "data", size=13, sub="(B, T_src, d_model)")
    s.arrow(140, enc[-1][1], 140, 296)
    # decoder
    dx = 300
    dec_in = _stack(
        s,
        dx,
        630,
        w,
        [
            ("Chinese tokens, shifted", "data", "01, 09"),
            ("embedding + positions", "embed", "02, 03"),
        ],
    )
    _block_frame(s, dx - 10, 218, w + 20, 318, "decoder block", "× L · 08")
    dec = _stack(
        s,
        dx,
        524,
        w,
        [
            ("masked self-attention", "attn", "04, 05, 06 (causal)"),
            ("add & LayerNorm", "norm"),
            ("cross-attention", "attn", "queries here, K, V: memory"),
            ("add & LayerNorm", "norm"),
            ("feed-forward", "ffn"),
            ("add & LayerNorm", "norm"),
        ],
        gap=12,
    )
    s.arrow(dx + 100, dec_in[-1][1], dx + 100, dec[0][1] + dec[0][3])
    cx, cy, cw, ch = dec[2]
    s.line([(240, 279), (265, 279), (265, cy + ch / 2), (cx, cy + ch / 2)])
    s.box(dx, 164, w, 40, "linear + softmax", "out", size=13, sub="08 · trained in 09")
    s.arrow(dx + 100, dec[-1][1], dx + 100, 204)
    s.box(
        dx,
        80,
        w,
        40,
        "greedy · beam search",
        "out",
        size=13,
        sub="10 · BLEU, chrF · 11",
    )
    s.arrow(dx + 100, 164, dx + 100, 120)
    # GPT
    gx = 690
    _stack(
        s,
        gx,
        630,
        w,
        [
            ("text tokens", "data", "01: characters, BPE"),
            ("embedding + positions", "embed", "02, 03"),
        ],
    )
    _block_frame(s, gx - 10, 304, w + 20, 232, "GPT block × L", "pre-norm · 12")
    # pre-norm: each sublayer reads RMSNorm(x) and adds its output to x, the residual
    # stream, drawn on the left; the boxes are stacked by hand for the two "+" nodes.
    # The first skip carries the block's input to the first "+"; the second starts
    # after that "+" (x1 = x + attention(...), x2 = x1 + MLP(...)), as in gpt_block
    cx = gx + w / 2
    s.box(gx, 504, w, 24, "RMSNorm", "norm", size=13)
    s.box(
        gx,
        464,
        w,
        34,
        "causal self-attention",
        "attn",
        size=13,
        sub="04-06 · 15: RoPE, GQA, QK-norm",
    )
    s.circle(cx, 449, r=9)
    s.box(gx, 398, w, 24, "RMSNorm", "norm", size=13)
    s.box(gx, 358, w, 34, "MLP with GELU", "ffn", size=13, sub="16: SwiGLU")
    s.circle(cx, 343, r=9)
    for bottom, top in (
        (548, 528),
        (504, 498),
        (464, 458),
        (440, 422),
        (398, 392),
        (358, 352),
    ):
        s.arrow(cx, bottom, cx, top)
    s.line([(cx, 542), (gx - 6, 542), (gx - 6, 449), (cx - 9, 449)])
    s.line([(cx, 434), (gx - 6, 434), (gx - 6, 343), (cx - 9, 343)])
    s.arrow(cx, 334, cx, 296)
    s.box(
        gx,
        256,
        w,
        40,
        "RMSNorm + LM head",
        "out",
        size=13,
        sub="12 · what it learned: 13",
    )
    s.box(gx, 172, w, 40, "sampling", "out", size=13, sub="10, 12")
    s.arrow(gx + 100, 256, gx + 100, 212)
    s.box(
        gx,
        80,
        w,
        48,
        "KV cache · fused attention",
        "data",
        size=13,
        sub="12 · bf16, compile, DDP: 14",
    )
    s.arrow(gx + 100, 172, gx + 100, 128)
    # Part V: the GPT adapted, between the two models
    s.frame(517, 70, 160, 192, "Part V · adapting it")
    for i, (label, sub) in enumerate(
        [
            ("a translator", "17: prompt, loss mask"),
            ("LoRA", "18: low-rank update"),
            ("DPO", "19: preference pairs"),
        ]
    ):
        s.box(525, 96 + 54 * i, 144, 44, label, "out", size=13, sub=sub)
    s.line([(gx, 276), (597, 276), (597, 262)])
    s.text(
        480,
        660,
        "Read from the bottom up: tokens enter below, predictions leave above.",
        size=12,
        color=MUTED,
    )
    return s


@diagram
def why_attention():
    s = Svg(
        900,
        360,
        "The bottleneck of a recurrent encoder, and attention",
        "Top: a recurrent encoder reads the words one after another and hands "
        "the decoder "
        "only its last state, one vector for the whole sentence; the first word's "
        "information must survive every step. Bottom: with attention the "
        "decoder looks at "
        "every encoder state directly, one step away, and all positions are "
        "computed at once.",
    )
    words = ["I", "bought", "a", "red", "car"]
    s.text(
        20,
        28,
        "Recurrent encoder: n sequential steps, one vector reaches the decoder",
        size=15,
        anchor="start",
        weight="bold",
    )
    for i, wd in enumerate(words):
        x = 40 + i * 120
        s.box(x, 112, 80, 30, wd, "data", size=13)
        s.box(x, 52, 80, 34, f"h{i + 1}", "ffn", size=14)
        s.arrow(x + 40, 112, x + 40, 86)
        if i:
            s.arrow(x - 40, 69, x, 69)
    s.box(700, 52, 170, 34, "decoder", "out", size=14)
    s.arrow(600, 69, 700, 69, width=3)
    s.text(650, 104, "one vector", size=12, color=MUTED)
    s.text(
        20,
        196,
        "Attention: every state is one step from every other; no sequential chain",
        size=15,
        anchor="start",
        weight="bold",
    )
    for i, wd in enumerate(words):
        x = 40 + i * 120
        s.box(x, 300, 80, 30, wd, "data", size=13)
        s.box(x, 230, 80, 34, f"h{i + 1}", "ffn", size=14)
        s.arrow(x + 40, 300, x + 40, 264)
        s.line(
            [(x + 40, 230), (x + 40, 216), (785, 216), (785, 230)],
            color=PALETTE["attn"][1],
            arrow=False,
        )
    s.box(
        700, 230, 170, 40, "decoder query", "attn", size=14, sub="weights over h1 … h5"
    )
    s.arrow(785, 216, 785, 230, color=PALETTE["attn"][1])
    return s


def one_query_numbers():
    """Notebook 04's hand example (the cat sat, d_k = 2): the query of 'sat'
    attending."""
    tokens = ["the", "cat", "sat"]
    keys = np.array([[1, 0], [0, 1], [0, 0]], float)  # a determiner, a noun, a verb
    values = np.eye(3)  # one-hot values: the output shows where each row looked
    q = np.array([0, 2], float)  # sat looks for a noun (direction 2)
    scores = keys @ q / np.sqrt(len(q))
    weights = np.exp(scores - scores.max())
    weights /= weights.sum()
    return tokens, q, keys, values, scores, weights, weights @ values


@diagram
def attention_one_query():
    tokens, q, keys, values, scores, weights, out = one_query_numbers()
    fmt = lambda v: "[" + " ".join(f"{x:g}" for x in v) + "]"  # noqa: E731
    s = Svg(
        900,
        290,
        "One query attending over three keys",
        f"The query of 'sat', {fmt(q)}, is compared with each key by a dot "
        "product divided "
        f"by the square root of d_k = 2, giving scores "
        f"{', '.join(f'{t} {x:.2f}' for t, x in zip(tokens, scores))}; "
        "softmax turns them "
        "into weights "
        f"{', '.join(f'{t} {x:.2f}' for t, x in zip(tokens, weights))}, which "
        f"sum to 1; the output is the weighted average of the value vectors, "
        f"{fmt(np.round(out, 2))}.",
    )
    heads = [
        "key k_{j}",
        "score q·k_{j} / √d_{k}",
        "softmax weight a_{j}",
        "value v_{j}",
    ]
    xs = [110, 300, 470, 700]
    for x, h in zip(xs, heads):
        s.text(x + 60, 70, h, size=13, weight="bold")
    s.box(20, 18, 250, 30, f"query of 'sat': q = {fmt(q)}", "attn", size=13)
    for i, t in enumerate(tokens):
        y = 88 + i * 44
        s.text(60, y + 22, t, size=14, weight="bold")
        s.box(xs[0], y, 120, 32, fmt(keys[i]), "data", size=13)
        s.box(xs[1], y, 120, 32, f"{scores[i]:.2f}", "attn", size=13)
        s.arrow(xs[0] + 120, y + 16, xs[1], y + 16)
        bar = 180 * weights[i]
        s.add(
            f'<rect x="{xs[2]}" y="{y + 6}" width="{bar:.1f}" height="20" '
            f'fill="{PALETTE["hot"][0]}" stroke="{PALETTE["hot"][1]}"/>'
        )
        s.text(xs[2] + bar + 8, y + 21, f"{weights[i]:.2f}", size=13, anchor="start")
        s.arrow(xs[1] + 120, y + 16, xs[2] - 4, y + 16)
        s.box(xs[3], y, 120, 32, fmt(values[i]), "data", size=13)
    s.text(
        470,
        234,
        f"weights sum to {weights.sum():.0f} (each shown rounded)",
        size=12,
        color=MUTED,
        anchor="start",
    )
    s.box(
        560,
        244,
        330,
        32,
        f"output = Σ_{{j}} a_{{j}} v_{{j}} = {fmt(np.round(out, 2))}",
        "out",
        size=13,
    )
    return s


@diagram
def heads_split_merge():
    import torch

    from transformer_lib.multi_head import merge_heads, split_heads

    B, T, C, H = 2, 5, 512, 8
    x = torch.zeros(B, T, C)
    split = split_heads(x, H)
    merged = merge_heads(split)
    shape = lambda t: "(" + ", ".join(str(d) for d in t.shape) + ")"  # noqa: E731
    s = Svg(
        900,
        330,
        "Splitting into heads and merging them back",
        f"With B={B} sentences of T={T} tokens and d_model={C}: the projected queries "
        f"{shape(x)} are viewed as H={H} heads of d_head={C // H}, "
        f"{shape(x.view(B, T, H, -1))}, "
        f"and transposed to {shape(split)} so each head attends on its own; "
        "the outputs are "
        f"transposed back and reshaped to {shape(merged)}, which concatenates "
        "the heads, "
        f"before the output projection W_O. The shapes come from running "
        f"split_heads and "
        f"merge_heads.",
    )
    row = [
        ("x W_Q", shape(x), "(B, T, d_model)", "ffn"),
        ("view", shape(x.view(B, T, H, -1)), "(B, T, H, d_head)", "data"),
        ("transpose(1, 2)", shape(split), "(B, H, T, d_head)", "data"),
        ("attention per head", shape(split), "(B, H, T, d_head)", "attn"),
    ]
    back = [
        ("transpose(1, 2)", shape(split.transpose(1, 2)), "(B, T, H, d_head)", "data"),
        ("reshape = concat", shape(merged), "(B, T, d_model)", "data"),
        ("· W_O", shape(merged), "(B, T, d_model)", "ffn"),
    ]

    def shape_box(x, y, lab, shp, sym, kind):
        s.box(x, y, 190, 70, "", kind)
        s.text(x + 95, y + 22, lab, size=15)
        s.text(x + 95, y + 43, shp, size=14, mono=True)
        s.text(x + 95, y + 61, sym, size=13, color=MUTED)

    s.text(20, 24, "split_heads", size=15, anchor="start", weight="bold")
    for i, (lab, shp, sym, kind) in enumerate(row):
        x = 20 + i * 220
        shape_box(x, 34, lab, shp, sym, kind)
        if i:
            s.arrow(x - 30, 69, x, 69)
    # the model width cut into heads
    s.text(
        20,
        134,
        f"one token's d_model = {C} numbers = {H} heads × {C // H}",
        size=13,
        anchor="start",
        color=MUTED,
    )
    for h in range(H):
        kind = "attn" if h % 2 == 0 else "norm"
        s.box(20 + h * 52, 144, 50, 26, f"h{h}", kind, size=13, rx=3)
    s.line([(767, 104), (767, 214), (680, 214)])
    s.text(20, 210, "merge_heads", size=15, anchor="start", weight="bold")
    for i, (lab, shp, sym, kind) in enumerate(back):
        x = 490 - i * 235
        shape_box(x, 228, lab, shp, sym, kind)
        if i:
            s.arrow(x + 235, 263, x + 190, 263)
    s.arrow(680, 214, 680, 228)
    return s


@diagram
def masks():
    import torch

    from transformer_lib.masks import causal_mask, padding_mask

    tokens = ["I", "like", "cats", "<pad>", "<pad>"]
    ids = torch.tensor([[5, 9, 7, 0, 0]])
    pad = padding_mask(ids, pad_id=0)[0, 0].expand(
        5, 5
    )  # (T, T): every query row alike
    causal = causal_mask(5)
    grids = [
        ("padding mask", pad),
        ("causal mask", causal),
        ("combined: both", pad & causal),
    ]
    s = Svg(
        900,
        330,
        "The padding, causal and combined masks",
        "Three 5 by 5 grids for the tokens I, like, cats and two pads; rows "
        "are queries, "
        "columns keys; a green cell may attend. Padding: the two pad columns "
        "are hidden from "
        "every row. Causal: row i sees columns up to i, a lower triangle. "
        "Combined (the "
        "decoder's self-attention): the lower triangle without the pad "
        "columns. The grids "
        "come from running padding_mask and causal_mask.",
    )
    cell = 36
    for g, (title, m) in enumerate(grids):
        x0, y0 = 130 + g * 270, 70
        s.text(x0 + 2.5 * cell, 30, title, size=15, weight="bold")
        s.text(x0 + 2.5 * cell, 52, "keys (attended to) →", size=11, color=MUTED)
        for i in range(5):
            if g == 0:
                s.text(x0 - 8, y0 + i * cell + 23, tokens[i], size=12, anchor="end")
            for j in range(5):
                kind = "hot" if bool(m[i, j]) else "off"
                s.box(x0 + j * cell, y0 + i * cell, cell, cell, "", kind, rx=0)
                s.text(
                    x0 + j * cell + 18,
                    y0 + i * cell + 23,
                    "✓" if m[i, j] else "",
                    size=13,
                    color=PALETTE["hot"][1],
                )
        for j in range(5):
            s.add(
                f'<text transform="translate({x0 + j * cell + 22},{y0 + 5 * cell + 8}) '
                f'rotate(-40)" font-family="DejaVu Sans, sans-serif" '
                f'font-size="{s.min_size}" '
                'fill="#263238" '
                "text-"
                'anchor="end">'
                f"{tokens[j].replace('<', '&lt;').replace('>', '&gt;')}</text>"
            )
    s.text(40, 72 + 2.5 * cell, "queries ↓", size=11, color=MUTED, anchor="middle")
    return s


def _sublayer_column(s, x, title, parts, residuals, bottom=400, w=190):
    """A block drawn bottom-up with residual arrows skipping from (i) to the '+' at
    (j)."""
    s.text(x + w / 2, 28, title, size=15, weight="bold")
    boxes = _stack(s, x, bottom, w, parts, h=36, gap=16)
    s.arrow(x + w / 2, bottom + 30, x + w / 2, bottom)
    for i, j in residuals:
        yi = boxes[i][1] - 8 if i >= 0 else bottom + 16
        yj = boxes[j][1] + boxes[j][3] / 2
        s.line(
            [(x + w / 2, yi), (x - 18, yi), (x - 18, yj), (x, yj)],
            color=PALETTE["norm"][1],
        )
    s.arrow(x + w / 2, boxes[-1][1], x + w / 2, boxes[-1][1] - 22)
    return boxes


@diagram
def encoder_decoder_blocks():
    s = Svg(
        900,
        480,
        "The encoder and decoder blocks: post-norm as in the paper, and the pre-norm "
        "block that notebook 09 trains",
        "Left, the encoder block: self-attention, add and LayerNorm, "
        "feed-forward, add and LayerNorm, with a residual connection around each "
        "sublayer. Middle, the decoder block: masked (causal) self-attention, add and "
        "LayerNorm, then cross-attention whose queries come from the decoder and whose "
        "keys and values are the encoder's output, the memory, then add and LayerNorm, "
        "feed-forward, add and LayerNorm. Both are post-norm, as in the paper. Right, "
        "the encoder block as the course's translator is trained, pre-norm: "
        "LayerNorm, self-attention, add the input; LayerNorm, feed-forward, add; its "
        "decoder block moves each LayerNorm the same way, and each stack ends with one "
        "more LayerNorm.",
    )
    _sublayer_column(
        s,
        36,
        "encoder block · 07",
        [
            ("self-attention", "attn", "Q, K, V from x; padding mask"),
            ("add & LayerNorm", "norm"),
            ("feed-forward", "ffn", "d_model → d_ff → d_model"),
            ("add & LayerNorm", "norm"),
        ],
        [(-1, 1), (1, 3)],
        bottom=420,
        w=210,
    )
    # below the input arrows' tails, which start 30 px under the blocks
    s.text(141, 468, "x: source tokens (B, T_src, d_model)", size=13, color=MUTED)
    dec = _sublayer_column(
        s,
        428,
        "decoder block · 08",
        [
            ("masked self-attention", "attn", "causal + padding mask"),
            ("add & LayerNorm", "norm"),
            ("cross-attention", "attn", "Q from y; K, V from memory"),
            ("add & LayerNorm", "norm"),
            ("feed-forward", "ffn"),
            ("add & LayerNorm", "norm"),
        ],
        [(-1, 1), (1, 3), (3, 5)],
        bottom=420,
        w=210,
    )
    s.text(533, 468, "y: target tokens so far (B, T, d_model)", size=13, color=MUTED)
    cx, cy, cw, ch = dec[2]
    s.box(256, cy - 6, 120, 48, "memory", "data", size=14, sub="encoder output")
    s.line([(141, 206), (141, 150), (316, 150), (316, cy - 6)], dash=True)
    s.text(
        150, 140, "output of the last of L blocks", size=13, color=MUTED, anchor="start"
    )
    s.arrow(376, cy + ch / 2, cx, cy + ch / 2, width=2.5, color=PALETTE["attn"][1])
    s.text(392, cy + ch / 2 - 8, "K, V", size=13, color=PALETTE["attn"][1])
    # the variant the course trains (Seq2SeqConfig(norm_first=True)): norm first
    s.line([(662, 60), (662, 470)], arrow=False, color=MUTED, dash=True)
    _sublayer_column(
        s,
        700,
        "pre-norm encoder · 09",
        [
            ("LayerNorm", "norm"),
            ("self-attention", "attn"),
            ("+", "norm"),
            ("LayerNorm", "norm"),
            ("feed-forward", "ffn"),
            ("+", "norm"),
        ],
        [(-1, 2), (2, 5)],
        bottom=420,
        w=180,
    )
    s.text(790, 468, "trained in 09; the decoder alike", size=13, color=MUTED)
    return s


@diagram
def post_pre_norm():
    s = Svg(
        900,
        280,
        "Post-norm beside pre-norm",
        "Left, post-norm (the 2017 paper): x plus Sublayer(x), then LayerNorm, so the "
        "residual path passes through a normalisation in every block. Right, pre-norm "
        "(GPT-2 and most models since): LayerNorm first, Sublayer, then add x, so the "
        "residual path from input to output is a clean sum.",
    )
    for x, title, parts, res, eq in [
        (
            120,
            "post-norm (paper, notebook 07)",
            [
                ("sublayer", "attn", "attention or feed-forward"),
                ("+", "norm"),
                ("LayerNorm", "norm"),
            ],
            (-1, 1),
            "x ← LayerNorm(x + Sublayer(x))",
        ),
        (
            560,
            "pre-norm (GPT, notebook 12)",
            [
                ("LayerNorm", "norm"),
                ("sublayer", "attn", "attention or feed-forward"),
                ("+", "norm"),
            ],
            (-1, 2),
            "x ← x + Sublayer(LayerNorm(x))",
        ),
    ]:
        _sublayer_column(s, x, title, parts, [res], bottom=210, w=220)
        s.text(x + 110, 268, eq, size=14, mono=True)
    return s


@diagram
def residual_stream():
    s = Svg(
        900,
        300,
        "The residual stream",
        "The residual stream of a pre-norm stack, drawn left to right: the embedding "
        "starts a running sum. Each sublayer, self-attention then feed-forward, layer "
        "after layer, reads a LayerNorm copy of the stream and writes its output back "
        "by addition. Nothing on the stream itself is rescaled, so after L layers, "
        "2L sublayers, the stream x_2L is the embedding plus every sublayer's write; "
        "the final LayerNorm normalises it, LN(x_2L).",
    )
    y = 210  # the stream
    s.box(14, y - 22, 100, 44, "embedding", "embed", size=13, sub="x_{0}")
    s.text(450, 30, "each sublayer reads a normalised copy and writes by adding", 13)
    s.text(450, y + 36, "residual stream", size=13, weight="bold", color=MUTED)
    left = 114
    parts = [("self-attention", "attn"), ("feed-forward", "ffn")] * 2
    for i, (label, kind) in enumerate(parts):
        x0 = 148 + 140 * i
        s.arrow(x0 + 15, y, x0 + 15, 153)
        s.box(x0 - 23, 125, 96, 28, "LayerNorm", "norm", size=13)
        s.arrow(x0 + 25, 125, x0 + 25, 103)
        s.box(x0 - 23, 65, 96, 38, label, kind, size=13, sub=f"layer {i // 2 + 1}")
        s.line([(x0 + 73, 84), (x0 + 108, 84), (x0 + 108, y - 11)])
        s.line([(left, y), (x0 + 97, y)], width=4, color=MUTED)
        s.circle(x0 + 108, y)
        left = x0 + 119
    s.line([(left, y), (left + 16, y)], width=4, color=MUTED, arrow=False)
    s.text(left + 30, y + 5, "⋯", size=18)
    s.line([(left + 44, y), (left + 68, y)], width=4, color=MUTED)
    s.box(
        left + 70, y - 22, 124, 44, "final LayerNorm", "norm", size=13, sub="LN(x_{2L})"
    )
    # x_i: the stream after i sublayers; L layers (n_layers) are 2L sublayers
    s.text(
        450,
        270,
        "x_{2L} = x_{0} + Σ_{i=1}^{2L} Sublayer_{i}(LN(x_{i−1}))",
        14,
        mono=True,
    )
    s.text(
        450,
        291,
        "x_{i}: the stream after i sublayers; L layers = 2L sublayers",
        12,
        color=MUTED,
    )
    return s


@diagram
def teacher_forcing():
    zh = list("我爱我的猫。")
    tgt_in, tgt_out = ["<bos>"] + zh, zh + ["<eos>"]
    s = Svg(
        900,
        300,
        "Teacher forcing: the target shifted by one",
        "The English 'I love my cat.' is the encoder's input. The decoder's "
        "input row is <bos> 我 爱 我 的 猫 。 and the row it must predict is "
        "the same characters shifted left by one: 我 爱 我 的 猫 。 <eos>. "
        "Position t sees the true tokens up to t (the causal mask) and is "
        "trained to predict token t+1, all positions in one pass.",
    )
    s.box(20, 20, 240, 34, "source: I love my cat.", "data", size=14)
    s.text(
        280,
        42,
        "→ encoder → memory, which every decoder position attends to",
        size=13,
        anchor="start",
        color=MUTED,
    )
    w, x0 = 88, 150
    s.text(x0 - 12, 245, "tgt_in", size=14, anchor="end", weight="bold", mono=True)
    s.text(x0 - 12, 105, "tgt_out", size=14, anchor="end", weight="bold", mono=True)
    s.text(x0 - 12, 180, "decoder", size=12, anchor="end", color=MUTED)
    for t, (a, b) in enumerate(zip(tgt_in, tgt_out)):
        x = x0 + t * (w + 8)
        s.box(x, 224, w, 34, a, "embed", size=15)
        s.box(x, 84, w, 34, b, "out", size=15)
        s.box(x, 160, w, 30, f"position {t}", "attn", size=12)
        s.arrow(x + w / 2, 224, x + w / 2, 190)
        s.arrow(x + w / 2, 160, x + w / 2, 118)
        if t + 1 < len(tgt_in):
            s.line(
                [(x + w / 2 + 20, 121), (x + w + 8 + w / 2 - 10, 218)],
                dash=True,
                color=MUTED,
                arrow=False,
            )
    s.text(
        450,
        286,
        "tgt_out[t] = tgt_in[t + 1]: each target is the next input",
        size=13,
        color=MUTED,
    )
    return s


def _translator_sizes() -> dict:
    """The course translator's sizes: Seq2SeqConfig's defaults (its d_model, n_heads,
    n_layers, d_ff) and the target vocabulary of notebook 09's stored run."""
    from dataclasses import fields

    from transformer_lib.seq2seq import Seq2SeqConfig
    from transformer_lib.viz import load_stored_attention

    sizes = {f.name: f.default for f in fields(Seq2SeqConfig)}
    run = load_stored_attention("translator", start=ROOT)["config"]
    for name in ("d_model", "n_heads", "n_layers", "d_ff"):
        if run[name] != sizes[name]:
            sys.exit(f"translator_shapes: the stored run's {name} is not the default")
    return {**sizes, "vocab": run["tgt_vocab_size"]}


def _shape_arrow(s, x, y_from, y_to, shape):
    """An upward arrow with the shape of what travels on it, right of it."""
    s.arrow(x, y_from, x, y_to)
    s.text(x + 8, (y_from + y_to) / 2 + 5, shape, size=14, anchor="start", mono=True)


@diagram
def translator_shapes():
    c = _translator_sizes()
    s = Svg(
        900,
        760,
        "The whole translator, with the shape on every arrow",
        "Read from the bottom up. Left, the encoder: source token ids (B, T_src) "
        "go through the token embedding times the square root of C plus the "
        "positional encoding, (B, T_src, C), then L encoder layers and a final "
        "LayerNorm, giving the memory (B, T_src, C). Right, the decoder: target "
        "token ids shifted right, "
        "<bos> first, (B, T), through their own embedding and positions, (B, T, C), "
        "then L decoder layers, each masked self-attention, cross-attention whose "
        "keys and values are the memory, and feed-forward; a final LayerNorm; the "
        "output projection, whose weight is the target embedding's table, gives the "
        "logits (B, T, n_vocab). Under it, the sizes of the course's translator.",
    )
    ex, dx = 190, 670  # the centres of the encoder and the decoder column
    s.text(ex, 30, "encoder · 07", size=15, weight="bold")
    s.text(dx, 30, "decoder · 08", size=15, weight="bold")
    s.box(40, 640, 300, 44, "source ids", "data", size=15, sub="English BPE tokens")
    s.box(
        500,
        640,
        340,
        44,
        "target ids, shifted right",
        "data",
        sub="<bos> first",
        size=15,
    )
    _shape_arrow(s, ex, 640, 600, "(B, T_src)")
    _shape_arrow(s, dx, 640, 600, "(B, T)")
    for x, w in ((40, 300), (500, 340)):
        sub = "02 · 03" if x == 40 else "a (n_vocab, C) table, shared with the output"
        s.box(
            x, 550, w, 50, "token embedding × √C + positions", "embed", sub=sub, size=15
        )
    _shape_arrow(s, ex, 550, 510, "(B, T_src, C)")
    s.box(
        40,
        430,
        300,
        80,
        "encoder layer × L",
        "attn",
        sub="self-attention, feed-forward",
        size=15,
    )
    _shape_arrow(s, ex, 430, 390, "(B, T_src, C)")
    s.box(40, 350, 300, 40, "final LayerNorm", "norm", size=15)
    _shape_arrow(s, ex, 350, 310, "(B, T_src, C)")
    s.box(40, 260, 300, 50, "memory", "data", sub="encoder output", size=15)
    s.frame(500, 302, 340, 208, "decoder layer × L")
    parts = [
        ("masked self-attention", "causal + padding mask"),
        ("cross-attention", "Q from here; K, V from memory"),
        ("feed-forward", None),
    ]
    for i, (label, sub) in enumerate(parts):
        y = 460 - 64 * i
        s.box(
            540, y, 260, 40, label, "ffn" if sub is None else "attn", sub=sub, size=15
        )
        if i:
            _shape_arrow(s, dx, y + 64, y + 40, "(B, T, C)")
    _shape_arrow(s, dx, 550, 500, "(B, T, C)")
    s.line([(340, 285), (420, 285), (420, 416), (540, 416)], color=PALETTE["attn"][1])
    s.text(428, 390, "K, V", size=14, anchor="start", color=PALETTE["attn"][1])
    # the memory's shape above the line that leaves it (beside "K, V" it would run
    # into the decoder's frame)
    s.text(348, 278, "(B, T_src, C)", size=13, anchor="start", mono=True)
    _shape_arrow(s, dx, 332, 250, "(B, T, C)")
    s.box(500, 214, 340, 36, "final LayerNorm", "norm", size=15)
    _shape_arrow(s, dx, 214, 174, "(B, T, C)")
    s.box(
        500,
        124,
        340,
        50,
        "output projection",
        "out",
        sub="weight: the target embedding's",
        size=15,
    )
    s.line([(840, 575), (870, 575), (870, 149), (840, 149)], dash=True, color=MUTED)
    _shape_arrow(s, dx, 124, 88, "(B, T, n_vocab)")
    s.box(500, 48, 340, 40, "logits: a score per target token", "out", size=15)
    s.text(
        40,
        720,
        "the course's translator (Seq2SeqConfig, notebook 09's run):",
        size=14,
        anchor="start",
        color=MUTED,
    )
    sizes = f"C = {c['d_model']}, H = {c['n_heads']}, L = {c['n_layers']}, "
    sizes += f"F = {c['d_ff']}, n_vocab = {c['vocab']:,} (Chinese tokens)"
    s.text(40, 742, sizes, size=14, anchor="start", mono=True)
    return s


@diagram
def gpt_block():
    s = Svg(
        900,
        560,
        "The GPT (decoder-only) model and its pre-norm block",
        "Token ids pass through the token embedding plus the learned position "
        "embedding, "
        "then n_layers identical blocks. Each block: RMSNorm, causal "
        "self-attention, add "
        "the residual; RMSNorm, MLP (a linear layer to 4 d_model, GELU, a linear layer "
        "back), add the residual. After the blocks a final RMSNorm and the LM "
        "head give "
        "the logits over the vocabulary for every position.",
    )
    s.box(60, 510, 240, 34, "token ids (B, T)", "data", size=14)
    s.box(
        60,
        454,
        240,
        40,
        "token + position embedding",
        "embed",
        size=14,
        sub="(B, T, d_model)",
    )
    s.arrow(180, 510, 180, 494)
    s.frame(30, 96, 300, 344, "block × L (n_layers)")
    blk = _sublayer_column(
        s,
        70,
        "",
        [
            ("RMSNorm", "norm"),
            ("causal self-attention", "attn", "H heads"),
            ("+", "norm"),
            ("RMSNorm", "norm"),
            ("MLP", "ffn", "Linear · GELU · Linear"),
            ("+", "norm"),
        ],
        [(-1, 2), (2, 5)],
        bottom=424,
        w=220,
    )
    s.box(
        60, 20, 240, 46, "RMSNorm · LM head", "out", size=14, sub="logits (B, T, vocab)"
    )
    s.arrow(180, blk[-1][1] - 22, 180, 66)
    s.frame(370, 170, 520, 150, "inside the MLP")
    for i, (lab, sub) in enumerate(
        [
            ("Linear", "d_model → 4·d_model"),
            ("GELU", "smooth ReLU"),
            ("Linear", "4·d_model → d_model"),
        ]
    ):
        s.box(382 + i * 166, 216, 156, 56, lab, "ffn", size=14, sub=sub)
        if i:
            s.arrow(382 + i * 166 - 10, 244, 382 + i * 166, 244)
    mx, my, mw, mh = blk[4]
    s.line([(mx + mw, my + mh / 2), (370, 245)], dash=True, color=MUTED, arrow=False)
    s.text(
        640, 380, "pre-norm: the residual path is a plain sum,", size=13, color=MUTED
    )
    s.text(
        640,
        400,
        "x + attention(…) + MLP(…) from the embedding to the head",
        size=13,
        color=MUTED,
    )
    return s


@diagram
def kv_cache():
    s = Svg(
        900,
        340,
        "Generating with a KV cache",
        "At each generation step only the newest token is fed in: its query, "
        "key and value "
        "are computed, the key and value are appended to the cache of shape (B, H, t, "
        "d_head), and the one query attends over all t cached keys. Without a "
        "cache every "
        "step would recompute keys and values for all t tokens.",
    )
    s.text(
        20,
        28,
        "step t: 1 new token in, its k and v appended, 1 query over t keys",
        size=15,
        anchor="start",
        weight="bold",
    )
    toks = ["To", "be", "or", "not"]
    for t in range(1, 5):
        y = 50 + (t - 1) * 66
        s.text(40, y + 30, f"t = {t}", size=14, anchor="start", weight="bold")
        s.box(100, y + 8, 70, 34, toks[t - 1], "embed", size=14)
        s.box(190, y + 8, 70, 34, f"q{t}", "attn", size=14)
        s.arrow(170, y + 25, 190, y + 25)
        for j in range(t):
            new = j == t - 1
            kind = "hot" if new else "data"
            s.box(300 + j * 58, y + 2, 52, 22, f"k{j + 1}", kind, size=12, rx=3)
            s.box(300 + j * 58, y + 28, 52, 22, f"v{j + 1}", kind, size=12, rx=3)
        s.line([(260, y + 25), (290, y + 25)], color=PALETTE["attn"][1])
        s.text(
            545,
            y + 22,
            f"computes q, k, v for 1 token; attends over {t} key{'s' * (t > 1)}",
            size=13,
            anchor="start",
        )
        s.text(
            545,
            y + 40,
            f"no cache: k, v for {t} token{'s' * (t > 1)} again",
            size=12,
            anchor="start",
            color=MUTED,
        )
    s.text(
        300,
        322,
        "green: appended this step · grey: stored in the cache (B, H, t, d_head)",
        size=12,
        anchor="start",
        color=MUTED,
    )
    return s


@diagram
def ddp():
    s = Svg(
        900,
        380,
        "Distributed data parallel training",
        "torchrun starts one process per GPU. Every process holds a full copy "
        "of the model "
        "and reads its own shard of each batch; it runs forward and backward "
        "on its shard; "
        "the gradients are all-reduced (averaged across processes) during the backward "
        "pass, so every process applies the same optimizer step and the copies stay "
        "identical.",
    )
    n = 3
    for r in range(n):
        x = 40 + r * 290
        s.frame(x - 10, 40, 260, 272, f"process (rank) {r} · GPU {r}")
        s.box(x, 70, 240, 36, f"batch shard {r}", "data", size=14)
        s.box(x, 126, 240, 36, "model copy", "ffn", size=14, sub="same weights")
        s.box(x, 182, 240, 36, f"forward + backward → g{r}", "attn", size=14)
        s.box(x, 262, 240, 36, "optimizer step", "out", size=14, sub="same update")
        s.arrow(x + 120, 106, x + 120, 126)
        s.arrow(x + 120, 162, x + 120, 182)
        s.arrow(x + 120, 218, x + 120, 232)
        s.arrow(x + 120, 246, x + 120, 262)
    s.add(
        '<rect x="30" y="232" width="840" height="14" rx="7" '
        f'fill="{PALETTE["norm"][0]}" '
        f'stroke="{PALETTE["norm"][1]}"/>'
    )
    s.text(
        450,
        342,
        "all-reduce: every process gets g = (g0 + g1 + g2) / 3",
        size=15,
        weight="bold",
    )
    s.text(
        450,
        364,
        "launched with torchrun --nproc_per_node=3 (notebook 14)",
        size=12,
        color=MUTED,
    )
    s.text(
        20,
        26,
        "one process per GPU; only gradients travel",
        size=15,
        anchor="start",
        weight="bold",
    )
    return s


# Part IV (notebooks 15-16) ----------------------------------------------------------


@diagram
def rope():
    s = Svg(
        900,
        330,
        "Rotary position embeddings: each pair of features turns with the position",
        "A head's features are taken in pairs. Each row is one pair i of a head "
        "of width 8, each column a position m from 0 to 7; the hand of each dial "
        "shows the angle m times theta_i by which RoPE turns that pair of a query "
        "or key. Pair 0 turns by one radian per position, pair 3 by a thousandth: "
        "fast pairs tell near positions apart, slow ones far ones. A query at m and "
        "a key at n meet at the angle (n - m) theta_i, so their score depends on "
        "the offset only.",
    )
    s.text(
        20,
        28,
        "RoPE turns pair i of a query or key at position m by the angle m·θᵢ",
        size=15,
        anchor="start",
        weight="bold",
    )
    r, x0, y0, dx, dy = 19, 210, 78, 62, 56
    for m in range(8):
        s.text(x0 + m * dx, y0 - 30, f"m = {m}", size=12, color=MUTED)
    for i in range(4):
        theta = 10000 ** (-2 * i / 8)
        y = y0 + i * dy
        s.text(
            20, y + 5, f"pair {i}: θ{'₀₁₂₃'[i]} = {theta:g}", size=13, anchor="start"
        )
        for m in range(8):
            x = x0 + m * dx
            s.circle(x, y, r=r, label="", kind="attn")
            a = m * theta
            tip = (x + 0.8 * r * np.cos(a), y - 0.8 * r * np.sin(a))
            s.line([(x, y), tip], width=2)
    s.text(
        20,
        y0 + 4 * dy - 4,
        "fast pairs tell near positions apart, slow pairs far ones",
        size=12,
        anchor="start",
        color=MUTED,
    )
    s.frame(720, 50, 160, 215, "q at m, k at n")
    s.text(800, 100, "angle between", size=13)
    s.text(800, 120, "them: (n − m)·θᵢ", size=13)
    s.text(800, 160, "score(m, n)", size=13, mono=True)
    s.text(800, 180, "= score(m+s, n+s)", size=13, mono=True)
    s.text(800, 220, "values are", size=12, color=MUTED)
    s.text(800, 238, "not rotated", size=12, color=MUTED)
    return s


@diagram
def muon_update():
    """Notebook 16: what setting every singular value to 1 does to an update."""
    s = Svg(
        900,
        345,
        "Muon's update: every direction of the gradient moves by the same amount",
        "Left: a step along the gradient's momentum, G = U Sigma V^T, maps the unit "
        "circle of input directions to an ellipse: the strong direction u1 is "
        "stretched by sigma1, the weak one u2 by a small sigma2, so the step mostly "
        "moves the strong one. Right: Muon's step U V^T sets every singular value "
        "to 1, and maps the circle to a circle: every direction moves as much.",
    )
    s.text(
        20,
        28,
        "Muon keeps the directions of a step and sets every singular value to 1",
        size=15,
        anchor="start",
        weight="bold",
    )
    R, turn = 100, np.pi / 6  # the circle's radius; u1's angle
    u1, u2 = (
        np.array([np.cos(turn), -np.sin(turn)]),
        np.array([np.sin(turn), np.cos(turn)]),
    )
    t = np.linspace(0, 2 * np.pi, 97)
    for cx, (a, b), caption in (
        (210, (1.0, 0.3), "a step along Ḡ = U Σ Vᵀ"),
        (690, (1.0, 1.0), "Muon's step U Vᵀ"),
    ):
        cy = 185
        s.line(
            [(cx + R * np.cos(x), cy + R * np.sin(x)) for x in t],
            arrow=False,
            dash=True,
            color=MUTED,
        )
        curve = [(cx, cy) + R * (a * np.cos(x) * u1 + b * np.sin(x) * u2) for x in t]
        s.line(
            [tuple(p) for p in curve], arrow=False, color=PALETTE["attn"][1], width=2.2
        )
        for vec, size, name in ((u1, a, "1"), (u2, b, "2")):
            tip = np.array([cx, cy]) + R * size * vec
            s.line([(cx, cy), tuple(tip)], width=2)
            label = np.array([cx, cy]) + (R * size + 22) * vec
            text = f"σ_{{{name}}} u_{{{name}}}" if a != b else f"u_{{{name}}}"
            s.text(label[0], label[1] + 5, text, size=14)
        s.text(cx, cy + R + 42, caption, size=14)
    s.text(210, 62, "the weak direction hardly moves", size=12, color=MUTED)
    s.text(690, 62, "every direction moves as much", size=12, color=MUTED)
    s.arrow(370, 180, 520, 180, width=2)
    s.text(445, 168, "Σ → I", size=15, weight="bold")
    s.text(445, 204, "Newton-Schulz", size=13, color=MUTED)
    return s


@diagram
def swiglu():
    s = Svg(
        900,
        330,
        "The GELU MLP and the SwiGLU MLP",
        "Left, notebook 12's MLP: a linear layer from d_model to 4 d_model, GELU, a "
        "linear layer back. Right, SwiGLU: two linear layers from d_model to d_ff, the "
        "gate passed through SiLU and multiplied element by element with the other "
        "(up); a third linear layer (proj) back to d_model. With d_ff = 8 d_model / 3 "
        "both hold 8 d_model squared weights.",
    )
    s.frame(20, 40, 300, 275, "GELU MLP (notebook 12)")
    parts = [
        ("x  (B, T, C)", "data"),
        ("Linear C → 4C", "ffn"),
        ("GELU", "ffn"),
        ("Linear 4C → C", "ffn"),
    ]
    for j, (label, kind) in enumerate(parts):
        y = 250 - j * 60
        s.box(70, y, 200, 34, label, kind, size=13)
        if j:
            s.arrow(170, y + 60, 170, y + 34)
    s.text(170, 304, "2 · C · 4C = 8C² weights", size=12, color=MUTED)
    s.frame(350, 40, 530, 275, "SwiGLU (LLaMA)")
    s.box(540, 270, 140, 34, "x  (B, T, C)", "data", size=13)
    s.box(390, 200, 190, 34, "gate: Linear C → F", "ffn", size=13)
    s.box(650, 200, 190, 34, "up: Linear C → F", "ffn", size=13)
    s.box(390, 140, 190, 34, "SiLU: z·σ(z)", "ffn", size=13)
    s.circle(615, 112, r=14, label="×", kind="norm")
    s.box(520, 50, 190, 34, "proj: Linear F → C", "ffn", size=13)
    s.line([(600, 270), (485, 234)])
    s.line([(630, 270), (745, 234)])
    s.arrow(485, 200, 485, 174)
    s.line([(485, 140), (485, 112), (601, 112)])
    s.line([(745, 200), (745, 112), (629, 112)])
    s.arrow(615, 98, 615, 84)
    s.text(430, 105, "a gate per feature", size=12, color=MUTED)
    s.text(870, 290, "F = ⅔ · 4C: 3 · C · F = 8C²", size=12, anchor="end", color=MUTED)
    return s


@diagram
def gqa():
    s = Svg(
        940,
        300,
        "Multi-head, grouped-query and multi-query attention",
        "Three panels with eight query heads each. Multi-head: eight key/value heads, "
        "one per query head. Grouped-query: two key/value heads, each shared by a "
        "group of four query heads (query head h reads key/value head h // 4). "
        "Multi-query: one key/value head shared by all eight. The KV cache stores only "
        "the key/value heads: 8, 2 or 1 per layer and token.",
    )
    panels = [("multi-head (H_kv = 8)", 8), ("grouped-query (H_kv = 2)", 2)]
    panels.append(("multi-query (H_kv = 1)", 1))
    for p, (title, n_kv) in enumerate(panels):
        x0 = 44 + p * 304
        s.text(x0 + 135, 30, title, size=14, weight="bold")
        s.text(x0 - 2, 74, "q", size=12, anchor="end", color=MUTED)
        s.text(x0 - 2, 204, "k, v", size=12, anchor="end", color=MUTED)
        for h in range(8):
            s.box(x0 + 4 + h * 33, 56, 28, 28, f"{h}", "attn", size=12, rx=4)
        w = 270 / n_kv
        for g in range(n_kv):
            s.box(x0 + 4 + g * w, 186, w - 5, 28, f"{g}", "hot", size=12, rx=4)
        for h in range(8):
            g = h // (8 // n_kv)
            s.line(
                [(x0 + 18 + h * 33, 84), (x0 + 4 + g * w + (w - 5) / 2, 186)],
                arrow=False,
                color=PALETTE["attn"][1],
                width=1.2,
            )
        s.text(
            x0 + 135, 240, f"cache: {n_kv} head{'s' * (n_kv > 1)} per layer", size=13
        )
        s.text(
            x0 + 135,
            260,
            f"{8 // n_kv} query head{'s' * (n_kv < 8)} per group",
            size=12,
            color=MUTED,
        )
    s.text(
        450,
        290,
        "query head h reads key/value head h // (H / H_kv)",
        size=12,
        color=MUTED,
    )
    return s


@diagram
def tiled_attention():
    s = Svg(
        900,
        360,
        "Causal attention in tiles with an online softmax",
        "A 6 by 6 grid of tiles: rows are tiles of queries, columns tiles of keys. "
        "Tiles above the diagonal are skipped (a query never sees a later key); tiles "
        "on the diagonal are computed with the causal mask inside; tiles below are "
        "computed in full. One row of tiles is highlighted: its key tiles are visited "
        "left to right, and each query of the row keeps a running maximum m, a running "
        "sum l and a running output o, rescaled by exp(m - m') when a tile raises the "
        "maximum. Only one tile of scores exists at a time.",
    )
    n, c, x0, y0 = 6, 40, 120, 60
    s.text(x0 + n * c / 2, 40, "key tiles →", size=12, color=MUTED)
    s.text(x0 - 12, y0 + n * c / 2, "query tiles ↓", size=12, color=MUTED, anchor="end")
    for i in range(n):
        for j in range(n):
            kind = "off" if j > i else ("norm" if j == i else "attn")
            s.box(x0 + j * c, y0 + i * c, c, c, "", kind, rx=0)
            if j == i:
                pts = f"{x0 + j * c},{y0 + i * c} {x0 + j * c + c},{y0 + i * c} "
                pts += f"{x0 + j * c + c},{y0 + i * c + c}"
                s.add(f'<polygon points="{pts}" fill="#ffffff" stroke="none"/>')
    hi = 3
    s.add(
        f'<rect x="{x0 - 3}" y="{y0 + hi * c - 3}" width="{(hi + 1) * c + 6}" '
        f'height="{c + 6}" fill="none" stroke="{PALETTE["hot"][1]}" stroke-width="3"/>'
    )
    s.arrow(x0 + 8, y0 + hi * c + c / 2, x0 + (hi + 1) * c - 8, y0 + hi * c + c / 2)
    s.text(
        x0 + n * c / 2,
        y0 + n * c + 28,
        "orange: full tile · yellow: masked",
        size=12,
        color=MUTED,
    )
    s.text(
        x0 + n * c / 2, y0 + n * c + 46, "inside · white: skipped", size=12, color=MUTED
    )
    tx = 420
    s.text(
        tx,
        80,
        "for each query row, over its key tiles:",
        size=14,
        anchor="start",
        weight="bold",
    )
    lines = [
        ("m′ = max(m, max s)", "running maximum"),
        ("ℓ′ = e^{m−m′} ℓ + Σ e^{s−m′}", "running sum"),
        ("o′ = e^{m−m′} o + Σ e^{s−m′} v", "running output"),
    ]
    for k, (formula, meaning) in enumerate(lines):
        s.text(tx, 120 + 30 * k, formula, size=15, anchor="start")
        s.text(tx + 250, 120 + 30 * k, meaning, size=12, anchor="start", color=MUTED)
    s.text(tx, 230, "after the last tile: output = o / ℓ", size=14, anchor="start")
    s.text(
        tx,
        262,
        "memory: one (b × b) tile of scores at a time,",
        size=12,
        anchor="start",
        color=MUTED,
    )
    s.text(tx, 280, "never the (T × T) matrix", size=12, anchor="start", color=MUTED)
    return s


LABELS_ZH = ROOT / "zh" / "diagram_labels.yml"


# The beam tree (tools/beam_tree.py) is drawn from a trained translator, its texts hold
# the run's numbers: the Chinese one is the English file with these texts replaced.
@diagram
def prompt_mask():
    s = Svg(
        900,
        300,
        "One sequence per pair, the loss on the translation only",
        "A row of tokens, as the course's English BPE splits the sentence: <bos>, I, "
        "'m, lear, ning, S, p, an, ish, ., <zh>, then 我 在 学 西 班 牙 语 。 "
        "and <eos>. Below each input token, the token it must predict "
        "next. The targets under the prompt (the English and <zh>) are crossed out: "
        "the loss mask gives them no weight, so the model learns to translate, not to "
        "write English. Without the mask every target counts.",
    )
    # the English as the course's 2,000-token BPE splits it (notebook 17 prints it);
    # "␣" marks a token that starts with a space
    tokens = ["<bos>", "I", "'m", "␣lear", "ning", "␣S", "p", "an", "ish", ".", "<zh>"]
    tokens += ["我", "在", "学", "西", "班", "牙", "语", "。", "<eos>"]
    n_prompt, w, x0 = 11, 44, 14
    s.text(x0, 40, "input (what the GPT reads)", size=13, anchor="start", color=MUTED)
    s.text(x0, 188, "target (the next token)", size=13, anchor="start", color=MUTED)
    for i, tok in enumerate(tokens[:-1]):
        x = x0 + i * (w + 2)
        kind = "embed" if i < n_prompt else "out"
        s.box(x, 52, w, 34, tok, kind, size=11)
        target = tokens[i + 1]
        masked = i < n_prompt - 1
        s.arrow(x + w / 2, 88, x + w / 2, 128, color=MUTED if masked else "#263238")
        s.box(x, 132, w, 34, target, "off" if masked else "hot", size=11, dash=masked)
        if masked:
            s.line([(x + 6, 138), (x + w - 6, 160)], arrow=False, color="#c62828")
    s.frame(x0 - 8, 218, (w + 2) * (n_prompt - 1) + 6, 56)
    s.text(x0, 240, "prompt: the targets are IGNORE (-100)", size=13, anchor="start")
    s.text(x0, 262, "no loss, no gradient", size=12, anchor="start", color=MUTED)
    x1 = x0 + (w + 2) * (n_prompt - 1)
    s.frame(x1 - 2, 218, (w + 2) * 9 + 4, 56)
    s.text(
        x1 + 6,
        240,
        "translation: cross-entropy on each target",
        size=13,
        anchor="start",
    )
    s.text(x1 + 6, 262, "the loss is their mean", size=12, anchor="start", color=MUTED)
    return s


@diagram
def run_lifecycle():
    s = Svg(
        900,
        350,
        "A training run that never loses work",
        "The trainer (train-mt, or fit) first calls start_run: it checks that the "
        "path can be written, takes the run's lock and removes the temporary files of "
        "killed saves. If a checkpoint is already there, a policy decides: refuse (the "
        "default, a one-line error that names --resume and --restart), resume (every "
        "part checked, the run continues at its saved step) or restart (a new run in "
        "its place). Then each epoch: train_epoch (09's training loop with its "
        "guards), end_epoch (validation, keep the best weights), save_run (a temporary "
        "file, then os.replace, so the disk holds the old checkpoint or the whole new "
        "one). Ctrl-C or SIGTERM saves and stops, and --resume continues exactly; a "
        "loss that is not finite stops the run, and the last saved epoch stays good.",
    )
    s.box(20, 52, 190, 50, "train-mt or fit", "data", size=14, sub="the trainer")
    s.arrow(210, 77, 250, 77)
    s.box(250, 52, 220, 50, "start_run", "norm", size=14, sub="check the path, lock it")
    s.text(700, 20, "a checkpoint already there?", size=13, color=MUTED)
    policies = [
        ("refuse (the default)", "a one-line error: --resume or --restart?", "off"),
        ("resume", "check every part, continue at its step", "attn"),
        ("restart", "a new run in its place", "out"),
    ]
    for j, (label, sub, kind) in enumerate(policies):
        y = 30 + j * 50
        s.box(520, y, 360, 42, label, kind, size=13, sub=sub)
        s.line([(470, 77), (520, y + 21)])
    s.line([(700, 172), (700, 196), (160, 196), (160, 222)])
    s.text(430, 190, "no checkpoint yet, resume or restart", size=12, color=MUTED)
    loop = [
        (60, 200, "train_epoch", "09's training loop, guarded", "embed"),
        (330, 200, "end_epoch", "validate, keep the best", "attn"),
        (600, 240, "save_run", "a temporary file, then os.replace", "hot"),
    ]
    for k, (x, w, label, sub, kind) in enumerate(loop):
        s.box(x, 222, w, 50, label, kind, size=14, sub=sub)
        if k:
            s.arrow(x - 70, 247, x, 247)
    s.line([(720, 272), (720, 296), (160, 296), (160, 272)])
    s.text(440, 290, "the next epoch", size=12, color=MUTED)
    s.text(
        20,
        322,
        "Ctrl-C or SIGTERM: save, then stop; --resume continues exactly",
        size=12,
        anchor="start",
    )
    s.text(
        20,
        342,
        "a loss that is not finite: stop; the last saved epoch stays good",
        size=12,
        anchor="start",
    )
    s.text(880, 332, "after the last epoch: the best weights", size=12, anchor="end")
    return s


@diagram
def lora():
    s = Svg(
        900,
        330,
        "LoRA: a frozen weight and a trainable low-rank update",
        "The input x (d_in features) goes two ways. Left, through the frozen weight W "
        "(d_out by d_in). Right, through A (r by d_in, a few features) then B (d_out "
        "by r, zero at the start), scaled by alpha / r. The two results are added. "
        "Only A and B are trained: r (d_in + d_out) parameters instead of d_in d_out. "
        "Merging adds (alpha / r) B A into W, so the merged layer costs what the base "
        "layer cost.",
    )
    s.box(330, 270, 240, 34, "x  (B, T, d_in)", "data", size=13)
    s.box(120, 150, 260, 60, "W  (d_out × d_in)", "off", size=14, sub="frozen")
    s.box(560, 190, 200, 34, "A  (r × d_in)", "attn", size=13, sub=None)
    s.box(560, 120, 200, 34, "B  (d_out × r)", "attn", size=13)
    s.text(770, 212, "r ≪ d_in, random", size=12, anchor="start", color=MUTED)
    s.text(770, 142, "starts at 0", size=12, anchor="start", color=MUTED)
    s.line([(420, 270), (250, 210)])
    s.line([(480, 270), (660, 224)])
    s.arrow(660, 190, 660, 154)
    s.text(700, 100, "× α / r", size=13, anchor="start")
    s.circle(450, 70, r=14, label="+", kind="norm")
    s.line([(250, 150), (250, 70), (436, 70)])
    s.line([(660, 120), (660, 70), (464, 70)])
    s.arrow(450, 56, 450, 26)
    s.text(462, 34, "y = x Wᵀ + (α / r) x Aᵀ Bᵀ", size=13, anchor="start")
    s.text(
        20,
        300,
        "trained: r (d_in + d_out) numbers",
        size=12,
        anchor="start",
        color=MUTED,
    )
    s.text(20, 318, "merge: W ← W + (α / r) B A", size=12, anchor="start", color=MUTED)
    return s


@diagram
def dpo():
    s = Svg(
        900,
        320,
        "DPO: preference pairs from the model's own translations",
        "For an English sentence from the training split, the model writes several "
        "candidates (greedy and sampled). Each is scored by sentence chrF against the "
        "reference: the best is chosen, the worst rejected. The policy (trained) and "
        "the reference model (a frozen copy) each give the log-probability of both. "
        "The loss is -log sigmoid of beta times the chosen log-ratio minus the "
        "rejected log-ratio: it pushes the policy up on the chosen and down on the "
        "rejected, measured against the reference.",
    )
    s.box(20, 140, 150, 40, "English", "data", size=13, sub="training split")
    s.box(200, 140, 150, 40, "the model", "out", size=13, sub="greedy + samples")
    s.arrow(170, 160, 200, 160)
    cands = [
        ("我正在学西班牙语。", "chrF 79", "hot"),
        ("我学习西班牙语。", "chrF 43", "data"),
        ("他在学法语。", "chrF 14", "off"),
    ]
    for j, (text, score, kind) in enumerate(cands):
        y = 70 + j * 70
        s.box(390, y, 170, 40, text, kind, size=13, sub=score)
        s.line([(350, 160), (390, y + 20)])
    s.text(475, 300, "sentence chrF against 我在学西班牙语。", size=12, color=MUTED)
    s.text(580, 96, "chosen y_w", size=13, anchor="start")
    s.text(580, 236, "rejected y_l", size=13, anchor="start")
    s.box(680, 60, 200, 40, "policy π_θ", "attn", size=13, sub="trained")
    s.box(680, 200, 200, 40, "reference π_ref", "off", size=13, sub="frozen copy")
    s.text(780, 140, "log π(y_w) − log π_ref(y_w)", size=12)
    s.text(780, 160, "− [log π(y_l) − log π_ref(y_l)]", size=12)
    s.text(780, 290, "loss = −log σ(β · margin)", size=13)
    return s


def _shade(v: float) -> str:
    """A cell's fill for a value about in [-1, 1]: orange above 0, blue below, white at
    0 (light enough for dark text)."""
    a = min(abs(float(v)), 1.0) * 0.75
    r, g, b = (217, 130, 43) if v > 0 else (43, 123, 185)
    mix = lambda c: round(255 + (c - 255) * a)  # noqa: E731
    return f"#{mix(r):02x}{mix(g):02x}{mix(b):02x}"


def _cell(s, x, y, w, h, v, text=None, size=12):
    s.add(
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
        f'fill="{_shade(v)}" stroke="#90a4ae" stroke-width="1"/>'
    )
    if text is not None:
        s.text(x + w / 2, y + h / 2 + size * 0.35, text, size=size)


@diagram
def bpe_merges():
    from transformer_lib.tokenization import merge, most_frequent_pair, pair_counts

    ids = list(b"low lower lowest")
    vocab = {i: bytes([i]) for i in range(256)}
    rows, table = [ids], []
    for k in range(4):
        counts = pair_counts(ids)
        pair = most_frequent_pair(counts)
        vocab[256 + k] = vocab[pair[0]] + vocab[pair[1]]
        table.append((256 + k, pair, counts[pair]))
        ids = merge(ids, pair, 256 + k)
        rows.append(ids)
    show = lambda i: vocab[i].decode().replace(" ", "␣")  # noqa: E731
    s = Svg(
        800,
        460,
        "Byte-pair encoding, merge by merge",
        "The text 'low lower lowest' starts as "
        f"{len(rows[0])} byte ids. Each step counts the neighbouring pairs, merges "
        "the most frequent one (the smallest on a tie) into a new id and adds it to "
        "the merge table: "
        + "; ".join(
            f"{i} = {show(p[0])} + {show(p[1])} (seen {n} times)" for i, p, n in table
        )
        + ". The sequence shrinks to "
        + ", ".join(str(len(r)) for r in rows[1:])
        + " tokens. The merges come from running pair_counts, most_frequent_pair "
        "and merge.",
    )
    x0, unit, top, step = 90, 32, 70, 72
    s.text(
        x0, 30, "the sequence (␣ is a space)", size=15, anchor="start", weight="bold"
    )
    s.text(625, 30, "the merge table", size=15, anchor="start", weight="bold")
    s.text(625, 50, "ids 0-255: the bytes", size=12, anchor="start", color=MUTED)
    for r, row in enumerate(rows):
        y, x = top + r * step, x0
        s.text(20, y + 20, "bytes" if r == 0 else f"step {r}", size=13, anchor="start")
        s.text(20, y + 36, f"{len(row)} tokens", size=12, anchor="start", color=MUTED)
        nxt = table[r][1] if r < len(table) else None
        j = 0
        while j < len(row):
            i = row[j]
            hit = nxt and j + 1 < len(row) and (row[j], row[j + 1]) == nxt
            group = [i, row[j + 1]] if hit else [i]
            for g in group:
                w = unit * len(vocab[g])
                kind = "attn" if hit else ("embed" if g >= 256 else "data")
                s.box(x + 1, y, w - 2, 40, show(g), kind, size=14, sub=str(g))
                x += w
            j += len(group)
        if r:
            i, p, n = table[r - 1]
            s.box(
                625,
                y,
                165,
                40,
                f"{i} = {show(p[0])} + {show(p[1])}",
                "embed",
                size=14,
                sub=f"({p[0]}, {p[1]}) seen {n} times",
            )
        if r < len(rows) - 1:
            s.arrow(x0 - 12, y + 40, x0 - 12, y + step)
    s.text(
        x0,
        top + len(rows) * step + 4,
        "orange: the most frequent pair, merged in the next step; "
        "green: a merged token",
        size=12,
        anchor="start",
        color=MUTED,
    )
    return s


@diagram
def embedding_lookup():
    import torch

    torch.manual_seed(0)
    n_vocab, C = 10, 4
    W = torch.randn(n_vocab, C) * 0.6
    ids = [3, 1, 4, 1]
    s = Svg(
        820,
        470,
        "An embedding is a table lookup",
        f"The token ids {ids} each pick one row of the table W, of shape (n_vocab, C) "
        f"= ({n_vocab}, {C}); the rows, in order, are the output, of shape (T, C) = "
        f"({len(ids)}, {C}); id 1 appears twice and gets the same row twice. Below: "
        "the one-hot vector of id 3 times W gives the same row 3, so the lookup is a "
        "matrix product with the zeros skipped.",
    )
    cw, rh, tx, ty = 40, 26, 290, 70
    s.text(75, 40, "token ids (T)", size=14, weight="bold")
    s.text(
        tx + 2 * cw, 40, f"W  (n_vocab, C) = ({n_vocab}, {C})", size=14, weight="bold"
    )
    s.text(670, 40, f"output (T, C) = ({len(ids)}, {C})", size=14, weight="bold")
    for r in range(n_vocab):
        used = r in ids
        s.text(
            tx - 10,
            ty + r * rh + 18,
            f"row {r}",
            size=12,
            anchor="end",
            color=INK if used else MUTED,
        )
        for c in range(C):
            v = float(W[r, c]) if used else 0.0
            _cell(s, tx + c * cw, ty + r * rh, cw, rh, v)
        if used:
            s.add(
                f'<rect x="{tx}" y="{ty + r * rh}" width="{C * cw}" height="{rh}" '
                f'fill="none" stroke="{PALETTE["embed"][1]}" stroke-width="2.5"/>'
            )
    s.text(
        tx + 2 * cw,
        ty + n_vocab * rh + 18,
        "unused rows left blank",
        size=12,
        color=MUTED,
    )
    green = PALETTE["embed"][1]
    for t, i in enumerate(ids):
        y = ty + 20 + t * 56
        s.box(45, y, 60, 30, str(i), "data", size=14)
        s.text(38, y + 20, f"t={t}", size=12, anchor="end", color=MUTED)
        ry = ty + i * rh + rh / 2
        s.line([(105, y + 15), (tx - 60, ry)], color=green)
        for c in range(C):
            _cell(s, 590 + c * cw, y, cw, 30, float(W[i, c]))
        s.line([(tx + C * cw, ry), (585, y + 15)], color=green)
        s.text(755, y + 20, f"= W[{i}]", size=12, anchor="start", mono=True)
    # the one-hot product
    y = 400
    s.text(
        20,
        y - 14,
        "the same row as a matrix product:",
        size=13,
        anchor="start",
        weight="bold",
    )
    s.text(20, y + 18, "one-hot e_{3}", size=13, anchor="start")
    for r in range(n_vocab):
        _cell(s, 130 + r * 26, y, 26, 26, 0.9 if r == 3 else 0.0, str(int(r == 3)), 12)
    s.text(400, y + 18, "× W   (1, 10) × (10, 4) =", size=13, anchor="start")
    for c in range(C):
        _cell(s, 585 + c * cw, y, cw, 26, float(W[3, c]))
    s.text(750, y + 18, "= W[3]", size=12, anchor="start", mono=True)
    s.text(
        20,
        y + 52,
        "nn.Embedding skips the multiplications by zero and reads the row",
        size=12,
        anchor="start",
        color=MUTED,
    )
    return s


@diagram
def positions_added():
    import torch

    from transformer_lib.positional import sinusoidal_positional_encoding

    C, N, t = 8, 10, 2
    pe = sinusoidal_positional_encoding(C, 200)
    torch.manual_seed(1)
    token = (torch.randn(C) * 0.5).clamp(-0.9, 0.9)
    x = token + pe[t]
    s = Svg(
        790,
        470,
        "Positions as waves, added to the token embeddings",
        f"Left: the sinusoidal encoding with C = {C}; each row is one dimension, a "
        "sine or a cosine of the position, fast in the first dimensions and slower "
        "in the later ones; the dots are the values at positions 0 to "
        f"{N - 1}. Reading the column at position {t} gives the vector PE({t}). "
        f"Right: the token embedding of 'sat', the third word of 'the cat sat', plus "
        f"PE({t}) gives its input to the model, x_{t}. The same token at another "
        "position gets another vector, so word order reaches attention. The numbers "
        "come from sinusoidal_positional_encoding.",
    )
    x0, dx, y0, rh = 165, 36, 80, 32
    s.text(
        x0 + dx * (N - 1) / 2,
        30,
        f"PE(pos, dim): {C} dimensions as waves",
        size=15,
        weight="bold",
    )
    s.text(
        x0 + dx * (N - 1) / 2, y0 + C * rh + 40, "position pos →", size=12, color=MUTED
    )
    s.add(
        f'<rect x="{x0 + t * dx - 16}" y="{y0 - 8}" width="32" '
        f'height="{C * rh + 8}" fill="{PALETTE["norm"][0]}" '
        f'stroke="{PALETTE["norm"][1]}" stroke-width="1.4"/>'
    )
    for d in range(C):
        cy = y0 + d * rh + rh / 2 - 4
        fn = "sin" if d % 2 == 0 else "cos"
        s.text(20, cy + 5, f"dim {d}: {fn} ω_{{{d // 2}}}·pos", size=12, anchor="start")
        s.line(
            [(x0 - 10, cy), (x0 + dx * (N - 1) + 10, cy)],
            arrow=False,
            color="#cfd8dc",
            width=1,
        )
        fine = torch.linspace(0, N - 1, 120)
        omega = 10000 ** (-(d // 2) * 2 / C)
        wave = torch.sin(fine * omega) if d % 2 == 0 else torch.cos(fine * omega)
        s.line(
            [(x0 + dx * float(p), cy - 11 * float(v)) for p, v in zip(fine, wave)],
            arrow=False,
            color=PALETTE["ffn"][1],
            width=1.4,
        )
        for p in range(N):
            v = float(pe[p, d])
            r = 4.5 if p == t else 3
            s.add(
                f'<circle cx="{x0 + dx * p:.1f}" cy="{cy - 11 * v:.1f}" r="{r}" '
                f'fill="{INK if p == t else PALETTE["ffn"][1]}"/>'
            )
    for p in range(N):
        s.text(
            x0 + dx * p,
            y0 + C * rh + 18,
            str(p),
            size=12,
            weight="bold" if p == t else "normal",
        )
    # token + position = x_t, one cell per dimension, on the rows of the waves
    cols = [
        ("token 'sat'", token, 530),
        (f"PE({t})", pe[t], 620),
        (f"x_{{{t}}}", x, 710),
    ]
    for label, vec, cx in cols:
        s.text(cx + 30, 52, label, size=13, weight="bold")
        for d in range(C):
            _cell(
                s,
                cx,
                y0 + d * rh - 2,
                60,
                rh - 4,
                float(vec[d]) / 1.5,
                f"{float(vec[d]):+.2f}",
                12,
            )
    for op, cx in [("+", 605), ("=", 695)]:
        s.text(cx, y0 + C * rh / 2 + 2, op, size=20, weight="bold")
    s.line(
        [
            (x0 + t * dx + 16, y0 - 14),
            (x0 + t * dx + 16, y0 - 22),
            (650, y0 - 22),
            (650, y0 - 14),
        ],
        color=PALETTE["norm"][1],
    )
    y = y0 + C * rh + 74
    s.text(
        20,
        y,
        "the cat sat: each token's embedding plus its position's column:",
        size=13,
        anchor="start",
        weight="bold",
    )
    s.text(
        20,
        y + 24,
        "x_{0} = emb(the) + PE(0),   x_{1} = emb(cat) + PE(1),   "
        "x_{2} = emb(sat) + PE(2)",
        size=13,
        anchor="start",
    )
    s.text(
        20,
        y + 46,
        "the same token at another position gets another vector, so "
        "word order reaches attention",
        size=13,
        anchor="start",
        color=MUTED,
    )
    return s


@diagram
def attention_matrix():
    s = Svg(
        760,
        560,
        "Scaled dot-product attention in matrix form, with shapes",
        "Read from the bottom up, as Figure 2 of Attention Is All You Need: Q of "
        "shape (T_q, d_k) times K transposed, (d_k, T_k), gives the scores S, "
        "(T_q, T_k); they are divided by the square root of d_k, optionally masked (a "
        "blocked score becomes minus infinity), and the softmax over each row turns "
        "them into the weights A, each row summing to 1, still (T_q, T_k); A times V, "
        "(T_k, d_v), gives the output (T_q, d_v). Right: the same steps as matrices "
        "drawn to shape for T_q = 3, T_k = 4, d_k = 2 and d_v = 3. Batches and heads "
        "add leading dimensions; every step acts on the last two.",
    )
    w, cx = 190, 210
    s.text(cx, 28, "the steps (bottom up)", size=15, weight="bold")
    s.box(30, 490, 90, 34, "Q", "attn", size=15)
    s.box(165, 490, 90, 34, "K", "attn", size=15)
    s.box(380, 490, 90, 34, "V", "attn", size=15)
    steps = [
        (420, "MatMul  Q Kᵀ", "ffn", False),
        (350, "Scale  ÷ √d_{k}", "norm", False),
        (280, "Mask (optional)", "off", True),
        (210, "SoftMax over each row", "out", False),
        (140, "MatMul  A V", "ffn", False),
    ]
    for y, label, kind, dash in steps:
        s.box(cx - w / 2, y, w, 34, label, kind, size=13, dash=dash)
    mono = dict(size=12, anchor="start", mono=True, color=MUTED)
    s.line([(75, 490), (75, 470), (cx - 40, 470), (cx - 40, 454)])
    s.text(12, 462, "(T_q, d_k)", **mono)
    s.line([(cx, 490), (cx, 454)])
    s.text(cx + 6, 484, "(T_k, d_k)", **mono)
    s.text(cx + 6, 468, "Kᵀ: (d_k, T_k)", **mono)
    for y in (420, 350, 280, 210):
        s.arrow(cx, y, cx, y - 36)
        s.text(cx + 8, y - 14, "(T_q, T_k)", **mono)
    s.text(cx + 102, 295, "−∞ where a key", size=12, anchor="start", color=MUTED)
    s.text(cx + 102, 310, "may not be seen", size=12, anchor="start", color=MUTED)
    s.line([(425, 490), (425, 157), (cx + w / 2, 157)])
    s.text(419, 440, "(T_k, d_v)", **dict(mono, anchor="end"))
    s.box(cx - w / 2, 60, w, 34, "output", "data", size=14)
    s.arrow(cx, 140, cx, 94)
    s.text(cx + 8, 124, "(T_q, d_v)", **mono)
    # the matrices drawn to shape
    u = 20
    mx = 480
    s.text(610, 28, "the same, as matrices", size=15, weight="bold")

    def grid(x, y, rows, cols, kind, label, shape):
        fill, stroke = PALETTE[kind]
        for r in range(rows):
            for c in range(cols):
                s.add(
                    f'<rect x="{x + c * u}" y="{y + r * u}" width="{u}" height="{u}" '
                    f'fill="{fill}" stroke="{stroke}" stroke-width="1"/>'
                )
        s.text(x + cols * u / 2, y - 8, label, size=13, weight="bold")
        s.text(
            x + cols * u / 2, y + rows * u + 16, shape, size=12, mono=True, color=MUTED
        )
        return x + cols * u

    y = 90
    e = grid(mx, y + 10, 3, 2, "attn", "Q", "(3, 2)")
    s.text(e + 14, y + 45, "×", size=16)
    e = grid(e + 28, y, 2, 4, "attn", "Kᵀ", "(2, 4)")
    s.text(e + 14, y + 45, "=", size=16)
    grid(e + 28, y + 10, 3, 4, "ffn", "S", "(3, 4)")
    y = 250
    s.text(mx, y + 35, "A = softmax(S / √d_{k})", size=13, anchor="start")
    s.text(mx, y + 55, "row by row: each row", size=12, anchor="start", color=MUTED)
    s.text(mx, y + 71, "sums to 1", size=12, anchor="start", color=MUTED)
    grid(mx + 170, y + 10, 3, 4, "out", "A", "(3, 4)")
    y = 390
    e = grid(mx, y + 20, 3, 4, "out", "A", "(3, 4)")
    s.text(e + 14, y + 60, "×", size=16)
    e = grid(e + 28, y + 10, 4, 3, "attn", "V", "(4, 3)")
    s.text(e + 14, y + 60, "=", size=16)
    grid(e + 28, y + 20, 3, 3, "data", "output", "(3, 3)")
    s.text(
        20,
        548,
        "Batches and heads add leading dimensions (B, H, …); every step "
        "acts on the last two.",
        size=12,
        anchor="start",
        color=MUTED,
    )
    return s


@diagram
def batched_attention():
    import torch

    from transformer_lib.attention import scaled_dot_product_attention

    B, T_q, T_k, d_k, d_v = 2, 3, 4, 2, 3
    q, k = torch.zeros(B, T_q, d_k), torch.zeros(B, T_k, d_k)
    v = torch.zeros(B, T_k, d_v)
    out, weights = scaled_dot_product_attention(q, k, v)
    scores = q @ k.transpose(-2, -1)
    shape = lambda t: "(" + ", ".join(str(d) for d in t.shape) + ")"  # noqa: E731
    s = Svg(
        460,
        630,
        "Attention on a batch, with shapes",
        f"Three steps, each tensor drawn as B = {B} stacked sheets, one per sentence. "
        f"1: Q, (B, T_q, d_k) = {shape(q)}, times K transposed on its last two axes, "
        f"(B, d_k, T_k), gives the scores S, (B, T_q, T_k) = {shape(scores)}. "
        "2: the softmax of S divided by the square root of d_k, over the last axis, "
        f"gives the weights A, still (B, T_q, T_k) = {shape(weights)}, each row "
        f"summing to 1. 3: A times V, (B, T_k, d_v) = {shape(v)}, gives the output, "
        f"(B, T_q, d_v) = {shape(out)}. The batch axis rides along: sheet b of the "
        "output uses only sheet b of Q, K and V. The shapes come from running "
        "scaled_dot_product_attention.",
    )
    u, lift = 18, 8  # cell size; offset of the sheet behind

    def stack(cx, top, t, kind, name, sym):
        """A (B, rows, cols) tensor as B sheets centred on cx, its name above, its
        shape below in letters and in numbers; returns its right edge."""
        rows, cols = t.shape[-2:]
        fill, stroke = PALETTE[kind]
        x0 = cx - (cols * u + lift) / 2
        for b in reversed(range(B)):
            x, y = x0 + b * lift, top + (B - 1 - b) * lift
            for r in range(rows):
                for c in range(cols):
                    s.add(
                        f'<rect x="{x + c * u:.1f}" y="{y + r * u:.1f}" width="{u}" '
                        f'height="{u}" fill="{fill}" stroke="{stroke}" '
                        'stroke-width="1"/>'
                    )
        s.text(cx, top - 8, name, size=16, weight="bold")
        s.text(cx, top + 98, sym, size=15, mono=True)
        s.text(cx, top + 117, "= " + shape(t), size=14, mono=True, color=MUTED)
        return x0 + cols * u + (B - 1) * lift

    def step(y, label):
        s.text(14, y, label, size=16, anchor="start", weight="bold")

    xs = (72, 224, 382)
    step(26, "1 · scores  S = Q Kᵀ")
    top = 62
    stack(xs[0], top, q, "attn", "Q", "(B, T_q, d_k)")
    stack(xs[1], top, k.transpose(-2, -1), "attn", "Kᵀ", "(B, d_k, T_k)")
    stack(xs[2], top, scores, "ffn", "S", "(B, T_q, T_k)")
    s.text(148, top + 36, "@", size=18)
    s.text(303, top + 36, "=", size=18)
    s.text(
        14,
        208,
        "Kᵀ = K.transpose(-2, -1): the last two axes swap, B stays",
        size=14,
        anchor="start",
        color=MUTED,
    )
    step(248, "2 · weights  A = softmax(S / √d_{k})")
    top = 284
    stack(xs[0], top, scores, "ffn", "S", "(B, T_q, T_k)")
    right = stack(xs[2], top, weights, "out", "A", "(B, T_q, T_k)")
    s.arrow(122, top + 30, 324, top + 30)
    s.text(223, top + 22, "softmax over", size=14, color=MUTED)
    s.text(223, top + 48, "the last axis, T_{k}", size=14, color=MUTED)
    for r in range(T_q):
        y = top + (B - 1) * lift + r * u + 13
        s.text(right + 5, y, "Σ=1", size=13, anchor="start", color=MUTED)
    step(440, "3 · output  A V")
    top = 476
    stack(xs[0], top, weights, "out", "A", "(B, T_q, T_k)")
    stack(xs[1], top, v, "attn", "V", "(B, T_k, d_v)")
    stack(xs[2], top, out, "data", "output", "(B, T_q, d_v)")
    s.text(148, top + 36, "@", size=18)
    s.text(303, top + 36, "=", size=18)
    s.text(
        14,
        618,
        f"B = {B} sheets: sheet b uses only sheet b of Q, K and V",
        size=14,
        anchor="start",
        color=MUTED,
    )
    return s


BEAM_TREE_ZH = [
    (r"beam search, beam (\d+): “(.*?)”", r"束搜索，束宽 \1：“\2”"),
    (r">from (\S+)<", r">来自 \1<"),
    (r">greedy<", ">贪心解码<"),
    (
        r"finished \(&lt;eos&gt;\): log-probability / \(\(5 \+ length\) / 6\)\^(\S+); "
        r"best: (“.*?”) (\S+)<",
        r"已结束（&lt;eos&gt;）：对数概率 / ((5 + 长度) / 6)^\1；最佳：\2 \3<",
    ),
    (
        r"greedy: (“.*?”), summed log-probability (\S+) \(with &lt;eos&gt;\)",
        r"贪心解码：\1，对数概率之和 \2（含 &lt;eos&gt;）",
    ),
    (
        r">Beam search \(beam (\d+)\) beside greedy decoding<",
        r">束搜索（束宽 \1）与贪心解码<",
    ),
    (
        r">Translating &#x27;(.*?)&#x27; with the translator (\S+)\. Each column is a "
        r"step; each node is a kept hypothesis ending in the token shown, with its "
        r"summed log-probability\. Finished hypotheses \(&lt;eos&gt;\) are scored with "
        r"the length penalty \(alpha (\S+)\); the best, &#x27;(.*?)&#x27;, scores "
        r"(\S+)\. Greedy decoding gives &#x27;(.*?)&#x27; with log-probability "
        r"(\S+)\.<",
        r">用翻译器 \2 翻译“\1”。每一列是一步；每个节点是一个"
        r"保留下来的假设，以图中的词元结尾，并标出它的对数概率之和。"
        r"已结束的假设（&lt;eos&gt;）按长度惩罚（alpha \3）打分；"
        r"最佳的“\4”得分 \5。贪心解码给出“\6”，对数概率 \7。<",
    ),
]


def beam_tree_zh() -> str:
    """The Chinese beam tree from book/images/beam_tree.svg; stops on English left."""
    text = (IMAGES / "beam_tree.svg").read_text(encoding="utf-8")
    for pattern, chinese in BEAM_TREE_ZH:
        text, n = re.subn(pattern, chinese, text)
        if n == 0:
            sys.exit(f"beam_tree.svg: no text matches {pattern!r}; update BEAM_TREE_ZH")
    return text


def main(words: list[str], lang: str = "en") -> None:
    images = IMAGES
    if lang == "zh":
        svg.LABELS.update(yaml.safe_load(LABELS_ZH.read_text(encoding="utf-8")))
        images = ROOT / "zh" / "book" / "images"
    images.mkdir(parents=True, exist_ok=True)
    for name, fn in DIAGRAMS.items():
        if words and not any(w in name for w in words):
            continue
        svg.MISSING.clear()
        drawing = str(fn())
        if svg.MISSING:
            sys.exit(
                f"{name}: no Chinese in {LABELS_ZH.relative_to(ROOT)} for "
                + "; ".join(repr(m) for m in dict.fromkeys(svg.MISSING))
            )
        (images / f"{name}.svg").write_text(drawing, encoding="utf-8")
        print(f"wrote {(images / name).relative_to(ROOT)}.svg")
    if lang == "zh" and (not words or any(w in "beam_tree" for w in words)):
        (images / "beam_tree.svg").write_text(beam_tree_zh(), encoding="utf-8")
        print("wrote zh/book/images/beam_tree.svg")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("words", nargs="*", help="only diagrams whose name has one")
    parser.add_argument("--lang", choices=["en", "zh"], default="en")
    args = parser.parse_args()
    main(args.words, args.lang)
