"""`python -m transformer_lib translate` and `train-mt`: clear messages, never a
traceback."""

import pytest
import torch

from transformer_lib.__main__ import main
from transformer_lib.mt_train import TrainConfig, fit
from transformer_lib.seq2seq import Seq2SeqConfig, Transformer
from transformer_lib.tokenization import SPECIAL_TOKENS, BPETokenizer, CharTokenizer
from transformer_lib.translation_data import encode_pair

PAIRS = [
    ("Where is the station?", "车站在哪里？"),
    ("I like cats.", "我喜欢猫。"),
    ("Hi.", "你好。"),
] * 4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny trained translator, saved the way train-mt saves one."""
    path = tmp_path_factory.mktemp("mt") / "tiny.pt"
    # Our own byte-level BPE breaks ties the same way every run (HF's trainer does not),
    # so the fixture repeats.
    src_tok = BPETokenizer(specials=SPECIAL_TOKENS)
    src_tok.train(" ".join(en for en, _ in PAIRS), 280)
    tgt_tok = CharTokenizer([zh for _, zh in PAIRS], specials=SPECIAL_TOKENS)
    config = Seq2SeqConfig.tiny(src_tok.vocab_size, tgt_tok.vocab_size, context_len=16)
    data = [encode_pair(en, zh, src_tok, tgt_tok, 16) for en, zh in PAIRS]
    cfg = TrainConfig(
        epochs=12, max_minutes=None, warmup_steps=2, lr=5e-3, max_tokens=400
    )
    torch.manual_seed(0)  # the model's initial weights
    fit(
        Transformer(config),
        data,
        data,
        cfg,
        path,
        {"src": src_tok.to_dict(), "tgt": tgt_tok.to_dict()},
        progress=False,
        log=lambda *_: None,
        extra={"src_chars": "".join(sorted({c for en, _ in PAIRS for c in en}))},
    )
    return str(path)


def test_translate_prints_a_translation(checkpoint, capsys):
    assert main(["translate", "--checkpoint", checkpoint, "Where is the station?"]) == 0
    out, err = capsys.readouterr()
    assert (
        "车" in out and "<" not in out and err == ""
    )  # it has learnt its three sentences


def test_several_sentences_and_methods(checkpoint, capsys):
    for method in ("greedy", "beam", "sample"):
        assert (
            main(
                [
                    "translate",
                    "--checkpoint",
                    checkpoint,
                    "--method",
                    method,
                    "Hi.",
                    "I like cats.",
                ]
            )
            == 0
        )
        lines = capsys.readouterr().out.strip().splitlines()
        assert [line.split("\t")[0] for line in lines] == ["Hi.", "I like cats."]


def test_empty_input_is_refused(checkpoint, capsys):
    assert main(["translate", "--checkpoint", checkpoint, "   "]) == 2
    assert "nothing to translate" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", checkpoint]) == 2


def test_unknown_characters_and_long_input_are_explained(checkpoint, capsys):
    assert main(["translate", "--checkpoint", checkpoint, "Où est la gare? ☃"]) == 0
    assert "never appeared in the training English" in capsys.readouterr().err
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                checkpoint,
                "--method",
                "greedy",
                "cats " * 40,
            ]
        )
        == 0
    )
    assert (
        "only the first 15 are translated (the model's context is 16)"
        in capsys.readouterr().err
    )


def test_bad_checkpoints_give_a_message_not_a_traceback(tmp_path, capsys):
    assert main(["translate", "--checkpoint", str(tmp_path / "none.pt"), "Hi."]) == 1
    assert "no checkpoint at" in capsys.readouterr().err
    (tmp_path / "junk.pt").write_text("junk")
    assert main(["translate", "--checkpoint", str(tmp_path / "junk.pt"), "Hi."]) == 1
    assert "is not a readable checkpoint" in capsys.readouterr().err


def test_train_mt_never_replaces_a_checkpoint_by_accident(checkpoint, capsys):
    before = open(checkpoint, "rb").read()
    assert main(["train-mt", "--quick", "--out", checkpoint, "--no-progress"]) == 1
    assert "already holds a checkpoint: add --resume" in capsys.readouterr().err
    assert (
        main(["train-mt", "--quick", "--out", checkpoint, "--no-progress", "--resume"])
        == 1
    )
    assert "was trained with other settings" in capsys.readouterr().err
    assert open(checkpoint, "rb").read() == before


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--epochs", "0"], "epochs"),
        (["--lr", "nan"], "--lr"),
        (["--max-minutes", "-1"], "max_minutes"),
        (["--resume", "--restart"], "not allowed with"),
        (["--device", "foo"], "--device"),
        (["--betas", "0.9", "1"], "betas"),
    ],
)
def test_train_mt_options_are_checked_in_one_line(flags, message, capsys):
    """One line naming the flag, or the field when the settings refuse the value."""
    with pytest.raises(SystemExit) as exit_:
        main(["train-mt", "--quick", *flags])
    err = capsys.readouterr().err
    assert (
        exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    )


def test_translate_reads_a_file_or_stdin(checkpoint, tmp_path, capsys, monkeypatch):
    (tmp_path / "in.txt").write_text("Hi.\n\nI like cats.\n")
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                checkpoint,
                "--method",
                "greedy",
                "--input",
                str(tmp_path / "in.txt"),
            ]
        )
        == 0
    )
    assert [
        line.split("\t")[0] for line in capsys.readouterr().out.strip().splitlines()
    ] == ["Hi.", "I like cats."]
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Hi.\n")))
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                checkpoint,
                "--method",
                "greedy",
                "--input",
                "-",
            ]
        )
        == 0
    )
    assert (
        len(capsys.readouterr().out.strip().splitlines()) == 1
    )  # one sentence in, one translation out
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                checkpoint,
                "--input",
                str(tmp_path / "missing.txt"),
            ]
        )
        == 2
    )
    assert "no file at" in capsys.readouterr().err


def test_a_language_model_checkpoint_is_refused_by_translate(tmp_path, capsys):
    torch.save(
        {"model": {}, "config": {}, "format": "transformer_lib.lm/1"},
        tmp_path / "lm.pt",
    )
    assert main(["translate", "--checkpoint", str(tmp_path / "lm.pt"), "Hi."]) == 1
    assert "not a transformer_lib.translator/1 one" in capsys.readouterr().err


def test_traditional_script_is_a_conversion_and_sampling_at_temperature_0_is_refused(
    checkpoint, capsys
):
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                checkpoint,
                "--method",
                "greedy",
                "Where is the station?",
            ]
        )
        == 0
    )
    simplified = capsys.readouterr().out.strip()
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                checkpoint,
                "--method",
                "greedy",
                "--script",
                "traditional",
                "Where is the station?",
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    from transformer_lib.data import to_traditional

    assert (
        out.strip() == to_traditional(simplified) and "converted to Traditional" in err
    )
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "translate",
                "--checkpoint",
                checkpoint,
                "--method",
                "sample",
                "--temperature",
                "0",
                "Hi.",
            ]
        )
    assert exit_.value.code == 2
    assert "temperature 0 is greedy decoding: give method greedy" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--beam-size", "100000"], "at most 1000"),
        (["--length-penalty", "1e308"], "in [0, 10]"),
    ],
)
def test_translate_refuses_absurd_beams_in_one_line(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["translate", *flags, "Hello."])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.splitlines()) == 1


def test_train_mt_refuses_crossed_rates_and_a_bad_device_variable(
    capsys, monkeypatch, tmp_path
):
    out = str(tmp_path / "x.pt")
    prog = "python -m transformer_lib train-mt: error:"
    for argv, message in [
        (["--min-lr", "1"], "min_lr"),
        (["--schedule", "inverse_sqrt", "--warmup-steps", "0"], "warmup_steps"),
    ]:  # the settings' own message, whatever its words, naming the field
        with pytest.raises(SystemExit) as exit_:
            main(["train-mt", "--quick", "--out", out, *argv])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith(prog) and message in err, err
        assert len(err.splitlines()) == 1
    monkeypatch.setenv("TRANSFORMER_DEVICE", "garbage")
    with pytest.raises(SystemExit):
        main(["train-mt", "--quick", "--out", out])
    assert capsys.readouterr().err.startswith(f"{prog} TRANSFORMER_DEVICE=garbage")


def test_translate_output_into_a_closed_pipe_ends_quietly(checkpoint, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    many = tmp_path / "many.txt"
    many.write_text("This is a sentence.\n" * 300)
    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-m", "transformer_lib", "translate", "--checkpoint"]
    # a pipe whose reader is already gone (as after `| head` exits): deterministic,
    # where a real `head` may still be reading when a short output has all been written
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        writer = subprocess.run(
            [*command, checkpoint, "--method", "greedy", "--input", str(many)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
    finally:
        os.close(write_end)
    assert writer.returncode == 141 and "Traceback" not in writer.stderr


def test_tokenizer_records_of_the_wrong_type_end_in_one_line(
    checkpoint, tmp_path, capsys
):
    state = torch.load(checkpoint, weights_only=True)
    state["src_chars"] = 12345  # the training English's characters, as a number
    torch.save(state, tmp_path / "edited.pt")
    assert main(["translate", "--checkpoint", str(tmp_path / "edited.pt"), "Hi."]) == 1
    err = capsys.readouterr().err
    assert "src_chars is of the wrong type" in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_translate_prints_each_window_as_it_is_done_in_input_order(
    checkpoint, capsys, monkeypatch
):
    """A long input shows its first translations before the rest are made (Ctrl-C
    keeps them), in input order, each the one the whole input at once gives."""
    import transformer_lib.decoding as decoding
    import transformer_lib.mt_cli as mt_cli

    sentences = ["I like cats.", "Hi.", "Where is the station?", "Hi.", "I like cats."]
    argv = ["translate", "--checkpoint", checkpoint, "--method", "greedy", *sentences]
    assert main(argv) == 0
    whole = capsys.readouterr().out
    printed_before, translate = [], decoding.translate

    def translate_and_look(model, src_tok, tgt_tok, window, **kw):
        printed_before.append(capsys.readouterr().out)
        return translate(model, src_tok, tgt_tok, window, **kw)

    monkeypatch.setattr(decoding, "translate", translate_and_look)
    monkeypatch.setattr(mt_cli, "WINDOW", 2)
    assert main(argv) == 0
    printed = [*printed_before, capsys.readouterr().out]
    assert [p.count("\n") for p in printed] == [0, 2, 2, 1]
    assert "".join(printed) == whole
    assert [line.split("\t")[0] for line in whole.splitlines()] == sentences
