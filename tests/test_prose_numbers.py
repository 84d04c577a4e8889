"""Numbers quoted in a notebook's prose equal the numbers in its stored outputs.

Each entry: (notebook, a regex on the markdown with one group around the quoted
number, a regex on the stored outputs with one group around the printed number).
When a notebook is re-executed and a number moves, this test names the sentence to
update. Add an entry whenever prose quotes a printed number.
"""

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

QUOTES = [
    (
        "05_multi_head_attention",
        r"\*bought\*, ([\d.]+) of a row's weight",
        r"head 0: most weight on 'bought' \(([\d.]+) of a row",
    ),
    (
        "07_encoder",
        r"with post-norm than with pre-norm \(([\d.]+)",
        r"layer 12 \(the top\): post-norm ([\d.]+)",
    ),
    (
        "07_encoder",
        r"the first layer gets ([\d.]+) of the\s+top layer's gradient with post-norm",
        r"layer 1 / layer 12: post-norm ([\d.]+)",
    ),
    (
        "07_encoder",
        r"top layer's gradient with post-norm, ([\d.]+) times it with pre-norm",
        r"layer 1 / layer 12: post-norm [\d.]+, pre-norm ([\d.]+)",
    ),
    (
        "08_decoder_and_model",
        r"\*\*The first loss, ([\d.]+), is worse",
        r"first loss ([\d.]+) \(ln 13",
    ),
    ("08_decoder_and_model", r"\(\$\\ln 13 = ([\d.]+)\$\)", r"\(ln 13 = ([\d.]+)\)"),
    (
        "08_decoder_and_model",
        r"\(std ([\d.]+), printed below",
        r"untrained logits: std ([\d.]+)",
    ),
    (
        "08_decoder_and_model",
        r"equal ones \(([\d.]+) here",
        r"std\*\*2 / 2 = ([\d.]+) nats",
    ),
    ("08_decoder_and_model", r"the largest at step (\d+)", r"largest jump: step (\d+)"),
    (
        "08_decoder_and_model",
        r"from a best of ([\d.]+) back up",
        r"after a best of ([\d.]+)",
    ),
    (
        "08_decoder_and_model",
        r"back up to\s+([\d.]+)\)",
        r"largest jump: step \d+, loss ([\d.]+)",
    ),
    (
        "08_decoder_and_model",
        r"put ([\d.]+) and [\d.]+ \(layer 0\)",
        r"decoder layer 0: .*?\['([\d.]+)'",
    ),
    (
        "08_decoder_and_model",
        r"put [\d.]+ and ([\d.]+) \(layer 0\)",
        r"decoder layer 0: .*?\['[\d.]+', '([\d.]+)'",
    ),
    (
        "08_decoder_and_model",
        r"([\d.]+) and [\d.]+ \(layer 1\)",
        r"decoder layer 1: .*?\['([\d.]+)'",
    ),
    (
        "08_decoder_and_model",
        r"[\d.]+ and ([\d.]+) \(layer 1\)",
        r"decoder layer 1: .*?\['[\d.]+', '([\d.]+)'",
    ),
    (
        "08_decoder_and_model",
        r"ends at a loss of ([\d.]+) instead",
        r"without positions, \d+ steps: final loss ([\d.]+)",
    ),
    (
        "08_decoder_and_model",
        r"instead of ([\d.]+) and\s+reverses",
        r"\(with positions: ([\d.]+)\)",
    ),
    (
        "08_decoder_and_model",
        r"reverses (\d+)% of the sequences",
        r"sequences reversed exactly: (\d+)%",
    ),
    ("08_decoder_and_model", r"It gets (\d+)% of the digits", r"digits right: (\d+)%"),
    (
        "13_what_the_gpt_learned",
        r"baseline ends at a validation loss of ([\d.]+)",
        r"nanoGPT CPU config: val loss ([\d.]+)",
    ),
    (
        "13_what_the_gpt_learned",
        r"Our preset ends at ([\d.]+) over every token",
        r"our CPU preset: val loss ([\d.]+)",
    ),
    (
        "13_what_the_gpt_learned",
        r"on 64 windows, the kind of number\s+nanoGPT prints, ends at ([\d.]+)",
        r"step 2000 \| train [\d.]+ \| val ([\d.]+)",
    ),
    (
        "13_what_the_gpt_learned",
        r"the BPE model is\s+better, ([\d.]+) bits",
        r"BPE 512\s+[\d.]+\s+[\d.]+\s+([\d.]+)",
    ),
    (
        "13_what_the_gpt_learned",
        r"head 0\.1 puts ([\d.]+) of its weight on the previous character",
        r"\n0\.1\s+[\d.]+\s+([\d.]+)\s",
    ),
    (
        "13_what_the_gpt_learned",
        r"the sharpest of all \(([\d.]+)\)",
        r"\n0\.1\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+sharp",
    ),
    (
        "13_what_the_gpt_learned",
        r"neighbouring positions have a\s+cosine similarity of ([\d.]+)",
        r"learned: ([\d.]+) between neighbours",
    ),
    (
        "13_what_the_gpt_learned",
        r"([\d.]+) nats per letter on the second copy",
        r"loss on the second copy: ([\d.]+)",
    ),
    (
        "13_what_the_gpt_learned",
        r"on the second copy against ([\d.]+) on the first",
        r"loss on the first copy: ([\d.]+)",
    ),
    (
        "13_what_the_gpt_learned",
        r"as on real text \(head 0\.1: ([\d.]+)\)",
        r"\n0\.1\s+[\d.]+\s+[\d.]+\s+([\d.]+)\n",
    ),
    (
        "11_evaluation",
        r"the model reaches BLEU-zh ([\d.]+) greedy",
        r"course test split\s+greedy\s+[\d,]+\s+([\d.]+)",
    ),
    (
        "11_evaluation",
        r"sentences\) it reaches ([\d.]+) and",
        r"Tatoeba Challenge test\s+greedy\s+[\d,]+\s+([\d.]+)",
    ),
    (
        "11_evaluation",
        r"greedy and [\d.]+\s+with the beam \(chrF [\d.]+ and ([\d.]+)\)",
        r"course test split\s+beam\s+[\d,]+\s+[\d.]+\s+([\d.]+)",
    ),
    (
        "09_training_a_translator",
        r"(\d[\d,]*) of 32,028 Chinese sentences",
        r"([\d,]+) of 32,028 Chinese sentences",
    ),
    (
        "A2_language_model_training_runs",
        r"The record: \*\*([\d.]+)\*\*",
        r"validation loss ([\d.]+) after",
    ),
    (
        "11_evaluation",
        r"decode our split\s+\(([\d.]+) s against",
        r"course test split\s+beam\s+[\d,]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)",
    ),
    (
        "11_evaluation",
        r"on the public test \(([\d.]+) s against",
        r"Challenge test\s+beam\s+[\d,]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)",
    ),
    (
        "16_modern_block",
        r"\*\*Muon is the big one\*\*: ([\d.]+) against",
        r"\nmuon\s+[\d.]+\s+\d+\s+\d+\s+(1\.\d{4})\s",
    ),
    (
        "16_modern_block",
        r"against the baseline's ([\d.]+), a gain",
        r"\nbaseline\s+[\d.]+\s+\d+\s+\d+\s+(1\.\d{4})\s",
    ),
    (
        "15_modern_attention",
        r"against the baseline's ([\d.]+), a gain",
        r"\nbaseline\s+[\d.]+\s+\d+\s+\d+\s+(1\.\d{4})\s",
    ),
    (
        "15_modern_attention",
        r"\*\*RoPE helps\*\* \(([\d.]+) against",
        r"\nrope\s+[\d.]+\s+\d+\s+\d+\s+(1\.\d{4})\s",
    ),
    (
        "15_modern_attention",
        r"\*\*Two key/value heads cost nothing\*\* \(([\d.]+);",
        r"\ngqa \(2 kv heads\)\s+[\d.]+\s+\d+\s+\d+\s+(1\.\d{4})\s",
    ),
    (
        "15_modern_attention",
        r"\*\*one costs a\s+little\*\* \(([\d.]+),",
        r"\nmqa \(1 kv head\)\s+[\d.]+\s+\d+\s+\d+\s+(1\.\d{4})\s",
    ),
    (
        "15_modern_attention",
        r"\*\*QK-norm hurts\*\* here \(([\d.]+),",
        r"\nqk-norm\s+[\d.]+\s+\d+\s+\d+\s+(1\.\d{4})\s",
    ),
    (
        "16_modern_block",
        r"\*\*SwiGLU helps a little\*\* \(([\d.]+),",
        r"\nswiglu\s+[\d.]+\s+\d+\s+\d+\s+(1\.\d{4})\s",
    ),
    (
        "16_modern_block",
        r"\*\*Untying does not help\*\* \(([\d.]+)\)",
        r"\nuntied\s+[\d.]+\s+\d+\s+\d+\s+(1\.\d{4})\s",
    ),
    (
        "16_modern_block",
        r"\s([\d.]+), a gain of 0\.17",
        r"\ncombination\s+[\d.]+\s+\d+\s+\d+\s+(1\.\d{4})\s",
    ),
    (
        "17_decoder_only_translation",
        r"the encoder-decoder took (\d+) steps",
        r"\nencoder-decoder\s+[\d,]+\s+(\d+)\s",
    ),
    (
        "18_lora",
        r"rank 8 recovers ([\d.]+)% of the gain with 1/[\d.]+ of",
        r"LoRA r=8: ([\d.]+)% of full fine-tuning's gain",
    ),
    (
        "18_lora",
        r"rank 8 recovers [\d.]+% of the gain with 1/([\d.]+) of",
        r"LoRA r=8: [\d.]+% of full fine-tuning's gain, 1/([\d.]+) of its",
    ),
    (
        "18_lora",
        r"([\d.]+) bits per character on\s+the held-out sentences before adapting",
        r"held-out bits per character, base model: ([\d.]+)",
    ),
    (
        "18_lora",
        r"1\.12 MiB of AdamW state against ([\d.]+) MiB",
        r"full fine-tuning:\s+([\d.]+) MiB of optimizer state",
    ),
    (
        "19_preference_tuning",
        r"mean sentence chrF\s+of ([\d.]+)",
        r"part5_dpo.json: .*?mean chrF chosen ([\d.]+)",
    ),
    # 19: the table on notebook 09's translator (steps, CPU s, BLEU s0, s1, then mean)
    (
        "19_preference_tuning",
        r"\(mean sentence chrF ([\d.]+), the rejected",
        r"training sentences .*?mean chrF chosen ([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"BLEU ([\d.]+) and chrF [\d.]+ on these sentences",
        r"DPO \+ NLL\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"DPO alone loses [\d.]+ BLEU\*\* \(([\d.]+)\)",
        r"\nDPO\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"Fine-tuning on the chosen loses a little\*\* \(([\d.]+)\)",
        r"fine-tuning on the chosen\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+"
        r"\s+([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"seed 0 scores BLEU ([\d.]+)",
        r"DPO \+ NLL, seed 0\s+: BLEU ([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"against the base's ([\d.]+)\s+and",
        r"base \(before tuning\): BLEU ([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"a log-ratio of -([\d.]+) at the end",
        r"DPO, seed 0, at the end: chosen [-+][\d.]+, rejected -([\d.]+)",
    ),
    # 19: the table of the pairs from the held-out test split
    (
        "19_preference_tuning",
        r"BLEU ([\d.]+) on these 1,000 sentences \(seeds",
        r"(?s)pairs held out;.*?\nDPO\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"\(seeds ([\d.]+) and [\d.]+\) against",
        r"(?s)pairs held out;.*?\nDPO\s+[\d.]+\s+[\d.]+\s+([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"DPO \+ NLL \(([\d.]+)\) and fine-tuning",
        r"(?s)pairs held out;.*?\nDPO \+ NLL\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+"
        r"\s+([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"fine-tuning on the chosen \(([\d.]+)\) stay",
        r"(?s)pairs held out;.*?\nfine-tuning on the chosen\s+[\d.]+\s+[\d.]+"
        r"\s+[\d.]+\s+[\d.]+\s+([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"\(\+([\d.]+) at the end, against",
        r"held out, DPO, seed 0, log-ratios at the end: chosen \+([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"score a mean chrF of ([\d.]+), against",
        r"sentences of the test split.*?mean chrF chosen ([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"DPO's\s+seed 0 reaches BLEU ([\d.]+)",
        r"(?s)held out, the whole public test.*?\n  DPO, seed 0\s+: BLEU ([\d.]+)",
    ),
    (
        "19_preference_tuning",
        r"DPO's\s+seed 0 reaches BLEU [\d.]+ and chrF ([\d.]+)",
        r"\n  DPO, seed 0\s+: BLEU [\d.]+, chrF ([\d.]+)",
    ),
    (
        "12_gpt_language_model",
        r"the (\d+) s that 700 steps took\s+above",
        r"795,904 parameters, (\d+) s\n",
    ),
    (
        "13_what_the_gpt_learned",
        r"One more seed of the baseline takes its (\d+) s of training",
        r"nanoGPT CPU config: .*? 2000 steps in (\d+) s",
    ),
    (
        "12_gpt_language_model",
        r"from the bigram model's ([\d.]+) nats",
        r"bigram model: validation loss ([\d.]+)",
    ),
    (
        "12_gpt_language_model",
        r"nats per character to ([\d.]+)\s+over every validation token",
        r"val loss ([\d.]+) over every validation token",
    ),
    (
        "12_gpt_language_model",
        r"over every validation token \(([\d.]+) bits per character\)",
        r"\| ([\d.]+) bits/char\n",
    ),
    (
        "12_gpt_language_model",
        r"The estimate on 64 windows \(([\d.]+) at step 700\)",
        r"step  700 \| train [\d.]+ \| val ([\d.]+)",
    ),
    (
        "12_gpt_language_model",
        r"its loss of ([\d.]+) nats",
        r"val loss ([\d.]+) over every validation token",
    ),
    (
        "11_evaluation",
        r"the two sentences reach BLEU-zh ([\d.]+);",
        r"\{'bleu': ([\d.]+), 'chrf'",
    ),
    (
        "11_evaluation",
        r"the same output falls to ([\d.]+)\.",
        r"BLEU = ([\d.]+) ",
    ),
    (
        "08_decoder_and_model",
        r"ends at a loss of ([\d.]+) instead",
        r"without positions, 400 steps: final loss ([\d.]+)",
    ),
]


def texts(name: str) -> tuple[str, str]:
    """(all markdown, all stored text outputs) of notebooks/NAME.ipynb."""
    cells = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))[
        "cells"
    ]
    prose = "\n".join(
        "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
    )
    outputs = []
    for c in cells:
        for o in c.get("outputs", []):
            outputs.append(
                "".join(o.get("text", ""))
                or "".join(o.get("data", {}).get("text/plain", ""))
            )
    return prose, "\n".join(outputs)


