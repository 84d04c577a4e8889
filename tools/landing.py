"""The landing page's figures, written from the course's stored outputs (both editions).

`book/intro.md` and `zh/book/intro.md` hold blocks between `<!-- landing:NAME -->`
and `<!-- /landing:NAME -->` that this script writes; the prose around them is
written by hand.

- `translation`: the car sentence and its translation, for readers without JavaScript
  (the explorer above it shows the same sentence with its attention), from
  `_static/explorer/translator.json`, which `tools/export_attention.py` exports from the
  trained translator.
- `sample`: a sample of the Part IV speedrun's GPT, from `_static/explorer/gpt.json`.
- `scoreboard`: the measured results, each read from the stored output that prints it
  (a notebook's outputs or a benchmark's `benchmarks/results/*.json`), linked to it.
- `parts`: the path through the notebooks, from `_toc.yml` (`zh/_toc.yml`), with each
  notebook's reading time and its stored run time (`tools/reading_time.py`).

    python tools/landing.py          # rewrite the blocks (and the zh page's hash)
    python tools/landing.py --check  # exit 1 if a block is not what outputs say
    python tools/landing.py --image  # also draw the link-preview image
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reading_time import measure, run_time  # noqa: E402
from zh_edition import digest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXPLORER = ROOT / "_static" / "explorer"
PAGES = {"en": ROOT / "book" / "intro.md", "zh": ROOT / "zh" / "book" / "intro.md"}
BLOCK = re.compile(r"(<!-- landing:(\w+) -->\n).*?(<!-- /landing:\2 -->)", re.S)
SAMPLE_LINES = 8  # of the GPT's sample: enough for a few speeches, short for a phone


def outputs(path: Path) -> str:
    """All stored text outputs of a notebook."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join(
        "".join(o.get("text", "")) or "".join(o.get("data", {}).get("text/plain", ""))
        for c in cells
        for o in c.get("outputs", [])
    )


def printed(pattern: str) -> tuple[str, str]:
    """(the group of `pattern` as printed, the notebook that prints it): the first
    notebook in file order whose stored outputs match, 00 left out (it shows the
    exported runs again). Found by what it prints, so a renumbered notebook is found."""
    for path in sorted((ROOT / "notebooks").glob("[0-9A][0-9]_*.ipynb"))[1:]:
        found = re.search(pattern, outputs(path))
        if found:
            return found.group(1), path.stem
    raise SystemExit(f"no notebook's stored outputs print anything like {pattern!r}")


