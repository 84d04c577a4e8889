"""Export the attention weights of the course's trained models to small JSON files that
the book's attention explorer (_static/attention_explorer.js) draws, offline.

Why: every heatmap of the book is a static picture of one layer and one head. The
explorer lets a reader pick a sentence, a layer, a head and a token; it needs the
weights themselves, from the stored runs, small enough that a page stays light.

    python tools/export_attention.py                      # both, from the full runs
    python tools/export_attention.py --only translator \\
        --translator notebooks/runs/translator-quick.pt   # notebook 09's quick model

- translator.json: notebook 09's translator (its checkpoint, read with the library's
  checked loader, weights_only=True) translates a few English sentences greedily
  (`greedy_decode`); for each: the tokens, the translation, and per layer and head the
  cross-attention (target x source) and both self-attentions. A target row is the
  decoder position that writes that token (notebook 11's labels): its self-attention
  keys are the decoder's inputs, <bos> then the tokens written before it.
- gpt.json: the Part IV speedrun's language model (`benchmarks/part4_speedrun.py
  --out notebooks/runs/lm/speedrun.pt`, read by `load_lm`), a few seeded samples with
  their settings, and one line of validation text (never trained on) with every
  layer's and head's causal self-attention; the run's training time and validation
  loss come from the run's own record (the `--json` the speedrun wrote).

Weights are rounded to 3 decimals. Each file also writes its data into a tiny HTML
page (same name, .html) that hands it to the explorer by postMessage, because a book
opened as files (file://) may not fetch JSON; over http the explorer fetches the JSON.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from transformer_lib.decoding import encode_sources, greedy_decode  # noqa: E402
from transformer_lib.mt_train import load_checked_translator  # noqa: E402

OUT = ROOT / "_static" / "explorer"
TRANSLATOR = "notebooks/runs/translator.pt"
GPT = "notebooks/runs/lm/speedrun.pt"
SENTENCES = [  # the first is notebook 11's per-head figure (and the landing page's)
    "I bought a new car last week.",
    "Where is the station?",
    "My brother is taller than me.",
    "She reads a book every night.",
    "It will rain tomorrow.",
    "Do you like Chinese food?",
]
# A2's line of validation text (32 characters), and the samples' settings
VAL_LINE = "Graybeard, thy love doth freeze."
PROMPTS = ["ROMEO:", "JULIET:", "KING RICHARD III:"]
SAMPLING = {"max_new_tokens": 300, "temperature": 0.8, "top_k": 200, "top_p": None}
DIGITS = 3


def rounded(t: torch.Tensor) -> list:
    """A tensor of weights -> nested lists of floats with DIGITS decimals."""
    return t.double().round(decimals=DIGITS).tolist()


class AttentionRecorder:
    """Collects the weights of the given attention modules on their next calls: each
    is asked for its weights (need_weights=True) by a pre-hook, kept by a hook."""

    def __init__(self, modules: list[torch.nn.Module]):
        self.weights: list[torch.Tensor | None] = [None] * len(modules)
        self.handles = []
        for i, m in enumerate(modules):
            self.handles.append(
                m.register_forward_pre_hook(self._ask, with_kwargs=True)
            )
            self.handles.append(m.register_forward_hook(self._keeper(i)))

    @staticmethod
    def _ask(module, args, kwargs):
        return args, {**kwargs, "need_weights": True}

    def _keeper(self, i: int):
        def keep(module, args, output):
            self.weights[i] = output[1][0].detach().cpu()  # (H, T_q, T_k) of row 0

        return keep

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def token(src_tok, i: int) -> str:
    """A source token as a label: notebook 11's (stripped); a lone space shows as ␣."""
    return src_tok.decode([i]).strip() or "␣"


@torch.no_grad()
def translator_attention(model, src_tok, tgt_tok, sentence: str) -> dict:
    """One sentence: greedy translation, tokens, and each layer's (H, T, S) cross- and
    self-attention weights."""
    src_ids = encode_sources([sentence], src_tok, model.config.context_len)[0]
    src = torch.tensor([src_ids])  # (1, S)
    N = model.config.context_len  # <bos> + output must fit, to read every row again
    out = greedy_decode(model, src, tgt_tok.bos_id, tgt_tok.eos_id, max_len=N - 1)[0]
    enc = [layer.self_attn for layer in model.encoder.layers]
    dec = [layer.self_attn for layer in model.decoder.layers]
    cross = [layer.cross_attn for layer in model.decoder.layers]
    rec = AttentionRecorder(enc + dec + cross)
    try:  # the decoder once more over the whole output: every row's weights
        memory, src_mask = model.encode(src)
        tgt_in = torch.tensor([[tgt_tok.bos_id] + out])  # (1, T)
        model.decode(tgt_in, memory, src_mask)
    finally:
        rec.remove()
    L = len(enc)
    w = rec.weights
    return {
        "source": sentence,
        "translation": tgt_tok.decode(out),
        "src_tokens": [token(src_tok, i) for i in src_ids[:-1]] + ["<eos>"],
        "tgt_tokens": [tgt_tok.decode([i]) for i in out] + ["<eos>"],  # row t writes
        "cross": [rounded(x) for x in w[2 * L :]],  # L x (H, T, S)
        "enc_self": [rounded(x) for x in w[:L]],  # L x (H, S, S)
        "dec_self": [rounded(x) for x in w[L : 2 * L]],  # L x (H, T, T)
    }


