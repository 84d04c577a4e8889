"""KV-cache generation against recomputing the whole context at every step, on the CPU.

    python benchmarks/kv_cache.py                  # about 1 minute on 2 cores
    python benchmarks/kv_cache.py --checkpoint runs/lm/char.pt

Greedy decoding (temperature 0) from the prompt "ROMEO:" with the CPU preset's size (4
layers, width 128) and a context of 1024, so that 500 new tokens fit in it; the model
is randomly initialised unless a checkpoint is given (speed does not depend on the
weights). Prints the time of each path for several lengths, the speed-up, and whether
the two paths produced exactly the same tokens.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from transformer_lib.cli_args import USER_ERRORS
from transformer_lib.data import load_tiny_shakespeare
from transformer_lib.gpt import GPT, GPTConfig, generate
from transformer_lib.lm_train import load_lm
from transformer_lib.runtime import describe_machine
from transformer_lib.tokenization import CharTokenizer


def timed_generate(
    model: GPT, prompt: torch.Tensor, n: int, use_cache: bool
) -> tuple[torch.Tensor, float]:
    """(tokens, seconds) of greedy generation of n new tokens."""
    t0 = time.perf_counter()
    out = generate(model, prompt, n, temperature=0, use_cache=use_cache)
    return out, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoint",
        help="a train-lm checkpoint (its context must hold prompt + tokens)",
    )
    parser.add_argument(
        "--lengths",
        default="50,100,200,500",
        help="numbers of new tokens, comma-separated",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny model, 10 tokens: checks the script",
    )
    args = parser.parse_args()
    if args.quick:
        args.lengths = "10"
    print(
        f"start {time.strftime('%H:%M:%S')} | load average "
        f"{os.getloadavg()[0]:.2f} | {describe_machine()}"
    )
    torch.manual_seed(0)
    if args.checkpoint:
        try:  # the library's checked loader: a refused file is one line
            model, tokenizer = load_lm(args.checkpoint, device="cpu")
        except USER_ERRORS as e:
            sys.exit(f"kv_cache: {e}")
    else:
        sizes = GPTConfig.tiny if args.quick else GPTConfig.cpu
        model = GPT(sizes(context_len=128 if args.quick else 1024))
        tokenizer = CharTokenizer(load_tiny_shakespeare())
    model.eval()
    prompt = torch.tensor([tokenizer.encode("ROMEO:")])  # (1, 6)
    generate(model, prompt, 20, temperature=0)  # warm-up
    generate(model, prompt, 20, temperature=0, use_cache=False)
    print(
        f"model: {model.config.n_layers} layers, d_model "
        f"{model.config.d_model}, context {model.config.context_len}, "
        f"{model.num_params():,} parameters"
    )
    print(
        f"{'new tokens':>10} {'uncached s':>11} {'cached s':>9} "
        f"{'speed-up':>9} {'identical':>9}"
    )
    for n in [int(s) for s in args.lengths.split(",")]:
        slow, t_slow = timed_generate(model, prompt, n, use_cache=False)
        fast, t_fast = timed_generate(model, prompt, n, use_cache=True)
        print(
            f"{n:>10} {t_slow:>11.2f} {t_fast:>9.2f} {t_slow / t_fast:>8.1f}x "
            f"{str(torch.equal(slow, fast)):>9}",
            flush=True,
        )
    print(f"end {time.strftime('%H:%M:%S')} | load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
