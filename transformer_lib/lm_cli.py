"""Command line of Part III (the language model): flags in, calls to the library out.

    python -m transformer_lib train-lm --preset cpu --out runs/lm/char.pt
    python -m transformer_lib train-lm --preset cpu --out runs/lm/char.pt --resume
    torchrun --nproc_per_node=2 -m transformer_lib train-lm --preset tiny --max-iters 20
    python -m transformer_lib train-lm --positions rope --mlp swiglu --optimizer muon
    python -m transformer_lib generate --checkpoint runs/lm/char.pt --prompt "ROMEO:"

The training is `transformer_lib.lm_train` (notebook 11); this file only turns flags
into its `TrainSettings`. An existing checkpoint is never replaced by accident:
`train-lm` refuses to start unless `--resume` or `--restart` says what to do with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from transformer_lib.cli_args import (
    USER_ERRORS,
    add_existing_checkpoint_flags,
    beta,
    check_text,
    default_device,
    device,
    key_value_overrides,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    read_text,
    run_reported,
    seed,
    temperature,
    top_p,
)

MAX_NEW_TOKENS = 100_000  # about 100,000 characters of Shakespeare: minutes on a CPU

TRAIN_HELP = """Train the GPT on Tiny Shakespeare (first 90% of the characters; the last
10% validate).

