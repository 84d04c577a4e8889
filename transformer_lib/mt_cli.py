"""Command line of Part II (the translator): flags in, calls to the library out.

    python -m transformer_lib train-mt            # notebook 09's full run
    python -m transformer_lib train-mt --resume   # continue it, after a kill or Ctrl-C
    python -m transformer_lib train-mt --quick --out runs/quick.pt   # does it run?
    python -m transformer_lib translate "Where is the station?"
    python -m transformer_lib translate --input sentences.txt   # one sentence a line

The training is `transformer_lib.mt_train` (appendix A1), the decoding
`transformer_lib.decoding` (notebooks 10 and 11). An existing checkpoint is never
replaced by accident: `train-mt` refuses to start unless --resume or --restart says
what to do with it.
"""

from __future__ import annotations

import argparse

from transformer_lib import cli_args as cli
from transformer_lib.cli_args import USER_ERRORS

DEFAULT_CHECKPOINT = "runs/translator.pt"
# TrainConfig's fields that are no flag: they decide the data split and the model
NOT_FLAGS = ("n_valid", "n_test", "train_limit", "model", "keep_last")
WINDOW = 256  # translate sentences this many at a time (in batches of like length)


def train_mt(args: argparse.Namespace) -> int:
    """Train the translator with notebook 09's settings (or --quick), checkpointing
    each epoch."""
    import torch

    from transformer_lib.mt_train import TrainConfig, fit_translator
    from transformer_lib.runtime import describe_machine
    from transformer_lib.training import RunSettings

    base = TrainConfig.quick() if args.quick else TrainConfig()
    cfg = cli.settings_from_args(args.parser, args, base)
    run = cli.settings_from_args(args.parser, args, RunSettings(out=DEFAULT_CHECKPOINT))
    try:
        dev = torch.device(cli.device(run.device))
    except ValueError as e:
        args.parser.error(str(e))
    print(f"training on {describe_machine(dev)}; checkpoint {run.out}", flush=True)
    status, result = cli.run_reported(
        "train-mt",
        lambda: fit_translator(
            cfg,
            run.out,
            run.existing,
            progress=run.progress,
            device=dev,
            log=lambda m: print(m, flush=True),
            log_dir=run.log_dir,
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
    from transformer_lib.decoding import DecodeSettings, translate

    settings = cli.settings_from_args(args.parser, args, DecodeSettings())
    try:
        sentences = cli.read_texts(args.sentences, args.input)
    except (OSError, ValueError) as e:
        cli.say(f"translate: {e}")
        return 2
    if not sentences:
        cli.say("translate: nothing to translate: give English sentences or --input")
        return 2
    from transformer_lib.mt_train import load_checked_translator

    try:  # one line for a damaged or edited file
        model, src_tok, tgt_tok, payload = load_checked_translator(
            args.checkpoint, device=args.device or "cpu"
        )
    except USER_ERRORS as e:
        cli.say(f"translate: {e}")
        return 1
    known = set(payload.get("src_chars", ""))
    limit = model.config.context_len - 1  # one place is kept for <eos>
    for s in sentences:
        unseen = sorted({ch for ch in s if ch not in known}) if known else []
        if unseen:
            cli.say(
                f"note: {''.join(unseen)[:20]!r} never appeared in the training "
                f"English; expect a poor translation of {_short(s)!r}"
            )
        n = len(src_tok.encode(s))
        if n > limit:
            cli.say(
                f"note: {_short(s)!r} has {n} tokens; only the first {limit} are "
                f"translated (the model's context is {model.config.context_len})"
            )
    if args.script == "traditional":
        from transformer_lib.data import to_traditional

        cli.say(
            "note: the model writes Simplified Chinese; this is its answer converted "
            "to Traditional characters by OpenCC (s2t), not a second model"
        )
    for start in range(0, len(sentences), WINDOW):  # printed window by window
        window = sentences[start : start + WINDOW]
        try:
            outputs = translate(model, src_tok, tgt_tok, window, **settings.options())
        except USER_ERRORS as e:
            cli.say(f"translate: {e}")
            return 1
        for s, zh in zip(window, outputs):
            zh = to_traditional(zh) if args.script == "traditional" else zh
            if not zh:
                cli.say(
                    f"note: the model produced an empty translation of {_short(s)!r}"
                )
            print(zh if len(sentences) == 1 else f"{s}\t{zh}", flush=True)
    return 0


def _short(text: str, n: int = 60) -> str:
    """`text`, cut to n characters for a message."""
    return text if len(text) <= n else text[: n - 3] + "..."


def register(commands) -> None:
    """Add `train-mt` and `translate` to the commands of `python -m transformer_lib`."""
    from transformer_lib.decoding import DecodeSettings
    from transformer_lib.mt_train import TrainConfig
    from transformer_lib.training import RunSettings

    t = commands.add_parser(
        "train-mt",
        help="train the English-Chinese translator (notebook 09's defaults)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cli.add_existing_flags(t)
    cli.add_settings_flags(t, RunSettings(out=DEFAULT_CHECKPOINT), ("existing",))
    t.add_argument("--checkpoint", dest="out", help="the older name of --out")
    t.add_argument(
        "--quick",
        action="store_true",
        help="a tiny model, a few dozen steps (to check it runs)",
    )
    cli.add_settings_flags(
        t.add_argument_group("training settings (TrainConfig)"), TrainConfig, NOT_FLAGS
    )
    t.set_defaults(run=train_mt, parser=t)

    tr = commands.add_parser(
        "translate", help="translate English sentences into Chinese"
    )
    tr.add_argument("sentences", nargs="*", help="English sentences, each one argument")
    tr.add_argument(
        "--input",
        metavar="PATH",
        help="read sentences from a file, one a line (-: standard input)",
    )
    tr.add_argument(
        "--checkpoint",
        default=DEFAULT_CHECKPOINT,
        help="a train-mt checkpoint (default: %(default)s)",
    )
    cli.add_settings_flags(
        tr.add_argument_group("decoding (DecodeSettings)"), DecodeSettings
    )
    tr.add_argument(
        "--script",
        choices=["simplified", "traditional"],
        default="simplified",
        help="the model writes Simplified; traditional converts its output with OpenCC",
    )
    tr.add_argument("--device", type=cli.device, help="cpu, cuda, mps (default: cpu)")
    tr.set_defaults(run=translate_cmd, parser=tr)