@pytest.mark.parametrize(
    "name, prose_re, output_re", QUOTES, ids=[f"{q[0][:2]}:{q[1][:30]}" for q in QUOTES]
)
def test_quoted_number_matches_output(name, prose_re, output_re):
    prose, outputs = texts(name)
    quoted = re.search(prose_re, prose)
    printed = re.search(output_re, outputs)
    assert quoted, f"{name}: no sentence matches {prose_re!r} (reworded? update QUOTES)"
    assert printed, (
        f"{name}: no stored output matches {output_re!r} (re-executed in quick mode?)"
    )
    assert float(quoted.group(1).replace(",", "")) == float(
        printed.group(1).replace(",", "")
    ), (
        f"{name}: the prose says {quoted.group(0)!r} "
        f"but the output prints {printed.group(0)!r}"
    )


def test_13s_extra_seconds_of_the_bpe_model_are_the_tables_difference():
    """A difference the outputs do not print: 13's 'N s more of training' for the BPE
    model is its time minus the character model's in the table (a bare "6" would pass
    the check below whenever a 6 is printed anywhere)."""
    prose, outputs = texts("13_what_the_gpt_learned")
    quoted = re.search(r"for (\d+) s more of training", prose)
    char = re.search(r"character +[\d.]+ +[\d.]+ +[\d.]+ +(\d+)", outputs)
    bpe = re.search(r"BPE 512 +[\d.]+ +[\d.]+ +[\d.]+ +(\d+)", outputs)
    assert quoted and char and bpe, "13: the sentence or the table was reworded"
    assert int(quoted[1]) == int(bpe[1]) - int(char[1]), (
        f"13: the prose says {quoted[0]!r}; the table gives {bpe[1]} - {char[1]} s"
    )


