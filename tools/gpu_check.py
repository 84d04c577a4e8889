"""The GPU check: one command that, on a CUDA machine, runs what the course has only
ever run on a CPU, and stores the figures with the card's name and torch's version.

    python tools/gpu_check.py                          # every stage, on cuda
    python tools/gpu_check.py --stage tests,notebooks  # first call (about 5 minutes)
    python tools/gpu_check.py --stage lm,mt,speed      # second call (about 8 minutes)
    python tools/gpu_check.py --device cpu --quick     # the whole script in a minute

Stages (`--stage`, comma-separated; each adds its figures to the same JSON file, so the
stages of two calls end in one record):

- `tests`: tests/test_devices.py with the GPU as the device (models, attention with
  and without weights, masks in fp16/bf16, the KV cache against no cache, decoding,
  `torch.compile`), then DDP through `torchrun` (NCCL on a GPU, gloo on a CPU) on one
  device, and `train-lm` under `torchrun`.
- `notebooks`: every notebook in quick mode under `pytest --nbval-lax` (each cell must
  run; outputs are not compared) with TRANSFORMER_DEVICE set to the device.
- `lm`: Part III's language model with a GPU recipe (`train-lm`) and nanoGPT's own
  `train.py` with its published Tiny Shakespeare config, unmodified (copied from
  shared/peers/nanoGPT or ../shared/peers/nanoGPT, or --nanogpt, to a temporary
  folder; its data prepared by its own prepare.py from our copy of Tiny Shakespeare),
  one after the other; each one's best validation loss as it reports it, and both
  measured the same way here: the loss over every character of the same validation
  text (the last 10%), in non-overlapping windows of one length, in fp32; and each
  one's wall time.
- `mt`: notebook 09's translator trained with a GPU recipe (`train-mt`), then scored on
  the public test (the Tatoeba Challenge's English-Mandarin test) through `translate`:
  sacreBLEU (tokenize='zh') and chrF, greedy and beam.
- `speed`: what notebook 14 measures on the CPU, as ratios against fp32 in one run:
  fused attention against the explicit softmax (time, and peak memory on a GPU),
  training throughput of fp32 SDPA, bf16 autocast and `torch.compile` against fp32
  with the explicit softmax (and MFU against the measured matmul peak), and the KV
  cache's speed-up in greedy generation.

Results go to benchmarks/results/gpu_check.json for a full run on CUDA; any other run
writes a file of its own (gpu_check_cpu_quick.json, gpu_check_cuda_quick.json, ...),
so a CPU smoke run never replaces a GPU record. The script uses the command line
(`python -m transformer_lib train-lm / train-mt / translate`) and, in-process, only the
model half of the library (gpt, modern, attention, masks, perf, decoding, data's
`public_test_pairs`, lm_train's `load_lm`). benchmarks/GPU.md says how to run it on a
GPU machine or Colab, and which wheels to bring.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
# nanoGPT, unmodified: $NANOGPT_DIR, else shared/peers/nanoGPT inside this checkout or
# beside it (../shared), the first that exists
PEERS = [ROOT / "shared", ROOT.parent / "shared", ROOT.parent.parent / "shared"]
PEER = next(
    (p / "peers" / "nanoGPT" for p in PEERS if (p / "peers" / "nanoGPT").is_dir()),
    PEERS[1] / "peers" / "nanoGPT",
)
PEER = Path(os.environ.get("NANOGPT_DIR") or PEER)
STAGES = ("tests", "notebooks", "lm", "mt", "speed")
NANOGPT_PUBLISHED = 1.4697  # nanoGPT's README: best val loss, about 3 min on one A100
# what each stage needs besides torch (a missing one is named before anything runs)
NEEDS = {
    "tests": ["pytest", "numpy"],
    "notebooks": ["pytest", "nbval", "ipykernel", "matplotlib", "tokenizers"],
    "lm": ["numpy", "tqdm"],
    "mt": ["sacrebleu", "tokenizers", "opencc", "tqdm"],
    "speed": [],
}

# Part III's GPU recipe: nanoGPT's model, schedule shape and dropout, with Part IV's
# levers (RoPE, SwiGLU), bf16 autocast and torch.compile, on fewer steps
LM_GPU = "--preset gpu --batch-size 64 --max-iters 3500 --lr 1e-3 --min-lr 1e-4 "
LM_GPU += "--warmup-steps 100 --eval-interval 250 --model dropout=0.2 "
LM_GPU += "--positions rope --mlp swiglu --dtype auto --compile"
LM_QUICK = "--preset tiny --batch-size 8 --max-iters 20 --eval-interval 10 "
LM_QUICK += "--eval-windows 4"
NANOGPT_CONFIG = "config/train_shakespeare_char.py"
# nanoGPT's README CPU run, shrunk to seconds (--quick only; on a GPU: no override)
NANOGPT_QUICK = [
    "--compile=False",
    "--eval_iters=5",
    "--log_interval=10",
    "--block_size=32",
    "--batch_size=8",
    "--n_layer=2",
    "--n_head=2",
    "--n_embd=32",
    "--max_iters=20",
    "--lr_decay_iters=20",
    "--dropout=0.0",
    "--eval_interval=10",
]
# notebook 09's model and recipe, with bigger batches for a GPU and a budget in minutes
MT_GPU = "--max-tokens 6000 --epochs 40 --patience 5"


# --- running things ---------------------------------------------------------------


def child_env(device: str, **extra: str) -> dict:
    """The environment of every command: this checkout first on the path, the device."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    env["TRANSFORMER_DEVICE"] = device
    env.setdefault("TRANSFORMER_QUICK", "0")
    env.update(extra)
    return env


