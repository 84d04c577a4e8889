"""training, checkpoints, files (notebook 09): schedules, AdamW groups, clipping, atomic
checkpoints, refusals."""

import math

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.checkpoints import (
    CheckpointError,
    CheckpointMismatchError,
    changed_settings,
    load_checkpoint,
    save_checkpoint,
    start_run,
)
from transformer_lib.files import atomic_write, check_writable, stale_temporaries
from transformer_lib.gpt import GPT, GPTConfig
from transformer_lib.training import (
    StopRequest,
    check_finite,
    clip_gradients,
    make_adamw,
    param_groups,
    warmup_cosine,
    warmup_inverse_sqrt,
)

FAST = settings(derandomize=True, deadline=None, max_examples=30)


@FAST
@given(
    st.integers(1, 200),
    st.integers(201, 5000),
    st.floats(1e-5, 1e-2),
    st.floats(0.0, 0.9),
)
def test_warmup_cosine_shape(warmup, total, max_lr, min_frac):
    min_lr = max_lr * min_frac
    lrs = [warmup_cosine(s, max_lr, warmup, total, min_lr) for s in range(total + 5)]
    assert 0 < lrs[0] < max_lr and lrs[warmup - 1] < max_lr
    assert all(
        a < b for a, b in zip(lrs[:warmup], lrs[1:warmup])
    )  # rising during warm-up
    assert lrs[warmup] == pytest.approx(max_lr)
    assert all(
        a >= b - 1e-15 for a, b in zip(lrs[warmup:], lrs[warmup + 1 :])
    )  # then never rising
    assert lrs[total] == lrs[-1] == pytest.approx(min_lr)
    # halfway down the cosine: exactly between the peak and the floor
    if (total - warmup) % 2 == 0:
        mid = warmup + (total - warmup) // 2
        assert lrs[mid] == pytest.approx((max_lr + min_lr) / 2, rel=1e-9)


@FAST
@given(st.integers(1, 4000), st.sampled_from([64, 128, 512]), st.integers(0, 20000))
def test_inverse_sqrt_is_the_transformer_schedule(warmup, d_model, step):
    noam = d_model**-0.5 * min((step + 1) ** -0.5, (step + 1) * warmup**-1.5)
    assert warmup_inverse_sqrt(
        step, (d_model * warmup) ** -0.5, warmup
    ) == pytest.approx(noam)
    with pytest.raises(ValueError, match="warmup_steps must be >= 1"):
        warmup_inverse_sqrt(step, 1e-3, 0)


def test_weight_decay_only_on_linear_matrices():
    model = GPT(GPTConfig.tiny(bias=True, norm="layer"))
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - {
        id(model.tok_emb.weight)
    }
    assert {id(p) for p in decay["params"]} == linear
    assert id(model.tok_emb.weight) in {
        id(p) for p in no_decay["params"]
    }  # tied: counted as an embedding
    assert all(
        p.dim() == 1 or id(p) in {id(model.tok_emb.weight), id(model.pos_emb.weight)}
        for p in no_decay["params"]
    )
    assert len(decay["params"]) + len(no_decay["params"]) == len(
        list(model.parameters())
    )
    with_emb, _ = param_groups(model, 0.1, decay_embeddings=True)
    assert len(with_emb["params"]) == len(decay["params"]) + 2
    assert make_adamw(model, 1e-3).param_groups[1]["weight_decay"] == 0.0


@FAST
@given(st.floats(0.01, 10.0), st.floats(0.1, 100.0))
def test_clipping_bounds_the_global_norm(max_norm, scale):
    model = nn.Linear(7, 5)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * scale
    before = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
    assert clip_gradients(model, max_norm) == pytest.approx(before, rel=1e-5)
    after = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
    assert after == pytest.approx(min(before, max_norm), rel=1e-4)


def test_checkpoint_round_trip(tmp_path):
    model = GPT(GPTConfig.tiny())
    opt = make_adamw(model, 1e-3)
    model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))[
        1
    ].backward()
    opt.step()
    config, tok = (
        model.config.to_dict(),
        {"type": "char", "specials": [], "chars": "abc"},
    )
    path = save_checkpoint(
        tmp_path / "run" / "ck.pt",
        model,
        opt,
        config=config,
        tokenizer=tok,
        step=7,
        rng=torch.get_rng_state(),
    )
    assert [p.name for p in path.parent.iterdir()] == [
        "ck.pt"
    ]  # no temporary file left behind
    state = load_checkpoint(path, expected_config=config, expected_tokenizer=tok)
    assert (
        state["step"] == 7 and state["config"] == config and state["tokenizer"] == tok
    )
    fresh = GPT(GPTConfig.tiny())
    fresh.load_state_dict(state["model"])
    for a, b in zip(fresh.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)
    make_adamw(fresh, 1e-3).load_state_dict(state["optimizer"])


