"""tools/export_attention.py, which writes the data of the book's attention explorer:
shapes, rows that sum to 1, causal self-attention, the car sentence; and the committed
files _static/explorer/*.json: their keys (another page reads them too), their size,
the same data in their .html twins, and made by the tool from the checkpoint they name
(checked where that checkpoint is on disk). The browser side: test_book_browser.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import export_attention as ea  # noqa: E402

EXPLORER = ROOT / "_static" / "explorer"
QUICK = ROOT / "notebooks" / "runs" / "translator-quick.pt"
MAX_BYTES = 300_000  # a page's data, well under what a page weighs already
TRANSLATOR_KEYS = {"command", "checkpoint", "config", "params", "sentences"}
SENTENCE_KEYS = {
    "source",
    "translation",
    "src_tokens",
    "tgt_tokens",
    "cross",
    "enc_self",
    "dec_self",
}
GPT_KEYS = {"command", "checkpoint", "train_time_s", "val_loss", "config", "params"}
GPT_KEYS |= {"samples", "lines"}


PAIRS = [("I bought a new car last week.", "我上周买了一辆新车。")] * 4 + [
    ("Where is the station?", "车站在哪里？")
] * 4


@pytest.fixture(scope="module")
def translator(tmp_path_factory) -> str:
    """Notebook 09's quick checkpoint where a quick run made it, else a tiny translator
    trained here in seconds and saved as train-mt saves one (tests/test_mt_cli.py)."""
    if QUICK.is_file():
        return str(QUICK)
    from transformer_lib.mt_train import TrainConfig, fit
    from transformer_lib.seq2seq import Seq2SeqConfig, Transformer
    from transformer_lib.tokenization import SPECIAL_TOKENS, BPETokenizer, CharTokenizer
    from transformer_lib.translation_data import encode_pair

    path = tmp_path_factory.mktemp("mt") / "tiny.pt"
    src_tok = BPETokenizer(specials=SPECIAL_TOKENS)
    src_tok.train(" ".join(en for en, _ in PAIRS), 280)
    tgt_tok = CharTokenizer([zh for _, zh in PAIRS], specials=SPECIAL_TOKENS)
    config = Seq2SeqConfig.tiny(src_tok.vocab_size, tgt_tok.vocab_size, context_len=24)
    data = [encode_pair(en, zh, src_tok, tgt_tok, 24) for en, zh in PAIRS]
    cfg = TrainConfig(epochs=4, max_minutes=None, warmup_steps=2, max_tokens=400)
    torch.manual_seed(0)
    tokenizers = {"src": src_tok.to_dict(), "tgt": tgt_tok.to_dict()}
    fit(
        Transformer(config),
        data,
        data,
        cfg,
        path,
        tokenizers,
        progress=False,
        log=lambda *_: None,
        extra={"src_chars": "".join(sorted(set("".join(en for en, _ in PAIRS))))},
    )
    return str(path)


def shape(x) -> tuple:
    """The shape of nested lists."""
    return (len(x),) + shape(x[0]) if isinstance(x, list) else ()


def check_translator(data: dict) -> None:
    """Schema, shapes, rows summing to 1 within rounding, causal decoder rows."""
    assert TRANSLATOR_KEYS <= data.keys()
    L, H = data["config"]["n_layers"], data["config"]["n_heads"]
    assert [s["source"] for s in data["sentences"]][0] == (
        "I bought a new car last week."
    )
    for s in data["sentences"]:
        assert SENTENCE_KEYS <= s.keys()
        T, S = len(s["tgt_tokens"]), len(s["src_tokens"])
        assert s["tgt_tokens"][-1] == s["src_tokens"][-1] == "<eos>"
        for kind, want in (
            ("cross", (T, S)),
            ("enc_self", (S, S)),
            ("dec_self", (T, T)),
        ):
            w = torch.tensor(s[kind], dtype=torch.float64)
            assert shape(s[kind]) == (L, H, *want), kind
            sums = w.sum(-1)  # each of up to `want[1]` weights is off by <= 0.0005
            assert (sums - 1).abs().max() <= 0.0005 * want[1] + 1e-9, kind
            assert w.min() >= 0
        upper = torch.tensor(s["dec_self"]).triu(1)  # a row never sees a later one
        assert upper.abs().max() == 0


def test_export_of_a_trained_translator(translator, tmp_path):
    data = ea.export_translator(translator, "python tools/export_attention.py ...")
    check_translator(data)
    assert data["checkpoint"] == translator
    paths = ea.write(data, "translator", tmp_path)
    assert json.loads(paths[0].read_text()) == data
    assert from_page(paths[1], "translator") == data


def test_the_recorder_leaves_the_model_as_it_was(translator):
    """The hooks are removed: the model's own need_weights=False path runs again."""
    from transformer_lib.mt_train import load_checked_translator

    model, src_tok, tgt_tok, _ = load_checked_translator(translator, "cpu")
    ea.translator_attention(model, src_tok, tgt_tok, "Where is the station?")
    attention = [m for m in model.modules() if type(m).__name__ == "MultiHeadAttention"]
    assert attention and not any(
        m._forward_hooks or m._forward_pre_hooks for m in attention
    )