def run(cmd: list[str], env: dict, timeout: float, cwd: Path = ROOT) -> dict:
    """Run a command; its status, wall time and output (stderr kept apart)."""
    print(f"$ {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        err = f"timed out after {timeout:.0f} s"
    seconds = round(time.perf_counter() - t0, 1)
    print(f"  -> status {rc} in {seconds} s", flush=True)
    if rc != 0:
        print("\n".join((out + "\n" + err).strip().splitlines()[-15:]), flush=True)
    return {"rc": rc, "seconds": seconds, "stdout": out, "stderr": err}


def tail(result: dict, n: int = 5) -> list[str]:
    return (result["stdout"] + "\n" + result["stderr"]).strip().splitlines()[-n:]


def junit_counts(path: Path) -> dict:
    """passed / failed / skipped test counts of a pytest --junitxml report, with the
    names of the failures and their seconds by file."""
    if not path.exists():
        return {"passed": 0, "failed": 0, "skipped": 0, "failures": ["no report"]}
    counts = {"passed": 0, "failed": 0, "skipped": 0, "failures": []}
    files: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        where = case.get("file") or case.get("classname", "").split("::")[0]
        files[where] = files.get(where, 0.0) + float(case.get("time", 0))
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
            counts["failures"].append(name)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    counts["seconds_by_file"] = {k: round(v, 1) for k, v in sorted(files.items())}
    return counts


# --- stage: tests -----------------------------------------------------------------


def ddp_worker(device_type: str) -> None:
    """Run by `torchrun` (--ddp-worker): the library's GPT in DistributedDataParallel,
    NCCL on a GPU, gloo on a CPU; a few steps and an all-reduce; prints a JSON line."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from transformer_lib.gpt import GPT, GPTConfig

    backend = "nccl" if device_type == "cuda" else "gloo"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = (
        torch.device("cuda", local) if device_type == "cuda" else torch.device("cpu")
    )
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    torch.manual_seed(0)
    model = GPT(GPTConfig.tiny()).to(device)
    ddp = DDP(model, device_ids=[local] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randint(0, model.config.vocab_size, (8, 32), device=device)
    losses = []
    for _ in range(10):
        _, loss = ddp(x, torch.roll(x, -1, 1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    total = torch.full((1,), dist.get_rank() + 1.0, device=device)
    dist.all_reduce(total)
    print(
        json.dumps(
            {
                "backend": dist.get_backend(),
                "world_size": dist.get_world_size(),
                "first_loss": losses[0],
                "last_loss": losses[-1],
                "all_reduce": float(total),
            }
        )
    )
    dist.destroy_process_group()


def stage_tests(args, device: str, tmp: Path) -> dict:
    env = child_env(device)
    report = tmp / "devices.xml"
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    tests = run(
        [*pytest, "tests/test_devices.py", f"--junitxml={report}"], env, args.timeout
    )
    counts = junit_counts(report)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    torchrun += ["--nproc_per_node=1"]
    ddp = run(
        [*torchrun, str(Path(__file__)), "--ddp-worker", "--device", device],
        env,
        args.timeout,
    )
    lines = [line for line in ddp["stdout"].splitlines() if line.startswith("{")]
    ddp_figures = json.loads(lines[-1]) if ddp["rc"] == 0 and lines else {}
    cli = run(
        [*torchrun, "-m", "transformer_lib", "train-lm", *LM_QUICK.split()]
        + ["--device", device, "--no-progress"],
        env,
        args.timeout,
    )
    ddp_ok = ddp_figures.get("last_loss", 9e9) < ddp_figures.get("first_loss", 0)
    return {
        "ok": tests["rc"] == 0 and ddp_ok and cli["rc"] == 0,
        "device_tests": counts,
        "ddp": {"ok": ddp_ok, "seconds": ddp["seconds"], **ddp_figures}
        if ddp_figures
        else {"ok": False, "tail": tail(ddp)},
        "train_lm_under_torchrun": {
            "ok": cli["rc"] == 0,
            "seconds": cli["seconds"],
            "tail": tail(cli, 2),
        },
    }


# --- stage: notebooks ---------------------------------------------------------------


def notebooks(args) -> list[Path]:
    every = sorted((ROOT / "notebooks").glob("[0-9A]*.ipynb"))
    wanted = args.notebooks or (["00", "06"] if args.quick else None)
    if not wanted:
        return every
    chosen = [p for p in every if any(p.name.startswith(w) for w in wanted)]
    if not chosen:
        raise SystemExit(f"gpu_check: no notebook starts with {wanted}")
    return chosen


def stage_notebooks(args, device: str, tmp: Path) -> dict:
    env = child_env(device, TRANSFORMER_QUICK="1")
    report = tmp / "notebooks.xml"
    chosen = notebooks(args)
    done = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + ["--nbval-lax", f"--junitxml={report}", "--nbval-cell-timeout=600"]
        + [str(p.relative_to(ROOT)) for p in chosen],
        env,
        args.timeout,
    )
    counts = junit_counts(report)
    failed = {f.split("::")[0].rsplit("/", 1)[-1] for f in counts["failures"]}
    return {
        "ok": done["rc"] == 0,
        "quick_mode": True,
        "notebooks": {
            p.stem: "failed" if any(p.stem in f for f in failed) else "passed"
            for p in chosen
        }
        if done["rc"] != "timeout"
        else "timed out",
        "cells": {k: counts[k] for k in ("passed", "failed", "skipped")},
        "failures": counts["failures"][:20],
        "seconds_by_notebook": counts.get("seconds_by_file", {}),
        "seconds": done["seconds"],
    }


# --- stage: lm ----------------------------------------------------------------------


def same_way_loss(forward, ids, window: int, device, batch: int = 32) -> float:
    """Mean cross-entropy over every id but the first of `ids` (1-D), read in
    non-overlapping windows of `window` ids, each predicting its next ones; fp32.
    `forward(x, y)` returns (logits, mean loss), as both GPTs do."""
    import torch

    ids = ids.to(device)
    starts = list(range(0, len(ids) - 1, window))
    total, count = 0.0, 0
    with torch.no_grad():
        full = [s for s in starts if s + window + 1 <= len(ids)]
        for i in range(0, len(full), batch):
            chunk = full[i : i + batch]
            x = torch.stack([ids[s : s + window] for s in chunk])
            y = torch.stack([ids[s + 1 : s + window + 1] for s in chunk])
            total += float(forward(x, y)[1]) * y.numel()
            count += y.numel()
        for s in starts[len(full) :]:  # the last, shorter window
            x, y = ids[s:-1][None], ids[s + 1 :][None]
            total += float(forward(x, y)[1]) * y.numel()
            count += y.numel()
    assert count == len(ids) - 1
    return total / count


def nanogpt_model(folder: Path, device):
    """nanoGPT's best checkpoint (ckpt.pt, saved when its val loss improved) through
    its own model.py, and its character-to-id map."""
    import pickle

    import torch

    sys.path.insert(0, str(folder))
    try:
        from model import GPT as NanoGPT  # the peer's model.py, unmodified
        from model import GPTConfig as NanoConfig
    finally:
        sys.path.remove(str(folder))
    ckpt = torch.load(
        folder / "out-shakespeare-char" / "ckpt.pt",
        map_location=device,
        weights_only=True,  # tensors, dicts and numbers: no code in it runs
    )
    model = NanoGPT(NanoConfig(**ckpt["model_args"]))
    state = {k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()}
    model.load_state_dict(state)
    with open(folder / "data" / "shakespeare_char" / "meta.pkl", "rb") as f:
        stoi = pickle.load(f)["stoi"]
    return model.to(device).eval(), stoi, ckpt["model_args"]["block_size"]


def run_nanogpt(args, device: str, tmp: Path) -> tuple[dict, Path]:
    """nanoGPT's train.py with its published config, in a copy of it (offline)."""
    folder = tmp / "nanoGPT"
    shutil.copytree(args.nanogpt, folder)
    data = folder / "data" / "shakespeare_char"
    with open(data / "input.txt", "w", encoding="utf-8", newline="") as f:
        f.write(tiny_shakespeare())  # prepare.py then downloads nothing
    env = child_env(device)
    env["PYTHONPATH"] = str(tmp / "stubs")  # nanoGPT sees only itself (and the stubs)
    stub = tmp / "stubs"
    stub.mkdir()
    try:  # prepare.py imports requests only for the download the copy made unneeded
        import requests  # noqa: F401
    except ImportError:
        (stub / "requests.py").write_text(
            "def get(*a, **k):\n    raise OSError('offline')\n"
        )
    prep = run([sys.executable, str(data / "prepare.py")], env, args.timeout, folder)
    if prep["rc"] != 0:
        return {"ok": False, "stage": "prepare.py", "tail": tail(prep)}, folder
    flags = [f"--device={device}"] + (NANOGPT_QUICK if args.quick else [])
    done = run(
        [sys.executable, "train.py", NANOGPT_CONFIG, *flags], env, args.timeout, folder
    )
    evals = re.findall(
        r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)", done["stdout"]
    )
    vals = [float(v) for step, _, v in evals if step != "0"] or [float("nan")]
    return {
        "ok": done["rc"] == 0,
        "command": f"python train.py {NANOGPT_CONFIG} {' '.join(flags)}",
        "wall_s": done["seconds"],
        "steps": int(evals[-1][0]) if evals else 0,
        "best_val_loss_reported": min(vals),
        "tail": tail(done, 3),
    }, folder