The defaults are the CPU recipe: preset cpu, batch 16, 700 steps, lr 5e-3 with 50
warm-up steps and a cosine to 5e-4, bf16 autocast where the device multiplies bf16
natively. The checkpoint (--out) is written atomically at every evaluation. If --out
already holds a checkpoint, say what to do with it: --resume continues it exactly (a
larger --max-iters extends a finished run), --restart trains a new one in its place (the
old file stays until the new run's first save). Ctrl-C stops after the current step and
saves. Under torchrun every process trains on its own batches (DistributedDataParallel,
gloo on CPU, nccl on GPU); only rank 0 prints and writes. nanoGPT's GPU model: --preset
gpu --batch-size 64 --max-iters 5000 --lr 1e-3 --min-lr 1e-4 --warmup-steps 100
--eval-interval 250.

Part IV's switches (notebook 13): --positions, --mlp, --n-kv-heads, --qk-norm,
--untied, --optimizer; with --time-budget the cosine decays on the clock and ends at
the budget (--max-iters is then only an upper bound, a million steps unless given).
"""


def train_command(args: argparse.Namespace) -> int:
    """`train-lm`: build TrainSettings from the flags, train, report the final
    figures."""
    from transformer_lib.lm_train import TrainSettings, train_lm
    from transformer_lib.modern import ModernConfig as GPTConfig

    kinds = {
        f.name: type(getattr(GPTConfig(), f.name))
        for f in dataclasses.fields(GPTConfig)
        if f.name != "vocab_size"
    }
    try:
        model = key_value_overrides(args.model, kinds)
    except ValueError as e:
        print(f"train-lm: {e}", file=sys.stderr)
        return 2
    for name in ("positions", "mlp", "n_kv_heads", "qk_norm"):  # Part IV's switches
        if getattr(args, name) is not None:
            model[name] = getattr(args, name)
    if args.untied:
        model["tie_weights"] = False
    if args.max_iters is None:
        args.max_iters = 1_000_000 if args.time_budget_s else TrainSettings.max_iters
    problem = _settings_problem(args)
    if problem:
        print(f"train-lm: {problem}", file=sys.stderr)
        return 2
    if not args.out:
        print(
            "note: no --out, so this run is not saved (give --out PATH to keep it)",
            file=sys.stderr,
        )
    names = {f.name for f in dataclasses.fields(TrainSettings)} - {"model", "betas"}
    try:  # the settings check themselves: one line, as for a flag
        s = TrainSettings(
            **{k: v for k, v in vars(args).items() if k in names},
            model=model,
            betas=tuple(args.betas),
        )
    except ValueError as e:
        print(f"train-lm: {e}", file=sys.stderr)
        return 2
    status, _ = run_reported(
        "train-lm", lambda: train_lm(s), "lower --batch-size or use a smaller --preset"
    )
    return status


def _settings_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with flags that are each valid but not together, or with
    $TRANSFORMER_DEVICE (then filled into args.device); None if nothing."""
    if args.min_lr > args.lr:
        return (
            f"--min-lr {args.min_lr:g} is above --lr {args.lr:g}; the rate falls from "
            "--lr to --min-lr, so give a --min-lr below it"
        )
    try:
        args.device = args.device or default_device()
    except ValueError as e:
        return str(e)
    return None


def generate_command(args: argparse.Namespace) -> int:
    """`generate`: print a continuation of the prompt (from --prompt, or a file with
    --prompt-file)."""
    from transformer_lib.lm_train import generate_text

    if args.max_new_tokens > MAX_NEW_TOKENS:
        print(
            f"generate: --max-new-tokens is at most {MAX_NEW_TOKENS:,} (got "
            f"{args.max_new_tokens:,}); for a "
            f"longer text, generate again from the end of this one",
            file=sys.stderr,
        )
        return 2
    prompt = args.prompt
    try:
        check_text(prompt, "--prompt")
        if args.prompt_file is not None:
            prompt = read_text(args.prompt_file)  # as it is: spaces and blank lines
        args.device = args.device or default_device()
    except ValueError as e:
        print(f"generate: {e}", file=sys.stderr)
        return 2
    try:
        text = generate_text(
            args.checkpoint,
            prompt,
            args.max_new_tokens,
            args.temperature,
            args.top_k or None,
            args.top_p,
            args.seed,
            not args.no_cache,
            args.device,
            notes=lambda m: print(m, file=sys.stderr),
        )
    except USER_ERRORS as e:
        print(f"generate: {e}", file=sys.stderr)
        return 1
    print(text)
    return 0


def register(commands) -> None:
    """Add the `train-lm` and `generate` subcommands to the CLI's subparsers."""
    from transformer_lib.lm_train import PRESETS, TrainSettings

    d = TrainSettings()
    p = commands.add_parser(
        "train-lm",
        help="train the GPT language model on Tiny Shakespeare",
        description=TRAIN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--preset",
        default=d.preset,
        choices=sorted(PRESETS),
        help="model size (default: %(default)s)",
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a GPTConfig field, e.g. --model dropout=0.1 (repeatable)",
    )
    p.add_argument("--tokenizer", default=d.tokenizer, choices=["char", "bpe"])
    p.add_argument(
        "--bpe-vocab",
        type=positive_int,
        default=d.bpe_vocab,
        help="BPE vocabulary, at least 256",
    )
    p.add_argument(
        "--batch-size", type=positive_int, default=d.batch_size, help="per process"
    )
    p.add_argument(
        "--max-iters",
        type=positive_int,
        default=None,
        help=f"steps; the cosine ends here (default {d.max_iters}; with --time-budget "
        "only an upper bound)",
    )
    p.add_argument(
        "--stop-at",
        type=positive_int,
        default=None,
        help="stop (and save) at this step",
    )
    p.add_argument(
        "--time-budget",
        dest="time_budget_s",
        type=positive_float,
        default=None,
        help="seconds of training; the cosine decays on the clock to end here",
    )
    p.add_argument("--lr", type=positive_float, default=d.lr, help="peak learning rate")
    p.add_argument(
        "--min-lr",
        type=non_negative_float,
        default=d.min_lr,
        help="where the cosine ends",
    )
    p.add_argument("--warmup-steps", type=non_negative_int, default=d.warmup_steps)
    p.add_argument("--weight-decay", type=non_negative_float, default=d.weight_decay)
    p.add_argument(
        "--betas",
        type=beta,
        nargs=2,
        default=list(d.betas),
        metavar=("B1", "B2"),
    )
    p.add_argument(
        "--grad-clip",
        type=non_negative_float,
        default=d.grad_clip,
        help="0 turns clipping off",
    )
    p.add_argument(
        "--decay-embeddings",
        action="store_true",
        help="decay embeddings too, as nanoGPT",
    )
    p.add_argument("--eval-interval", type=positive_int, default=d.eval_interval)
    p.add_argument("--eval-windows", type=positive_int, default=d.eval_windows)
    p.add_argument(
        "--out",
        default=None,
        help="checkpoint path (written atomically at each evaluation)",
    )
    add_existing_checkpoint_flags(p)
    p.add_argument(
        "--device",
        type=device,
        default=None,
        help="cpu, cuda, mps (default: the best available)",
    )
    iv = p.add_argument_group("Part IV switches (notebook 13)")
    iv.add_argument("--positions", choices=["learned", "sinusoidal", "rope"])
    iv.add_argument("--mlp", choices=["gelu", "swiglu"])
    iv.add_argument(
        "--n-kv-heads", type=positive_int, help="key/value heads (GQA); 1 is MQA"
    )
    iv.add_argument("--qk-norm", action="store_const", const=True, default=None)
    iv.add_argument("--untied", action="store_true", help="an output matrix of its own")
    iv.add_argument("--optimizer", default=d.optimizer, choices=["adamw", "muon"])
    p.add_argument("--dtype", default=d.dtype, choices=["fp32", "bf16", "auto"])
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--seed", type=seed, default=d.seed)
    p.add_argument(
        "--log-dir",
        default=None,
        help="write TensorBoard curves here (needs `pip install tensorboard`)",
    )
    p.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bar"
    )
    p.set_defaults(run=train_command)

    g = commands.add_parser(
        "generate", help="continue a prompt with a trained language model"
    )
    g.add_argument("--checkpoint", required=True)
    g.add_argument("--prompt", default="\n")
    g.add_argument(
        "--prompt-file",
        metavar="PATH",
        help="read the prompt from a file ('-': standard input)",
    )
    g.add_argument("--max-new-tokens", type=non_negative_int, default=500)
    g.add_argument("--temperature", type=temperature, default=0.8, help="0 = greedy")
    g.add_argument(
        "--top-k", type=non_negative_int, default=200, help="0 = no top-k filter"
    )
    g.add_argument("--top-p", type=top_p, default=None)
    g.add_argument("--seed", type=seed, default=0)
    g.add_argument(
        "--no-cache", action="store_true", help="recompute the whole context every step"
    )
    g.add_argument("--device", type=device, default=None)
    g.set_defaults(run=generate_command)
