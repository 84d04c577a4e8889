"""Every `--help` of `python -m transformer_lib` reads: it exits 0, each line fits 88
columns, every option says what it does, and no usage example or list item is run
together with the next (what a mechanical re-wrap of the docstrings once did). The
same reading is asked of the usage docstrings of the hand-written modules and of the
benchmarks."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

from transformer_lib.__main__ import build_parser

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 88
COMMAND = r"\b(python|torchrun) (-m |--|[\w/]+\.py)"  # the start of a usage example
HAND_WRITTEN = ["__init__", "__main__", "cli_args", "mt_cli", "lm_cli", "data", "files"]
HAND_WRITTEN += ["viz", "tokenizer_kit"]  # heatmaps (04), tokenizers' kit (01)
COMMANDS = [None] + sorted(
    next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
)


def _help(command: str | None, capsys, monkeypatch) -> str:
    """What `python -m transformer_lib [COMMAND] --help` prints, in a wide terminal."""
    monkeypatch.setenv("COLUMNS", str(WIDTH + 2))  # argparse wraps at COLUMNS - 2
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([command, "--help"] if command else ["--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def run_together(text: str) -> list[str]:
    """The lines of `text` where two things a re-wrap merged meet: two commands on one
    line, a command after other words of an indented example (environment variables
    aside), a list item that starts mid-line, a line over WIDTH."""
    bad, in_example = [], False
    for line in text.splitlines():
        body = line.strip()
        starts = [m.start() for m in re.finditer(COMMAND, body)]
        indented = line.startswith("    ") and body
        if indented and starts:
            in_example = True  # an example's lines: commands, comments, --flags
            if not re.fullmatch(r"(\w+=\S* )*", body[: starts[0]]):
                bad.append(line)
                continue
        elif not indented or not re.match("[#-]", body):
            in_example, was_example = False, in_example
            if indented and was_example:  # '    $VAR, a folder or an URL) and'
                bad.append(line)
                continue
        if (
            len(line) > WIDTH
            or len(starts) > 1
            or re.search(r"[.;:] (?:[-*]|\d\.) \S", body)  # '...does; - our BPE'
            or re.search("#.*" + COMMAND, body)  # an example in a comment
        ):
            bad.append(line)
    return bad


def test_run_together_finds_what_the_rewrap_did():
    assert run_together(
        "    python -m transformer_lib train-mt   # notebook 09's full-mode\n"
        "    run -> runs/translator.pt python -m transformer_lib train-mt --resume\n"
        "    python -m transformer_lib fetch-data   # download (or copy from\n"
        "    $TRANSFORMER_DATA_MIRROR) and verify every corpus\n"
        "\n"
        "- the tokenizer, as notebook 01 does; - our BPE train\n"
    ) == [
        "    run -> runs/translator.pt python -m transformer_lib train-mt --resume",
        "    $TRANSFORMER_DATA_MIRROR) and verify every corpus",
        "- the tokenizer, as notebook 01 does; - our BPE train",
    ]
    assert run_together("    python -m transformer_lib train-mt   # the full run") == []


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c or "top")
def test_every_help_reads(command, capsys, monkeypatch):
    text = _help(command, capsys, monkeypatch)
    assert run_together(text) == [], text
    assert text.startswith("usage: python -m transformer_lib")


@pytest.mark.parametrize("command", COMMANDS[1:])
def test_every_option_says_what_it_does(command):
    parser = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices[command]
    silent = [a.dest for a in parser._actions if not (a.help or "").strip()]
    assert silent == [], f"{command}: options without help: {silent}"
    assert parser.description or parser.format_help().count("\n") > 3


@pytest.mark.parametrize(
    "path",
    [ROOT / "transformer_lib" / f"{m}.py" for m in HAND_WRITTEN]
    + sorted((ROOT / "benchmarks").glob("*.py")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_usage_docstrings_read(path):
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
    assert doc.strip(), f"{path.name} has no docstring"
    assert run_together(doc) == []