def tiny_shakespeare() -> str:
    """Tiny Shakespeare, as the course reads it (from $TRANSFORMER_DATA_MIRROR or its
    download, checksum verified)."""
    from transformer_lib.data import load_tiny_shakespeare

    return load_tiny_shakespeare()


def run_ours(args, device: str, tmp: Path) -> dict:
    out = tmp / "lm.pt"
    recipe = args.lm_args or (LM_QUICK if args.quick else LM_GPU)
    cmd = [sys.executable, "-m", "transformer_lib", "train-lm", *recipe.split()]
    cmd += ["--device", device, "--out", str(out), "--no-progress"]
    done = run(cmd, child_env(device), args.timeout)
    vals = [float(v) for v in re.findall(r"\| val ([\d.]+) \|", done["stdout"])]
    final = re.search(r"final: val loss ([\d.]+)", done["stdout"])
    return {
        "ok": done["rc"] == 0 and out.exists(),
        "command": "python -m transformer_lib train-lm " + recipe,
        "wall_s": done["seconds"],
        "best_val_loss_reported": min(vals) if vals else float("nan"),
        "final_val_loss_reported": float(final[1]) if final else float("nan"),
        "tail": tail(done, 3),
        "checkpoint": out,
    }


def stage_lm(args, device: str, tmp: Path) -> dict:
    import torch

    peer, folder = run_nanogpt(args, device, tmp)
    ours = run_ours(args, device, tmp)
    text = tiny_shakespeare()
    val_text = text[int(0.9 * len(text)) :]  # both split at 90%, as nanoGPT does
    dev = torch.device(device)
    window = None
    if peer["ok"]:
        nano, stoi, nano_ctx = nanogpt_model(folder, dev)
    if ours["ok"]:
        from transformer_lib.lm_train import load_lm

        model, tok = load_lm(str(ours.pop("checkpoint")), dev)
    ctxs = ([nano_ctx] if peer["ok"] else []) + (
        [model.config.context_len] if ours["ok"] else []
    )
    if ctxs:
        window = min(ctxs)
    if peer["ok"]:
        ids = torch.tensor([stoi[c] for c in val_text])
        peer["val_loss_same_way"] = same_way_loss(nano, ids, window, dev)
    if ours["ok"]:
        ids = torch.tensor(tok.encode(val_text))
        ours["val_loss_same_way"] = same_way_loss(model, ids, window, dev)
    ours.pop("checkpoint", None)
    both = peer["ok"] and ours["ok"]
    return {
        "ok": both,
        "measured_the_same_way": f"loss over all {len(val_text) - 1:,} validation "
        f"characters after the first, windows of {window}, fp32",
        "nanogpt": peer,
        "ours": ours,
        "nanogpt_published": NANOGPT_PUBLISHED,
        "ours_below_nanogpt_in_less_time": both
        and ours["val_loss_same_way"] < peer["val_loss_same_way"]
        and ours["wall_s"] < peer["wall_s"],
    }


