"""Part IV's switches in notebook 16's ModernGPT (notebook 12's GPT, extended): every
combination generates the same tokens with and without the KV cache and is causal; the
trainer's Muon option, the clock-planned cosine and the `train-lm` flags."""

import itertools
import math

import pytest
import torch

from transformer_lib.__main__ import main
from transformer_lib.gpt import generate
from transformer_lib.lm_train import LMRun, TrainSettings, learning_rate, train_lm
from transformer_lib.modern import ModernConfig, ModernGPT
from transformer_lib.muon import MuonAdamW

COMBINATIONS = list(
    itertools.product(
        ["learned", "sinusoidal", "rope"],  # positions
        ["gelu", "swiglu"],  # mlp
        [0, 2, 1],  # n_kv_heads: as many as the queries (4), GQA, MQA
        [False, True],  # qk_norm
        [True, False],  # tie_weights
    )
)


@pytest.mark.parametrize("positions,mlp,kv,qk,tie", COMBINATIONS)
def test_every_combination_is_causal_and_caches_exactly(positions, mlp, kv, qk, tie):
    torch.manual_seed(0)
    config = ModernConfig.tiny(
        n_heads=4,
        context_len=12,
        positions=positions,
        mlp=mlp,
        n_kv_heads=kv,
        qk_norm=qk,
        tie_weights=tie,
    )
    model = ModernGPT(config).eval()
    prompt = torch.randint(0, 65, (2, 5))
    cached = generate(model, prompt, 16, temperature=0, use_cache=True)
    plain = generate(model, prompt, 16, temperature=0, use_cache=False)
    assert torch.equal(cached, plain)  # 21 tokens: past the context of 12
    ids = torch.randint(0, 65, (2, 12))
    changed = ids.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 65
    torch.testing.assert_close(model(ids)[0][:, :7], model(changed)[0][:, :7])
    assert not torch.allclose(model(ids)[0][:, 7:], model(changed)[0][:, 7:])


def test_defaults_are_notebook_11s_gpt_and_switches_change_the_parts():
    base = ModernGPT(ModernConfig.cpu())
    assert type(base.blocks[0].attn).__name__ == "CausalSelfAttention"
    assert type(base.blocks[0].mlp).__name__ == "MLP" and hasattr(base, "pos_emb")
    rope = ModernGPT(ModernConfig.cpu(positions="rope", n_kv_heads=2, mlp="swiglu"))
    assert type(rope.blocks[0].attn).__name__ == "GroupedQueryAttention"
    assert not hasattr(rope, "pos_emb")
    assert rope.blocks[0].attn.kv.out_features == 2 * 2 * 32  # K and V, 2 heads of 32
    gelu_mlp = sum(p.numel() for p in base.blocks[0].mlp.parameters())
    swiglu = sum(p.numel() for p in rope.blocks[0].mlp.parameters())
    assert abs(swiglu - gelu_mlp) / gelu_mlp < 0.01  # parameter-matched


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"n_kv_heads": 3}, "must divide n_heads"),
        ({"positions": "alibi"}, "positions must be one of"),
        ({"mlp": "relu2"}, "mlp must be one of"),
        ({"positions": "rope", "n_heads": 4, "d_model": 36}, "d_head=9 is odd"),
        ({"n_kv_heads": -1}, "n_kv_heads must be >= 0"),
    ],
)
def test_impossible_switches_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        ModernConfig.tiny(**overrides)


def test_the_cosine_planned_on_the_clock_ends_at_the_budget():
    s = TrainSettings(lr=1e-2, min_lr=1e-3, warmup_steps=10, time_budget_s=100.0)
    run = LMRun(schedule_steps=1_000_000, step=50)
    rates = []
    for elapsed in (0.0, 50.0, 100.0, 120.0):
        run.seconds = elapsed
        rates.append(learning_rate(s, run))
    assert rates[0] == pytest.approx(1e-2)
    assert rates[1] == pytest.approx(5.5e-3)  # half-way on the clock: the midpoint
    assert rates[2] == rates[3] == pytest.approx(1e-3)  # the floor, at the budget
    run.step = 3  # warm-up is still counted in steps
    assert learning_rate(s, run) == pytest.approx(1e-2 * 4 / 11)
    steps = TrainSettings(lr=1e-2, min_lr=1e-3, warmup_steps=10)
    run = LMRun(schedule_steps=110, step=60, seconds=1e9)  # the clock is ignored
    assert learning_rate(steps, run) == pytest.approx(5.5e-3)


def test_muon_trains_resumes_and_splits_the_parameters(tmp_path):
    model = ModernGPT(ModernConfig.tiny())
    opt = MuonAdamW(model, lr=1e-3)
    in_muon = {id(p) for g in opt.muon.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        expect = p.dim() == 2 and name.startswith("blocks.")
        assert (id(p) in in_muon) == expect, name
    out = tmp_path / "muon.pt"
    common = dict(preset="tiny", batch_size=2, eval_interval=3, eval_windows=2)
    common.update(optimizer="muon", progress=False, verbose=False, device="cpu")
    first = train_lm(TrainSettings(**common, max_iters=6, out=str(out)))
    assert math.isfinite(first["val_loss"])
    again = dict(max_iters=9, out=str(out), existing="resume")
    resumed = train_lm(TrainSettings(**common, **again))
    assert resumed["step"] == 9


def test_train_lm_flags_reach_the_model(tmp_path, capsys):
    out = str(tmp_path / "rope.pt")
    flags = ["--preset", "tiny", "--max-iters", "2", "--batch-size", "2"]
    flags += ["--eval-interval", "2", "--eval-windows", "2", "--no-progress"]
    flags += ["--positions", "rope", "--mlp", "swiglu", "--n-kv-heads", "1"]
    flags += ["--qk-norm", "--untied", "--optimizer", "muon", "--out", out]
    assert main(["train-lm", *flags]) == 0
    config = torch.load(out, weights_only=True)["config"]
    assert (config["positions"], config["mlp"], config["n_kv_heads"]) == (
        "rope",
        "swiglu",
        1,
    )
    assert config["qk_norm"] and not config["tie_weights"]
    assert main(["generate", "--checkpoint", out, "--max-new-tokens", "5"]) == 0
    with pytest.raises(SystemExit) as e:
        main(["train-lm", *flags[:-2], "--positions", "alibi"])
    assert e.value.code == 2
    assert "invalid choice: 'alibi'" in capsys.readouterr().err
