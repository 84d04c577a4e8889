"""The translator's library trainer (appendix A1): schedules, checkpoints, exact
resume, early stopping, and never losing work."""

import os
from dataclasses import replace

import pytest
import torch

from transformer_lib import mt_train, translator
from transformer_lib.checkpoints import CheckpointError, CheckpointMismatchError
from transformer_lib.mt_train import TrainConfig, fit, load_checked_translator, lr_at
from transformer_lib.seq2seq import Seq2SeqConfig, Transformer
from transformer_lib.training import NonFiniteLossError, TrainingInterrupted


def examples(n: int = 48, seed: int = 0) -> list:
    """Encoded pairs of a reversal task: <bos> = 1, <eos> = 2, pad = 0."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        src = torch.randint(
            3, 10, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g
        ).tolist()
        out.append((src + [2], [1] + src[::-1] + [2]))
    return out


CFG = TrainConfig(
    epochs=3,
    max_minutes=None,
    warmup_steps=3,
    max_tokens=60,
    patience=5,
    lr=3e-3,
    min_lr=6e-5,
)
TOKENIZERS = {"src": {"type": "test"}, "tgt": {"type": "test"}}


def new_model(**kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(
        Seq2SeqConfig.tiny(src_vocab_size=10, tgt_vocab_size=10, dropout=0.1, **kw)
    )


def run(path, cfg=CFG, model=None, existing="restart", **kw):
    model = model or new_model()
    history = fit(
        model,
        examples(),
        examples(12),
        cfg,
        path,
        TOKENIZERS,
        existing,
        progress=False,
        log=lambda *_: None,
        **kw,
    )
    return model, history


def test_schedules():
    cosine, inv = (
        replace(CFG, schedule="cosine", lr=1.0, min_lr=0.02),
        replace(CFG, schedule="inverse_sqrt", lr=1.0),
    )
    assert lr_at(0, cosine, 100) < lr_at(2, cosine, 100) <= 1.0  # warm-up
    assert lr_at(99, cosine, 100) == pytest.approx(0.02, abs=1e-3)
    assert lr_at(11, inv, 100) == pytest.approx((3 / 12) ** 0.5)
    with pytest.raises(ValueError, match="schedule must be"):
        lr_at(5, replace(CFG, schedule="linear"), 100)


def test_checkpoint_is_weights_only_and_the_run_learns(tmp_path):
    model, history = run(tmp_path / "ck.pt")
    assert len(history) == 3 and history[-1]["valid_loss"] < history[0]["valid_loss"]
    payload = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert (
        payload["finished"]
        and payload["epoch"] == 3
        and payload["tokenizer"] == TOKENIZERS
    )
    assert not list(
        tmp_path.glob(".*.tmp")
    )  # the temporary file was renamed into place


def test_resume_after_a_kill_mid_epoch_loses_nothing_else(tmp_path, monkeypatch):
    reference, _ = run(tmp_path / "straight.pt")
    per_epoch = (
        len(mt_train.epoch_batches(examples(), CFG.max_tokens, CFG.seed)) + 1
    )  # training batches + validation
    calls = {"n": 0}
    real_loss = translator.label_smoothed_cross_entropy

    def dying_loss(*args, **kw):
        calls["n"] += 1
        if calls["n"] == per_epoch + 3:  # the third batch of epoch 2
            raise KeyboardInterrupt
        return real_loss(*args, **kw)

    monkeypatch.setattr(translator, "label_smoothed_cross_entropy", dying_loss)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "killed.pt")
    assert torch.load(tmp_path / "killed.pt", weights_only=True)["epoch"] == 1
    monkeypatch.setattr(translator, "label_smoothed_cross_entropy", real_loss)
    resumed, history = run(tmp_path / "killed.pt", model=new_model(), existing="resume")
    assert [h["epoch"] for h in history] == [1, 2, 3]
    for (name, a), b in zip(
        reference.state_dict().items(), resumed.state_dict().values()
    ):
        torch.testing.assert_close(a, b, msg=name)


def test_early_stopping(tmp_path, monkeypatch):
    monkeypatch.setattr(translator, "validation_loss", lambda *_, **__: 1.0)  # flat
    _, history = run(tmp_path / "flat.pt", replace(CFG, epochs=10, patience=2))
    # the first epoch sets the best loss, two more fail to beat it
    assert len(history) == 3


def test_other_configuration_or_settings_are_refused(tmp_path):
    run(tmp_path / "ck.pt")
    with pytest.raises(
        CheckpointMismatchError, match="n_layers: checkpoint has 2, expected 3"
    ):
        run(tmp_path / "ck.pt", model=new_model(n_layers=3), existing="resume")
    with pytest.raises(
        CheckpointMismatchError,
        match="other settings \\(lr: checkpoint 0.003, now 0.001; seed",
    ):
        run(tmp_path / "ck.pt", cfg=replace(CFG, lr=1e-3, seed=1), existing="resume")


def test_another_seed_on_resume_is_named_rather_than_its_tokenizers(tmp_path):
    run(tmp_path / "ck.pt")
    # another seed splits the data otherwise, so the tokenizers differ too
    other = {"src": {"type": "test", "merges": [[3, 4]]}, "tgt": TOKENIZERS["tgt"]}
    with pytest.raises(CheckpointMismatchError) as e:
        fit(
            new_model(), examples(), examples(12), replace(CFG, seed=1),
            tmp_path / "ck.pt", other, "resume", progress=False, log=lambda *_: None
        )  # fmt: skip
    assert "other settings (seed: checkpoint 0, now 1)" in str(e.value)
    assert "tokenizer" not in str(e.value)


def test_load_checked_translator_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checked_translator(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="junk.pt is not a readable checkpoint"):
        load_checked_translator(tmp_path / "junk.pt")
    torch.save({"hello": 1}, tmp_path / "other.pt")
    with pytest.raises(
        CheckpointError,
        match="other.pt is not a transformer_lib.translator/1 checkpoint",
    ):
        load_checked_translator(tmp_path / "other.pt")
    torch.save(
        {"model": {}, "config": {}, "format": "transformer_lib.lm/1"},
        tmp_path / "lm.pt",
    )
    with pytest.raises(
        CheckpointError,
        match="lm.pt is a transformer_lib.lm/1 checkpoint, not a transformer_lib",
    ):
        load_checked_translator(tmp_path / "lm.pt")


def _tiny_translator_data() -> tuple[TrainConfig, dict]:
    """Notebook 09's data pipeline on 60 made-up pairs, with a one-epoch tiny model."""
    from transformer_lib.translator import prepare_data

    words = ["red", "cat", "sun", "old", "big", "tree", "sky", "dog"]
    pairs = [
        (f"The {a} {b} {i}.", f"{i}只{len(a)}的{len(b)}。")
        for i, (a, b) in enumerate(zip(words * 8, words[3:] + words * 7))
    ][:60]
    tiny = dict(d_model=16, n_heads=2, n_layers=1, d_ff=32)
    cfg = TrainConfig(
        n_valid=5, n_test=5, src_vocab_size=270, max_tokens=200, epochs=1,
        max_minutes=None, warmup_steps=2, model=tiny,
    )  # fmt: skip
    return cfg, prepare_data(cfg, pairs)


