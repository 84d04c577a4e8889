"""Notebook 09's training loop and the library trainer of appendix A1 compute the same
run: the same losses, step by step and epoch by epoch, for the same seed."""

import math
from dataclasses import replace

import pytest
import test_mt_train  # the same task and settings as the trainer's tests
import torch

from transformer_lib.checkpoints import load_checkpoint
from transformer_lib.mt_train import TrainConfig, fit
from transformer_lib.seq2seq import Seq2SeqConfig, Transformer
from transformer_lib.translator import CHECKPOINT_FORMAT, train_loop

CFG = replace(test_mt_train.CFG, dtype="fp32")  # both runs in fp32 on every machine
examples = test_mt_train.examples


def new_model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(Seq2SeqConfig.tiny(src_vocab_size=10, tgt_vocab_size=10))


def test_the_core_loop_and_fit_give_the_same_losses():
    train, valid = examples(), examples(12, seed=1)
    torch.manual_seed(1)  # the dropout masks of both runs
    core = train_loop(new_model(), train, valid, CFG, log=lambda *_: None)
    torch.manual_seed(1)
    history = fit(new_model(), train, valid, CFG, progress=False, log=lambda *_: None)
    assert len(core.history) == len(history) == CFG.epochs
    for ours, theirs in zip(core.history, history):
        assert ours["step"] == theirs["step"] and ours["lr"] == theirs["lr"]
        assert ours["train_loss"] == theirs["train_loss"]
        assert ours["valid_loss"] == theirs["valid_loss"]
    assert history[-1]["valid_loss"] < history[0]["valid_loss"]  # it learnt something


def test_the_core_loop_curve_matches_fit_step_by_step(tmp_path):
    train, valid = examples(), examples(12, seed=1)
    torch.manual_seed(1)
    core = train_loop(new_model(), train, valid, CFG, log=lambda *_: None)
    torch.manual_seed(1)
    path = tmp_path / "run.pt"
    fit(new_model(), train, valid, CFG, path, progress=False, log=lambda *_: None)
    saved = load_checkpoint(path, kind=CHECKPOINT_FORMAT)
    assert [s for s, _ in core.curve] == list(range(10, core.step + 1, 10))
    assert all(math.isfinite(loss) for _, loss in core.curve)
    assert core.curve == saved["curve"]
    assert core.step == saved["step"]


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(lr=-1), "lr must be > 0, got -1"),
        (dict(epochs=0), "epochs must be an integer > 0, got 0"),
        (dict(schedule="linear"), "schedule must be cosine or inverse_sqrt"),
        (dict(label_smoothing=1.0), "label_smoothing must be in [0, 1)"),
        (dict(max_minutes=0), "max_minutes must be > 0 or None, got 0"),
        (dict(betas=(0.9, 1.0)), "betas must be two numbers in [0, 1)"),
        (dict(dtype="fp16"), "dtype must be fp32, bf16 or auto"),
    ],
)
def test_settings_are_refused_where_they_are_made(change, message):
    with pytest.raises(ValueError) as error:
        TrainConfig(**change)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_every_setting_has_a_help_line():
    for name, f in TrainConfig.__dataclass_fields__.items():
        assert f.metadata.get("help"), name


def test_the_saved_translator_holds_the_best_and_the_last_weights(tmp_path):
    """load_translator(best=False): the last epoch's weights, not the best again."""
    from transformer_lib.translator import (
        TranslatorRun,
        load_translator,
        save_translator,
    )

    cfg, data = test_mt_train._tiny_translator_data()
    model = Transformer(data["model_config"])
    best = {k: v.clone() for k, v in model.state_dict().items()}
    last = {k: v + 1 if v.is_floating_point() else v for k, v in best.items()}
    run = TranslatorRun(best_model=best, recent_models=[last])
    model.load_state_dict(best)  # as train_loop leaves it
    save_translator(tmp_path / "t.pt", model, run, cfg, data)
    for flag, want in ((True, best), (False, last)):
        got = load_translator(tmp_path / "t.pt", best=flag)[0].state_dict()
        assert all(torch.equal(got[k], want[k]) for k in want)


def test_a_saved_translator_is_replaced_only_on_purpose_and_in_one_step(
    tmp_path, monkeypatch
):
    """save_translator refuses to overwrite; with replace=True (a restart) the new file
    takes the old one's place in one step: if writing fails, the old one is intact."""
    import pytest

    from transformer_lib import files
    from transformer_lib.translator import TranslatorRun, save_translator

    cfg, data = test_mt_train._tiny_translator_data()
    model = Transformer(data["model_config"])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    run = TranslatorRun(best_model=state, recent_models=[state])
    path = tmp_path / "t.pt"
    save_translator(path, model, run, cfg, data)
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="already holds a trained translator"):
        save_translator(path, model, run, cfg, data)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        save_translator(path, model, run, cfg, data, replace=True)
    assert path.read_bytes() == before  # the old model, whole
    monkeypatch.undo()
    run.history = [{"epoch": 1}]
    save_translator(path, model, run, cfg, data, replace=True)
    assert path.read_bytes() != before
