"""Command line of Part II (the translator), registered by `python -m transformer_lib`.

    python -m transformer_lib train-mt                      # notebook 09's full-mode run -> runs/translator.pt
    python -m transformer_lib train-mt --quick              # a few dozen steps on a slice, to check it runs
    python -m transformer_lib translate --checkpoint runs/translator.pt "Where is the station?"

A killed `train-mt` resumes from its last finished epoch when run again with the same settings.
`translate` truncates an input longer than the model's context (and says so), warns about characters
it never saw in training, and refuses empty input or a bad checkpoint with a message, not a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

DEFAULT_CHECKPOINT = "runs/translator.pt"


def train_mt(args: argparse.Namespace) -> int:
    """Train the translator with notebook 09's settings (or --quick), checkpointing each epoch."""
    from transformer_lib.mt_train import TrainConfig, train_translator
    from transformer_lib.runtime import describe_machine, get_device
    from transformer_lib.training import CheckpointMismatchError

    cfg = TrainConfig.quick() if args.quick else TrainConfig()
    changes = {k: v for k, v in (("epochs", args.epochs), ("max_minutes", args.max_minutes),
                                 ("schedule", args.schedule)) if v is not None}
    cfg = replace(cfg, **changes)
    device = get_device()
    print(f"training on {describe_machine(device)}; checkpoint {args.checkpoint}")
    start = time.perf_counter()
    try:
        model, _, history = train_translator(cfg, args.checkpoint, resume=not args.restart,
                                             progress=not args.no_progress, device=device)
    except (ValueError, CheckpointMismatchError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if history:
        best = min(h["valid_loss"] for h in history)
        print(f"done: {len(history)} epochs, best validation loss {best:.3f}, "
              f"{sum(h['seconds'] for h in history) / 60:.1f} min training "
              f"({(time.perf_counter() - start) / 60:.1f} min this call)")
    return 0


def translate_cmd(args: argparse.Namespace) -> int:
    """Translate English sentences given on the command line with a trained checkpoint."""
    sentences = [s.strip() for s in args.sentences if s.strip()]
    if not sentences:
        print("error: nothing to translate: give one or more non-empty English sentences", file=sys.stderr)
        return 2
    from transformer_lib.decoding import translate
    from transformer_lib.mt_train import load_translator

    try:
        model, src_tok, tgt_tok, payload = load_translator(args.checkpoint)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    known = set(payload.get("src_chars", ""))
    limit = model.config.context_len - 1  # one place is kept for <eos>
    for s in sentences:
        unseen = sorted({ch for ch in s if ch not in known}) if known else []
        if unseen:
            print(f"note: {''.join(unseen)!r} never appeared in the training English; "
                  f"expect a poor translation of {s!r}", file=sys.stderr)
        n = len(src_tok.encode(s))
        if n > limit:
            print(f"note: {s[:40]!r}... has {n} tokens; only the first {limit} are translated "
                  f"(the model's context is {model.config.context_len})", file=sys.stderr)
    kwargs = {"beam": {"beam_size": args.beam_size}, "greedy": {}, "sample": {"temperature": args.temperature}}
    for s, zh in zip(sentences, translate(model, src_tok, tgt_tok, sentences, args.method, **kwargs[args.method])):
        if not zh:
            print(f"note: the model produced an empty translation of {s!r}", file=sys.stderr)
        print(zh if len(sentences) == 1 else f"{s}\t{zh}")
    return 0


def register(commands) -> None:
    """Add `train-mt` and `translate` to the subparsers of `python -m transformer_lib`."""
    train = commands.add_parser("train-mt", help="train the English-Chinese translator (notebook 09's defaults)")
    train.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT, help=f"where to save (default {DEFAULT_CHECKPOINT})")
    train.add_argument("--quick", action="store_true", help="a tiny model, a few dozen steps (to check it runs)")
    train.add_argument("--restart", action="store_true", help="ignore an existing checkpoint instead of resuming")
    train.add_argument("--epochs", type=int, help="most epochs (default: notebook 09's)")
    train.add_argument("--max-minutes", type=float, help="wall-clock budget for training (default: notebook 09's)")
    train.add_argument("--schedule", choices=["cosine", "inverse_sqrt"], help="learning-rate schedule")
    train.add_argument("--no-progress", action="store_true", help="no progress bar (for logs)")
    train.set_defaults(run=train_mt)
    tr = commands.add_parser("translate", help="translate English sentences into Chinese")
    tr.add_argument("sentences", nargs="*", help="English sentences, each one argument")
    tr.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT, help=f"a train-mt checkpoint ({DEFAULT_CHECKPOINT})")
    tr.add_argument("--method", choices=["beam", "greedy", "sample"], default="beam", help="decoding (default beam)")
    tr.add_argument("--beam-size", type=int, default=4)
    tr.add_argument("--temperature", type=float, default=0.8, help="for --method sample")
    tr.set_defaults(run=translate_cmd)
