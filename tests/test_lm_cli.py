"""`python -m transformer_lib train-lm` and `generate`: flags checked in one line, bad
files refused, no traceback."""

import io
import sys

import pytest
import torch

from transformer_lib.__main__ import main
from transformer_lib.tokenization import CharTokenizer

TINY = [
    "train-lm",
    "--preset",
    "tiny",
    "--max-iters",
    "3",
    "--batch-size",
    "2",
    "--eval-interval",
    "3",
    "--eval-windows",
    "2",
    "--no-progress",
    "--device",
    "cpu",
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("lm") / "tiny.pt")
    assert main([*TINY, "--out", out]) == 0
    return out


@pytest.mark.slow
def test_train_lm_never_replaces_a_checkpoint_by_accident(checkpoint, capsys):
    before = open(checkpoint, "rb").read()
    assert main([*TINY, "--out", checkpoint]) == 1
    assert (
        "already holds a checkpoint: add --resume to continue that run, --restart"
        in capsys.readouterr().err
    )
    assert main([*TINY, "--out", checkpoint, "--resume", "--model", "n_layers=3"]) == 1
    assert "n_layers: checkpoint has 2, expected 3" in capsys.readouterr().err
    assert main([*TINY, "--out", checkpoint, "--resume", "--lr", "0.1"]) == 1
    assert "lr: checkpoint 0.005, now 0.1" in capsys.readouterr().err
    assert open(checkpoint, "rb").read() == before


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--batch-size", "0"], "batch_size"),
        (["--max-iters", "-5"], "max_iters"),
        (["--eval-interval", "0"], "eval_interval"),
        (["--eval-windows", "-1"], "eval_windows"),
        (["--lr", "nan"], "--lr"),
        (["--lr", "inf"], "--lr"),
        (["--seed", "1e23"], "--seed"),
        (["--device", "foo"], "--device"),
        (["--resume", "--restart"], "not allowed with"),
        (["--betas", "0.9", "1.5"], "betas"),
        (["--betas", "0.9", "1"], "betas"),
    ],
)
def test_train_lm_options_are_checked_in_one_line(flags, message, capsys):
    """One line naming the flag, or the field when the settings refuse the value."""
    with pytest.raises(SystemExit) as exit_:
        main([*TINY, *flags])
    err = capsys.readouterr().err
    assert (
        exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    )


def test_unknown_model_keys_and_impossible_models_are_named(tmp_path, capsys):
    unknown = _usage_error([*TINY, "--model", "colour=1"], capsys)
    assert "--model colour: unknown key; allowed keys:" in unknown
    assert main([*TINY, "--model", "n_heads=0"]) == 1
    assert "n_heads must be a positive integer" in capsys.readouterr().err
    assert main([*TINY, "--model", "context_len=2000000"]) == 1
    assert "needs more text than the data has" in capsys.readouterr().err
    assert main([*TINY, "--out", str(tmp_path)]) == 1
    assert "is a folder; give a file name" in capsys.readouterr().err


@pytest.mark.slow
def test_generate_prints_a_continuation_and_reads_a_prompt_file(
    checkpoint, tmp_path, capsys, monkeypatch
):
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                checkpoint,
                "--prompt",
                "ROMEO:",
                "--max-new-tokens",
                "20",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert text.startswith("ROMEO:") and len(text.rstrip("\n")) >= 6
    (tmp_path / "prompt.txt").write_bytes(b"KING:\r\n")  # a Windows file, as --input
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                checkpoint,
                "--prompt-file",
                str(tmp_path / "prompt.txt"),
                "--max-new-tokens",
                "5",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("KING:\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"QUEEN:")))
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                checkpoint,
                "--prompt-file",
                "-",
                "--max-new-tokens",
                "5",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("QUEEN:")


@pytest.mark.slow
def test_generate_handles_bad_prompts_with_a_message(checkpoint, capsys):
    assert main(["generate", "--checkpoint", checkpoint, "--prompt", "Café"]) == 1
    assert "'é'" in capsys.readouterr().err
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                checkpoint,
                "--prompt",
                "",
                "--max-new-tokens",
                "5",
            ]
        )
        == 0
    )
    assert "empty prompt" in capsys.readouterr().err
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                checkpoint,
                "--prompt",
                "a" * 50,
                "--max-new-tokens",
                "5",
            ]
        )
        == 0
    )
    assert (
        "the prompt has 50 tokens but the context holds 32" in capsys.readouterr().err
    )
    assert main(["generate", "--checkpoint", checkpoint + ".missing"]) == 1
    assert "no checkpoint at" in capsys.readouterr().err


