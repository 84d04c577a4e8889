"""Translation quality and training time of the Part II translator, on our test split
and the public one.

    python benchmarks/translation.py            # train with notebook 09's defaults,
                                                # then evaluate
    python benchmarks/translation.py --checkpoint runs/translator.pt   # evaluate one
    python benchmarks/translation.py --quick    # a tiny run, to check the script works
    python benchmarks/translation.py --valid-only --max-minutes 8 --train-limit 6000

Training uses notebook 09's recipe (`fit_translator`, appendix A1); `--max-minutes`,
`--train-limit` (the first N training pairs), `--dtype` and `--model KEY=VALUE` change
it, for the measurements of the levers. Evaluation follows notebook 11: the weights
(best epoch, or the mean of the last three) and the beam size and length penalty are
chosen on the validation split; then sacreBLEU with tokenize='zh' and chrF, greedy and
beam, on the course's test split and on the Tatoeba Challenge's public English-Mandarin
test (the one OPUS-MT reports on: opus-mt-en-zh BLEU 31.4 / chrF 26.8; the 2022
transformer-big 34.3 / 29.1 on eng-cmn_Hans), with decoding times, the hardware and the
load average. `--valid-only` stops after the validation scores (a quicker comparison of
training recipes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from transformer_lib.data import public_test_pairs
from transformer_lib.decoding import (
    average_weights,
    choose_decoding,
    evaluate_model,
    first_sentences,
)
from transformer_lib.mt_train import (
    TrainConfig,
    fit_translator,
    load_checked_translator,
)
from transformer_lib.runtime import describe_machine, get_device
from transformer_lib.translation_data import TEST_FINGERPRINT, split_fingerprint
from transformer_lib.translator import held_out_split


def load() -> str:
    """The 1, 5 and 15 minute load averages, to say how busy the machine was."""
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def train(args: argparse.Namespace, device) -> str:
    """Train as the flags say; returns the checkpoint path."""
    cfg = TrainConfig.quick() if args.quick else TrainConfig()
    model = dict(item.split("=", 1) for item in args.model)
    changes = {
        "max_minutes": args.max_minutes,
        "train_limit": args.train_limit,
        "dtype": args.dtype,
        "epochs": args.epochs,
    }
    overrides = {k: int(v) if v.isdigit() else float(v) for k, v in model.items()}
    cfg = replace(
        cfg,
        **{k: v for k, v in changes.items() if v is not None},
        model={**cfg.model, **overrides},
    )
    print(f"recipe: {cfg}")
    t0 = time.perf_counter()
    # a killed run continues
    existing = "resume" if Path(args.out).exists() else "refuse"
    fit_translator(cfg, args.out, existing, progress=False, device=device)
    print(f"training call: {(time.perf_counter() - t0) / 60:.1f} min wall time")
    return args.out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoint", help="evaluate this checkpoint instead of training a new one"
    )
    parser.add_argument(
        "--out", default="runs/translator-benchmark.pt", help="where a new run is saved"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny model, few steps, first 100 sentences",
    )
    parser.add_argument(
        "--max-minutes", type=float, help="training budget (default: notebook 09's 24)"
    )
    parser.add_argument("--epochs", type=int, help="most epochs (default 20)")
    parser.add_argument(
        "--train-limit", type=int, help="train on the first N training pairs only"
    )
    parser.add_argument(
        "--dtype", choices=["fp32", "bf16", "auto"], help="autocast (default auto)"
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Seq2SeqConfig override",
    )
    parser.add_argument(
        "--limit", type=int, help="evaluate on the first N sentences of each set only"
    )
    parser.add_argument(
        "--valid-only", action="store_true", help="stop after the validation scores"
    )
    parser.add_argument(
        "--greedy-only",
        action="store_true",
        help="with --valid-only: no beam search either",
    )
    args = parser.parse_args()
    device = get_device()
    print(f"hardware: {describe_machine(device)}")
    print(f"start: {load()}")
    checkpoint = args.checkpoint or train(args, device)
    model, src_tok, tgt_tok, payload = load_checked_translator(checkpoint, device)
    history = payload["history"]
    print(
        f"checkpoint {Path(checkpoint).name}: {len(history)} epochs, "
        f"{payload['step']} steps, "
        f"{payload['seconds'] / 60:.1f} min of training, best validation loss "
        f"{payload['best_valid']:.3f}, "
        f"{model.num_params():,} parameters"
    )
    limit = 100 if args.quick and args.limit is None else args.limit
    valid = first_sentences(
        held_out_split(payload, "valid"), 600 if limit is None else limit
    )
    candidates = {
        "best epoch": payload["best_model"],
        "mean of last 3": average_weights(payload["recent_models"]),
    }
    scores = {}
    for name, state in candidates.items():
        model.load_state_dict(state)
        scores[name] = evaluate_model(model, src_tok, tgt_tok, valid, "greedy")[0][
            "bleu"
        ]
        print(
            f"validation ({len({e for e, _ in valid})} sentences) BLEU-zh "
            f"greedy, {name}: {scores[name]:.2f}"
        )
    chosen = max(scores, key=scores.get)
    model.load_state_dict(candidates[chosen])
    if args.valid_only and args.greedy_only:
        return 0
    decoding = choose_decoding(model, src_tok, tgt_tok, valid)
    for (k, a), bleu in decoding["scores"].items():
        print(f"validation BLEU-zh, beam {k}, alpha {a}: {bleu:.2f}")
    print(
        f"chosen: {chosen}; beam {decoding['beam_size']}, alpha "
        f"{decoding['length_penalty']}"
    )
    if args.valid_only:
        return 0
    test = held_out_split(payload, "test")
    if (
        payload["train_config"]["seed"] == 0
        and split_fingerprint(test) != TEST_FINGERPRINT
    ):
        print("warning: this is not the documented test split", file=sys.stderr)
    beam = {
        "beam_size": decoding["beam_size"],
        "length_penalty": decoding["length_penalty"],
    }
    print(
        f"{'test set':<24}{'decoding':<22}{'sentences':>10}{'BLEU-zh':>9}"
        f"{'chrF':>7}{'seconds':>9}"
    )
    for test_name, pairs in (
        ("course test split", first_sentences(test, limit)),
        ("Tatoeba Challenge test", first_sentences(public_test_pairs(), limit)),
    ):
        for name, method, kw in (
            ("greedy", "greedy", {}),
            (
                f"beam (K={beam['beam_size']}, alpha={beam['length_penalty']})",
                "beam",
                beam,
            ),
        ):
            t0 = time.perf_counter()
            s, srcs, *_ = evaluate_model(model, src_tok, tgt_tok, pairs, method, **kw)
            print(
                f"{test_name:<24}{name:<22}{len(srcs):>10,}{s['bleu']:>9.2f}"
                f"{s['chrf']:>7.2f}"
                f"{time.perf_counter() - t0:>9.1f}"
            )
    print(
        "published on the Tatoeba Challenge test: opus-mt-en-zh BLEU 31.4, chrF 26.8; "
        "transformer-big (2022, eng-cmn_Hans) BLEU 34.3, chrF 29.1"
    )
    print(f"end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