def explorer(name: str) -> dict:
    """_static/explorer/NAME.json, exported by tools/export_attention.py."""
    path = EXPLORER / f"{name}.json"
    if not path.exists():
        raise SystemExit(
            f"{path.relative_to(ROOT)} is missing: tools/export_attention.py"
        )
    return json.loads(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the blocks


def translation(lang: str) -> str:
    """The car sentence and the translator's output, for readers without JavaScript."""
    car = explorer("translator")["sentences"][0]
    return f"<noscript><p>{car['source']} → {car['translation']}</p></noscript>\n"


def sample(lang: str) -> str:
    """The first lines of the speedrun GPT's first sample, and where it comes from."""
    gpt = explorer("gpt")
    first = gpt["samples"][0]
    text = "\n".join(first["text"].strip("\n").splitlines()[:SAMPLE_LINES])
    minutes = gpt["train_time_s"] / 60
    machine = gpt.get("machine", "").split(" | ")[0]
    knobs = {"temperature": "temperature", "top_k": "top-k", "top_p": "top-p"}
    settings = ", ".join(
        f"{knobs[k]} {v}"
        for k, v in first["settings"].items()
        if k in knobs and v is not None
    )
    cpu, threads = machine.split(",")[0], re.search(r"(\d+) CPU thread", machine)
    threads = threads[1] if threads else "?"
    if lang == "en":
        caption = (
            f"A sample (prompt `{first['prompt']}`, seed {first['seed']}, {settings})"
            f" of a run of Part IV's speedrun:"
            f" {gpt['params']:,} parameters, {minutes:.1f} minutes"
            f" ({gpt['steps']:,} steps) on {cpu} with {threads} CPU"
            f" thread{'' if threads == '1' else 's'}, validation loss"
            f" {gpt['val_loss']} (a second run, beside the one the table below scores)."
        )
    else:
        caption = (
            "这段文字出自第四部分速通的一次运行："
            f"{gpt['params']:,} 个参数，在 {cpu} 上用 {threads} 个 CPU 线程训练了"
            f" {minutes:.1f} 分钟（{gpt['steps']:,} 步），验证损失 {gpt['val_loss']}"
            "（这是另一次运行，与下表计分的那次并列）。"
            f"提示为 `{first['prompt']}`，随机种子 {first['seed']}，"
            + settings.replace("temperature", "温度").replace(", ", "，")
            + "。"
        )
    return f"```text\n{text}\n```\n\n*{caption}*\n"


def scores() -> dict[str, tuple[str, str]]:
    """{name: (figure, notebook)}: each figure the scoreboard quotes, as printed by a
    stored output, and the notebook that prints it."""
    return {
        "bleu_public": printed(r"Challenge test\s+beam\s+[\d,]+\s+([\d.]+)"),
        "bleu_ours": printed(r"course test split\s+beam\s+[\d,]+\s+([\d.]+)"),
        # the checkpoint that 10, 11 and 19 load, as 11 prints it when it loads it
        "mt_epochs": printed(
            r"loaded runs/translator.pt: (\d+) epochs, best validation"
        ),
        "mt_val": printed(
            r"loaded runs/translator.pt: \d+ epochs, best validation loss ([\d.]+)"
        ),
        "lm_loss": printed(r"val loss ([\d.]+) over every validation token \|"),
        "kv_speedup": printed(r"500 new tokens:.*?speed-up\s+([\d.]+)x"),
        "speedrun_loss": printed(r"validation loss ([\d.]+) after [\d,]+ steps in"),
        "speedrun_minutes": printed(
            r"validation loss [\d.]+ after [\d,]+ steps in ([\d.]+) min of training"
        ),
        # 17's table, as pandas wraps it: the block whose header starts with the
        # BLEU mean, so the first figure of each row is BLEU, not chrF
        "encdec_bleu": printed(
            r"\n120 CPU s each\s+BLEU \(mean\)\s+chrF \(mean\)[^\n]*\n"
            r"encoder-decoder\s+(\d+\.\d+)\s"
        ),
        "deconly_bleu": printed(
            r"\n120 CPU s each\s+BLEU \(mean\)\s+chrF \(mean\)[^\n]*\n"
            r"(?:.*\n)?decoder-only\s+(\d+\.\d+)\s"
        ),
        # 18's measurement where LoRA works (the Shakespeare GPT learns today's English)
        "lora_gain": printed(r"LoRA r=8: ([\d.]+)% of full fine-tuning's gain"),
        "lora_state": printed(
            r"LoRA r=8: [\d.]+% of full fine-tuning's gain, 1/([\d.]+) of its AdamW"
        ),
        # 19's pairs from held-out sentences, on the whole public test
        "dpo_bleu": printed(
            r"held out, the whole public test[\s\S]*?\n  DPO, seed 0\s+: BLEU ([\d.]+)"
        ),
        "dpo_base": printed(
            r"held out, the whole public test[^\n]*\n"
            r"  base \(before tuning\)\s+: BLEU ([\d.]+)"
        ),
    }


# (en, zh) per row; {name} is a figure of scores(); the row links to the notebook
# that prints its first figure.
SCOREBOARD = [
    # the translator that 10, 11 and 19 load and that the next row scores (appendix
    # A1's run of 09's settings; 09's own stored run is another)
    (
        "**Part II**, an English → Chinese translator trained with"
        " [notebook 09](../notebooks/09_training_a_translator.ipynb)'s settings:"
        " {mt_epochs} epochs, best validation loss {mt_val}",
        "**第二部分**，英译中翻译器，按"
        "[笔记本 09](../notebooks/09_training_a_translator.ipynb) 的设置"
        "训练 {mt_epochs} 轮，最佳验证损失 {mt_val}",
    ),
    (
        "its BLEU-zh on the public Tatoeba test (beam 4): **{bleu_public}** (OPUS-MT,"
        " trained on tens of millions of pairs, reports 31.4 on another version of"
        " that test); on our own test split: {bleu_ours}",
        "它在公开的 Tatoeba 测试集上的 BLEU-zh（束宽 4）：**{bleu_public}**（用数千万"
        "句对训练的 OPUS-MT 在该测试集的另一个版本上报告 31.4）。"
        "在我们自己的测试集上：{bleu_ours}",
    ),
    (
        "**Part III**, a character-level GPT on Tiny Shakespeare, 700 steps: validation"
        " loss {lm_loss}",
        "**第三部分**，Tiny Shakespeare 上的字符级 GPT，训练 700 步：验证损失"
        " {lm_loss}",
    ),
    (
        "500 tokens generated with a KV cache: **{kv_speedup}×** faster, the same"
        " tokens",
        "用 KV 缓存生成 500 个词元：速度是不用缓存时的 **{kv_speedup}** 倍，"
        "生成的词元完全相同",
    ),
    (
        "**Part IV**, today's GPT (RoPE, SwiGLU, GQA, Muon) trained for"
        " {speedrun_minutes} minutes on 2 CPU threads: validation loss"
        " **{speedrun_loss}**, against 1.4697 for nanoGPT's larger model on an A100"
        " GPU",
        "**第四部分**，当今的 GPT（RoPE、SwiGLU、GQA、Muon）在 2 个 CPU 线程上训练"
        " {speedrun_minutes} 分钟：验证损失 **{speedrun_loss}**；nanoGPT 更大的模型在"
        " A100 GPU 上是 1.4697",
    ),
    (
        "**Part V**, a GPT trained as a translator against Part II's encoder-decoder,"
        " 120 CPU seconds each: BLEU {deconly_bleu} against {encdec_bleu}",
        "**第五部分**，把 GPT 训练成翻译器，与第二部分的编码器-解码器相比，各用 120"
        " 秒 CPU 时间：BLEU {deconly_bleu} 对 {encdec_bleu}",
    ),
    (
        "LoRA (r = 8) adapting Part III's Shakespeare GPT to today's English:"
        " **{lora_gain}%** of full fine-tuning's gain with 1/{lora_state} of its"
        " AdamW state (rank 8 was added after ranks 4 and 16 each missed one of the"
        " two bars)",
        "LoRA（r = 8）把第三部分的莎士比亚 GPT 适配到今天的英语：只用全量微调"
        " 1/{lora_state} 的 AdamW 状态，收回了它 **{lora_gain}%** 的增益"
        "（秩 4 和秩 16 各有一条标准没达到，之后才加上了秩 8）",
    ),
    (
        "DPO on Part II's translator, with pairs from sentences it never trained on:"
        " BLEU {dpo_bleu} against {dpo_base} before tuning (the whole public test,"
        " greedy, one seed)",
        "DPO 用于第二部分的翻译器，偏好对来自它从没训练过的句子：BLEU {dpo_bleu}，"
        "调优前是 {dpo_base}（整个公开测试集，贪心解码，一个种子）",
    ),
]
HEAD = {
    "en": "| what was measured | shown in |\n| --- | --- |\n",
    "zh": "| 测得的结果 | 出处 |\n| --- | --- |\n",
}


def title(lang: str, stem: str) -> str:
    """'09 · Training a translator': the notebook's own first heading."""
    folder = ROOT / ("zh/notebooks" if lang == "zh" else "notebooks")
    cells = json.loads((folder / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]
    return "".join(cells[0]["source"]).splitlines()[0].lstrip("# ").strip()


def scoreboard(lang: str) -> str:
    """The table of measured results, each row linked to the notebook that prints it."""
    figures = scores()
    rows = []
    for en, zh in SCOREBOARD:
        values = {name: value for name, (value, _) in figures.items()}
        what = (en if lang == "en" else zh).format(**values)
        stem = figures[re.search(r"\{(\w+)\}", en)[1]][1]
        rows.append(f"| {what} | [{title(lang, stem)}](../notebooks/{stem}.ipynb) |")
    return HEAD[lang] + "\n".join(rows) + "\n"


def minutes(total: float, lang: str) -> str:
    """'40 min', '2.9 h' (zh: '40 分钟', '2.9 小时')."""
    if total < 90:
        return f"{total:.0f} min" if lang == "en" else f"{total:.0f} 分钟"
    return f"{total / 60:.1f} h" if lang == "en" else f"{total / 60:.1f} 小时"


def parts(lang: str) -> str:
    """The notebooks by part (from the table of contents), with reading and run
    times."""
    toc = yaml.safe_load(
        (ROOT / ("zh/_toc.yml" if lang == "zh" else "_toc.yml")).read_text("utf-8")
    )
    head = {
        "en": "| part and notebook | reading | run (full mode, CPU) |\n",
        "zh": "| 部分与笔记本 | 阅读 | 运行（完整模式，CPU） |\n",
    }[lang] + "| --- | --- | --- |\n"
    rows, all_read, all_run = [], 0, 0.0
    for part in toc["parts"]:
        stems = [
            Path(c["file"]).name
            for c in part["chapters"]
            if c["file"].startswith("notebooks/")
        ]
        if not stems:
            continue
        times = [measure(ROOT / "notebooks" / f"{s}.ipynb") for s in stems]
        read = sum(t["read_min"] for t in times)
        run = sum(t["run_s"] or 0 for t in times)
        all_read, all_run = all_read + read, all_run + run
        rows.append(
            f"| **{part['caption']}** | **{minutes(read, lang)}** "
            f"| **{run_time(run) if lang == 'en' else run_time_zh(run)}** |"
        )
        for stem, t in zip(stems, times):
            run_s = run_time(t["run_s"]) if lang == "en" else run_time_zh(t["run_s"])
            link = f"[{title(lang, stem)}](../notebooks/{stem}.ipynb)"
            read_s = f"{t['read_min']} min" if lang == "en" else f"{t['read_min']} 分钟"
            rows.append(f"| {link} | {read_s} | {run_s} |")
    total = "the whole course" if lang == "en" else "整门课程"
    run_all = run_time(all_run) if lang == "en" else run_time_zh(all_run)
    rows.append(f"| **{total}** | **{minutes(all_read, lang)}** | **{run_all}** |")
    return head + "\n".join(rows) + "\n"


def run_time_zh(seconds: float | None) -> str:
    """run_time() in Chinese: '12 秒', '4.4 分钟'."""
    return run_time(seconds).replace(" s", " 秒").replace(" min", " 分钟")


def preview(out: Path) -> None:
    """The link-preview image (1200 x 630 px): the car sentence's cross-attention, the
    last layer's heads averaged, beside the book's title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from transformer_lib.viz import plot_attention

    car = explorer("translator")["sentences"][0]
    weights = np.array(car["cross"])[-1].mean(axis=0)  # (T_tgt, T_src)
    fig = plt.figure(figsize=(12, 6.3), dpi=100)
    fig.text(
        0.04, 0.66, "Building a Transformer\nfrom Scratch", fontsize=30, weight="bold"
    )
    fig.text(0.04, 0.42, f"{car['source']}\n→ {car['translation']}", fontsize=18)
    fig.text(0.04, 0.12, "从零构建 Transformer", fontsize=22)
    ax = fig.add_axes((0.6, 0.2, 0.37, 0.74))
    plot_attention(
        weights,
        car["tgt_tokens"],
        car["src_tokens"],
        ax=ax,
        title="",
        fontsize=15,
        colorbar=False,
    )
    ax.set(xlabel="", ylabel="")
    fig.savefig(out)
    print(f"wrote {out.relative_to(ROOT)}")


BLOCKS = {
    "translation": translation,
    "sample": sample,
    "scoreboard": scoreboard,
    "parts": parts,
}


NEEDS = {"translation": "translator", "sample": "gpt"}  # block: its export


def render(text: str, lang: str) -> str:
    """`text` with each landing block rewritten; a block whose export is missing is
    left as it is (with a warning)."""

    def block(m: re.Match) -> str:
        if m[2] in NEEDS and not (EXPLORER / f"{NEEDS[m[2]]}.json").exists():
            print(f"_static/explorer/{NEEDS[m[2]]}.json is missing: {m[2]} left as is")
            return m[0]
        return m[1] + BLOCKS[m[2]](lang) + m[3]

    return BLOCK.sub(block, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if stale"
    )
    parser.add_argument(
        "--image", action="store_true", help="also draw _static/preview.png"
    )
    args = parser.parse_args()
    texts = {lang: path.read_text(encoding="utf-8") for lang, path in PAGES.items()}
    new = {lang: render(text, lang) for lang, text in texts.items()}
    # the zh page names the English text it translates by hash: when only the blocks
    # changed (the zh page was current), it stays current
    source = f"<!-- source book/intro.md en {digest(texts['en'])} -->"
    if new["zh"].startswith(source):
        fresh = f"<!-- source book/intro.md en {digest(new['en'])} -->"
        new["zh"] = new["zh"].replace(source, fresh, 1)
    stale = [lang for lang in PAGES if new[lang] != texts[lang]]
    if args.check:
        for lang in stale:
            print(
                f"{PAGES[lang].relative_to(ROOT)}: stale; run python tools/landing.py"
            )
        sys.exit(1 if stale else 0)
    if args.image:
        preview(ROOT / "_static" / "preview.png")
    for lang in stale:
        PAGES[lang].write_text(new[lang], encoding="utf-8")
        print(f"wrote {PAGES[lang].relative_to(ROOT)}")


if __name__ == "__main__":
    main()