def test_notebook_09s_load_translator_reads_both_checkpoints(tmp_path):
    """09's save_translator file and fit's checkpoint (09's plus the optimizer and the
    run) load with 09's load_translator, and with load_checked_translator, which
    returns the same."""
    from transformer_lib.translator import load_translator, save_translator, train_loop

    cfg, data = _tiny_translator_data()
    torch.manual_seed(0)
    model = Transformer(data["model_config"])
    loop_run = train_loop(model, data["train"], data["valid"], cfg, log=lambda *_: 0)
    save_translator(tmp_path / "09.pt", model, loop_run, cfg, data)
    torch.manual_seed(0)
    fitted = Transformer(data["model_config"])
    history = fit(
        fitted, data["train"], data["valid"], cfg, tmp_path / "a1.pt",
        data["tokenizers"], progress=False, log=lambda *_: 0,
        extra={"src_chars": data["src_chars"]},
    )  # fmt: skip
    for name, trained in (("09.pt", model), ("a1.pt", fitted)):
        for best in (True, False):
            loaded, src_tok, tgt_tok, payload = load_translator(
                tmp_path / name, best=best
            )
            assert src_tok.to_dict() == data["tokenizers"]["src"]
            assert payload["train_config"]["seed"] == cfg.seed
            checked = load_checked_translator(tmp_path / name, best=best)
            assert [t.to_dict() for t in checked[1:3]] == [
                src_tok.to_dict(),
                tgt_tok.to_dict(),
            ]
            assert checked[3].keys() == payload.keys()
            for a, b in zip(
                loaded.state_dict().values(), checked[0].state_dict().values()
            ):
                torch.testing.assert_close(a, b)
        for a, b in zip(trained.state_dict().values(), loaded.state_dict().values()):
            torch.testing.assert_close(a, b)  # one epoch: the best is the last
    assert torch.load(tmp_path / "a1.pt", weights_only=True)["history"] == history


def test_an_existing_checkpoint_is_never_replaced_by_accident(tmp_path):
    path = tmp_path / "ck.pt"
    run(path)
    before = path.read_bytes()
    with pytest.raises(
        FileExistsError, match="--resume to continue that run, --restart"
    ):
        run(path, existing="refuse")
    with pytest.raises(FileNotFoundError, match="no checkpoint at .* to resume"):
        run(tmp_path / "none.pt", existing="resume")
    assert path.read_bytes() == before


def test_restart_keeps_the_old_file_until_the_first_save(tmp_path, monkeypatch):
    path = tmp_path / "ck.pt"
    run(path)
    before = path.read_bytes()

    def fail(*args, **kw):
        raise RuntimeError("dies in the first epoch")

    monkeypatch.setattr(translator, "label_smoothed_cross_entropy", fail)
    with pytest.raises(RuntimeError):
        run(path, existing="restart")
    assert path.read_bytes() == before


