"""Command line of Part III (the language model): flags in, calls to the library out.

    python -m transformer_lib train-lm --out runs/lm/char.pt
    python -m transformer_lib train-lm --out runs/lm/char.pt --resume
    torchrun --nproc_per_node=2 -m transformer_lib train-lm --preset tiny --max-iters 20
    python -m transformer_lib train-lm --positions rope --mlp swiglu --optimizer muon
    python -m transformer_lib generate --checkpoint runs/lm/char.pt --prompt "ROMEO:"

The training is `transformer_lib.lm_train` (notebook 11); this file only turns flags
into its `TrainSettings`. An existing checkpoint is never replaced by accident:
`train-lm` refuses to start unless --resume or --restart says what to do with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from transformer_lib.cli_args import (
    USER_ERRORS,
    add_run_flags,
    add_settings_flags,
    check_text,
    default_device,
    device,
    key_value_overrides,
    non_negative_int,
    read_text,
    run_reported,
    seed,
    settings_from_args,
    temperature,
    top_p,
)

MAX_NEW_TOKENS = 100_000  # about 100,000 characters of Shakespeare: minutes on a CPU
# TrainSettings' fields given by add_run_flags, --preset, --model (and Part IV's
# switches), or by no flag (verbose: the CLI always prints)
NOT_FLAGS = ("out", "resume", "restart", "device", "log_dir", "progress", "preset")
NOT_FLAGS += ("model", "verbose")
PART_IV = ("positions", "mlp", "n_kv_heads", "qk_norm")  # ModernConfig's, notebook 13

TRAIN_HELP = """Train the GPT on Tiny Shakespeare: the first 90% of the characters
train, the last 10% validate.

The defaults are the CPU recipe: preset cpu, batch 16, 700 steps, lr 5e-3 with 50
warm-up steps and a cosine to 5e-4, bf16 autocast where the device multiplies bf16
natively. nanoGPT's GPU model:

    train-lm --preset gpu --batch-size 64 --max-iters 5000 --lr 1e-3 --min-lr 1e-4
             --warmup-steps 100 --eval-interval 250

The checkpoint (--out) is written atomically at every evaluation. If --out already
holds a checkpoint, say what to do with it: --resume continues it exactly (a larger
--max-iters extends a finished run), --restart trains a new one in its place (the old
file stays until the new run's first save). Ctrl-C stops after the current step and
saves.

Under torchrun every process trains on its own batches (DistributedDataParallel, gloo
on CPU, nccl on GPU); only rank 0 prints and writes.

With --time-budget the cosine decays on the clock and ends at the budget (--max-iters
is then only an upper bound, a million steps unless given).
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
        model = key_value_overrides(args.model_items, kinds)
        args.device = args.device or default_device()
    except ValueError as e:
        args.parser.error(str(e))
    model |= {k: getattr(args, k) for k in PART_IV if getattr(args, k) is not None}
    if args.untied:
        model["tie_weights"] = False
    if args.max_iters is None and args.time_budget_s:
        args.max_iters = 1_000_000
    s = settings_from_args(args.parser, args, TrainSettings(model=model))
    if not s.out:
        print(
            "note: no --out, so this run is not saved (give --out PATH to keep it)",
            file=sys.stderr,
        )
    status, _ = run_reported(
        "train-lm", lambda: train_lm(s), "lower --batch-size or use a smaller --preset"
    )
    return status


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
            log=lambda m: print(m, file=sys.stderr),
        )
    except USER_ERRORS as e:
        print(f"generate: {e}", file=sys.stderr)
        return 1
    print(text)
    return 0


def register(commands) -> None:
    """Add `train-lm` and `generate` to the subcommands of `python -m
    transformer_lib`."""
    from transformer_lib.lm_train import PRESETS, TrainSettings
    from transformer_lib.modern import ModernConfig as GPTConfig

    p = commands.add_parser(
        "train-lm",
        help="train the GPT language model on Tiny Shakespeare",
        description=TRAIN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_flags(p, None)
    settings = p.add_argument_group("training settings (TrainSettings)")
    settings.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help=f"model size (default: {TrainSettings.preset})",
    )
    settings.add_argument(
        "--model",
        dest="model_items",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a GPTConfig field, e.g. --model dropout=0.1 (repeatable)",
    )
    add_settings_flags(settings, TrainSettings, NOT_FLAGS)
    iv = p.add_argument_group("Part IV switches (notebook 13)")
    add_settings_flags(iv, GPTConfig, only=PART_IV)
    iv.add_argument("--untied", action="store_true", help="an output matrix of its own")
    p.set_defaults(run=train_command, parser=p)

    g = commands.add_parser(
        "generate", help="continue a prompt with a trained language model"
    )
    g.add_argument("--checkpoint", required=True, help="a train-lm checkpoint")
    g.add_argument(
        "--prompt", default="\n", help="the text to continue (default: a new line)"
    )
    g.add_argument(
        "--prompt-file",
        metavar="PATH",
        help="read the prompt from a file (-: standard input)",
    )
    g.add_argument(
        "--max-new-tokens",
        type=non_negative_int,
        default=500,
        help="tokens to generate (default: %(default)s)",
    )
    g.add_argument(
        "--temperature",
        type=temperature,
        default=0.8,
        help="0 = greedy (default: %(default)s)",
    )
    g.add_argument(
        "--top-k",
        type=non_negative_int,
        default=200,
        help="sample among the k most likely tokens; 0 = all (default: %(default)s)",
    )
    g.add_argument(
        "--top-p",
        type=top_p,
        help="sample among the most likely tokens holding this probability",
    )
    g.add_argument(
        "--seed", type=seed, default=0, help="random seed (default: %(default)s)"
    )
    g.add_argument(
        "--no-cache", action="store_true", help="recompute the whole context every step"
    )
    g.add_argument(
        "--device", type=device, help="cpu, cuda, mps (default: the best available)"
    )
    g.set_defaults(run=generate_command)
