"""Tokenizer speed on the CPU: the character tokenizer, our BPE, and tiktoken's GPT-2
for scale.

    python benchmarks/bpe_speed.py          # about 15 s on 2 cores

Prints, each as the best of `--repeats` runs:

- `CharTokenizer.encode` of a megabyte of mixed English and Chinese (the course
  expects well under 0.5 s; this figure used to be a wall-clock assert in the tests,
  where a busy machine made it flaky);
- our `BPETokenizer.train` to 2,000 tokens on 90% of Tiny Shakespeare, as notebook 01
  does;
- our `BPETokenizer` loaded with GPT-2's merges encoding all of Tiny Shakespeare and
  all of Tatoeba's Chinese, with an empty chunk cache (a fresh tokenizer: every
  distinct chunk merged once) and with a warm one, against tiktoken's
  `encode_ordinary` (Rust) on the same text, and whether the ids are identical.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from transformer_lib.data import (
    gpt2_encoding,
    load_tatoeba_pairs,
    load_tiny_shakespeare,
)
from transformer_lib.runtime import describe_machine
from transformer_lib.tokenization import (
    SPECIAL_TOKENS,
    BPETokenizer,
    CharTokenizer,
    gpt2_merges,
)


def best_of(repeats: int, fn: Callable[[], object]) -> tuple[object, float]:
    """(result, seconds) of the fastest of `repeats` calls of fn."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of each measurement; the best is shown",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small texts, one run: checks the script"
    )
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    print(
        f"start {time.strftime('%H:%M:%S')} | load average "
        f"{os.getloadavg()[0]:.2f} | {describe_machine()}"
    )
    shakespeare = load_tiny_shakespeare()
    chinese = "\n".join(zh for _, zh in load_tatoeba_pairs())
    if args.quick:
        shakespeare, chinese = shakespeare[:20_000], chinese[:5_000]

    mixed = shakespeare[:500_000] + chinese[:170_000]  # about a megabyte of UTF-8
    char_tok = CharTokenizer(mixed, specials=SPECIAL_TOKENS)
    _, t = best_of(args.repeats, lambda: char_tok.encode(mixed))
    print(
        f"CharTokenizer.encode, {len(mixed):,} characters "
        f"({len(mixed.encode()):,} bytes): {t:.3f} s "
        f"({'under' if t < 0.5 else 'OVER'} 0.5 s)"
    )

    train_text = shakespeare[: int(0.9 * len(shakespeare))]
    vocab = 300 if args.quick else 2000
    _, t = best_of(
        args.repeats,
        lambda: BPETokenizer(specials=SPECIAL_TOKENS).train(train_text, vocab),
    )
    print(
        f"BPETokenizer.train to {vocab:,} tokens on {len(train_text):,} "
        f"characters: {t:.2f} s"
    )

    gpt2 = gpt2_encoding()
    merges = gpt2_merges()
    to_gpt2 = [gpt2.encode_single_token(piece) for piece in BPETokenizer(merges).vocab]
    print(
        f"{'GPT-2 merges on':<18}{'tokens':>10}{'ours, cold s':>14}"
        f"{'ours, warm s':>14}{'tiktoken s':>12}"
        f"{'identical':>11}"
    )
    for name, text in [("Tiny Shakespeare", shakespeare), ("Tatoeba Chinese", chinese)]:
        # a fresh tokenizer: an empty cache
        ids, cold = best_of(args.repeats, lambda: BPETokenizer(merges).encode(text))
        warm_tok = BPETokenizer(merges)
        warm_tok.encode(text)
        _, warm = best_of(args.repeats, lambda: warm_tok.encode(text))
        expected, ref = best_of(args.repeats, lambda: gpt2.encode_ordinary(text))
        same = [to_gpt2[i] for i in ids] == expected
        print(
            f"{name:<18}{len(ids):>10,}{cold:>14.2f}{warm:>14.2f}{ref:>12.3f}"
            f"{str(same):>11}",
            flush=True,
        )
    print(f"end {time.strftime('%H:%M:%S')} | load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
