"""What each speed lever gives the course's CPU model here: milliseconds per training
step of the CPU preset (notebook 12) under each lever, alone and together.

    python benchmarks/part4_speed_levers.py            # about 5 minutes on 2 cores
    python benchmarks/part4_speed_levers.py --steps 5  # a quick look

Levers: the fused AdamW kernel (`fused=True`, one kernel for all parameters instead of
a loop over them), `torch.compile` of the model (fewer Python calls and fused
element-wise kernels), bf16 autocast (only where the CPU multiplies bf16 natively), a
vocabulary padded to 128 (a matmul width that suits the vector units) and a larger
batch (more work per Python call). Each row is timed in three interleaved rounds after
a warm-up that includes compilation; the fastest round counts, so a busy machine slows
no row more than another. The model and data are the same in every row.
"""

from __future__ import annotations

import argparse
import json

import torch
from timing import fastest_of_rounds, training_step  # benchmarks/timing.py

from transformer_lib.gpt import GPT, GPTConfig
from transformer_lib.lm_train import get_batch, load_lm_data
from transformer_lib.runtime import describe_machine
from transformer_lib.training import bf16_supported, mixed_precision, param_groups

LEVERS = {  # name -> (fused AdamW, compile, bf16, vocabulary, batch)
    "baseline (fp32, eager, foreach AdamW)": (False, False, False, 65, 16),
    "fused AdamW": (True, False, False, 65, 16),
    "bf16 autocast": (False, False, True, 65, 16),
    "torch.compile": (False, True, False, 65, 16),
    "vocabulary padded to 128": (False, False, False, 128, 16),
    "batch 32 (per token)": (False, False, False, 65, 32),
    "compile + fused": (True, True, False, 65, 16),
    "compile + fused + bf16": (True, True, True, 65, 16),
}


def build(fused: bool, compiled: bool, bf16: bool, vocab: int):
    torch.manual_seed(0)
    model = GPT(GPTConfig.cpu(vocab_size=vocab))
    opt = torch.optim.AdamW(
        param_groups(model, 0.1), lr=5e-3, betas=(0.9, 0.99), fused=fused or None
    )
    fwd = torch.compile(model) if compiled else model
    autocast = mixed_precision("bf16" if bf16 else "fp32", torch.device("cpu"))
    return model, fwd, opt, autocast


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="steps per timed round")
    ap.add_argument(
        "--json", help="default: benchmarks/results/part4_speed_levers.json"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="one step a round, no compile, writes nothing unless --json",
    )
    a = ap.parse_args()
    if a.quick:
        a.steps = 1
    elif a.json is None:
        a.json = "benchmarks/results/part4_speed_levers.json"
    data = load_lm_data("char")
    machine = describe_machine(torch.device("cpu"))
    native_bf16 = bf16_supported(torch.device("cpu"))
    print(machine, "| native bf16:", native_bf16, flush=True)
    # bf16 rows only where the CPU has it
    rows = {k: v for k, v in LEVERS.items() if native_bf16 or not v[2]}
    if a.quick:  # compiling takes minutes on a CPU
        rows = {k: v for k, v in rows.items() if not v[1]}
    g = torch.Generator().manual_seed(0)
    steps = {}
    for name, (*lever, batch) in rows.items():
        model, fwd, opt, autocast = build(*lever)
        batches = lambda b=batch: get_batch(data.train_ids, b, 128, g)  # noqa: E731
        steps[name] = training_step(fwd, opt, batches, autocast)
    best = fastest_of_rounds(steps, a.steps, warmup=3)  # the warm-up compiles
    # per 16 sequences, so that the rows compare per token
    best = {name: t * 16 / rows[name][4] for name, t in best.items()}
    base = best[next(iter(rows))]
    print(
        f"\n{machine}\n| lever | ms per 16 x 128 tokens | speed-up |\n"
        "| --- | ---: | ---: |"
    )
    for name, t in best.items():
        print(f"| {name} | {1000 * t:.1f} | {base / t:.2f}x |")
    if a.json is None:
        return
    with open(a.json, "w") as f:
        json.dump(
            {
                "machine": machine,
                "torch": torch.__version__,
                "steps": a.steps,
                "ms_per_step": {k: 1000 * v for k, v in best.items()},
            },
            f,
            indent=1,
        )
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
