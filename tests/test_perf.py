"""perf.py (notebook 14): the FLOP count of a GPT against its weights and PyTorch's FLOP
counter, MFU arithmetic, and the timers with a stub clock (fast and deterministic:
nothing here times real work)."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from transformer_lib import perf
from transformer_lib.gpt import GPT, GPTConfig


def matmul_weights(model: nn.Module) -> int:
    """Weights of every nn.Linear, the output layer included even when it shares the
    embedding."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


@pytest.mark.parametrize(
    "overrides", [{}, dict(tie_weights=False, n_layers=3, d_ff=48), dict(bias=True)]
)
def test_flops_per_token_count_every_matmul_weight(overrides):
    config = GPTConfig.tiny(**overrides)
    model = GPT(config)
    L, C, N, V = config.n_layers, config.d_model, config.context_len, config.vocab_size
    weights = matmul_weights(model)
    assert (
        weights == L * (4 * C * C + 2 * C * config.d_ff) + V * C
    )  # the docstring's 12 L C^2 + V C at F = 4C
    forward = perf.model_flops_per_token(config, training=False)
    assert forward == 2 * weights + 4 * L * C * N
    assert (
        perf.model_flops_per_token(config) == 3 * forward
    )  # backward: twice the forward
    # the same count from the parameters: the tied embedding once, minus positions,
    # norms and biases
    others = sum(
        p.numel()
        for name, p in model.named_parameters()
        if "norm" in name or name.endswith(".bias")
    )
    tied_once = 0 if config.tie_weights else V * C
    assert model.num_params(non_embedding=True) - others - tied_once == weights


def test_flops_per_token_match_pytorchs_flop_counter():
    """One forward over a full context: PyTorch counts the matmuls (2 FLOPs per
    multiply-add) as we do."""
    config = GPTConfig.tiny(
        attn_impl="explicit"
    )  # plain matmuls, which the counter knows
    model = GPT(config).eval()
    idx = torch.zeros(2, config.context_len, dtype=torch.long)  # (B, N)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(idx)
    assert counter.get_total_flops() == idx.numel() * perf.model_flops_per_token(
        config, training=False
    )


def test_mfu_arithmetic():
    assert perf.mfu(
        tokens_per_s=1_000, flops_per_token=2e6, peak_flops=4e9
    ) == pytest.approx(0.5)
    assert perf.mfu(2_000, 2e6, 4e9) == pytest.approx(2 * perf.mfu(1_000, 2e6, 4e9))


class StubClock:
    """A perf_counter that only moves when the stub work says so."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_time_it_is_the_median_of_the_timed_runs(monkeypatch):
    clock = StubClock()
    monkeypatch.setattr(perf, "time", clock)
    durations = iter(
        [100.0, 100.0, 3.0, 1.0, 2.0, 10.0, 4.0]
    )  # two slow warm-up runs, then five timed

    def work():
        clock.now += next(durations)

    assert (
        perf.time_it(work, repeats=5, warmup=2) == 3.0
    )  # median of 3, 1, 2, 10, 4: warm-ups not counted
    assert next(durations, "all used") == "all used"  # exactly warmup + repeats calls


def test_matmul_flops_take_the_best_run(monkeypatch):
    times = iter([0.5, 0.25, 1.0])
    monkeypatch.setattr(perf, "time_it", lambda fn, **kw: next(times))
    assert perf.matmul_flops(n=8, repeats=3) == 2 * 8**3 / 0.25


def test_training_throughput_counts_tokens_over_the_timed_steps(monkeypatch):
    calls = []

    def perf_counter():  # 0 s at the start of the timed steps, 2 s at the end
        calls.append(None)
        return 2.0 * (len(calls) - 1)

    monkeypatch.setattr(perf, "time", SimpleNamespace(perf_counter=perf_counter))
    config = GPTConfig.tiny(context_len=8)
    assert (
        perf.training_throughput(config, batch_size=3, steps=2, warmup=1)
        == 3 * 8 * 2 / 2.0
    )
    assert len(calls) == 2