def test_generate_refuses_bad_checkpoints_in_one_line(tmp_path, capsys):
    torch.save(
        {"model": {}, "config": {}, "format": "transformer_lib.translator/1"},
        tmp_path / "mt.pt",
    )
    torch.save(
        {
            "model": {},
            "config": {"vocab_size": 3},
            "tokenizer": CharTokenizer("abcd").to_dict(),
            "format": "transformer_lib.lm/1",
        },
        tmp_path / "wrong.pt",
    )
    (tmp_path / "empty.pt").write_bytes(b"")
    for name, message in (
        ("mt.pt", "not a transformer_lib.lm/1 one"),
        ("empty.pt", "is not a readable checkpoint"),
        ("wrong.pt", "weights do not fit its model configuration"),
    ):
        assert main(["generate", "--checkpoint", str(tmp_path / name)]) == 1
        err = capsys.readouterr().err
        assert (
            message in err
            and len(err.strip().splitlines()) == 1
            and "Traceback" not in err
        )


@pytest.mark.slow
def test_cached_and_uncached_cli_agree(checkpoint, capsys):
    args = [
        "generate",
        "--checkpoint",
        checkpoint,
        "--prompt",
        "KING:",
        "--max-new-tokens",
        "40",
        "--temperature",
        "0",
    ]
    main(args)
    cached = capsys.readouterr().out
    main(args + ["--no-cache"])
    assert capsys.readouterr().out == cached


def _usage_error(argv: list[str], capsys) -> str:
    """The one line `main(argv)` prints before it exits with status 2."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1, err
    return err


def test_train_lm_refuses_crossed_rates_and_says_when_nothing_is_saved(
    tmp_path, capsys, monkeypatch
):
    crossed = _usage_error([*TINY, "--lr", "0.001", "--min-lr", "0.01"], capsys)
    assert crossed.startswith("python -m transformer_lib train-lm: error: ")
    assert "min_lr" in crossed  # the settings' own message, naming the field
    monkeypatch.setenv("TRANSFORMER_DEVICE", "meta")
    # no --device: the variable decides
    assert "TRANSFORMER_DEVICE=meta: meta is not available" in _usage_error(
        TINY[:-2], capsys
    )
    monkeypatch.delenv("TRANSFORMER_DEVICE")
    assert main([*TINY, "--out", ""]) == 0
    assert "no --out, so this run is not saved" in capsys.readouterr().err


def test_generate_refuses_tiny_top_p_bad_bytes_and_a_closed_stdin(
    checkpoint, capsys, monkeypatch
):
    with pytest.raises(SystemExit):
        main(["generate", "--checkpoint", checkpoint, "--top-p", "1e-300"])
    assert "top_p must lie in (0, 1], >= 1.2e-38" in capsys.readouterr().err
    assert main(["generate", "--checkpoint", checkpoint, "--prompt", "caf\udce9"]) == 2
    assert "--prompt is not UTF-8 text" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", None)
    assert main(["generate", "--checkpoint", checkpoint, "--prompt-file", "-"]) == 2
    assert "standard input is closed" in capsys.readouterr().err


def test_ctrl_c_anywhere_is_one_line_and_status_130(monkeypatch, capsys):
    import transformer_lib.__main__ as entry

    def interrupted(argv=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(entry, "main", interrupted)
    assert entry.run_command([]) == 130
    err = capsys.readouterr().err
    assert err == "python -m transformer_lib: interrupted (Ctrl-C)\n"


def test_a_stdout_that_cannot_take_the_text_is_one_line(monkeypatch, capsys):
    import transformer_lib.__main__ as entry

    def ascii_stdout(argv=None):
        "汉".encode("ascii")  # what print does on an ASCII stdout

    monkeypatch.setattr(entry, "main", ascii_stdout)
    assert entry.run_command([]) == 1
    assert "set PYTHONIOENCODING=utf-8" in capsys.readouterr().err