def test_12s_cached_positions_are_what_generate_runs():
    """12 counts the token positions `generate` runs through the model with its cache,
    for 200 new tokens after a prompt of 6 at N = 128 (the window slides, and then the
    last N are computed again): counted here on a tiny model of that context."""
    import torch

    from transformer_lib.gpt import GPT, GPTConfig, generate

    prose, _ = texts("12_gpt_language_model")
    quoted = re.search(r"= ([\d,]+) positions,\s+about half", prose)
    assert quoted, "12: the sentence was reworded"
    torch.manual_seed(0)
    model = GPT(GPTConfig.tiny(context_len=128, n_layers=1, d_model=8, n_heads=1))
    seen = []
    model.register_forward_pre_hook(lambda m, args: seen.append(args[0].size(1)))
    generate(model, torch.zeros(1, 6, dtype=torch.long), 200, temperature=0)
    assert f"{sum(seen):,}" == quoted[1], (
        f"12 says {quoted[1]}; generate ran {sum(seen):,}"
    )


# Every other figure: a decimal (1.913, 5.3x) or a number with thousands separators
# (26,759) in a notebook's prose must be printed by one of its stored outputs, unless
# it is listed here with what it is: a cited figure, a setting, a constant. So a re-run
# that moves a number fails here, naming the sentence, until the prose says what was
# printed.
FIGURE = re.compile(r"(?<![\w.,$\\{^_/-])(\d{1,3}(?:,\d{3})+|\d+\.\d+)(?![\w.,]*\d)")
# A declaration that starts with "=" is a sum of printed figures ("= 1.7235 - 1.5890"):
# the test checks that each is printed and that the result rounds to the figure.
NOT_PRINTED: dict[str, dict[str, str]] = {
    "00": {
        "2.0": "the pairs' licence, CC-BY 2.0",
        "30.4": "in 09",  # the translator's training time in 09, as 00 says
        "1.5045": "in A2",  # the speedrun's stored loss, beside 00's rerun
    },
    "01": {
        "0.39": "cited: a 2,000-token BPE on Shakespeare (exercise's answer)",
        "0.32": "cited: GPT-2's tokenizer on the same text",
        "50,000": "GPT-2's merges file, cited",
        "150,000": "Unicode's size, cited",
    },
    "02": {
        "50,000": "a vocabulary size for the example",
        "3.4": "a section of the paper",
        "1,000": "the positions of the picture, a setting",
        "0.02": "GPT-2's initialisation, cited",
    },
    "03": {
        "3.5": "a section of the paper",
        "2,000": "positions in the exercise and the plot, a setting",
        "4.7": "read off the plot above",
        "1,000": "a position named in the text",
    },
    "05": {"0.10": "= 1 / 10"},
    "07": {
        "18,914,304": "the exercise's answer, left to the reader",
        "0.122": "exercise 1's answer: 24 post-norm layers, not run here",
        "0.90": "exercise 1's answer: 24 post-norm layers, not run here",
        "0.069": "exercise 1's answer: 24 pre-norm layers, not run here",
        "1.61": "exercise 1's answer: 24 pre-norm layers, not run here",
    },
    "08": {
        "3.4": "a section of the paper",
        "4,000": "in 09",
        "2,767": "in 09",
        "0.76": "read off the loss curves above",
    },
    "09": {
        "3,000": "the demo's batch cap, a setting",
        "5.4": "a section of the paper",
        "4.4": "= 4415040 / 1e6",
        "1.861": "in 10",  # the stored-runs box: the book's translator, which 10 prints
    },
    "10": {
        "1.851": "in 09",  # 09's stored run's best validation loss, beside this run's
        "0.09": "the min-p build-it's example: min_p 0.1 times a top probability 0.9",
        "0.02": "the min-p build-it's example: min_p 0.1 times a top probability 0.2",
        "1.98": "a score in the beam tree figure (tools/beam_tree.py)",
        "4.04": "a score in the beam tree figure (tools/beam_tree.py)",
        "4.43": "greedy's score in the beam tree figure (tools/beam_tree.py)",
        "2.31": "a score in the beam tree figure (tools/beam_tree.py)",
        "3.06": "the beam's summed score in the figure (tools/beam_tree.py)",
        "1.44": "= ((5 + 6) / 6) ** 0.6",
        "2.13": "the beam's penalised score in the figure (tools/beam_tree.py)",
        "0.4": "a toy model's probability, worked in the text",
        "4,000": "the checker's sample size, a setting",
        "0.36": "the toy model's probability, worked in the text",
    },
    "11": {
        "3.8": "= 64.9 / 17.3",
        "4.3": "= 539.9 / 124.4",
        "1.851": "in 09",  # 09's stored run's best validation loss, beside this run's
    },
    "13": {
        "0.8": "nanoGPT's README, cited; and a threshold of the head table",
        "0.5": "a threshold of the head table",
        "0.008": "= 1.915 - 1.907",
        "0.0080": "in 15",  # the 90-s ablation's seed spread of the same preset
        "2,048": "the preset's tokens a step: batch 16 times context 128",
        "57,216": "exercise 2's answer: (512 - 65) * 128",
        "853,120": "exercise 2's answer: 795,904 + 57,216",
    },
    "14": {
        "1.41": "the translator's bf16 speed-up on the Xeon (results page)",
        "1.47": "nanoGPT's A100 result, cited",
    },
    "12": {
        "1,115,394": "the corpus's size, data/README.md",
        "0.02": "GPT-2's initialisation, a setting",
        "0.57": "read off the loss curves above",
        "18,097": "worked out in the equation before it",
        "9,984": "worked out in its sentence: 6 + 122 + 77 x 128, generate's steps",
        "50,257": "GPT-2's vocabulary, cited",
        "0.8": "nanoGPT's README, cited",
        "1.47": "nanoGPT's GPU result, cited",
        "1.5271": "in 00",  # the explorer's GPT: a rerun of A2's speedrun, 00 prints
        "1.5045": "in A2",  # A2's stored speedrun, beside that rerun
    },
    "15": {
        "0.5": "an example's memory, worked in the text",
        "6.7": "an example's size, worked in the text",
        "102,000": "an example's size, worked in the text",
        "0.8": "the ablation's model: 795904 parameters, rounded",
        "0.07": "= 1.7951 - 1.7235",
    },
    "16": {
        "50,257": "GPT-2's vocabulary, cited",
        "0.7": "read off the plot above",
        "1.2": "read off the plot above",
        "0.8": "the ablation's model: 795904 parameters, rounded",
        "0.13": "= 1.7235 - 1.5890",
        "0.038": "15's table: RoPE's gain, 1.7235 - 1.6853",
        "0.17": "= 1.7235 - 1.5513",
        "0.017": "= 1.7235 - 1.7069",
        "8,320": "= 65 * 128",
        "0.20": "benchmarks/results/part4_ablation.json, a sum of its gains",
        "0.044": "exercise 1's answer: 1/sqrt(512), derived",
        "0.0442": "exercise 1's answer: 1/sqrt(512), which its check computes",
        "0.2": "Muon's factor 0.2 sqrt(max(A, B)), and Liu et al.'s measured range",
        "0.4": "Liu et al.'s measured range of AdamW's update RMS, cited",
    },
    "A2": {
        "0.8": "nanoGPT's README, cited",
        "1.47": "nanoGPT's GPU result, cited",
        "0.017": "benchmarks/results/part4_ablation.json, a difference of its means",
        "8,320": "the untied output layer's size, 65 * 128",
        "0.13": "benchmarks/results/part4_ablation.json, a difference of its means",
        "0.04": "benchmarks/results/part4_ablation.json, a difference of its means",
        "0.07": "benchmarks/results/part4_ablation.json, a difference of its means",
        "0.17": "benchmarks/results/part4_ablation.json, a difference of its means",
        "0.01": "exercise 3's min_lr, a setting",
        "0.20": "benchmarks/results/part4_ablation.json, a sum of its gains",
        "2,048": "the preset's tokens a step: batch 16 times context 128",
        "10.7": "nanoGPT's model size, cited",
        "1.4697": "nanoGPT's A100 result, cited",
        "1.547": "the 10-minute CPU preset, benchmarks/results (results page)",
        "1.07": "benchmarks/results/part4_speed_levers.json, rounded",
        "1.459": "benchmarks/results/part4_speedrun.json, its running estimate",
        "24,745": "benchmarks/results/part4_speedrun_no_dropout.json, rounded",
        "15,658": "benchmarks/results/part4_speedrun.json, rounded",
        "1.4664": "benchmarks/results/part4_speedrun_no_dropout.json, its estimate",
        "6.95": "benchmarks/results/part4_speedrun_no_dropout.json, minutes",
        "7.64": "benchmarks/results/part4_speedrun_no_dropout.json, minutes",
        "0.73": "the speedrun model's size in millions (730,368 parameters)",
        "1.5717": "benchmarks/results/part4_speedrun_no_dropout.json",
    },
    "17": {
        "1.54": "= 1536384 / 1e6",
        "0.2": "a bound on the two seeds' BLEU gap, from the table",
        "23.92": "in 11",
        "0.3": "= 5.12 - 4.84",
    },
    "19": {
        "3.0": "= -0.547 - -3.536",
        "2.6": "= 24.98 - 22.39",
        "23.92": "in 11",
    },
}