# --- stage: mt ----------------------------------------------------------------------


def stage_mt(args, device: str, tmp: Path) -> dict:
    from transformer_lib.data import public_test_pairs
    from transformer_lib.decoding import evaluate_translations

    out = tmp / "translator.pt"
    recipe = args.mt_args or ("--quick" if args.quick else MT_GPU)
    budget = [] if args.quick else ["--max-minutes", str(args.mt_minutes)]
    env = child_env(device)
    train = run(
        [sys.executable, "-m", "transformer_lib", "train-mt", *recipe.split(), *budget]
        + ["--device", device, "--out", str(out), "--no-progress"],
        env,
        args.timeout,
    )
    result = {
        "command": f"python -m transformer_lib train-mt {recipe} {' '.join(budget)}",
        "train_wall_s": train["seconds"],
        "train_tail": tail(train, 3),
    }
    if train["rc"] != 0:
        return {"ok": False, **result}
    references: dict[str, list[str]] = {}
    for en, zh in public_test_pairs():  # each English sentence once, all its references
        references.setdefault(en, []).append(zh)
    sources = list(references)[: 20 if args.quick else None]
    (tmp / "sources.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    result["sentences"] = len(sources)
    ok = True
    for method, flags in (("greedy", []), ("beam", ["--beam-size", "4"])):
        done = run(
            [sys.executable, "-m", "transformer_lib", "translate", "--checkpoint"]
            + [str(out), "--input", str(tmp / "sources.txt"), "--method", method]
            + [*flags, "--device", device],
            env,
            args.timeout,
        )
        hyps = done["stdout"].split("\n")[: len(sources)]
        if done["rc"] != 0 or len(hyps) != len(sources):
            ok = False
            result[method] = {"ok": False, "tail": tail(done)}
            continue
        scores = evaluate_translations(hyps, [references[s] for s in sources])
        result[method] = {**scores, "decode_wall_s": done["seconds"]}
    return {"ok": ok, "public_test": "Tatoeba Challenge eng-cmn (Simplified)", **result}


# --- stage: speed -------------------------------------------------------------------


def stage_speed(args, device: str, tmp: Path) -> dict:
    import torch
    import torch.nn.functional as F

    from transformer_lib import perf
    from transformer_lib.attention import scaled_dot_product_attention
    from transformer_lib.gpt import GPT, GPTConfig, generate
    from transformer_lib.masks import causal_mask
    from transformer_lib.training import bf16_supported

    dev = torch.device(device)
    quick, cuda = args.quick, dev.type == "cuda"
    native_bf16 = bf16_supported(dev)
    result: dict = {"native_bf16": native_bf16}
    n = 256 if quick else 4096
    result["matmul_peak_tflops"] = {"fp32": perf.matmul_flops(dev, n=n) / 1e12}
    if native_bf16:
        peak = perf.matmul_flops(dev, torch.bfloat16, n=n)
        result["matmul_peak_tflops"]["bf16"] = peak / 1e12

    attention = []  # notebook 14's B = 16, H = 4, D = 32
    for T in [64] if quick else [256, 1024, 4096]:
        q, k, v = (
            torch.randn(16, 4, T, 32, device=dev, requires_grad=True) for _ in "qkv"
        )
        mask = causal_mask(T, dev)
        row = {"T": T}
        for name, fn in (
            ("explicit", lambda: scaled_dot_product_attention(q, k, v, mask)[0]),
            ("fused", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        ):
            row[f"{name}_ms"] = 1e3 * perf.time_it(
                lambda: fn().sum().backward(), device=dev
            )
            if cuda:
                torch.cuda.reset_peak_memory_stats(dev)
                base = torch.cuda.memory_allocated(dev)
                fn().sum().backward()
                extra = torch.cuda.max_memory_allocated(dev) - base
                row[f"{name}_peak_mib"] = extra / 2**20
        row["fused_speedup"] = row["explicit_ms"] / row["fused_ms"]
        attention.append(row)
    result["attention_fwd_bwd"] = attention

    config = GPTConfig.tiny() if quick else GPTConfig.gpu()
    batch, steps = (4, 2) if quick else (32, 20)
    variants = [("fp32, explicit softmax (baseline)", "explicit", False, False)]
    variants.append(("fp32, fused SDPA", "sdpa", False, False))
    if native_bf16:
        variants.append(("bf16 autocast, fused SDPA", "sdpa", True, False))
    if cuda or args.compile_on_cpu:
        variants.append(("fp32, fused SDPA, torch.compile", "sdpa", False, True))
        if native_bf16:
            variants.append(("bf16 autocast, fused SDPA, compile", "sdpa", True, True))
    flops = perf.model_flops_per_token(config)
    rows = {}
    for name, impl, bf16, compiled in variants:
        variant = GPTConfig(**{**config.to_dict(), "attn_impl": impl})
        try:
            tps = perf.training_throughput(variant, batch, steps, bf16, compiled, dev)
        except Exception as e:  # e.g. no compiler for torch.compile
            rows[name] = {
                "error": f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
            }
            continue
        peak = result["matmul_peak_tflops"]["bf16" if bf16 else "fp32"] * 1e12
        rows[name] = {"tokens_per_s": tps, "mfu": perf.mfu(tps, flops, peak)}
    base = rows[variants[0][0]]["tokens_per_s"]
    for row in rows.values():
        if "tokens_per_s" in row:
            row["ratio_to_fp32"] = row["tokens_per_s"] / base
    result["training_throughput"] = {
        "model": f"{config.n_layers} layers, d_model {config.d_model}, context "
        f"{config.context_len}, batch {batch}",
        "variants": rows,
    }

    torch.manual_seed(0)
    gen = (
        GPT(GPTConfig.tiny(context_len=128) if quick else GPTConfig.gpu())
        .to(dev)
        .eval()
    )
    prompt = torch.randint(0, gen.config.vocab_size, (1, 6), device=dev)
    kv = []
    for new in [20] if quick else [100, 500]:
        greedy = lambda cache: generate(gen, prompt, new, 0, use_cache=cache)  # noqa: E731
        same = torch.equal(greedy(True), greedy(False))
        slow = perf.time_it(lambda: greedy(False), 3, 1, dev)
        fast = perf.time_it(lambda: greedy(True), 3, 1, dev)
        kv.append({"new_tokens": new, "uncached_s": slow, "cached_s": fast,
                   "speedup": slow / fast, "same_tokens": same})  # fmt: skip
    result["kv_cache"] = kv
    return {"ok": all(r["same_tokens"] for r in kv), **result}


# --- the record ---------------------------------------------------------------------


def header(device: str, quick: bool) -> dict:
    import torch

    from transformer_lib.runtime import describe_machine

    dev = torch.device(device)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "card": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "device": device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "machine": describe_machine(dev),
        "quick": quick,
        "commit": commit or None,
    }


def default_out(device: str, quick: bool) -> Path:
    """gpu_check.json is a full run on CUDA only; anything else has its own name."""
    kind = device.split(":")[0]
    if kind == "cuda" and not quick:
        return RESULTS / "gpu_check.json"
    return RESULTS / f"gpu_check_{kind}{'_quick' if quick else ''}.json"


def write(path: Path, record: dict) -> None:
    """Atomically: a kill or a timeout leaves the previous record, never half one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.part")
    part.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(part, path)


def parse(argv: list[str] | None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", help="cuda (the default where there is one), or cpu")
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks the script")
    p.add_argument("--stage", default=",".join(STAGES), help="comma-separated stages")
    p.add_argument("--out", type=Path, help="the JSON record (default: by device)")
    p.add_argument("--timeout", type=float, default=570, help="seconds per command")
    p.add_argument("--notebooks", nargs="*", help="notebook prefixes (default: all)")
    p.add_argument("--nanogpt", type=Path, default=PEER, help="nanoGPT's folder")
    p.add_argument("--lm-args", help="train-lm flags instead of the GPU recipe")
    p.add_argument("--mt-args", help="train-mt flags instead of the GPU recipe")
    p.add_argument("--mt-minutes", type=float, default=2.0, help="train-mt budget")
    p.add_argument("--compile-on-cpu", action="store_true", help="speed: compile too")
    p.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.ddp_worker:
        ddp_worker(device.split(":")[0])
        return 0
    stages = [s.strip() for s in args.stage.split(",") if s.strip()]
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        sys.exit(f"gpu_check: unknown stage(s) {unknown}; choose from {list(STAGES)}")
    out = args.out or default_out(device, args.quick)
    if out.name == "gpu_check.json" and (args.quick or not device.startswith("cuda")):
        sys.exit("gpu_check: gpu_check.json is for a full run on CUDA; give --out")
    missing = sorted({m for s in stages for m in NEEDS[s] if not importlib_find(m)})
    if missing:
        sys.exit(
            f"gpu_check: missing modules {missing}: pip install them (see "
            "benchmarks/GPU.md)"
        )
    if not args.nanogpt.is_dir() and "lm" in stages:
        sys.exit(f"gpu_check: no nanoGPT at {args.nanogpt} (give --nanogpt FOLDER)")
    os.environ.setdefault("TRANSFORMER_QUICK", "0")
    record = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    record.update(header(device, args.quick))
    record.setdefault("stages", {})
    run_stage = {
        "tests": stage_tests,
        "notebooks": stage_notebooks,
        "lm": stage_lm,
        "mt": stage_mt,
        "speed": stage_speed,
    }
    for stage in stages:
        print(f"\n== {stage} on {device} ==", flush=True)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"gpu-check-{stage}-") as tmp:
            try:
                result = run_stage[stage](args, device, Path(tmp))
            except Exception as e:  # one stage failing must not lose the others
                first = (str(e).splitlines() or [""])[0][:300]
                result = {"ok": False, "error": f"{type(e).__name__}: {first}"}
        result["stage_seconds"] = round(time.perf_counter() - t0, 1)
        result["when"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        record["stages"][stage] = result
        write(out, record)
        print(f"{stage}: {'ok' if result['ok'] else 'FAILED'} in "
              f"{result['stage_seconds']} s", flush=True)  # fmt: skip
    print(f"\nwrote {out}")
    return 0 if all(record["stages"][s]["ok"] for s in stages) else 1


def importlib_find(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    sys.exit(main())
