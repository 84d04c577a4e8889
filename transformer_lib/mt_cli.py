"""Command line of Part II (the translator): flags in, calls to the library out.

    python -m transformer_lib train-mt                      # notebook 09's full-mode
    run -> runs/translator.pt python -m transformer_lib train-mt --resume             #
    continue it (after a kill or Ctrl-C), or extend it python -m transformer_lib
    train-mt --quick --out runs/quick.pt   # a few dozen steps, to check it runs python
    -m transformer_lib translate "Where is the station?" python -m transformer_lib
    translate --input sentences.txt       # one sentence a line; "-" reads stdin

The training is `transformer_lib.mt_train` (notebook 09), the decoding
`transformer_lib.decoding` (notebook 10). An existing checkpoint is never replaced by
accident: `train-mt` refuses to start unless
`--resume` or `--restart` says what to do with it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from transformer_lib.cli_args import (
    USER_ERRORS,
    add_existing_checkpoint_flags,
    beam_size,
    beta,
    default_device,
    device,
    length_penalty,
    non_negative_float,
    positive_float,
    positive_int,
    read_texts,
    run_reported,
    seed,
    temperature,
)

DEFAULT_CHECKPOINT = "runs/translator.pt"


def train_mt(args: argparse.Namespace) -> int:
    """Train the translator with notebook 09's settings (or --quick), checkpointing each
    epoch."""
    import torch

    from transformer_lib.mt_train import TrainConfig, train_translator
    from transformer_lib.runtime import describe_machine

    cfg = TrainConfig.quick() if args.quick else TrainConfig()
    names = (
        "epochs",
        "max_minutes",
        "schedule",
        "lr",
        "min_lr",
        "warmup_steps",
        "weight_decay",
        "grad_clip",
        "seed",
        "dtype",
    )
    changes = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    if args.betas is not None:
        changes["betas"] = tuple(args.betas)
    cfg = replace(cfg, **changes)
    if cfg.min_lr > cfg.lr:
        print(
            f"train-mt: --min-lr {cfg.min_lr:g} is above --lr {cfg.lr:g}; the rate "
            "falls from --lr to --min-lr, so give a --min-lr below it",
            file=sys.stderr,
        )
        return 2
    try:
        dev = torch.device(args.device or default_device())
    except ValueError as e:
        print(f"train-mt: {e}", file=sys.stderr)
        return 2
    existing = "resume" if args.resume else "restart" if args.restart else "refuse"
    print(f"training on {describe_machine(dev)}; checkpoint {args.out}", flush=True)
    status, result = run_reported(
        "train-mt",
        lambda: train_translator(
            cfg,
            args.out,
            existing,
            progress=not args.no_progress,
            device=dev,
            log=lambda m: print(m, flush=True),
            log_dir=args.log_dir,
        ),
        "use a smaller model or fewer tokens per batch",
    )
    if status:
        return status
    history = result[2]
    if history:
        best = min(h["valid_loss"] for h in history)
        print(
            f"done: {len(history)} epochs, best validation loss {best:.3f}, "
            f"{sum(h['seconds'] for h in history) / 60:.1f} min of training"
        )
    return 0


def translate_cmd(args: argparse.Namespace) -> int:
    """Translate English sentences (arguments, a file, or standard input) with a trained
    checkpoint."""
    try:
        sentences = read_texts(args.sentences, args.input)
    except (OSError, ValueError) as e:
        print(f"translate: {e}", file=sys.stderr)
        return 2
    if not sentences:
        print(
            "translate: nothing to translate: give English sentences as "
            "arguments or with --input",
            file=sys.stderr,
        )
        return 2
    from transformer_lib.decoding import translate
    from transformer_lib.mt_train import load_translator

    try:
        model, src_tok, tgt_tok, payload = load_translator(
            args.checkpoint, device=args.device or "cpu"
        )
    except USER_ERRORS as e:
        print(f"translate: {e}", file=sys.stderr)
        return 1
    known = set(payload.get("src_chars", ""))
    limit = model.config.context_len - 1  # one place is kept for <eos>
    for s in sentences:
        unseen = sorted({ch for ch in s if ch not in known}) if known else []
        if unseen:
            print(
                f"note: {''.join(unseen)[:20]!r} never appeared in the "
                "training English; expect a poor "
                f"translation of {_short(s)!r}",
                file=sys.stderr,
            )
        n = len(src_tok.encode(s))
        if n > limit:
            print(
                f"note: {_short(s)!r} has {n} tokens; only the first {limit} "
                "are translated "
                f"(the model's context is {model.config.context_len})",
                file=sys.stderr,
            )
    if args.method == "sample" and args.temperature == 0:
        print(
            "translate: --temperature 0 is greedy decoding: use --method greedy",
            file=sys.stderr,
        )
        return 2
    kwargs = {
        "beam": {"beam_size": args.beam_size, "length_penalty": args.length_penalty},
        "greedy": {},
        "sample": {"temperature": args.temperature},
    }
    try:
        outputs = translate(
            model, src_tok, tgt_tok, sentences, args.method, **kwargs[args.method]
        )
    except USER_ERRORS as e:
        print(f"translate: {e}", file=sys.stderr)
        return 1
    if args.script == "traditional":
        from transformer_lib.translation_data import to_traditional

        print(
            "note: the model writes Simplified Chinese; this is its answer "
            "converted to Traditional "
            "characters by OpenCC (s2t), not a second model",
            file=sys.stderr,
        )
        outputs = [to_traditional(zh) for zh in outputs]
    for s, zh in zip(sentences, outputs):
        if not zh:
            print(
                f"note: the model produced an empty translation of {_short(s)!r}",
                file=sys.stderr,
            )
        print(zh if len(sentences) == 1 else f"{s}\t{zh}")
    return 0


def _short(text: str, n: int = 60) -> str:
    """`text`, cut to n characters for a message."""
    return text if len(text) <= n else text[: n - 3] + "..."


def register(commands) -> None:
    """Add `train-mt` and `translate` to the subparsers of `python -m
    transformer_lib`."""
    t = commands.add_parser(
        "train-mt",
        help="train the English-Chinese translator (notebook 09's defaults)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument(
        "--out",
        "--checkpoint",
        dest="out",
        default=DEFAULT_CHECKPOINT,
        help=f"checkpoint path (default {DEFAULT_CHECKPOINT})",
    )
    t.add_argument(
        "--quick",
        action="store_true",
        help="a tiny model, a few dozen steps (to check it runs)",
    )
    add_existing_checkpoint_flags(t)
    t.add_argument(
        "--epochs", type=positive_int, help="most epochs (default: notebook 09's 20)"
    )
    t.add_argument(
        "--max-minutes",
        type=positive_float,
        help="wall-clock budget for training (default 24)",
    )
    t.add_argument(
        "--schedule", choices=["cosine", "inverse_sqrt"], help="learning-rate schedule"
    )
    t.add_argument(
        "--lr", type=positive_float, help="peak learning rate (default 1e-3)"
    )
    t.add_argument(
        "--min-lr", type=non_negative_float, help="where the cosine ends (default 2e-5)"
    )
    t.add_argument(
        "--warmup-steps",
        type=positive_int,
        help="steps of linear warm-up (default 200)",
    )
    t.add_argument(
        "--weight-decay",
        type=non_negative_float,
        help="AdamW weight decay (default 0.01)",
    )
    t.add_argument(
        "--betas",
        type=beta,
        nargs=2,
        metavar=("B1", "B2"),
        help="AdamW betas (0.9 0.98)",
    )
    t.add_argument(
        "--grad-clip",
        type=non_negative_float,
        help="largest gradient norm, 0 = off (default 1)",
    )
    t.add_argument("--seed", type=seed)
    t.add_argument(
        "--dtype",
        choices=["fp32", "bf16", "auto"],
        help="bf16 autocast; auto: where native (default)",
    )
    t.add_argument(
        "--device", type=device, help="cpu, cuda, mps (default: the best available)"
    )
    t.add_argument(
        "--log-dir",
        help="write TensorBoard curves here (needs `pip install tensorboard`)",
    )
    t.add_argument(
        "--no-progress", action="store_true", help="no progress bar (for logs)"
    )
    t.set_defaults(run=train_mt)

    tr = commands.add_parser(
        "translate", help="translate English sentences into Chinese"
    )
    tr.add_argument("sentences", nargs="*", help="English sentences, each one argument")
    tr.add_argument(
        "--input",
        metavar="PATH",
        help="read sentences from a file, one a line ('-': standard input)",
    )
    tr.add_argument(
        "--checkpoint",
        default=DEFAULT_CHECKPOINT,
        help=f"a train-mt checkpoint ({DEFAULT_CHECKPOINT})",
    )
    tr.add_argument(
        "--method",
        choices=["beam", "greedy", "sample"],
        default="beam",
        help="decoding (default beam)",
    )
    tr.add_argument("--beam-size", type=beam_size, default=4)
    tr.add_argument(
        "--length-penalty",
        type=length_penalty,
        default=0.6,
        help="beam's alpha (default 0.6)",
    )
    tr.add_argument(
        "--script",
        choices=["simplified", "traditional"],
        default="simplified",
        help="the model writes Simplified; traditional converts its output with OpenCC",
    )
    tr.add_argument(
        "--temperature", type=temperature, default=0.8, help="for --method sample"
    )
    tr.add_argument("--device", type=device, help="cpu, cuda, mps (default cpu)")
    tr.set_defaults(run=translate_cmd)
