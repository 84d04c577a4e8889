"""transformer_lib.lm_cli: batches, evaluation, exact resume, and the train-lm / generate commands."""

import math

import pytest
import torch

from transformer_lib.__main__ import main
from transformer_lib.gpt import GPT, GPTConfig
from transformer_lib.lm_cli import LMData, TrainSettings, bf16_supported, evaluate, get_batch, train_lm
from transformer_lib.tokenization import CharTokenizer

TEXT = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 20


def small_data() -> LMData:
    tok = CharTokenizer(TEXT)
    n = int(0.9 * len(TEXT))
    as_ids = lambda s: torch.tensor(tok.encode(s))  # noqa: E731
    return LMData(tok, as_ids(TEXT[:n]), as_ids(TEXT[n:]), TEXT[n:])


def test_batches_are_shifted_windows():
    ids = torch.arange(100)
    x, y = get_batch(ids, 5, 8, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 8)
    assert torch.equal(y, x + 1) and int(y.max()) < 100


def test_evaluate_predicts_every_token_once():
    model = GPT(GPTConfig.tiny(context_len=16))
    ids = torch.randint(0, 65, (101,))
    loss, count = evaluate(model, ids, batch_size=3)
    assert count == 100 and math.isfinite(loss)
    logits, _ = model(ids[:16][None])  # the first window by hand
    first = torch.nn.functional.cross_entropy(logits[0], ids[1:17], reduction="sum")
    assert evaluate(model, ids[:17])[0] == pytest.approx(first.item() / 16, rel=1e-5)


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    data = small_data()
    base = dict(preset="tiny", model={"dropout": 0.1}, batch_size=4, max_iters=8, warmup=2, eval_interval=4,
                eval_windows=2, device="cpu", progress=False, verbose=False)
    straight = train_lm(TrainSettings(**base, out=str(tmp_path / "a.pt")), data)
    train_lm(TrainSettings(**base, out=str(tmp_path / "b.pt"), stop_at=5), data)  # "interrupted" at step 5
    resumed = train_lm(TrainSettings(**base, out=str(tmp_path / "b.pt"), resume=True), data)
    a = torch.load(tmp_path / "a.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "b.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["val_loss"] == straight["val_loss"] and resumed["step"] == 8


def test_resume_with_another_model_is_refused(tmp_path, capsys):
    out = str(tmp_path / "ck.pt")
    common = ["train-lm", "--preset", "tiny", "--max-iters", "2", "--batch-size", "2", "--no-progress",
              "--device", "cpu", "--out", out]
    assert main(common) == 0
    assert main(common + ["--resume", "--model", "n_layers=3"]) == 2
    assert "n_layers: checkpoint has 2, expected 3" in capsys.readouterr().err


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("lm") / "tiny.pt")
    assert main(["train-lm", "--preset", "tiny", "--max-iters", "3", "--batch-size", "2", "--no-progress",
                 "--device", "cpu", "--out", out]) == 0
    return out


def test_generate_prints_a_continuation(checkpoint, capsys):
    assert main(["generate", "--checkpoint", checkpoint, "--prompt", "ROMEO:", "--max-new-tokens", "20"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("ROMEO:") and len(text.rstrip("\n")) >= 6


def test_generate_handles_bad_prompts_with_a_message(checkpoint, capsys):
    assert main(["generate", "--checkpoint", checkpoint, "--prompt", "Café"]) == 2
    assert "'é'" in capsys.readouterr().err
    assert main(["generate", "--checkpoint", checkpoint, "--prompt", "", "--max-new-tokens", "5"]) == 0
    assert "empty prompt" in capsys.readouterr().err
    assert main(["generate", "--checkpoint", checkpoint, "--prompt", "a" * 50, "--max-new-tokens", "5"]) == 0
    assert "the prompt has 50 tokens but the context holds 32" in capsys.readouterr().err
    assert main(["generate", "--checkpoint", checkpoint + ".missing"]) == 2
    assert "no checkpoint at" in capsys.readouterr().err


def test_cached_and_uncached_cli_agree(checkpoint, capsys):
    args = ["generate", "--checkpoint", checkpoint, "--prompt", "KING:", "--max-new-tokens", "40", "--temperature", "0"]
    main(args)
    cached = capsys.readouterr().out
    main(args + ["--no-cache"])
    assert capsys.readouterr().out == cached


@pytest.mark.parametrize("capability, native", [((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_bf16_only_on_gpus_that_multiply_it_natively(monkeypatch, capability, native):
    """A T4 (7.5, Colab's free GPU) emulates bf16, slower than fp32: autocast must stay off there."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert bf16_supported(torch.device("cuda")) is native
