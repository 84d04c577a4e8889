"""Draw a beam-search tree from a real run of a trained translator (notebook 10's
figure).

    python tools/beam_tree.py notebooks/runs/translator.pt   # after the full training
    python tools/beam_tree.py CKPT --sentence "Where is the station?" --beam 3

It picks the first of a few short sentences (or the one given) on which beam search
finds a more probable translation than greedy decoding, traces the library's beam
search step by step on it (finished hypotheses ranked by their summed log-probability
divided by the GNMT length penalty), checks that the traced winner is what
`transformer_lib.decoding.beam_search` returns, and draws the kept hypotheses of each
step beside the greedy path, every node with one kind of score (the summed
log-probability of its prefix), into book/images/beam_tree.svg; the figure's
description (with the new numbers) becomes the image's alt text in notebook 10.
"""

import argparse
import html
import json
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from svg import MUTED, PALETTE, Svg  # noqa: E402

from transformer_lib.cli_args import USER_ERRORS  # noqa: E402
from transformer_lib.decoding import (  # noqa: E402
    beam_search,
    encode_sources,
    greedy_decode,
    length_penalty_gnmt,
)
from transformer_lib.mt_train import load_checked_translator  # noqa: E402


@torch.no_grad()
def trace_beam(model, src, bos_id, eos_id, K=3, alpha=0.6, max_len=12):
    """Beam search on one source (1, S), recording every step's kept and finished
    hypotheses.

    Returns (steps, finished): steps[t] = [(parent_slot, token, cumulative logp)] for
    the live beams after step t; finished = [(step, parent_slot, normalised score,
    tokens, summed logp with <eos>)].
    """
    memory, src_mask = model.encode(src)
    memory, src_mask = memory.repeat_interleave(K, 0), src_mask.repeat_interleave(K, 0)
    ys = torch.full((K, 1), bos_id, dtype=torch.long)
    scores = torch.full((K,), float("-inf"))
    scores[0] = 0.0
    steps, finished = [], []
    for t in range(max_len):
        logp = torch.log_softmax(model.decode(ys, memory, src_mask)[:, -1].float(), -1)
        V = logp.shape[-1]
        top_s, top_i = (scores[:, None] + logp).view(-1).topk(2 * K)
        kept, rows, toks = [], [], []
        for s, idx in zip(top_s.tolist(), top_i.tolist()):
            beam, tok = divmod(idx, V)
            if s == float("-inf") or len(kept) == K:
                break
            if tok == eos_id:
                hyp = ys[beam, 1:].tolist()
                norm = s / length_penalty_gnmt(len(hyp) + 1, alpha)
                finished.append((t, beam, norm, hyp, s))
            else:
                kept.append((beam, tok, s))
                rows.append(beam)
                toks.append(tok)
        steps.append(kept)
        if len(finished) >= K:
            break
        while len(rows) < K:  # fewer than K live beams: pad with dead ones
            rows.append(0)
            toks.append(eos_id)
            kept.append(None)
        ys = torch.cat([ys[rows], torch.tensor(toks)[:, None]], dim=1)
        scores = torch.tensor([k[2] if k else float("-inf") for k in kept])
        steps[-1] = [k for k in kept if k]
    return steps, finished


