"""Unit tests for transformer_lib.cli_args: each checked type, the one-line Parser,
flags made from a settings dataclass, read_texts, --model KEY=VALUE."""

from __future__ import annotations

import argparse
import dataclasses
import io
import sys
from dataclasses import field

import pytest
import torch

from transformer_lib import cli_args as ca


def _refused(argv: list[str], capsys) -> str:
    """The one line `python -m transformer_lib ARGV` prints before it exits with 2."""
    from transformer_lib.__main__ import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    "flags, words",
    [
        (
            ["--max-new-tokens", "-1"],
            "max_new_tokens must be an integer in [0, 100000]",
        ),
        (["--max-new-tokens", "1.5"], "whole number"),
        (["--max-new-tokens", "abc"], "whole number"),
        (["--top-p", "0"], "top_p must lie in (0, 1]"),
        (["--top-p", "1.5"], "top_p must lie in (0, 1]"),
        (["--top-p", "1e-300"], ">= 1.2e-38"),
        (["--top-p", "nan"], "finite"),
        (["--top-p", "inf"], "finite"),
        (["--top-k", "-3"], "top_k must be an integer >= 0"),
        (["--temperature", "-1"], "greedy"),
        (["--temperature", "nan"], "finite"),
        (["--temperature", "1e-40"], ">= 1e-4"),
        (["--seed", "-1"], "2**63"),
        (["--seed", "100000000000000000000000"], "2**63"),
        (["--seed", "1e3"], "whole number"),
    ],
)
def test_generate_settings_refuse_with_a_message(flags, words, capsys):
    assert words in _refused(["generate", "--checkpoint", "x.pt", *flags], capsys)


def test_the_settings_accept_their_edges():
    from transformer_lib.decoding import DecodeSettings
    from transformer_lib.lm_train import GenerateSettings

    GenerateSettings(max_new_tokens=0, temperature=0, top_k=0, top_p=1, seed=0)
    GenerateSettings(max_new_tokens=100_000, temperature=1e-4, top_p=1e-9)
    GenerateSettings(seed=2**63 - 1)
    DecodeSettings(beam_size=1000, length_penalty=0)
    DecodeSettings(method="greedy", temperature=0)


def test_sampling_and_the_settings_keep_one_rule():
    """A temperature so small that logits / t overflow is refused by sample_next, in a
    notebook, as by the command line."""
    from transformer_lib.lm_train import GenerateSettings
    from transformer_lib.sampling import sample_next

    for bad in (dict(temperature=1e-5), dict(top_p=1e-40), dict(top_k=0)):
        with pytest.raises(ValueError) as direct:
            sample_next(torch.zeros(1, 3), **{"temperature": 1.0, **bad})
        if "top_k" not in bad:  # the settings' 0 is every token
            with pytest.raises(ValueError) as settings:
                GenerateSettings(**bad)
            assert str(settings.value) == str(direct.value)


def test_help_lists_the_choices(capsys, monkeypatch):
    from transformer_lib.__main__ import build_parser

    monkeypatch.setenv("COLUMNS", "200")
    commands = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
    lm, mt = commands["train-lm"].format_help(), commands["train-mt"].format_help()
    for flag in ("--tokenizer {char,bpe}", "--optimizer {adamw,muon}"):
        assert flag in lm
    assert "--dtype {fp32,bf16,auto}" in lm and "--dtype {fp32,bf16,auto}" in mt
    assert "--preset {tiny,cpu,gpu,nanogpt_cpu}" in lm
    assert "--schedule {cosine,inverse_sqrt}" in mt
    assert "--method {beam,greedy,sample}" in commands["translate"].format_help()


def test_device_accepts_cpu_and_refuses_unknown_kinds():
    assert ca.device("cpu") == "cpu"
    with pytest.raises(
        argparse.ArgumentTypeError, match="not a device; available here: .*cpu"
    ):
        ca.device("foo")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_refuses_cuda_when_absent():
    with pytest.raises(argparse.ArgumentTypeError, match="cuda is not available.*cpu"):
        ca.device("cuda")


