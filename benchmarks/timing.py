"""The timing the benchmarks share: the fastest of interleaved rounds, so that another
process on the machine slows no row more than another.

    from timing import fastest_of_rounds, training_step   # in a benchmarks/ script
    best = fastest_of_rounds({"AdamW": step_a, "Muon": step_m}, calls=10)

A row's figure is seconds per call: each round times `calls` calls of every row in
turn, after a first round of `warmup` calls that is not counted (it also compiles).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable


def fastest_of_rounds(
    rows: dict[str, Callable[[], None]], calls: int, rounds: int = 3, warmup: int = 3
) -> dict[str, float]:
    """Seconds per call of each row's function: the fastest of `rounds` interleaved
    rounds of `calls` calls, after one warm-up round of `warmup` calls."""
    best = dict.fromkeys(rows, float("inf"))
    for r in range(rounds + 1):
        for name, call in rows.items():
            n = warmup if r == 0 else calls
            t0 = time.perf_counter()
            for _ in range(n):
                call()
            if r:
                best[name] = min(best[name], (time.perf_counter() - t0) / n)
    return best


def training_step(
    forward: Callable, optimizer, next_batch: Callable, autocast=None
) -> Callable[[], None]:
    """One training step as a function of nothing: a batch from `next_batch()`, the
    loss of `forward(x, y)` (under `autocast` if given), backward, optimizer step."""

    def step() -> None:
        x, y = next_batch()
        with autocast or contextlib.nullcontext():
            _, loss = forward(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step