def figures(markdown: str) -> list[tuple[str, str]]:
    """[(figure, its sentence)] in markdown, leaving out math, code and link targets."""
    text = re.sub(
        r"\$\$.*?\$\$|\$[^$\n]*\$|`[^`]*`|\]\([^)]*\)|<[^>]*>",
        " ",
        markdown,
        flags=re.S,
    )
    return [
        (m.group(1), " ".join(text[max(0, m.start() - 50) : m.end() + 20].split()))
        for m in FIGURE.finditer(text)
    ]


def printed(figure: str, outputs: str) -> bool:
    """Is `figure` in the outputs as a whole number (1.23 is not in 1.234), with or
    without thousands separators?"""
    bare = figure.replace(",", "")
    return any(
        re.search(rf"(?<![\d.]){re.escape(f)}(?![\d]|\.\d)", text)
        for f, text in ((figure, outputs), (bare, outputs.replace(",", "")))
    )


def derived(figure: str, declaration: str, outputs: str) -> bool:
    """A declared figure is fine, unless its declaration is checkable and fails:
    "= a - b" (printed figures whose result rounds to it) or "in NN" (printed by
    notebook NN)."""
    if declaration.startswith("in "):
        return printed(figure, texts(notebook(declaration.split()[1]))[1])
    if not declaration.startswith("="):
        return True
    terms = re.findall(r"[\d.]+", declaration)
    value = eval(declaration[1:].replace(",", ""), {"__builtins__": {}})  # noqa: S307
    digits = len(figure.split(".")[1]) if "." in figure else 0
    exact = all(printed(t, outputs) for t in terms)
    return exact and f"{abs(value):.{digits}f}" == figure.replace(",", "")