def export_translator(checkpoint: str, command: str) -> dict:
    """translator.json's content, from notebook 09's checkpoint."""
    model, src_tok, tgt_tok, payload = load_checked_translator(checkpoint, "cpu")
    return {
        "command": command,
        "checkpoint": checkpoint,
        "config": model.config.to_dict(),
        "params": model.num_params(),
        "weights": "the best epoch's (load_checked_translator's default)",
        "decoding": "greedy",
        "epochs": len(payload["history"]),
        "about": "a target row t is the decoder position that writes tgt_tokens[t]; "
        "its self-attention keys are the decoder's inputs: <bos>, then "
        "tgt_tokens[:t]",
        "sentences": [
            translator_attention(model, src_tok, tgt_tok, s) for s in SENTENCES
        ],
    }


@torch.no_grad()
def export_gpt(checkpoint: str, record: str, command: str) -> dict:
    """gpt.json's content, from the speedrun's checkpoint and its JSON record."""
    from transformer_lib.lm_loop import load_lm_data
    from transformer_lib.lm_train import generate_text, load_lm

    run = json.loads(Path(record).read_text())
    model, tok = load_lm(checkpoint, "cpu")
    if VAL_LINE not in load_lm_data("char").val_text:
        raise SystemExit(f"{VAL_LINE!r} is not in the validation text")
    samples = []
    for seed, prompt in enumerate(PROMPTS):
        text = generate_text(checkpoint, prompt, seed=seed, device="cpu", **SAMPLING)
        samples.append(
            {"prompt": prompt, "text": text, "seed": seed, "settings": SAMPLING}
        )
    ids = torch.tensor([tok.encode(VAL_LINE)])  # (1, T)
    model(ids, need_weights=True)
    return {
        "command": command,
        "checkpoint": checkpoint,
        "train_time_s": round(run["train_time_s"], 1),
        "val_loss": round(run["val_loss"], 4),
        "trained_with": run["command"],
        "machine": run["machine"],
        "steps": run["steps"],
        "config": model.config.to_dict(),
        "params": model.num_params(),
        "samples": samples,
        "lines": [
            {
                "text": VAL_LINE,
                "tokens": list(VAL_LINE),
                "self": [rounded(w[0]) for w in model.last_weights],  # L x (H, T, T)
            }
        ],
    }


PAGE = """<!DOCTYPE html>
<meta charset="utf-8"><title>{name}: data of the attention explorer</title>
<script>
parent.postMessage({{"attentionExplorer": "{name}", "data": {data}}}, "*");
</script>
"""


def write(data: dict, name: str, out: Path) -> list[Path]:
    """name.json (compact) and name.html (the same data for file:// pages)."""
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    paths = [out / f"{name}.json", out / f"{name}.html"]
    paths[0].write_text(text + "\n", encoding="utf-8")
    safe = text.replace("</", "<\\/")  # no "</script>" inside the script
    paths[1].write_text(PAGE.format(name=name, data=safe), encoding="utf-8")
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("translator", "gpt"), help="default: both")
    ap.add_argument("--translator", default=TRANSLATOR, help="notebook 09's checkpoint")
    ap.add_argument("--gpt", default=GPT, help="the speedrun's checkpoint (--out)")
    ap.add_argument(
        "--gpt-record",
        default=None,
        help="the speedrun's --json (default: .pt -> .json)",
    )
    ap.add_argument("--out", type=Path, default=OUT, help="default: _static/explorer")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    tool = "python tools/export_attention.py"
    out = [] if a.out == OUT else ["--out", str(a.out)]
    if a.only in (None, "translator"):
        cmd = shlex.join(
            [*tool.split(), "--only", "translator", "--translator", a.translator, *out]
        )
        for p in write(export_translator(a.translator, cmd), "translator", a.out):
            print(f"wrote {p} ({p.stat().st_size:,} bytes)")
    if a.only in (None, "gpt"):
        record = a.gpt_record or str(Path(a.gpt).with_suffix(".json"))
        words = ["--only", "gpt", "--gpt", a.gpt, "--gpt-record", record, *out]
        cmd = shlex.join([*tool.split(), *words])
        for p in write(export_gpt(a.gpt, record, cmd), "gpt", a.out):
            print(f"wrote {p} ({p.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
