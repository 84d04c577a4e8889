"""Character-level Tiny Shakespeare on this CPU: nanoGPT's CPU configuration against our
CPU preset.

    python benchmarks/lm_char_cpu.py                # about 14 minutes on 2 cores
    python benchmarks/lm_char_cpu.py --quick        # a one-minute smoke test
    python benchmarks/lm_char_cpu.py --json out.json

Three runs, one after another, all on the same data split (the first 90% of the
characters train, the last 10% validate):

1. `baseline`: nanoGPT's README CPU run reproduced with our code: 4 layers, 4 heads,
   width 128, context 64, batch 12, 2000 steps, LayerNorm, exact GELU, learned
   positions, no biases (nanoGPT's train.py default), lr 1e-3 with 100 warm-up steps
   and cosine to 1e-4, AdamW betas (0.9, 0.99), weight decay 0.1 on every matrix
   including the embeddings, clipping at 1.0, fp32.
2. `fast`: our CPU preset (RMSNorm, tanh GELU, context 128) on a schedule short enough
   to finish before the baseline does.
3. `ten_minutes`: the same preset with its cosine schedule stretched over a 10-minute
   budget.

The loss printed during a run is an estimate on a subset of the validation windows;
the final figure of each run is the loss over every validation token (non-overlapping
windows of the model's context). Timings are of training only (evaluation excluded),
then of the whole run, evaluation included.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

from transformer_lib.lm_train import TrainSettings, load_lm_data, train_lm
from transformer_lib.runtime import describe_machine
from transformer_lib.training import bf16_supported

# nanoGPT README: the validation loss of its CPU configuration after 2000 iterations
NANOGPT_TARGET = 1.88

BASELINE = dict(
    preset="nanogpt_cpu",
    batch_size=12,
    max_iters=2000,
    lr=1e-3,
    min_lr=1e-4,
    warmup_steps=100,
    weight_decay=0.1,
    betas=(0.9, 0.99),
    grad_clip=1.0,
    decay_embeddings=True,
    eval_interval=250,
    eval_windows=240,
    dtype="fp32",
)
OURS = dict(  # the defaults of `train-lm`
    preset="cpu",
    batch_size=16,
    lr=5e-3,
    min_lr=5e-4,
    warmup_steps=50,
    weight_decay=0.1,
    betas=(0.9, 0.99),
    grad_clip=1.0,
    dtype="auto",
)
# the fast run's schedule: about 85 s here, against about 96 s for the baseline
FAST_ITERS = 800
BUDGET_S = 600.0


def run(name: str, settings: dict, data) -> dict:
    """Train one configuration; print its curve; return its figures and wall time."""
    print(f"\n== {name} ==", flush=True)
    t0 = time.perf_counter()
    result = train_lm(TrainSettings(device="cpu", progress=False, **settings), data)
    result["wall_s"] = time.perf_counter() - t0
    print(
        f"-> {name}: val loss {result['val_loss']:.4f} "
        f"({result['bits_per_char']:.3f} bits/char) after "
        f"{result['step']} steps | training {result['train_time_s']:.1f} s | "
        f"whole run {result['wall_s']:.1f} s | "
        f"{result['tokens_per_s']:,.0f} tokens/s",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny schedules: checks the script, not the figures",
    )
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--budget",
        type=float,
        default=BUDGET_S,
        help="seconds of training for the long run",
    )
    args = parser.parse_args()
    print(
        f"start {time.strftime('%H:%M:%S')} | load average "
        f"{os.getloadavg()[0]:.2f} | {describe_machine()}"
    )
    print(
        f"{platform.processor() or platform.machine()}: native bf16 matmul: "
        f"{bf16_supported(torch.device('cpu'))}"
    )
    data = load_lm_data("char")
    scale = 40 if args.quick else 1
    baseline = run(
        "baseline (nanoGPT CPU config)",
        {
            **BASELINE,
            "max_iters": BASELINE["max_iters"] // scale,
            "eval_interval": 250 // scale,
        },
        data,
    )
    fast = run(
        "fast (our CPU preset)",
        {**OURS, "max_iters": FAST_ITERS // scale, "eval_interval": 100 // scale},
        data,
    )
    steps_per_s = fast["step"] / fast["train_time_s"]
    budget = args.budget / scale
    # the cosine ends at the budget, if speed holds
    long_iters = int(0.97 * budget * steps_per_s)
    ten = run(
        f"ten_minutes (our CPU preset, {budget:.0f} s budget)",
        {
            **OURS,
            "max_iters": long_iters,
            "time_budget_s": budget,
            "eval_interval": max(1, long_iters // 12),
        },
        data,
    )

    print("\n== loss against training time (validation estimate at each evaluation) ==")
    for name, r in (("baseline", baseline), ("fast", fast), ("ten_minutes", ten)):
        curve = ", ".join(
            f"{h['train_time_s']:.0f}s:{h['val_loss']:.3f}" for h in r["history"]
        )
        print(f"{name:>12}: {curve}")
    print("\n== targets ==")
    print(
        f"baseline reaches {baseline['val_loss']:.3f} (nanoGPT reports "
        f"{NANOGPT_TARGET}) in "
        f"{baseline['train_time_s']:.1f} s of training, "
        f"{baseline['wall_s']:.1f} s in all"
    )
    ok = fast["val_loss"] <= NANOGPT_TARGET and fast["wall_s"] < baseline["wall_s"]
    print(
        f"fast run: {fast['val_loss']:.3f} in {fast['train_time_s']:.1f} s of "
        f"training, {fast['wall_s']:.1f} s in all "
        f"-> <= {NANOGPT_TARGET} in less wall time than the baseline: "
        f"{'yes' if ok else 'NO'}"
    )
    print(
        f"ten-minute run: {ten['val_loss']:.3f} ({ten['bits_per_char']:.3f} "
        "bits/char) after "
        f"{ten['train_time_s']:.0f} s of training"
    )
    print(f"end {time.strftime('%H:%M:%S')} | load average {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            plain = {
                name: {k: v for k, v in r.items() if k not in ("model", "tokenizer")}
                for name, r in (
                    ("baseline", baseline),
                    ("fast", fast),
                    ("ten_minutes", ten),
                )
            }
            json.dump(plain, f, indent=1)


if __name__ == "__main__":
    main()