def notebook(number: str) -> str:
    """The stem of the notebook numbered `number` ("09", "A1")."""
    return next(NOTEBOOKS.glob(f"{number}_*.ipynb")).stem


NAMES = sorted(p.stem for p in NOTEBOOKS.glob("[0-9A][0-9]_*.ipynb"))


@pytest.mark.parametrize("name", NAMES, ids=lambda n: n[:2])
def test_every_figure_in_the_prose_is_printed_or_declared(name):
    prose, outputs = texts(name)
    declared = NOT_PRINTED.get(name[:2], {})
    missing = [
        f"{figure!r} in {sentence!r}"
        for figure, sentence in figures(prose)
        if not printed(figure, outputs)
        and not (figure in declared and derived(figure, declared[figure], outputs))
    ]
    assert not missing, (
        f"{name}: figures no output prints (quote the output, or declare them in "
        "NOT_PRINTED):\n" + "\n".join(missing)
    )


# The README's results and the results page (both editions) quote the same runs: each of
# their figures is printed by a notebook's stored output or saved by a benchmark
# (benchmarks/results/*.json), or declared here with where it comes from.
PAGES = ["README.md", "README.zh-CN.md", "book/results.md", "zh/book/results.md"]
PAGES_NOT_PRINTED: dict[str, str] = {
    "1.4697": "nanoGPT's A100 result, cited",
    "1.47": "nanoGPT's GPU result, cited",
    "3.10": "the Python version needed",
    "1.547": "an earlier 10-minute run of benchmarks/lm_char_cpu.py (AMD EPYC)",
    "2.232": "its bits per character",
    "2.23": "its bits per character",
    "0.268": "OPUS-MT's chrF on its own 0-1 scale, cited",
    "12.9": "an earlier, shorter run on both scripts, cited",
    "19.4": "an earlier bf16 run of A1's `fit` on the Intel Xeon, minutes of training",
    "6.95": "benchmarks/results/part4_speedrun_no_dropout.json, minutes (as A2 says)",
    "7.64": "benchmarks/results/part4_speedrun_no_dropout.json, minutes (as A2 says)",
}


