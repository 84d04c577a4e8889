"""Command line of Part III (the language model): flags in, calls to the library out.

    python -m transformer_lib train-lm --out runs/lm/char.pt   # the CPU recipe
    python -m transformer_lib train-lm --out runs/lm/char.pt --resume
    python -m transformer_lib train-lm --preset gpu --batch-size 64 --max-iters 5000
        --lr 1e-3 --min-lr 1e-4 --warmup-steps 100 --eval-interval 250   # nanoGPT's
    torchrun --nproc_per_node=2 -m transformer_lib train-lm --preset tiny --max-iters 20
    python -m transformer_lib train-lm --positions rope --mlp swiglu --optimizer muon
    python -m transformer_lib generate --checkpoint runs/lm/char.pt --prompt "ROMEO:"

train-lm trains the GPT of `transformer_lib.lm_train` (appendix A2) on Tiny Shakespeare:
the first 90% of the characters train, the last 10% validate. Under torchrun each
process trains on its own batches (DistributedDataParallel); only rank 0 prints and
writes. The checkpoint (--out) is written atomically at every evaluation and never
replaced by accident: if one is there, --resume continues it exactly (a larger
--max-iters extends a finished run), --restart trains a new one in its place (the old
file stays until the first save). Ctrl-C stops after the current step and saves. With
--time-budget, --max-iters is only an upper bound (a million steps unless given).
"""

from __future__ import annotations

import argparse
import dataclasses

from transformer_lib import cli_args as cli

# TrainSettings' fields given by --resume/--restart, --model (and Part IV's switches),
# or by no flag (verbose: the command line always prints)
NOT_FLAGS = ("existing", "model", "verbose")
# ModernConfig's switches, notebooks 15-16
PART_IV = ("positions", "mlp", "n_kv_heads", "qk_norm")


def train_command(args: argparse.Namespace) -> int:
    """`train-lm`: TrainSettings from the flags, then train_lm, one line if it fails."""
    from transformer_lib.lm_train import TrainSettings, train_lm
    from transformer_lib.modern import ModernConfig

    model_fields = dataclasses.asdict(ModernConfig()).items()
    kinds = {k: type(v) for k, v in model_fields if k != "vocab_size"}
    try:
        model = cli.key_value_overrides(args.model_items, kinds)
        base = {"device": cli.device(args.device)}
    except ValueError as e:
        args.parser.error(str(e))
    model |= {k: getattr(args, k) for k in PART_IV if getattr(args, k) is not None}
    if args.untied:
        model["tie_weights"] = False
    if args.max_iters is None and args.time_budget_s:
        base["max_iters"] = 1_000_000  # the clock decides
    s = cli.settings_from_args(args.parser, args, TrainSettings(model=model, **base))
    if not s.out:
        cli.say("note: no --out, so this run is not saved (give --out PATH to keep it)")
    status, _ = cli.run_reported(
        "train-lm", lambda: train_lm(s), "lower --batch-size or use a smaller --preset"
    )
    return status


def generate_command(args: argparse.Namespace) -> int:
    """`generate`: print a continuation of --prompt (or of the --prompt-file)."""
    from transformer_lib.lm_train import GenerateSettings, generate_text

    s = cli.settings_from_args(args.parser, args, GenerateSettings())
    prompt = args.prompt
    try:
        cli.check_text(prompt, "--prompt")
        if args.prompt_file is not None:
            prompt = cli.read_text(args.prompt_file)  # as it is: spaces and blank lines
        dev = cli.device(args.device)
    except ValueError as e:
        cli.say(f"generate: {e}")
        return 2
    knobs = dataclasses.asdict(s) | {"top_k": s.top_k or None}  # 0: every token
    try:
        text = generate_text(args.checkpoint, prompt, **knobs, device=dev, log=cli.say)
    except cli.USER_ERRORS as e:
        cli.say(f"generate: {e}")
        return 1
    print(text)
    return 0


def register(commands) -> None:
    """Add `train-lm` and `generate` to the commands of `python -m transformer_lib`."""
    from transformer_lib.lm_train import GenerateSettings, TrainSettings
    from transformer_lib.modern import ModernConfig

    p = commands.add_parser(
        "train-lm",
        help="train the GPT language model on Tiny Shakespeare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cli.add_existing_flags(p)
    settings = p.add_argument_group("training settings (TrainSettings)")
    settings.add_argument(
        "--model",
        dest="model_items",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a ModernConfig field, e.g. --model dropout=0.1 (repeatable)",
    )
    cli.add_settings_flags(settings, TrainSettings, NOT_FLAGS)
    iv = p.add_argument_group("Part IV switches (notebooks 15-16)")
    cli.add_settings_flags(iv, ModernConfig, only=PART_IV)
    iv.add_argument("--untied", action="store_true", help="an output matrix of its own")
    p.set_defaults(run=train_command, parser=p)

    g = commands.add_parser(
        "generate", help="continue a prompt with a trained language model"
    )
    g.add_argument("--checkpoint", required=True, help="a train-lm checkpoint")
    prompt = "the text to continue (default: a new line)"
    g.add_argument("--prompt", default="\n", help=prompt)
    from_file = "read the prompt from a file (-: standard input)"
    g.add_argument("--prompt-file", metavar="PATH", help=from_file)
    cli.add_settings_flags(
        g.add_argument_group("sampling (GenerateSettings)"), GenerateSettings
    )
    g.add_argument(
        "--device", type=cli.device, help="cpu, cuda, mps (default: the best available)"
    )
    g.set_defaults(run=generate_command, parser=g)
