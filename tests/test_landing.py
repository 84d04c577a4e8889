"""The landing page (both editions) and notebook 00's opening show the course's own
results: each figure, translation and sample comes from a stored output, never typed.

`tools/landing.py` writes the page's generated blocks from the stored outputs; these
tests fail when a block is stale (run `python tools/landing.py`), when a figure of the
hand-written prose is not printed anywhere, or when notebook 00's stored outputs are not
what `_static/explorer/*.json` holds.
"""

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))

import landing  # noqa: E402
import reading_time  # noqa: E402
from test_prose_numbers import everything_printed, figures, printed, saved  # noqa: E402

PAGES = {"en": ROOT / "book" / "intro.md", "zh": ROOT / "zh" / "book" / "intro.md"}
EXPLORED = ["translator", "gpt"]  # the blocks that read _static/explorer/
NEEDS_EXPORT = landing.NEEDS


def exported(name: str) -> bool:
    return (landing.EXPLORER / f"{name}.json").exists()


@pytest.mark.parametrize("lang", PAGES)
@pytest.mark.parametrize("block", landing.BLOCKS)
def test_each_generated_block_is_what_the_stored_outputs_say(lang, block):
    if block in NEEDS_EXPORT and not exported(NEEDS_EXPORT[block]):
        pytest.skip(f"_static/explorer/{NEEDS_EXPORT[block]}.json not exported here")
    text = PAGES[lang].read_text(encoding="utf-8")
    found = re.search(
        rf"<!-- landing:{block} -->\n(.*?)<!-- /landing:{block} -->", text, re.S
    )
    assert found, f"{PAGES[lang]} has no block {block}"
    assert found[1] == landing.BLOCKS[block](lang), (
        f"{PAGES[lang].relative_to(ROOT)}: block {block} is stale; "
        "run python tools/landing.py"
    )


# Figures of the page's prose that no output prints: cited figures.
CITED = {"31.4": "OPUS-MT's BLEU, cited", "1.4697": "nanoGPT's A100 result, cited"}


@pytest.mark.parametrize("lang", PAGES)
def test_every_figure_on_the_landing_page_is_printed_or_cited(lang):
    text = PAGES[lang].read_text(encoding="utf-8")
    # the parts table's sums and the sample are checked above, block by block
    for block in ("parts", "sample"):
        text = re.sub(
            rf"<!-- landing:{block} -->.*?<!-- /landing:{block} -->",
            "",
            text,
            flags=re.S,
        )
    everything = everything_printed()
    missing = [
        f"{figure!r} in {sentence!r}"
        for figure, sentence in figures(text)
        if not printed(figure, everything) and not saved(figure) and figure not in CITED
    ]
    assert not missing, f"{PAGES[lang]}: figures no output prints:\n" + "\n".join(
        missing
    )


@pytest.mark.parametrize("lang", PAGES)
def test_the_page_shows_the_result_part_v_and_a_start(lang):
    text = PAGES[lang].read_text(encoding="utf-8")
    first_heading = text.index("\n## ")
    assert (
        text.index('<div class="attention-explorer" data-src="translator"')
        < first_heading
    )
    assert text.index("<!-- landing:sample -->") < first_heading
    assert ("Part V" if lang == "en" else "第五部分") in text
    assert "{button-ref} ../notebooks/00_introduction_and_setup" in text
    config = yaml.safe_load(
        (ROOT / ("zh" if lang == "zh" else "") / "_config.yml").read_text()
    )
    repo = config["repository"]["url"].removeprefix("https://github.com/")
    folder = "zh/notebooks" if lang == "zh" else "notebooks"
    colab = re.search(r"\{button-link\} (https://colab\S+)", text)[1]
    stem = "00_introduction_and_setup.ipynb"
    assert (
        colab
        == f"https://colab.research.google.com/github/{repo}/blob/main/{folder}/{stem}"
    )
    assert (ROOT / folder / stem).exists()


def test_every_notebook_of_the_table_of_contents_is_on_the_page():
    toc = (ROOT / "_toc.yml").read_text()
    page = PAGES["en"].read_text(encoding="utf-8")
    for stem in re.findall(r"file: notebooks/(\S+)", toc):
        assert f"(../notebooks/{stem}.ipynb)" in page, stem


def test_reading_time_counts_prose_code_and_outputs_but_not_build_its(tmp_path):
    def cell(kind, text, **extra):
        return {"cell_type": kind, "source": text, "metadata": {}, **extra}

    cells = [
        cell("markdown", " ".join(["word"] * 400)),  # 2 min
        cell(
            "code", "\n".join(["x = 1"] * 15), outputs=[{"text": "a\nb\n"}]
        ),  # 17 lines
        cell("code", "hidden = 1\n" * 99, metadata={"tags": ["remove-cell"]}),
        cell("markdown", "**Build it: a stub.** " + "word " * 1000),
        cell("code", "raise NotImplementedError\n" * 45, id="bi000stub"),
        cell(
            "code",
            "print(elapsed_since(start))",
            outputs=[{"text": "executed in 93.1 s on X\n"}],
        ),
    ]
    path = tmp_path / "00_x.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    got = reading_time.measure(path)
    assert (got["words"], got["code_lines"], got["output_lines"]) == (400, 16, 3)
    assert got["read_min"] == round(400 / 200 + 19 / 15)
    assert got["run_s"] == 93.1


@pytest.mark.parametrize("edition", ["notebooks", "zh/notebooks"])
def test_notebook_00_shows_what_the_exported_runs_hold(edition):
    if not all(map(exported, EXPLORED)):
        pytest.skip("_static/explorer/*.json not exported here")
    translator, gpt = (
        json.loads((landing.EXPLORER / f"{n}.json").read_text(encoding="utf-8"))
        for n in EXPLORED
    )
    cells = json.loads(
        (ROOT / edition / "00_introduction_and_setup.ipynb").read_text()
    )["cells"]
    shown = "".join(
        "".join(o.get("text", "")) for c in cells for o in c.get("outputs", [])
    )
    for s in translator["sentences"][:6]:
        assert f"{s['source']}\n  -> {s['translation']}" in shown
    for sample in gpt["samples"][:2]:
        assert "\n".join(sample["text"].strip("\n").splitlines()[:10]) in shown
    assert translator["command"] in shown and gpt["command"] in shown


def test_the_part_v_scoreboard_quotes_the_bleu_column():
    """The decoder-only row quotes BLEU, the mean over the two seeds that
    benchmarks/results/part5_arch_seed*.json hold, not the chrF printed beside it."""
    runs = [
        json.loads((ROOT / f"benchmarks/results/part5_arch_seed{s}.json").read_text())
        for s in (0, 1)
    ]
    figures_now = landing.scores()
    for name, row in (
        ("encdec_bleu", "encoder-decoder"),
        ("deconly_bleu", "decoder-only"),
    ):
        mean = sum(run["rows"][row]["bleu"] for run in runs) / len(runs)
        shown = float(figures_now[name][0])
        assert abs(shown - mean) < 0.006, (
            f"{name}: the page says {shown}, BLEU is {mean}"
        )
