"""Training throughput of the GPT on this machine: each speed-up against a plain fp32
explicit-softmax model.

    python benchmarks/lm_throughput.py                 # about 3 minutes on 2 CPU cores
    python benchmarks/lm_throughput.py --preset gpu    # on a GPU

Every variant trains the same model size (forward, backward, gradient clipping, AdamW)
on random tokens, in the same process, one after another; tokens per second are over
`--steps` steps after warm-up steps (which include torch.compile's compilation). MFU is
against this machine's measured matmul speed (fp32, and bf16 where it is native).
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from transformer_lib.gpt import GPTConfig
from transformer_lib.lm_train import PRESETS
from transformer_lib.perf import (
    matmul_flops,
    mfu,
    model_flops_per_token,
    training_throughput,
)
from transformer_lib.runtime import describe_machine, get_device
from transformer_lib.training import bf16_supported


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument(
        "--no-compile", action="store_true", help="skip the torch.compile variants"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="preset tiny, batch 2, one step, no compile: checks the script",
    )
    args = parser.parse_args()
    if args.quick:
        args.preset, args.batch_size, args.steps, args.no_compile = "tiny", 2, 1, True
    device = get_device()
    print(
        f"start {time.strftime('%H:%M:%S')} | load average "
        f"{os.getloadavg()[0]:.2f} | {describe_machine(device)}"
    )
    config: GPTConfig = PRESETS[args.preset]()
    bf16 = bf16_supported(device)
    n = 128 if args.quick else 1024
    peak32 = matmul_flops(device, torch.float32, n=n)
    peak16 = matmul_flops(device, torch.bfloat16, n=n) if bf16 else float("nan")
    print(
        f"measured matmul peak: fp32 {peak32 / 1e9:,.0f} GFLOP/s | bf16 "
        f"{peak16 / 1e9:,.0f} GFLOP/s "
        f"(native bf16: {bf16})"
    )
    flops = model_flops_per_token(config)
    print(
        f"model: preset {args.preset}, {config.n_layers} layers, d_model "
        f"{config.d_model}, context "
        f"{config.context_len}, batch {args.batch_size}: {flops / 1e6:.1f} "
        "MFLOP per token (training)"
    )
    variants = [
        ("fp32, explicit softmax (baseline)", "explicit", False, False),
        ("fp32, SDPA", "sdpa", False, False),
    ]
    if bf16:
        variants.append(("bf16 autocast, SDPA", "sdpa", True, False))
    if not args.no_compile:
        variants.append(("fp32, SDPA, torch.compile", "sdpa", False, True))
        if bf16:
            variants.append(("bf16 autocast, SDPA, torch.compile", "sdpa", True, True))
    base = None
    print(f"{'variant':<36} {'tokens/s':>10} {'vs baseline':>11} {'MFU':>7}")
    for name, impl, use_bf16, use_compile in variants:
        cfg = PRESETS[args.preset](attn_impl=impl)
        try:
            tps = training_throughput(
                cfg,
                args.batch_size,
                args.steps,
                bf16=use_bf16,
                compile=use_compile,
                device=device,
            )
        except (
            Exception
        ) as e:  # torch.compile needs a C++ compiler on CPU; report and go on
            print(
                f"{name:<36} failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
            )
            continue
        base = base or tps
        peak = peak16 if use_bf16 else peak32
        print(
            f"{name:<36} {tps:>10,.0f} {tps / base:>10.2f}x "
            f"{mfu(tps, flops, peak):>6.1%}",
            flush=True,
        )
    print(f"end {time.strftime('%H:%M:%S')} | load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