def draw(sentence, tgt_tok, steps, finished, greedy, greedy_logp, K, alpha, source=""):
    """The SVG: one column per step, each kept or finished hypothesis with its summed
    log-probability."""
    n = len(steps)
    col, row = 118, 58
    # the rightmost column: of the beams, the finished ones, greedy's
    last = max([n - 1, len(greedy_logp_steps) - 1] + [f[0] for f in finished])
    # no wider than its nodes: the page scales it down less, its text stays legible
    width = max(760, 110 + last * col + 96 + 24)
    per_step = [sum(f[0] == t for f in finished) for t in range(n + 1)]
    extra = max(per_step) if per_step else 1
    height = 120 + (K + extra - 1) * row + 170
    best = max(finished, key=lambda f: f[2])
    tok = lambda i: tgt_tok.decode([i], skip_special=False)  # noqa: E731
    text = lambda ids: tgt_tok.decode(ids, skip_special=True) or "(empty)"  # noqa: E731
    s = Svg(
        width,
        height,
        f"Beam search (beam {K}) beside greedy decoding",
        f"Translating '{sentence}' with the translator {source}. Each column "
        "is a step; each "
        f"node is a kept hypothesis ending in the token shown, with its summed log-"
        f"probability. Finished hypotheses (<eos>) are scored with the length penalty "
        f"(alpha {alpha}); the best, '{text(best[3])}', scores {best[2]:.2f}. "
        f"Greedy decoding gives '{text(greedy)}' with log-probability "
        f"{greedy_logp:.2f}.",
    )
    s.text(
        20,
        26,
        f"beam search, beam {K}: “{sentence}”",
        size=15,
        anchor="start",
        weight="bold",
    )
    s.text(width - 10, 26, f"from {source}", size=12, anchor="end", color=MUTED)
    y0 = 50
    s.box(20, y0 + (K - 1) * row / 2, 70, 36, "<bos>", "embed", size=13)
    pos = {(-1, 0): (90, y0 + (K - 1) * row / 2 + 18)}
    on_best = set()
    # walk back the winner's path: finished at step best[0] from slot best[1]
    slot = best[1]
    for t in range(best[0] - 1, -1, -1):
        on_best.add((t, slot))
        slot = steps[t][slot][0]
    for t, kept in enumerate(steps):
        x = 110 + t * col
        for j, (parent, token, score) in enumerate(kept):
            y = y0 + j * row
            kind = "hot" if (t, j) in on_best else "data"
            s.box(x, y, 96, 36, f"{tok(token)}  {score:.2f}", kind, size=13)
            px, py = pos[(t - 1, parent if t else 0)]
            s.line([(px, py), (x, y + 18)], color=MUTED)
            pos[(t, j)] = (x + 96, y + 18)
    seen = [0] * (n + 1)
    for done in finished:
        t, parent, _, _, summed = done
        x = 110 + t * col
        y = y0 + (K + seen[t]) * row
        seen[t] += 1
        kind = "out" if done == best else "off"
        px, py = pos[(t - 1, parent)] if t else pos[(-1, 0)]
        s.box(x, y, 96, 36, f"<eos> {summed:.2f}", kind, size=12, dash=kind == "off")
        s.line([(px, py), (x, y + 18)], color=MUTED, dash=True)
    yb = y0 + (K + extra - 1) * row + 56
    lp = length_penalty_gnmt(len(best[3]) + 1, alpha)
    s.text(
        20,
        yb,
        f"finished (<eos>): log-probability / ((5 + length) / 6)^{alpha}; "
        f"best: “{text(best[3])}” {best[2]:.2f}",
        size=13,
        anchor="start",
        color=PALETTE["out"][1],
    )
    # the ranking's arithmetic for the winner: numbers only, the same in Chinese
    s.text(
        20,
        yb + 20,
        f"“{text(best[3])}”: {best[4]:.2f} / {lp:.3f} = {best[2]:.2f}",
        size=13,
        anchor="start",
        color=PALETTE["out"][1],
    )
    yg = yb + 50
    s.text(20, yg + 22, "greedy", size=14, anchor="start", weight="bold")
    total = 0.0
    for t, (token, lp) in enumerate(greedy_logp_steps):
        total += lp
        x = 110 + t * col
        s.box(x, yg, 96, 36, f"{tok(token)}  {total:.2f}", "attn", size=13)
        if t:
            s.arrow(x - col + 96, yg + 18, x, yg + 18)
    s.text(
        20,
        yg + 62,
        f"greedy: “{text(greedy)}”, summed log-probability "
        f"{greedy_logp:.2f} (with <eos>)",
        size=13,
        anchor="start",
        color=MUTED,
    )
    return s


greedy_logp_steps: list = []


@torch.no_grad()
def greedy_with_logp(model, src, bos_id, eos_id, max_len=12):
    """Greedy decoding of one source, with each chosen token's log-probability."""
    memory, src_mask = model.encode(src)
    ys, out = torch.tensor([[bos_id]]), []
    for _ in range(max_len):
        logp = torch.log_softmax(model.decode(ys, memory, src_mask)[:, -1].float(), -1)[
            0
        ]
        nxt = int(logp.argmax())
        out.append((nxt, float(logp[nxt])))
        ys = torch.cat([ys, torch.tensor([[nxt]])], dim=1)
        if nxt == eos_id:
            break
    return out