def everything_printed() -> str:
    """The text of every notebook's stored outputs."""
    return "\n".join(texts(name)[1] for name in NAMES)


def saved(figure: str) -> bool:
    """Is `figure` a number a benchmark saved (benchmarks/results/*.json), rounded to
    the figure's digits?"""
    digits = len(figure.split(".")[1]) if "." in figure else 0
    want = figure.replace(",", "")
    folder = NOTEBOOKS.parent / "benchmarks" / "results"
    numbers = re.findall(
        r"-?\d+\.?\d*", "".join(p.read_text() for p in folder.glob("*.json"))
    )
    return any(f"{abs(float(n)):.{digits}f}" == want for n in numbers)


@pytest.mark.parametrize("page", PAGES)
def test_every_figure_on_the_results_pages_is_printed_or_declared(page):
    everything = everything_printed()
    text = (NOTEBOOKS.parent / page).read_text(encoding="utf-8")
    missing = [
        f"{figure!r} in {sentence!r}"
        for figure, sentence in figures(text)
        if not printed(figure, everything)
        and not saved(figure)
        and not (
            figure in PAGES_NOT_PRINTED
            and derived(figure, PAGES_NOT_PRINTED[figure], everything)
        )
    ]
    assert not missing, (
        f"{page}: figures no notebook output or saved benchmark shows (quote one, or "
        "declare them in PAGES_NOT_PRINTED):\n" + "\n".join(missing)
    )


