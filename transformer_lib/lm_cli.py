"""The language model's command line: `train-lm` and `generate` (Part III).

    python -m transformer_lib train-lm --preset cpu --tokenizer char --out runs/lm/char.pt
    python -m transformer_lib train-lm --preset cpu --out runs/lm/char.pt --resume       # go on from the checkpoint
    torchrun --nproc_per_node=2 -m transformer_lib train-lm --preset tiny --max-iters 20  # DistributedDataParallel
    python -m transformer_lib generate --checkpoint runs/lm/char.pt --prompt "ROMEO:"

Data: Tiny Shakespeare, split as nanoGPT does: the first 90% of the characters for training, the last
10% for validation. Written by hand; notebooks 11 and 12 explain the pieces (`transformer_lib.gpt`,
`transformer_lib.training`, `transformer_lib.perf`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from transformer_lib.gpt import GPT, GPTConfig
from transformer_lib.training import (CheckpointMismatchError, clip_gradients, load_checkpoint, make_adamw,
                                      save_checkpoint, warmup_cosine)

__all__ = ["TrainSettings", "LMData", "load_lm_data", "get_batch", "evaluate", "bf16_supported", "train_lm",
           "generate_text", "register"]

PRESETS = {"tiny": GPTConfig.tiny, "cpu": GPTConfig.cpu, "gpu": GPTConfig.gpu, "nanogpt_cpu": GPTConfig.nanogpt_cpu}


@dataclass
class TrainSettings:
    """Everything a training run needs besides the model config; the command line sets each field."""

    preset: str = "cpu"  # a GPTConfig preset: tiny, cpu, gpu, nanogpt_cpu
    model: dict = field(default_factory=dict)  # overrides of the preset's fields, e.g. {"dropout": 0.1}
    tokenizer: str = "char"  # char, or bpe (a byte-level BPE trained on the training split)
    bpe_vocab: int = 512  # vocabulary size of the BPE tokenizer
    batch_size: int = 16  # B, sequences per step (per process under torchrun)
    max_iters: int = 700  # optimizer steps; the cosine schedule ends here (700: about a minute on 2 cores)
    stop_at: int | None = None  # stop early at this step (and save), as an interruption would
    time_budget_s: float | None = None  # stop when training (evaluation excluded) has run this long
    lr: float = 5e-3  # peak learning rate: high, for the small CPU model (nanoGPT's GPU model uses 1e-3)
    min_lr: float = 5e-4  # learning rate at the end of the cosine, a tenth of the peak
    warmup: int = 50  # steps of linear warm-up
    weight_decay: float = 0.1
    beta2: float = 0.99  # higher than 0.95: small batches give noisy gradients (nanoGPT's choice here)
    grad_clip: float = 1.0  # global gradient norm; 0 turns clipping off
    decay_embeddings: bool = False  # nanoGPT decays embeddings too; we do not (see training.param_groups)
    eval_interval: int = 100  # evaluate (and save) every this many steps
    eval_windows: int = 64  # validation windows for the periodic estimate; the final one reads all of it
    out: str | None = None  # checkpoint path; None saves nothing
    resume: bool = False  # continue from `out`
    device: str | None = None  # default: runtime.get_device()
    dtype: str = "auto"  # fp32, bf16 (autocast), or auto (bf16 where the device multiplies it natively)
    compile: bool = False  # torch.compile the model
    seed: int = 0
    progress: bool = True  # a tqdm progress bar
    verbose: bool = True  # print a line at each evaluation


@dataclass
class LMData:
    """A tokenizer and the encoded splits of Tiny Shakespeare."""

    tokenizer: object
    train_ids: torch.Tensor  # (n_train,) int64
    val_ids: torch.Tensor  # (n_val,) int64
    val_text: str  # the validation characters, for bits per character


def load_lm_data(tokenizer: str = "char", bpe_vocab: int = 512) -> LMData:
    """Tiny Shakespeare, first 90% of characters to train and last 10% to validate (nanoGPT's split)."""
    from transformer_lib.data import load_tiny_shakespeare
    from transformer_lib.tokenization import CharTokenizer, train_hf_bpe

    text = load_tiny_shakespeare()
    n = int(0.9 * len(text))
    train_text, val_text = text[:n], text[n:]
    if tokenizer == "char":
        tok = CharTokenizer(text)  # the 65 characters of the whole corpus, as nanoGPT
    elif tokenizer == "bpe":
        tok = train_hf_bpe(train_text, bpe_vocab, specials=())  # trained on the training split only
    else:
        raise ValueError(f"tokenizer must be 'char' or 'bpe', got {tokenizer!r}")
    as_ids = lambda s: torch.tensor(tok.encode(s), dtype=torch.long)  # noqa: E731
    return LMData(tok, as_ids(train_text), as_ids(val_text), val_text)


def get_batch(ids: torch.Tensor, batch_size: int, context_len: int,
              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows: inputs x (B, T) and targets y (B, T), y shifted one token to the right."""
    starts = torch.randint(len(ids) - context_len, (batch_size,), generator=generator)  # (B,)
    x = torch.stack([ids[s:s + context_len] for s in starts.tolist()])  # (B, T)
    y = torch.stack([ids[s + 1:s + 1 + context_len] for s in starts.tolist()])  # (B, T)
    return x, y


@torch.no_grad()
def evaluate(model: GPT, ids: torch.Tensor, batch_size: int = 32, max_windows: int | None = None,
             autocast: contextlib.AbstractContextManager | None = None) -> tuple[float, int]:
    """Mean next-token loss (nats) over non-overlapping windows of `ids`, and how many tokens it predicted.

    Deterministic: windows start at 0, N, 2N, ...; every token but the first is predicted once when
    max_windows is None. With max_windows, an evenly spaced subset of the windows (a cheaper estimate).
    """
    N = model.config.context_len
    starts = list(range(0, len(ids) - 1, N))
    if max_windows is not None and max_windows < len(starts):
        starts = [starts[round(i * (len(starts) - 1) / (max_windows - 1 or 1))] for i in range(max_windows)]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for length in sorted({min(N, len(ids) - 1 - s) for s in starts}):  # full windows, then the last one
        group = [s for s in starts if min(N, len(ids) - 1 - s) == length]
        for i in range(0, len(group), batch_size):
            chunk = group[i:i + batch_size]
            x = torch.stack([ids[s:s + length] for s in chunk]).to(device)  # (B, T)
            y = torch.stack([ids[s + 1:s + 1 + length] for s in chunk]).to(device)  # (B, T)
            with autocast or contextlib.nullcontext():
                _, loss = model(x, y)
            total += float(loss) * y.numel()
            count += y.numel()
    model.train(was_training)
    return total / count, count


def bf16_supported(device: torch.device) -> bool:
    """True if this device computes bf16 matmuls natively: on CUDA, compute capability 8.0 (Ampere) or
    newer; on a CPU, oneDNN's check (AVX512-BF16 or AMX).

    `torch.cuda.is_bf16_supported()` alone also says True for older GPUs such as Colab's T4, where bf16 is
    emulated and slower than fp32.
    """
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 8
    if device.type == "cpu":
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            return False
    return False


def _distributed() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment; (0, 1, 0) when run alone."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def _model_config(s: TrainSettings, vocab_size: int) -> GPTConfig:
    if s.preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {s.preset!r}")
    return PRESETS[s.preset](**{"vocab_size": vocab_size, **s.model})


def train_lm(s: TrainSettings, data: LMData | None = None) -> dict:
    """Train a GPT on Tiny Shakespeare as `s` says; returns the model, its history and the final figures.

    Under torchrun (RANK and WORLD_SIZE set) every process trains on its own batches inside
    DistributedDataParallel, which averages the gradients; only rank 0 prints and writes checkpoints.
    Resuming restores the model, the optimizer, the step, the sampling and dropout random states and
    the history, so on CPU an interrupted and resumed run gives the same weights as an uninterrupted one.
    """
    import torch.distributed as dist

    from transformer_lib.runtime import get_device, set_seed

    rank, world, local_rank = _distributed()
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() and s.device != "cpu" else "gloo")
    device = torch.device(s.device) if s.device else get_device()
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    main = rank == 0
    say = print if (main and s.verbose) else (lambda *a, **k: None)

    set_seed(s.seed)
    data = data or load_lm_data(s.tokenizer, s.bpe_vocab)
    config = _model_config(s, data.tokenizer.vocab_size)
    model = GPT(config).to(device)
    optimizer = make_adamw(model, s.lr, s.weight_decay, (0.9, s.beta2), s.decay_embeddings)
    batches = torch.Generator().manual_seed(s.seed + rank)  # each process draws its own batches
    step, history, train_time = 0, [], 0.0
    if s.resume:
        if not s.out:
            raise ValueError("--resume needs --out, the checkpoint to continue from")
        state = load_checkpoint(s.out, expected_config=config.to_dict(),
                                expected_tokenizer=data.tokenizer.to_dict(), map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, history, train_time = state["step"], state["history"], state["train_time_s"]
        torch.set_rng_state(state["torch_rng"])
        batches.set_state(state["batch_rng"])
        if world > 1:  # the checkpoint holds rank 0's sampler; give the others their own streams again
            batches.manual_seed(s.seed + rank + 7919 * step)
        say(f"resumed from {os.path.basename(s.out)} at step {step}")

    use_bf16 = s.dtype == "bf16" or (s.dtype == "auto" and bf16_supported(device))
    if s.dtype == "bf16" and not bf16_supported(device):
        say(f"note: {device.type} has no native bf16 matmul here; autocast to bf16 will be slow")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16)
    fwd: nn.Module = torch.compile(model) if s.compile else model
    if world > 1:
        fwd = nn.parallel.DistributedDataParallel(fwd, device_ids=[local_rank] if device.type == "cuda" else None)
    say(f"{config.n_layers} layers, d_model {config.d_model}, context {config.context_len}, vocab "
        f"{config.vocab_size}: {model.num_params():,} parameters | {s.tokenizer} tokens | {device} "
        f"{'bf16' if use_bf16 else 'fp32'} | {world} process(es) x batch {s.batch_size}")

    def save():
        if main and s.out:
            save_checkpoint(s.out, model, optimizer, config=config.to_dict(), tokenizer=data.tokenizer.to_dict(),
                            step=step, history=history, train_time_s=train_time, torch_rng=torch.get_rng_state(),
                            batch_rng=batches.get_state(), settings=_plain(s))

    tokens_per_step = s.batch_size * config.context_len * world
    bar = None
    if main and s.progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=s.max_iters, initial=step, desc="train-lm", unit="step", dynamic_ncols=True)
    last_loss = float("nan")
    model.train()
    def out_of_time() -> bool:
        over = s.time_budget_s is not None and train_time >= s.time_budget_s
        if world > 1 and s.time_budget_s is not None:  # every rank must stop at the same step
            flag = torch.tensor([float(over)], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            over = bool(flag.item())
        return over

    while step < s.max_iters and (s.stop_at is None or step < s.stop_at) and not out_of_time():
        t0 = time.perf_counter()
        lr = warmup_cosine(step, s.lr, s.warmup, s.max_iters, s.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = (t.to(device) for t in get_batch(data.train_ids, s.batch_size, config.context_len, batches))
        with autocast:
            _, loss = fwd(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip_gradients(model, s.grad_clip)
        optimizer.step()
        step += 1
        if step % 10 == 0 or step == s.max_iters:
            last_loss = float(loss.detach())  # reading the loss waits for the device: only now and then
        if device.type == "cuda":
            torch.cuda.synchronize()
        train_time += time.perf_counter() - t0
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{last_loss:.3f}", lr=f"{lr:.1e}")
        if main and (step % s.eval_interval == 0 or step == s.max_iters):
            val, _ = evaluate(model, data.val_ids, max_windows=s.eval_windows, autocast=autocast)
            history.append({"step": step, "train_time_s": round(train_time, 3), "train_loss": last_loss,
                            "val_loss": val, "lr": lr})
            say(f"step {step:>5}/{s.max_iters} | train {last_loss:.3f} | val {val:.3f} | lr {lr:.1e} | "
                f"{train_time:6.1f} s | {step * tokens_per_step / max(train_time, 1e-9):,.0f} tok/s")
            save()
    if bar is not None:
        bar.close()
    save()
    result = {"model": model, "tokenizer": data.tokenizer, "step": step, "train_time_s": train_time,
              "history": history, "config": config.to_dict(),
              "params": model.num_params(), "bf16": use_bf16, "world_size": world,
              "tokens_per_s": step * tokens_per_step / max(train_time, 1e-9)}
    if main:
        val_loss, n_tokens = evaluate(model, data.val_ids, autocast=autocast)
        n_chars = len(data.val_text) - len(data.tokenizer.decode(data.val_ids[:1].tolist()))
        result.update(val_loss=val_loss, bits_per_char=val_loss * n_tokens / n_chars / math.log(2))
        say(f"final: val loss {val_loss:.4f} over all {n_tokens:,} validation tokens | "
            f"{result['bits_per_char']:.3f} bits per character | {train_time:.1f} s of training")
    if world > 1:
        checksums = [None] * world
        dist.all_gather_object(checksums, round(sum(float(p.double().sum()) for p in model.parameters()), 6))
        result["rank_checksums"] = checksums
        say(f"parameter checksum on each rank: {checksums} -> ranks agree: {len(set(checksums)) == 1}")
        dist.destroy_process_group()
    return result


def _plain(s: TrainSettings) -> dict:
    """The settings as a plain dict (for the checkpoint)."""
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in dataclasses.asdict(s).items()}


def generate_text(checkpoint: str, prompt: str, max_new_tokens: int = 500, temperature: float = 0.8,
                  top_k: int | None = 200, top_p: float | None = None, seed: int = 0, use_cache: bool = True,
                  device: str | None = None, notes=None) -> str:
    """Load a checkpoint and continue `prompt`; returns prompt + continuation as text.

    Raises ValueError, with a message for a person, for characters the vocabulary lacks. An empty
    prompt starts from a newline; a prompt longer than the context keeps its last context_len tokens.
    Both cases are reported through `notes` (a function taking a string; default: stderr).
    """
    from transformer_lib.runtime import get_device
    from transformer_lib.tokenization import tokenizer_from_dict

    notes = notes or (lambda m: print(m, file=sys.stderr))
    dev = torch.device(device) if device else get_device()
    state = load_checkpoint(checkpoint, map_location=dev)
    tok = tokenizer_from_dict(state["tokenizer"])
    model = GPT(GPTConfig.from_dict(state["config"])).to(dev)
    model.load_state_dict(state["model"])
    if prompt == "":
        notes("note: empty prompt; starting from a newline, as a new speech would")
        prompt = "\n"
    try:
        ids = tok.encode(prompt)
    except ValueError as e:
        known = "".join(getattr(tok, "chars", []))
        raise ValueError(f"the prompt cannot be encoded by this checkpoint's tokenizer: {e}"
                         + (f"\nknown characters: {known!r}" if known else "")) from None
    N = model.config.context_len
    if len(ids) > N:
        notes(f"note: the prompt has {len(ids)} tokens but the context holds {N}; only its last {N} are read")
    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.tensor([ids], dtype=torch.long, device=dev)
    out = model.generate(x, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                         use_cache=use_cache, generator=g)
    return prompt + tok.decode(out[0, len(ids):].tolist())


def _train_command(args: argparse.Namespace) -> int:
    """`train-lm`: build TrainSettings from the flags, train, print the final figures."""
    model = {}
    for item in args.model:
        key, _, value = item.partition("=")
        if not value:
            print(f"--model expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        model[key] = _parse_value(value)
    fields_ = {f.name for f in dataclasses.fields(TrainSettings)}
    s = TrainSettings(**{k: v for k, v in vars(args).items() if k in fields_ and k != "model"}, model=model)
    try:
        train_lm(s)
    except (CheckpointMismatchError, FileNotFoundError, ValueError) as e:
        print(f"train-lm: {e}", file=sys.stderr)
        return 2
    return 0


def _parse_value(value: str):
    """'0.1' -> 0.1, '4' -> 4, 'true' -> True, anything else stays a string."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


def _generate_command(args: argparse.Namespace) -> int:
    """`generate`: print a continuation of the prompt."""
    try:
        text = generate_text(args.checkpoint, args.prompt, args.max_new_tokens, args.temperature,
                             args.top_k or None, args.top_p, args.seed, not args.no_cache, args.device)
    except (CheckpointMismatchError, FileNotFoundError, ValueError) as e:
        print(f"generate: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0


TRAIN_HELP = """Train the GPT on Tiny Shakespeare (first 90% of the characters; the last 10% validate).

The defaults are the CPU recipe: preset cpu, batch 16, 700 steps, lr 5e-3 with 50 warm-up steps and a
cosine to 5e-4, bf16 autocast where the device multiplies bf16 natively. The checkpoint (--out) is
written atomically at every evaluation; --resume continues from it, exactly, on one CPU process.
Under torchrun every process trains on its own batches (DistributedDataParallel, gloo on CPU, nccl on
GPU); only rank 0 prints and writes. For nanoGPT's GPU model: --preset gpu --batch-size 64
--max-iters 5000 --lr 1e-3 --min-lr 1e-4 --warmup 100 --eval-interval 250.
"""


def register(commands) -> None:
    """Add the `train-lm` and `generate` subcommands to the CLI's subparsers."""
    d = TrainSettings()
    p = commands.add_parser("train-lm", help="train the GPT language model on Tiny Shakespeare",
                            description=TRAIN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default=d.preset, choices=sorted(PRESETS), help="model size (default: %(default)s)")
    p.add_argument("--model", action="append", default=[], metavar="KEY=VALUE",
                   help="override a GPTConfig field, e.g. --model dropout=0.1 (repeatable)")
    p.add_argument("--tokenizer", default=d.tokenizer, choices=["char", "bpe"])
    p.add_argument("--bpe-vocab", type=int, default=d.bpe_vocab)
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="per process")
    p.add_argument("--max-iters", type=int, default=d.max_iters, help="steps; the cosine ends here")
    p.add_argument("--stop-at", type=int, default=None, help="stop (and save) at this step")
    p.add_argument("--time-budget", dest="time_budget_s", type=float, default=None, help="seconds of training")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--min-lr", type=float, default=d.min_lr)
    p.add_argument("--warmup", type=int, default=d.warmup)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--beta2", type=float, default=d.beta2)
    p.add_argument("--grad-clip", type=float, default=d.grad_clip)
    p.add_argument("--decay-embeddings", action="store_true", help="decay embeddings too, as nanoGPT")
    p.add_argument("--eval-interval", type=int, default=d.eval_interval)
    p.add_argument("--eval-windows", type=int, default=d.eval_windows)
    p.add_argument("--out", default=None, help="checkpoint path (written atomically at each evaluation)")
    p.add_argument("--resume", action="store_true", help="continue from --out")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: the best available)")
    p.add_argument("--dtype", default=d.dtype, choices=["fp32", "bf16", "auto"])
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.set_defaults(run=_train_command)

    g = commands.add_parser("generate", help="continue a prompt with a trained language model")
    g.add_argument("--checkpoint", required=True)
    g.add_argument("--prompt", default="\n")
    g.add_argument("--max-new-tokens", type=int, default=500)
    g.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=200, help="0 = no top-k filter")
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-cache", action="store_true", help="recompute the whole context every step")
    g.add_argument("--device", default=None)
    g.set_defaults(run=_generate_command)
