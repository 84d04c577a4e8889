"""The language model's trainer (notebook 12): batches, evaluation, exact resume, and
never losing work."""

import math
import os

import pytest
import torch

from transformer_lib import lm_loop, lm_train
from transformer_lib.checkpoints import CheckpointError, CheckpointMismatchError
from transformer_lib.gpt import GPT, GPTConfig
from transformer_lib.lm_train import (
    LMData,
    TrainSettings,
    evaluate,
    generate_text,
    get_batch,
    load_lm,
    train_lm,
)
from transformer_lib.tokenization import CharTokenizer
from transformer_lib.training import (
    NonFiniteLossError,
    TrainingInterrupted,
    bf16_supported,
)

TEXT = (
    "To be, or not to be, that is the question:\nWhether 'tis nobler in the "
    "mind to suffer\n" * 20
)
BASE = dict(
    preset="tiny",
    model={"dropout": 0.1},
    batch_size=4,
    max_iters=8,
    warmup_steps=2,
    eval_interval=4,
    eval_windows=2,
    device="cpu",
    progress=False,
    verbose=False,
)


def small_data() -> LMData:
    tok = CharTokenizer(TEXT)
    n = int(0.9 * len(TEXT))
    as_ids = lambda s: torch.tensor(tok.encode(s))  # noqa: E731
    return LMData(tok, as_ids(TEXT[:n]), as_ids(TEXT[n:]), TEXT[n:])


def train(path=None, **settings):
    return train_lm(
        TrainSettings(**{**BASE, "out": str(path) if path else None, **settings}),
        small_data(),
    )