def test_a_diverging_run_stops_and_keeps_the_last_good_checkpoint(
    tmp_path, monkeypatch
):
    path = tmp_path / "ck.pt"
    run(path, cfg=replace(CFG, epochs=1))
    before = path.read_bytes()
    real = translator.label_smoothed_cross_entropy
    monkeypatch.setattr(
        translator,
        "label_smoothed_cross_entropy",
        lambda *a, **k: real(*a, **k) * float("nan"),
    )
    with pytest.raises(
        NonFiniteLossError, match="the loss is nan at step 5 \\(learning rate"
    ):
        run(path, cfg=replace(CFG, epochs=2), existing="resume")
    assert path.read_bytes() == before


def test_output_path_is_checked_before_any_training(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a folder"):
        run(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(PermissionError, match="cannot write"):
        run(tmp_path / "file" / "ck.pt")  # its folder would be a file


def test_ctrl_c_saves_mid_epoch_and_the_resumed_run_is_exact(tmp_path, monkeypatch):
    reference, _ = run(tmp_path / "straight.pt")
    real_step = mt_train.train_epoch
    calls = {"n": 0}

    class Asked:  # a StopRequest whose flag is set after 3 steps of epoch 2
        requested = False

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    asked = Asked()

    def clipping(model, max_norm):
        calls["n"] += 1
        if calls["n"] == 5 + 3:  # 5 steps per epoch
            asked.requested = True
        return 0.0

    monkeypatch.setattr(mt_train, "StopRequest", lambda: asked)
    real_clip = translator.clip_gradients
    monkeypatch.setattr(
        translator, "clip_gradients", lambda m, n: (clipping(m, n), real_clip(m, n))[1]
    )
    with pytest.raises(TrainingInterrupted, match="stopped at step 8, in epoch 2"):
        run(tmp_path / "stopped.pt")
    saved = torch.load(tmp_path / "stopped.pt", weights_only=True)
    assert (saved["epoch"], saved["batch"], saved["step"]) == (1, 3, 8)
    monkeypatch.undo()
    assert mt_train.train_epoch is real_step
    resumed, history = run(
        tmp_path / "stopped.pt", model=new_model(), existing="resume"
    )
    assert [h["epoch"] for h in history] == [1, 2, 3]
    for (name, a), b in zip(
        reference.state_dict().items(), resumed.state_dict().values()
    ):
        torch.testing.assert_close(a, b, msg=name)


def test_stale_temporary_files_are_removed_and_a_finished_run_can_be_extended(tmp_path):
    path = tmp_path / "ck.pt"
    run(path, cfg=replace(CFG, epochs=2))
    (tmp_path / ".ck.pt.abc123.tmp").write_bytes(b"half a save")
    logs = []
    history = fit(
        new_model(),
        examples(),
        examples(12),
        replace(CFG, epochs=3),
        path,
        TOKENIZERS,
        "resume",
        progress=False,
        log=logs.append,
    )
    assert not list(tmp_path.glob(".*.tmp"))
    assert any("removed .ck.pt.abc123.tmp" in m for m in logs) and any(
        "extending the run to 3" in m for m in logs
    )
    assert [h["epoch"] for h in history] == [1, 2, 3]


@pytest.mark.skipif(
    os.name != "posix", reason="no POSIX file modes (umask, 0o644) here"
)
def test_checkpoints_get_the_mode_of_any_new_file(tmp_path):
    old = os.umask(0o022)
    try:
        run(tmp_path / "ck.pt", cfg=replace(CFG, epochs=1))
    finally:
        os.umask(old)
    assert (tmp_path / "ck.pt").stat().st_mode & 0o777 == 0o644


def test_tensorboard_curves_with_validation_bleu(tmp_path):
    pytest.importorskip("tensorboard")
    from test_lm_train import read_scalars

    run(
        tmp_path / "ck.pt",
        cfg=replace(CFG, epochs=2),
        log_dir=str(tmp_path / "tb"),
        valid_bleu=lambda m: 12.5,
    )
    scalars = read_scalars(tmp_path / "tb")
    assert set(scalars) == {"train/loss", "train/lr", "valid/loss", "valid/bleu"}
    assert scalars["valid/bleu"] == [12.5, 12.5] and len(scalars["valid/loss"]) == 2


def test_a_resumed_run_refuses_moments_that_are_not_finite():
    """A damaged optimizer state, a NaN in Adam's moments, is refused in one line, not
    carried into every step of the resumed run."""
    from transformer_lib.checkpoints import restore_training

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    restore_training("run.pt", state, model, optimizer, rng={})  # sound: accepted
    state["optimizer"]["state"][0]["exp_avg"][0, 0] = float("nan")
    with pytest.raises(CheckpointError, match="damaged .*holds NaN or inf"):
        restore_training("run.pt", state, model, optimizer, rng={})