# The setup pages (both editions, and the Chinese edition's page for mainland China)
# quote run times, the data's size and the download limit. Every figure there with a
# unit (s, 分钟, MB, 字节 ...) is bound below to where it comes from: the "executed in
# N s" that a notebook's last cell printed, another stored output, or the value the
# code pins, in the unit and digits the page writes. A figure that no entry binds
# fails, so a page cannot quote a run time that no stored output shows, and a re-run
# that moves one names it.
SETUP_PAGES = ["book/setup.md", "zh/book/setup.md", "zh/book/setup_china.md"]
WITH_UNIT = re.compile(
    r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)\s*"
    r"(?:s\b|秒|分钟|min\b|minutes?\b|小时|hours?\b|[KMG]B\b|字节|bytes?\b)"
)


def elapsed(name: str, per: float = 1.0) -> float:
    """What notebooks/NAME.ipynb's last cell printed, "executed in N s", over `per`."""
    return float(re.findall(r"executed in ([\d.]+) s", texts(name)[1])[-1]) / per


def output_value(name: str, pattern: str) -> float:
    return float(re.search(pattern, texts(name)[1]).group(1))


def data_megabytes() -> float:
    from transformer_lib.data import ALL_FILES

    return sum(f.size for f in ALL_FILES) / 1e6


def download_minutes() -> float:
    from transformer_lib.downloads import DOWNLOAD_SECONDS

    return DOWNLOAD_SECONDS / 60


def trained_minutes() -> float:
    return output_value("09_training_a_translator", r"([\d.]+) min of training")