def weights(path) -> dict:
    return torch.load(path, weights_only=True)["model"]


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
    straight = train(tmp_path / "a.pt")
    train(tmp_path / "b.pt", stop_at=5)  # "interrupted" at step 5
    resumed = train(tmp_path / "b.pt", existing="resume")
    a, b = weights(tmp_path / "a.pt"), weights(tmp_path / "b.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["val_loss"] == straight["val_loss"] and resumed["step"] == 8


def test_an_existing_checkpoint_is_never_replaced_by_accident(tmp_path):
    path = tmp_path / "ck.pt"
    train(path)
    before = path.read_bytes()
    with pytest.raises(
        FileExistsError, match="add --resume to continue that run, --restart"
    ):
        train(path)
    with pytest.raises(FileNotFoundError, match="to resume"):
        train(tmp_path / "none.pt", existing="resume")
    assert path.read_bytes() == before
    train(path, existing="restart", seed=1)  # explicit: a new run in its place
    assert path.read_bytes() != before


def test_resume_refuses_other_settings_and_extends_a_finished_run(tmp_path, capsys):
    path = tmp_path / "ck.pt"
    train(path)
    with pytest.raises(
        CheckpointMismatchError,
        match="batch_size: checkpoint 4, now 2; lr: checkpoint 0.005",
    ):
        train(path, existing="resume", batch_size=2, lr=1e-3)
    longer = train(path, existing="resume", max_iters=12, verbose=True)
    assert (
        longer["step"] == 12
        and "extending the run to 12 steps" in capsys.readouterr().out
    )
    assert torch.load(path, weights_only=True)["history"][-1]["lr"] == pytest.approx(
        5e-4
    )  # the floor


def test_a_diverging_run_stops_and_keeps_the_last_good_checkpoint(
    tmp_path, monkeypatch
):
    calls, real = {"n": 0}, lm_loop.clip_gradients

    def poisoning(model, max_norm):  # step 6 gets NaN gradients: the weights break
        calls["n"] += 1
        if calls["n"] == 6:
            for p in model.parameters():
                p.grad.fill_(float("nan"))
        return real(model, max_norm)

    # the trainer's steps are notebook 12's `train_step`, which clips in lm_loop
    monkeypatch.setattr(lm_loop, "clip_gradients", poisoning)
    with pytest.raises(
        NonFiniteLossError, match="the loss is nan at step 8 \\(learning rate"
    ):
        train(tmp_path / "ck.pt")
    saved = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert saved["step"] == 4 and all(
        torch.isfinite(w).all() for w in saved["model"].values()
    )


def test_a_learning_rate_that_diverges_is_stopped(tmp_path):
    with pytest.raises(NonFiniteLossError, match="the loss is \\S+ at step \\d+"):
        train(
            tmp_path / "ck.pt",
            lr=1e12,
            min_lr=1e12,
            warmup_steps=0,
            max_iters=40,
            eval_interval=40,
        )
    assert not (tmp_path / "ck.pt").exists()  # no save with broken weights


def test_ctrl_c_stops_after_a_step_and_saves(tmp_path, monkeypatch):
    class Asked:
        requested = True  # as if Ctrl-C came before the first step

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(lm_train, "StopRequest", Asked)
    with pytest.raises(
        TrainingInterrupted, match="stopped at step 0; saved .*--resume"
    ):
        train(tmp_path / "ck.pt")
    assert torch.load(tmp_path / "ck.pt", weights_only=True)["step"] == 0


def test_bad_model_settings_and_a_context_longer_than_the_text(tmp_path):
    with pytest.raises(ValueError, match="model must be a dict of ModernConfig fields"):
        train(model={"colour": 1})
    with pytest.raises(ValueError, match="n_heads must be a positive integer"):
        train(model={"n_heads": 0})
    with pytest.raises(ValueError, match="context_len 4096 needs more text"):
        train(model={"context_len": 4096})


def test_load_lm_refuses_what_it_cannot_use(tmp_path):
    train(tmp_path / "ck.pt")
    model, tok = load_lm(str(tmp_path / "ck.pt"), "cpu")
    assert tok.vocab_size == model.config.vocab_size and not model.training
    state = torch.load(tmp_path / "ck.pt", weights_only=True)
    cases = {"empty.pt": b"", "junk.pt": os.urandom(300)}
    for name, payload in cases.items():
        (tmp_path / name).write_bytes(payload)
        with pytest.raises(CheckpointError, match="is not a readable checkpoint"):
            load_lm(str(tmp_path / name), "cpu")
    torch.save({**state, "format": "transformer_lib.translator/1"}, tmp_path / "mt.pt")
    with pytest.raises(CheckpointError, match="not a transformer_lib.lm/1 one"):
        load_lm(str(tmp_path / "mt.pt"), "cpu")
    torch.save(
        {**state, "tokenizer": CharTokenizer("abc").to_dict()}, tmp_path / "vocab.pt"
    )
    with pytest.raises(CheckpointError, match="its tokenizer has 3 tokens, its model"):
        load_lm(str(tmp_path / "vocab.pt"), "cpu")
    torch.save(
        {**state, "model": {"tok_emb.weight": torch.zeros(2, 2)}},
        tmp_path / "damaged.pt",
    )
    with pytest.raises(CheckpointError, match="tok_emb.weight has shape \\(2, 2\\)"):
        load_lm(str(tmp_path / "damaged.pt"), "cpu")
    logged = []
    assert generate_text(
        str(tmp_path / "ck.pt"), "", 3, device="cpu", log=logged.append
    ).startswith("\n")
    assert logged and "empty prompt" in logged[0]


@pytest.mark.parametrize(
    "capability, native", [((7, 5), False), ((8, 0), True), ((9, 0), True)]
)
def test_bf16_only_on_gpus_that_multiply_it_natively(monkeypatch, capability, native):
    """A T4 (7.5, Colab's free GPU) emulates bf16, slower than fp32: autocast must stay
    off there."""
    monkeypatch.setattr(
        torch.cuda, "get_device_capability", lambda device=None: capability
    )
    assert bf16_supported(torch.device("cuda")) is native


def read_scalars(log_dir) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {
        tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def test_tensorboard_curves_while_training(tmp_path):
    pytest.importorskip("tensorboard")
    train(log_dir=str(tmp_path / "tb"))
    scalars = read_scalars(tmp_path / "tb")
    assert set(scalars) == {"train/loss", "valid/loss", "train/lr"}
    assert len(scalars["valid/loss"]) == 2 and all(
        math.isfinite(v) for v in scalars["valid/loss"]
    )


def test_notebook_11s_loop_and_the_library_trainer_give_the_same_losses():
    """train_lm is notebook 12's loop with run management around it: same seed, same
    steps, the same losses and the same weights (in fp32, on the CPU)."""
    from transformer_lib.lm_loop import train as core_train
    from transformer_lib.runtime import set_seed

    data, steps = small_data(), 6
    set_seed(0)
    model = GPT(GPTConfig.tiny(vocab_size=data.tokenizer.vocab_size))
    history = core_train(model, data, max_iters=steps, batch_size=4, lr=5e-3)
    settings = dict(preset="tiny", batch_size=4, max_iters=steps, dtype="fp32")
    result = train_lm(TrainSettings(**settings, device="cpu", progress=False), data)
    assert len(history) == len(result["history"]) == 1
    core, library = history[0], result["history"][0]
    assert core["step"] == library["step"] == steps
    assert core["train_loss"] == library["train_loss"]
    assert core["val_loss"] == library["val_loss"]
    trained = result["model"].state_dict()
    for name, weight in model.state_dict().items():
        assert torch.equal(weight, trained[name]), name


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(lr=-1), "lr must be > 0, got -1"),
        (dict(lr=1e-3, min_lr=1e-2), r"min_lr must be <= lr \(0.001\), got 0.01"),
        (dict(preset="huge"), "preset must be tiny, cpu, gpu or nanogpt_cpu"),
        (dict(batch_size=0), "batch_size must be an integer > 0, got 0"),
        (dict(betas=(0.9, 1.5)), r"betas must be two numbers in \[0, 1\)"),
        (dict(tokenizer="bpe", bpe_vocab=100), "bpe_vocab must be above 256"),
        (dict(existing="resume"), "--resume needs --out"),
        (
            dict(existing="both", out="x.pt"),
            "existing must be refuse, resume or restart",
        ),
        (dict(time_budget_s=0), "time_budget_s must be > 0 or None, got 0"),
    ],
)
def test_settings_refuse_bad_values_when_made(bad, message):
    with pytest.raises(ValueError, match=message):
        TrainSettings(**bad)


def test_every_setting_has_a_help_text():
    import dataclasses

    for f in dataclasses.fields(TrainSettings):
        assert f.metadata.get("help"), f"{f.name} has no help text"