def test_interrupted_save_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    model = GPT(GPTConfig.tiny())
    path = save_checkpoint(tmp_path / "ck.pt", model, config={"a": 1}, step=1)

    def broken_save(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, model, config={"a": 1}, step=2)
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]


def test_mismatches_are_refused_by_name(tmp_path):
    config = GPTConfig.tiny().to_dict()
    path = save_checkpoint(
        tmp_path / "ck.pt",
        GPT(GPTConfig.tiny()),
        config=config,
        tokenizer={"type": "char", "chars": "abc"},
    )
    with pytest.raises(
        CheckpointMismatchError, match="n_layers: checkpoint has 2, expected 3"
    ):
        load_checkpoint(path, expected_config={**config, "n_layers": 3})
    with pytest.raises(
        CheckpointError,
        match="is a unlabelled checkpoint, not a transformer_lib.lm/1 one",
    ):
        load_checkpoint(path, kind="transformer_lib.lm/1")
    with pytest.raises(
        CheckpointMismatchError,
        match="tokenizer chars: checkpoint has 'abc', expected 'abd'",
    ):
        load_checkpoint(path, expected_tokenizer={"type": "char", "chars": "abd"})
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")
    assert math.isfinite(load_checkpoint(path, expected_config=config)["step"])


def test_a_file_that_would_run_code_is_refused_in_one_line(tmp_path, recwarn):
    import pickle

    import numpy as np

    class Evil:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    (tmp_path / "evil.pt").write_bytes(pickle.dumps({"model": Evil()}))
    torch.save({"model": Evil()}, tmp_path / "evil_zip.pt")
    torch.save({"model": np.array([1], dtype=object)}, tmp_path / "numpy.pt")
    said = {}
    for name in ("evil.pt", "evil_zip.pt", "numpy.pt"):
        with pytest.raises(CheckpointError, match="which a safe load refuses") as e:
            load_checkpoint(tmp_path / name)
        # our words only: no torch advice, no terminal colour codes, no warnings
        said[name] = str(e.value)
        assert "\n" not in said[name] and "\x1b" not in said[name]
        assert "weights_only" not in said[name] and "PyTorch" not in said[name]
    assert "(it asks for io.open," in said["evil_zip.pt"]  # builtins.open is io.open
    assert not recwarn.list
    assert not (tmp_path / "pwned").exists()


def test_atomic_write_keeps_the_old_file_and_gives_the_usual_mode(tmp_path):
    import os

    old = os.umask(0o027)
    try:
        path = atomic_write(tmp_path / "f.bin", lambda f: f.write(b"old"))
        with pytest.raises(ZeroDivisionError):
            atomic_write(path, lambda f: (f.write(b"new"), 1 / 0))
    finally:
        os.umask(old)
    assert path.read_bytes() == b"old"
    if os.name == "posix":  # Windows has no POSIX file modes: umask means nothing there
        assert path.stat().st_mode & 0o777 == 0o640
    assert stale_temporaries(path) == []
    (tmp_path / ".f.bin.x1.tmp").write_bytes(b"")
    assert [p.name for p in stale_temporaries(path)] == [".f.bin.x1.tmp"]


def test_the_policy_for_an_existing_checkpoint(tmp_path):
    path = tmp_path / "ck.pt"
    assert start_run(path, "refuse", log=print) is False  # nothing there: a new run
    torch.save({"step": 0}, path)  # a file torch.save wrote
    with pytest.raises(FileExistsError, match="--resume .* --restart"):
        start_run(path, "refuse")
    assert start_run(path, "resume") is True and start_run(path, "restart") is False
    path.write_bytes(b"my notes")  # --restart replaces only a checkpoint
    with pytest.raises(FileExistsError, match="is not a checkpoint"):
        start_run(path, "restart")
    with pytest.raises(ValueError, match="existing must be one of"):
        start_run(path, "overwrite")
    with pytest.raises(IsADirectoryError):
        check_writable(tmp_path)
    assert changed_settings(
        {"lr": 1, "epochs": 2}, {"lr": 2, "epochs": 3}, ("epochs",)
    ) == ["lr: checkpoint 1, now 2"]


def test_non_finite_losses_and_ctrl_c():
    import signal

    check_finite(1.0, 3, 1e-3)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(RuntimeError, match="at step 3 \\(learning rate 0.001\\)"):
            check_finite(bad, 3, 1e-3)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # a background job (`cmd &`)
        with StopRequest():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # left ignored
        pytest.skip("SIGINT is ignored in this process, and StopRequest leaves it so")
    with StopRequest() as stop:
        # raise_signal, not os.kill: on Windows os.kill(pid, SIGINT) ends the process
        signal.raise_signal(signal.SIGINT)  # the first Ctrl-C only asks
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # the second one stops at once
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
