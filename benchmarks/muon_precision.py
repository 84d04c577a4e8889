"""What the precision of Muon's Newton-Schulz iteration costs a training step: the CPU
preset of notebook 12 (batch 16, context 128) with AdamW, and with Muon iterating in
bf16 (torch.optim.Muon's choice) and in fp32, in milliseconds per step.

    python benchmarks/muon_precision.py         # this CPU, under a minute on 2 cores
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python benchmarks/muon_precision.py

The second command makes a CPU with AVX-512 act as one without it (most laptops): oneDNN
and PyTorch's kernels stop at AVX2, so bf16 is emulated. Each row is timed in three
interleaved rounds after a warm-up; the fastest round counts, so a busy moment slows no
row more than another. The result is merged into benchmarks/results/muon_precision.json
under "native bf16" or "emulated bf16", whichever this CPU is.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from timing import fastest_of_rounds, training_step  # benchmarks/timing.py

from transformer_lib.gpt import GPT, GPTConfig
from transformer_lib.lm_train import get_batch, load_lm_data
from transformer_lib.muon import MuonAdamW
from transformer_lib.runtime import describe_machine
from transformer_lib.training import bf16_supported, make_adamw

ROWS = ("AdamW", "Muon, bf16 iteration", "Muon, fp32 iteration")


def build(row: str) -> tuple[GPT, object]:
    """The CPU preset and the optimizer of one row, from the same seed."""
    torch.manual_seed(0)
    model = GPT(GPTConfig.cpu(vocab_size=65))
    if row == "AdamW":
        return model, make_adamw(model, 5e-3, 0.1, (0.9, 0.99))
    optimizer = MuonAdamW(model, lr=5e-3)
    optimizer.muon.dtype = torch.bfloat16 if "bf16" in row else torch.float32
    return model, optimizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10, help="steps per timed round")
    ap.add_argument("--json", help="default: benchmarks/results/muon_precision.json")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="one step a round, writes nothing unless --json: checks the script",
    )
    a = ap.parse_args()
    if a.quick:
        a.steps = 1
    elif a.json is None:
        a.json = "benchmarks/results/muon_precision.json"
    data = load_lm_data("char")
    cpu = torch.device("cpu")
    kind = "native bf16" if bf16_supported(cpu) else "emulated bf16"
    machine = describe_machine(cpu)
    print(machine, "|", kind, flush=True)
    g = torch.Generator().manual_seed(0)
    steps = {}
    for row in ROWS:
        model, optimizer = build(row)
        steps[row] = training_step(
            model, optimizer, lambda: get_batch(data.train_ids, 16, 128, g)
        )
    best = fastest_of_rounds(steps, a.steps, warmup=2)
    ms = {row: 1000 * t for row, t in best.items()}
    print("| optimizer | ms per step | vs AdamW |\n| --- | ---: | ---: |")
    for row, t in ms.items():
        print(f"| {row} | {t:.1f} | {t / ms['AdamW']:.2f}x |")
    if a.json is None:
        return
    path = Path(a.json)
    results = json.loads(path.read_text()) if path.exists() else {}
    results[kind] = {
        "machine": machine,
        "torch": torch.__version__,
        "steps": a.steps,
        "ms_per_step": ms,
    }
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {path} ({kind})")


if __name__ == "__main__":
    main()
