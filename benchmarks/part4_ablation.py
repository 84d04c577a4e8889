"""Part IV's ablation: each change of notebooks 15 and 16 alone, then the changes that
helped together, on character-level Tiny Shakespeare at equal wall-clock time, 3 seeds
each.

    python benchmarks/part4_ablation.py                   # 8 rows x 3 seeds x 90 s
    python benchmarks/part4_ablation.py --budget 30 --seeds 1 --rows baseline rope
    python benchmarks/part4_ablation.py --quick           # a one-minute smoke test

Every row starts from the course's CPU preset (notebook 12: 4 layers, width 128,
context 128, batch 16, AdamW at lr 5e-3, fp32) and changes one thing. Equal wall-clock
time is turned into a step count per row: the script first times each row's training
step (the fastest of three interleaved rounds, so another process on the machine slows
no row more than another), then trains each row for budget / step-time steps with its
cosine planned on those steps. The losses are therefore what each model reaches in the
same time on this machine, yet do not depend on how busy the machine was during the
run. The final loss is over every validation token. Writes a JSON file and prints a
Markdown table: mean and standard deviation over the seeds, and the change against
the baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from timing import fastest_of_rounds, training_step  # benchmarks/timing.py

from transformer_lib.lm_train import (
    TrainSettings,
    get_batch,
    load_lm_data,
    make_optimizer,
    model_config,
    train_lm,
)
from transformer_lib.modern import ModernGPT
from transformer_lib.runtime import describe_machine

# name -> (overrides of the GPTConfig preset, optimizer)
ROWS = {
    "baseline": ({}, "adamw"),
    "rope": ({"positions": "rope"}, "adamw"),
    "swiglu": ({"mlp": "swiglu"}, "adamw"),
    "gqa (2 kv heads)": ({"n_kv_heads": 2}, "adamw"),
    "mqa (1 kv head)": ({"n_kv_heads": 1}, "adamw"),
    "qk-norm": ({"qk_norm": True}, "adamw"),
    "untied": ({"tie_weights": False}, "adamw"),
    "muon": ({}, "muon"),
}


def settings(model: dict, optimizer: str, steps: int, seed: int) -> TrainSettings:
    """The CPU recipe of notebook 12 with one change, for a fixed number of steps."""
    return TrainSettings(
        preset="cpu",
        model=dict(model),
        optimizer=optimizer,
        max_iters=steps,
        eval_interval=10**9,  # no evaluation during the run: only the final one
        dtype="fp32",
        seed=seed,
        progress=False,
        verbose=False,
    )


def step_times(rows: dict, data, rounds: int = 3, steps: int = 15) -> dict:
    """Seconds per training step of each row: the fastest of `rounds` interleaved
    rounds of `steps` steps (after 5 warm-up steps)."""
    g = torch.Generator().manual_seed(0)
    steps_of = {}
    for name, (model, opt) in rows.items():
        s = settings(model, opt, 1, 0)
        torch.manual_seed(0)
        m = ModernGPT(model_config(s, data))
        batch = (s.batch_size, m.config.context_len)
        steps_of[name] = training_step(
            m, make_optimizer(m, s), lambda b=batch: get_batch(data.train_ids, *b, g)
        )
    return fastest_of_rounds(steps_of, steps, rounds, warmup=5)


def run_rows(rows: dict, data, budget: float, seeds: list[int], times: dict) -> dict:
    results = {}
    for name, (model, opt) in rows.items():
        steps = max(1, round(budget / times[name]))
        losses = []
        for seed in seeds:
            out = train_lm(settings(model, opt, steps, seed), data)
            losses.append(out["val_loss"])
            print(
                f"  {name:>18} seed {seed}: {steps} steps, val {out['val_loss']:.4f} "
                f"({out['train_time_s']:.0f} s)",
                flush=True,
            )
        results[name] = {
            "model": model,
            "optimizer": opt,
            "ms_per_step": 1000 * times[name],
            "steps": steps,
            "params": out["params"],
            "val_losses": losses,
            "mean": statistics.mean(losses),
            "std": statistics.stdev(losses) if len(losses) > 1 else 0.0,
        }
    return results


def table(results: dict, budget: float) -> str:
    base = results["baseline"]["mean"]
    lines = [
        f"| change ({budget:.0f} s each) | ms/step | steps | parameters | val loss "
        "(mean ± sd) | vs baseline |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in results.items():
        delta = "" if name == "baseline" else f"{r['mean'] - base:+.4f}"
        lines.append(
            f"| {name} | {r['ms_per_step']:.1f} | {r['steps']:,} | {r['params']:,} | "
            f"{r['mean']:.4f} ± {r['std']:.4f} | {delta} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=90.0, help="seconds per run")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rows", nargs="*", default=list(ROWS), choices=list(ROWS))
    ap.add_argument("--no-combination", action="store_true")
    ap.add_argument(
        "--quick", action="store_true", help="3 s runs, 2 seeds; writes only --json"
    )
    ap.add_argument("--json", help="default: benchmarks/results/part4_ablation.json")
    a = ap.parse_args()
    if a.json is None and not a.quick:
        a.json = "benchmarks/results/part4_ablation.json"
    if a.quick:
        a.budget, a.seeds = 3.0, 2
    if "baseline" not in a.rows:
        a.rows = ["baseline", *a.rows]
    data = load_lm_data("char")
    machine = describe_machine(torch.device("cpu"))
    print(machine, flush=True)
    rows = {name: ROWS[name] for name in a.rows}
    started = time.perf_counter()
    times = step_times(rows, data)
    print({k: round(1000 * v, 1) for k, v in times.items()}, "ms/step", flush=True)
    results = run_rows(rows, data, a.budget, list(range(a.seeds)), times)
    if not a.no_combination:  # every change whose mean beat the baseline's, together
        base = results["baseline"]["mean"]
        helped = [n for n, r in results.items() if n != "baseline" and r["mean"] < base]
        helped.sort(key=lambda n: results[n]["mean"])  # the best first
        model, opt, used = {}, "adamw", []
        for name in helped:
            if "kv head" in name and "n_kv_heads" in model:
                continue  # GQA or MQA, not both: the better of the two
            model.update(ROWS[name][0])
            opt = "muon" if ROWS[name][1] == "muon" else opt
            used.append(name)
        if len(used) > 1:
            combo = {"combination: " + " + ".join(used): (model, opt)}
            times.update(step_times(combo, data))
            results.update(run_rows(combo, data, a.budget, list(range(a.seeds)), times))
    minutes = (time.perf_counter() - started) / 60
    print(f"\n{machine}; {a.budget:.0f} s per run, {a.seeds} seeds; {minutes:.0f} min")
    print(table(results, a.budget))
    if a.json is None:
        return
    with open(a.json, "w") as f:
        json.dump(
            {
                "machine": machine,
                "budget_s": a.budget,
                "seeds": a.seeds,
                "torch": torch.__version__,
                "minutes": minutes,
                "rows": results,
            },
            f,
            indent=1,
        )
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