CHINA = "zh/book/setup_china.md"
# (page, a regex with one group around the figure, what it equals or None for a cited
# figure, where it comes from)
SETUP_FIGURES = [
    (
        "book/setup.md",
        r"train one themselves \(([\d.]+) minutes",
        trained_minutes,
        "09",
    ),
    ("zh/book/setup.md", r"需要 ([\d.]+) 分钟，在 GPU 上", trained_minutes, "09"),
    ("book/setup.md", r"five files \(about ([\d.]+) MB\)", data_megabytes, "data.py"),
    ("zh/book/setup.md", r"5 个文件（约 ([\d.]+) MB）", data_megabytes, "data.py"),
    (CHINA, r"5 个文件，共约 ([\d.]+) MB", data_megabytes, "data.py"),
    ("zh/book/setup.md", r"必须在 (\d+) 分钟内传完", download_minutes, "downloads.py"),
    (CHINA, r"必须在 (\d+) 分钟内传完", download_minutes, "downloads.py"),
    (CHINA, r"GPT-2 权重（约 (\d+) MB）", None, "cited: GPT-2's weights on the Hub"),
    (CHINA, r"压缩包本身也要校验：([\d,]+) 字节", None, "cited: the zip as served"),
    (
        CHINA,
        r"完整模型\]\([^)]*\)需要 (\d+) s",
        lambda: elapsed("08_decoder_and_model"),
        "08",
    ),
    (
        CHINA,
        r"翻译器\]\([^)]*\)需要 (\d+) 分钟",
        lambda: elapsed("09_training_a_translator", 60),
        "09",
    ),
    (CHINA, r"全花在训练上（训练 ([\d.]+) 分钟）", trained_minutes, "09"),
    (
        CHINA,
        r"评估翻译器\]\([^)]*\)在 1 个线程上需要 (\d+) 分钟",
        lambda: elapsed("11_evaluation", 60),
        "11",
    ),
    (
        CHINA,
        r"语言模型\]\([^)]*\)需要 (\d+) s",
        lambda: elapsed("12_gpt_language_model"),
        "12",
    ),
    (
        CHINA,
        r"学到了什么\]\([^)]*\)需要 (\d+) 分钟",
        lambda: elapsed("13_what_the_gpt_learned", 60),
        "13",
    ),
    (CHINA, r"更快\]\([^)]*\)需要 (\d+) s", lambda: elapsed("14_making_it_fast"), "14"),
    (
        CHINA,
        r"训练语言模型\]\([^)]*\)在 1 个线程上需要 (\d+) s",
        lambda: elapsed("A2_language_model_training_runs"),
        "A2",
    ),
]
# the China page's list of the data files: "- `path`：N 字节，sha256 `H`"
DATA_LINE = re.compile(
    r"^- `([^`]+)`[^：]*：([\d,]+) 字节，sha256 `([0-9a-f]{64})`", re.M
)


def page_text(page: str) -> str:
    return (NOTEBOOKS.parent / page).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "page, pattern, value, source",
    SETUP_FIGURES,
    ids=[f"{p.split('/')[-1]}:{s}:{r[:20]}" for p, r, _, s in SETUP_FIGURES],
)
def test_a_figure_of_the_setup_pages_is_its_source(page, pattern, value, source):
    quoted = re.search(pattern, page_text(page))
    assert quoted, (
        f"{page}: no sentence matches {pattern!r} (reworded? update SETUP_FIGURES)"
    )
    if value is None:
        return
    figure = quoted.group(1).replace(",", "")
    digits = len(figure.split(".")[1]) if "." in figure else 0
    assert f"{value():.{digits}f}" == figure, (
        f"{page}: {quoted.group(0)!r}, but {source} gives {value():.{digits + 2}f}"
    )


@pytest.mark.parametrize("page", SETUP_PAGES)
def test_every_figure_with_a_unit_on_the_setup_pages_is_bound(page):
    text = page_text(page)
    bound = [
        m.span(1)
        for p, pattern, _, _ in SETUP_FIGURES
        if p == page
        for m in re.finditer(pattern, text)
    ] + [m.span(2) for m in DATA_LINE.finditer(text)]
    near = lambda m: " ".join(text[max(m.start() - 40, 0) : m.end()].split())  # noqa: E731
    loose = [
        f"{m.group(0)!r} in {near(m)!r}"
        for m in WITH_UNIT.finditer(text)
        if not any(a <= m.start(1) < b for a, b in bound)
    ]
    assert not loose, (
        f"{page}: figures bound to no stored output or pinned value (add them to "
        "SETUP_FIGURES):\n" + "\n".join(loose)
    )


def test_the_china_page_lists_the_pinned_data_files():
    from transformer_lib.data import ALL_FILES

    listed = {
        path: (int(size.replace(",", "")), sha)
        for path, size, sha in DATA_LINE.findall(page_text(CHINA))
    }
    assert listed == {f.relpath: (f.size, f.sha256) for f in ALL_FILES}
    zipped = [f.archive_sha256 for f in ALL_FILES if f.archive_sha256]
    assert all(sha in page_text(CHINA) for sha in zipped)


def test_the_first_notebooks_take_seconds_as_the_china_page_says():
    """「……每一章只需几秒」: notebooks 00 to 07 take under 10 s each."""
    assert "每一章只需几秒" in page_text(CHINA)
    first = [n for n in NAMES if n[:2].isdigit() and int(n[:2]) <= 7]
    assert len(first) == 8
    assert all(elapsed(name) < 10 for name in first), {n: elapsed(n) for n in first}