# Short sentences (so that the tree stays readable), notebook 10's examples first.
CANDIDATES = [
    "Where is the station?",
    "I don't like cats.",
    "He is my brother.",
    "What time is it?",
    "I want to go home.",
    "This book is mine.",
    "We are hungry.",
    "Open the door.",
]


def beam_tree(
    checkpoint,
    sentences=CANDIDATES,
    K=3,
    alpha=0.6,
    out=ROOT / "book" / "images" / "beam_tree.svg",
):
    """Draw the first sentence on which beam search finds a more probable translation
    than greedy decoding, after checking the trace against the library; returns the
    output path."""
    # one line for a damaged or edited file
    model, src_tok, tgt_tok, _ = load_checked_translator(checkpoint, device="cpu")
    model.eval()
    bos, eos = tgt_tok.bos_id, tgt_tok.eos_id
    for sentence in sentences:
        src = torch.tensor(
            encode_sources([sentence], src_tok, model.config.context_len)
        )
        steps, finished = trace_beam(model, src, bos, eos, K=K, alpha=alpha)
        best = max(finished, key=lambda f: f[2])
        lib = beam_search(
            model, src, bos, eos, beam_size=K, length_penalty=alpha, max_len=12
        )[0]
        assert best[3] == lib, f"traced beam {best[3]} differs from the library's {lib}"
        g = greedy_with_logp(model, src, bos, eos)
        greedy = [t for t, _ in g if t != eos]
        assert greedy == greedy_decode(model, src, bos, eos, max_len=12)[0]
        total = sum(lp for _, lp in g)
        if best[3] != greedy and best[4] > total:
            break
        print(f"{sentence!r}: beam search finds nothing more probable than greedy")
    else:
        sys.exit(
            "beam search beats greedy decoding on none of the sentences; "
            'give others with --sentence "..." --sentence "..."'
        )
    greedy_logp_steps[:] = g
    svg = draw(
        sentence,
        tgt_tok,
        steps,
        finished,
        greedy,
        total,
        K,
        alpha,
        Path(checkpoint).name,
    )
    Path(out).write_text(str(svg), encoding="utf-8")
    return Path(out)


def update_alt(notebook: Path, image: str, alt: str) -> bool:
    """Set the alt text of `<img src=".../image" ...>` in the notebook's markdown
    cells."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    pattern = re.compile(r'(<img src="[^"]*' + re.escape(image) + r'" alt=")[^"]*(")')
    found = False
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and pattern.search(source):
            escaped = html.escape(alt, quote=True)
            source = pattern.sub(lambda m: m[1] + escaped + m[2], source)
            cell["source"] = source.splitlines(keepends=True)
            found = True
    if found:
        text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
        notebook.write_text(text, encoding="utf-8")
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "checkpoint", help="a translator checkpoint, e.g. notebooks/runs/translator.pt"
    )
    p.add_argument(
        "--sentence",
        action="append",
        help="a sentence to try (repeatable); default: a few short ones, in order",
    )
    p.add_argument("--beam", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "book" / "images" / "beam_tree.svg"))
    p.add_argument(
        "--notebook",
        default=str(ROOT / "notebooks" / "10_decoding.ipynb"),
        help="whose <img> of the tree gets the new description as alt text",
    )
    a = p.parse_args()
    try:
        out = beam_tree(a.checkpoint, a.sentence or CANDIDATES, a.beam, out=a.out)
    except USER_ERRORS as e:  # a refused or missing checkpoint: one line
        sys.exit(f"beam_tree: {e}")
    print("wrote", out)
    desc = re.search(r"<desc[^>]*>(.*?)</desc>", out.read_text(encoding="utf-8"), re.S)
    if update_alt(Path(a.notebook), out.name, html.unescape(desc[1])):
        print("updated the alt text in", a.notebook)


if __name__ == "__main__":
    main()