def _parser() -> ca.Parser:
    p = ca.Parser(prog="prog")
    sub = p.add_subparsers(dest="command", required=True, parser_class=ca.Parser)
    g = sub.add_parser("generate")
    g.add_argument("--device", type=ca.device)
    return p


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ["generate", "--device", "foo"],
            "prog generate: error: argument --device: 'foo' is not a device",
        ),
        (["frobnicate"], "prog: error: argument command: invalid choice"),
        (["generate", "--nope"], "prog: error: unrecognized arguments: --nope"),
    ],
)
def test_parser_errors_are_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        _parser().parse_args(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert (
        err.count("\n") == 1
        and err.startswith(words)
        and err.rstrip().endswith("--help)")
    )


def test_parser_accepts_valid_input():
    assert _parser().parse_args(["generate", "--device", "cpu"]).device == "cpu"


def test_read_texts_from_args_file_and_stdin(tmp_path, monkeypatch):
    f = tmp_path / "in.txt"
    f.write_text("Hello.\n\n  How are you?  \n", encoding="utf-8")
    assert ca.read_texts(["A", "  ", ""]) == ["A"]
    assert ca.read_texts(["A"], str(f)) == ["A", "Hello.", "How are you?"]
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO("one\ntwo\n".encode()))
    )
    assert ca.read_texts([], "-") == ["one", "two"]


@pytest.mark.parametrize(
    "setup, words",
    [
        (lambda d: d / "missing.txt", "no file at"),
        (lambda d: d, "is a folder"),
        (lambda d: (d / "b.bin").write_bytes(b"ab\0cd") and d / "b.bin", "binary"),
        (lambda d: (d / "l.txt").write_bytes(b"caf\xe9") and d / "l.txt", "not UTF-8"),
    ],
)
def test_read_texts_refuses_bad_files(tmp_path, setup, words):
    with pytest.raises(ValueError, match=words) as e:
        ca.read_texts([], str(setup(tmp_path)))
    assert "\n" not in str(e.value)


def test_key_value_overrides_types_values():
    allowed = {"dropout": float, "n_layers": int, "bias": bool, "norm": str}
    got = ca.key_value_overrides(
        ["dropout=0.1", "n_layers=2", "bias=false", "norm=rms", "n_layers=3"], allowed
    )
    assert got == {"dropout": 0.1, "n_layers": 3, "bias": False, "norm": "rms"}


@pytest.mark.parametrize(
    "item, words",
    [
        ("foo=1", "unknown key; allowed keys: dropout, n_layers"),
        ("dropout", "expects KEY=VALUE"),
        ("n_layers=two", "expected int"),
        ("dropout=nan", "finite"),
        ("=1", "expects KEY=VALUE"),
    ],
)
def test_key_value_overrides_refuses(item, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        ca.key_value_overrides([item], {"dropout": float, "n_layers": int})


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--beam-size", "100000"], "at most 1000"),
        (["--beam-size", "0"], "beam_size must be an integer >= 1"),
        (["--length-penalty", "1e308"], "in [0, 10]"),
        (["--method", "sample", "--temperature", "0"], "give method greedy"),
        (["--method", "nucleus"], "invalid choice: 'nucleus'"),
    ],
)
def test_values_that_would_break_decoding_are_refused(flags, words, capsys):
    assert words in _refused(["translate", *flags, "Hello."], capsys)


@pytest.mark.parametrize("value", ["garbage", "meta", "cuda:7"])
def test_transformer_device_is_checked_like_the_flag(monkeypatch, value):
    monkeypatch.setenv("TRANSFORMER_DEVICE", value)
    if value == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    with pytest.raises(ValueError, match=f"TRANSFORMER_DEVICE={value}: "):
        ca.device()