def from_page(path: Path, name: str) -> dict:
    """The data an explorer page posts (NAME.html), parsed back."""
    text = path.read_text(encoding="utf-8")
    match = re.search(r'"attentionExplorer": "(\w+)", "data": (.*)\}, "\*"\);', text)
    assert match and match[1] == name
    return json.loads(match[2].replace("<\\/", "</"))


@pytest.mark.parametrize("name", ["translator", "gpt"])
def test_committed_files_are_the_tools_and_small(name):
    path = EXPLORER / f"{name}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["command"].startswith("python tools/export_attention.py --only " + name)
    for suffix in (".json", ".html"):
        size = (EXPLORER / f"{name}{suffix}").stat().st_size
        assert size < MAX_BYTES, f"{name}{suffix}: {size:,} bytes"
    assert from_page(EXPLORER / f"{name}.html", name) == data
    if name == "translator":
        check_translator(data)
        return
    assert GPT_KEYS <= data.keys()
    L, H = data["config"]["n_layers"], data["config"]["n_heads"]
    for s in data["samples"]:
        assert s["text"].startswith(s["prompt"]) and len(s["text"]) > len(s["prompt"])
        assert {"seed", "settings"} <= s.keys()
    for line in data["lines"]:
        T = len(line["tokens"])
        assert "".join(line["tokens"]) == line["text"]
        assert shape(line["self"]) == (L, H, T, T)
        w = torch.tensor(line["self"], dtype=torch.float64)
        assert (w.sum(-1) - 1).abs().max() <= 0.0005 * T
        assert w.triu(1).abs().max() == 0  # causal


def test_committed_translator_is_what_its_checkpoint_gives():
    """Re-exported from the checkpoint it names (where that file is on disk), the
    committed translator.json comes back: same tokens, weights within rounding."""
    committed = json.loads((EXPLORER / "translator.json").read_text(encoding="utf-8"))
    checkpoint = ROOT / committed["checkpoint"]
    if not checkpoint.is_file():
        pytest.skip(f"{committed['checkpoint']} is not here (notebook 09 makes it)")
    again = ea.export_translator(committed["checkpoint"], committed["command"])
    for old, new in zip(committed["sentences"], again["sentences"], strict=True):
        for key in ("translation", "src_tokens", "tgt_tokens"):
            assert old[key] == new[key]
        for key in ("cross", "enc_self", "dec_self"):
            diff = torch.tensor(old[key]) - torch.tensor(new[key])
            assert diff.abs().max() <= 0.0011


def test_committed_gpt_is_what_its_checkpoint_gives():
    """The same for gpt.json, where the speedrun's checkpoint and record are on disk."""
    committed = json.loads((EXPLORER / "gpt.json").read_text(encoding="utf-8"))
    record = re.search(r"--gpt-record (\S+)", committed["command"])[1]
    if not (ROOT / committed["checkpoint"]).is_file() or not (ROOT / record).is_file():
        pytest.skip(f"{committed['checkpoint']} is not here (the speedrun makes it)")
    again = ea.export_gpt(committed["checkpoint"], record, committed["command"])
    assert again["samples"] == committed["samples"]
    assert again["val_loss"] == committed["val_loss"]
    for old, new in zip(committed["lines"], again["lines"], strict=True):
        assert old["tokens"] == new["tokens"]
        diff = torch.tensor(old["self"]) - torch.tensor(new["self"])
        assert diff.abs().max() <= 0.0011
