"""Training loop: schedules, atomic weights_only checkpoints, resume after a kill mid-epoch, early stopping, refusals."""

from dataclasses import replace

import pytest
import torch

from transformer_lib import mt_train
from transformer_lib.mt_train import TrainConfig, fit, load_translator, lr_at
from transformer_lib.seq2seq import Seq2SeqConfig, Transformer
from transformer_lib.training import CheckpointMismatchError


def examples(n: int = 48) -> list:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        src = torch.randint(3, 10, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist()
        out.append((src + [2], [1] + src[::-1] + [2]))
    return out


CFG = TrainConfig(epochs=3, max_minutes=None, warmup_steps=3, max_tokens=60, patience=5, peak_lr=3e-3)
TOKENIZERS = {"src": {"type": "test"}, "tgt": {"type": "test"}}


def new_model(**kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(Seq2SeqConfig.tiny(src_vocab_size=10, tgt_vocab_size=10, dropout=0.1, **kw))


def run(path, cfg=CFG, model=None, **kw):
    model = model or new_model()
    history = fit(model, examples(), examples(12), cfg, path, TOKENIZERS, progress=False, log=lambda *_: None, **kw)
    return model, history


def test_schedules():
    cosine, inv = replace(CFG, schedule="cosine", peak_lr=1.0), replace(CFG, schedule="inverse_sqrt", peak_lr=1.0)
    assert lr_at(0, cosine, 100) < lr_at(2, cosine, 100) <= 1.0  # warm-up
    assert lr_at(99, cosine, 100) == pytest.approx(CFG.min_lr_ratio, abs=1e-3)
    assert lr_at(11, inv, 100) == pytest.approx((3 / 12) ** 0.5)
    with pytest.raises(ValueError, match="schedule must be"):
        lr_at(5, replace(CFG, schedule="linear"), 100)


def test_checkpoint_is_weights_only_and_the_run_learns(tmp_path):
    model, history = run(tmp_path / "ck.pt")
    assert len(history) == 3 and history[-1]["valid_loss"] < history[0]["valid_loss"]
    payload = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert payload["finished"] and payload["epoch"] == 3 and payload["tokenizer"] == TOKENIZERS
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was renamed into place


def test_resume_after_a_kill_mid_epoch_loses_nothing_else(tmp_path, monkeypatch):
    reference, _ = run(tmp_path / "straight.pt")
    per_epoch = len(mt_train._batches(examples(), CFG.max_tokens, CFG.seed)) + 1  # training batches + validation
    calls = {"n": 0}
    real_loss = mt_train.label_smoothed_cross_entropy

    def dying_loss(*args, **kw):
        calls["n"] += 1
        if calls["n"] == per_epoch + 3:  # the third batch of epoch 2
            raise KeyboardInterrupt
        return real_loss(*args, **kw)

    monkeypatch.setattr(mt_train, "label_smoothed_cross_entropy", dying_loss)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "killed.pt")
    assert torch.load(tmp_path / "killed.pt", weights_only=True)["epoch"] == 1
    monkeypatch.setattr(mt_train, "label_smoothed_cross_entropy", real_loss)
    resumed, history = run(tmp_path / "killed.pt", model=new_model())
    assert [h["epoch"] for h in history] == [1, 2, 3]
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)


def test_early_stopping(tmp_path):
    _, history = run(tmp_path / "flat.pt", replace(CFG, peak_lr=0.0, epochs=10, patience=2))
    assert len(history) == 3  # the first epoch sets the best loss, two more fail to beat it


def test_other_configuration_or_settings_are_refused(tmp_path):
    run(tmp_path / "ck.pt")
    with pytest.raises(CheckpointMismatchError, match="n_layers: checkpoint has 2, expected 3"):
        run(tmp_path / "ck.pt", model=new_model(n_layers=3))
    with pytest.raises(ValueError, match="other settings \\(peak_lr\\)"):
        run(tmp_path / "ck.pt", cfg=replace(CFG, peak_lr=1e-3))


def test_load_translator_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_translator(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="junk.pt is not a readable checkpoint"):
        load_translator(tmp_path / "junk.pt")
    torch.save({"hello": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="other.pt is not a translator checkpoint"):
        load_translator(tmp_path / "other.pt")