def test_arguments_and_inputs_that_are_not_text(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="argument 2 is not UTF-8 text"):
        ca.read_texts(["fine", "caf\udce9"])  # how Python keeps the byte 0xE9 of argv
    monkeypatch.setattr(sys, "stdin", None)  # started with <&-
    with pytest.raises(ValueError, match="standard input is closed"):
        ca.read_texts([], "-")
    big = tmp_path / "big.txt"
    big.write_text("a line\n" * 100)
    monkeypatch.setattr(ca, "MAX_INPUT_BYTES", 500)
    with pytest.raises(ValueError, match="holds more than"):
        ca.read_texts([], str(big))
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffHello.\n".encode())
    assert ca.read_texts([], str(bom)) == ["Hello."]


def test_lines_end_only_at_newlines_and_a_prompt_file_is_read_as_it_is(tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("One\u2028still one.\fand\vthis.\r\nTwo.\n", encoding="utf-8")
    assert ca.read_texts([], str(f)) == ["One\u2028still one.\fand\vthis.", "Two."]
    f.write_text("  ROMEO:\n\n  JULIET:\n", encoding="utf-8")
    assert ca.read_text(str(f)) == "  ROMEO:\n\n  JULIET:\n"
    f.write_bytes(b"  ROMEO:\r\n\r\n  JULIET:\r\n")  # a Windows file reads the same
    assert ca.read_text(str(f)) == "  ROMEO:\n\n  JULIET:\n"


@dataclasses.dataclass
class _Settings:
    """A stand-in for the trainers' settings dataclasses."""

    lr: float = field(default=1e-3, metadata={"help": "peak learning rate"})
    warmup_steps: int = 200
    betas: tuple[float, float] = (0.9, 0.98)
    stop_at: int | None = None
    compile: bool = False
    progress: bool = True
    min_lr: float = 0.0

    def __post_init__(self):  # the checks live in the settings, as the trainers' do
        if not 0 < self.lr <= 0.5:
            raise ValueError(f"lr must be in (0, 0.5], got {self.lr:g}")
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas}")


def _settings_parser() -> ca.Parser:
    p = ca.Parser(prog="prog")
    ca.add_settings_flags(p, _Settings, skip=("min_lr",))
    return p


def test_settings_flags_come_from_the_fields(capsys):
    p = _settings_parser()
    args = p.parse_args(
        ["--lr", "0.01", "--betas", "0.8", "0.9", "--compile", "--no-progress"]
    )
    s = ca.settings_from_args(p, args, _Settings())
    assert s == _Settings(lr=0.01, betas=(0.8, 0.9), compile=True, progress=False)
    assert ca.settings_from_args(p, p.parse_args([]), _Settings()) == _Settings()
    text = p.format_help()
    assert "peak learning rate (default: 0.001)" in text  # metadata help, default
    assert "warmup steps (default: 200)" in text  # no metadata: the field's name
    assert "--min-lr" not in text and "--stop-at N" in text


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--lr", "-1"], "lr must be in (0, 0.5], got -1"),
        (
            ["--betas", "0.9", "1.5"],
            "betas must be two numbers in [0, 1), got (0.9, 1.5)",
        ),
        (["--lr", "0.9"], "lr must be in (0, 0.5], got 0.9"),
        (["--lr", "nan"], "argument --lr: 'nan' is not a finite number"),
        (["--warmup-steps", "1.5"], "argument --warmup-steps: '1.5' is not a whole"),
    ],
)
def test_flags_and_the_settings_refuse_in_one_line(argv, words, capsys):
    p = _settings_parser()
    with pytest.raises(SystemExit) as e:
        ca.settings_from_args(p, p.parse_args(argv), _Settings())
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"prog: error: {words}"), err


def test_both_trainers_take_the_same_betas_and_warmup():
    from transformer_lib.__main__ import build_parser

    parser = build_parser()
    for command in ("train-mt", "train-lm"):
        args = parser.parse_args(
            [command, "--warmup-steps", "0", "--betas", "0", "0.5"]
        )
        assert args.warmup_steps == 0 and args.betas == [0.0, 0.5]
