"""Translation quality and training time of the Part II translator: BLEU-zh and chrF on the test split.

    python benchmarks/translation.py                                  # train with notebook 09's defaults, then evaluate
    python benchmarks/translation.py --checkpoint runs/translator.pt  # evaluate a trained checkpoint
    python benchmarks/translation.py --quick                          # a tiny run, to check the script works

Prints, for greedy decoding and beam search (beam 4, length penalty 0.6), sacreBLEU with tokenize='zh' and
chrF on the fixed test split (2,000 English sentences, every reference translation), the training wall time
and validation loss stored in the checkpoint, the decoding times, the hardware and the load average.
Targets (README): training within 30 minutes on 2 CPU cores; BLEU-zh >= 25 with beam above greedy.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from transformer_lib.decoding import evaluate_model  # noqa: E402
from transformer_lib.mt_train import (  # noqa: E402
    TrainConfig,
    held_out_test_split,
    load_translator,
    train_translator,
)
from transformer_lib.runtime import describe_machine, get_device  # noqa: E402
from transformer_lib.translation_data import TEST_FINGERPRINT, split_fingerprint  # noqa: E402


def load() -> str:
    """The 1, 5 and 15 minute load averages, to say how busy the machine was."""
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


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
        help="tiny model, few steps, first 100 test sentences",
    )
    parser.add_argument(
        "--limit", type=int, help="evaluate on the first N test sentences only"
    )
    args = parser.parse_args()
    device = get_device()
    print(f"hardware: {describe_machine(device)}")
    print(f"start: {load()}")
    if args.checkpoint is None:
        cfg = TrainConfig.quick() if args.quick else TrainConfig()
        t0 = time.perf_counter()
        existing = (
            "resume" if Path(args.out).exists() else "refuse"
        )  # a killed run continues
        train_translator(cfg, args.out, existing, progress=False, device=device)
        print(f"training call: {(time.perf_counter() - t0) / 60:.1f} min wall time")
        args.checkpoint = args.out
    model, src_tok, tgt_tok, payload = load_translator(args.checkpoint, device)
    history = payload["history"]
    print(
        f"checkpoint {Path(args.checkpoint).name}: {len(history)} epochs, {payload['step']} steps, "
        f"{payload['seconds'] / 60:.1f} min of training (epochs only), "
        f"best validation loss {payload['best_valid']:.3f}, {model.num_parameters():,} parameters"
    )
    pairs = held_out_test_split(payload)
    if (
        payload["train_config"]["seed"] == 0
        and split_fingerprint(pairs) != TEST_FINGERPRINT
    ):
        print("warning: this is not the documented test split", file=sys.stderr)
    limit = 100 if args.quick and args.limit is None else args.limit
    if limit:
        keep = list(dict.fromkeys(en for en, _ in pairs))[:limit]
        pairs = [(en, zh) for en, zh in pairs if en in set(keep)]
    print(
        f"test split: {len({en for en, _ in pairs}):,} English sentences, {len(pairs):,} references"
    )
    print(f"{'decoding':<26}{'BLEU-zh':>8}{'chrF':>8}{'seconds':>9}")
    for name, method, kw in (
        ("greedy", "greedy", {}),
        ("beam (K=4, alpha=0.6)", "beam", dict(beam_size=4, length_penalty=0.6)),
    ):
        t0 = time.perf_counter()
        scores, *_ = evaluate_model(model, src_tok, tgt_tok, pairs, method, **kw)
        print(
            f"{name:<26}{scores['bleu']:>8.2f}{scores['chrf']:>8.2f}{time.perf_counter() - t0:>9.1f}"
        )
    print(f"end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
