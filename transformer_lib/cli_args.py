"""Checked command-line values for the thin CLI files (`lm_cli`, `mt_cli`, `__main__`);
written by hand.

Each `type=` callable turns one typed string into a value or raises
`argparse.ArgumentTypeError` with a message that says what was wrong and what to type
instead, so a bad number ends as one line, not as a traceback deep inside training.
`Parser` makes every argparse error that one line:

    PROG: error: argument --top-p: 1.5 is not a probability; give a number in (0, 1],
    e.g. 0.9 (see PROG --help)

    p = Parser(prog="python -m transformer_lib")
    commands = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    g = commands.add_parser("generate")
    g.add_argument("--top-k", type=non_negative_int, default=200)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

__all__ = [
    "positive_int",
    "non_negative_int",
    "positive_float",
    "non_negative_float",
    "probability",
    "top_p",
    "beta",
    "beam_size",
    "length_penalty",
    "temperature",
    "seed",
    "device",
    "default_device",
    "Parser",
    "read_texts",
    "read_text",
    "check_text",
    "key_value_overrides",
    "MIN_TEMPERATURE",
    "MAX_SEED",
    "MAX_INPUT_BYTES",
]

# logits / t must stay finite: with |logits| ~ 1e3, t below this overflows fp32's 3e38
MIN_TEMPERATURE = 1e-4
MAX_SEED = (
    2**63
    # torch.manual_seed takes a signed 64-bit int (negative seeds are folded; we refuse
    # them)
)


def _int(text: str, what: str) -> int:
    """`text` as an int, or an ArgumentTypeError naming `what` was expected."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number; give {what}"
        ) from None


def _float(text: str, what: str) -> float:
    """`text` as a finite float, or an ArgumentTypeError naming `what` was expected (NaN
    and inf refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number; give {what}"
        ) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a finite number; give {what}"
        )
    return value


def positive_int(text: str) -> int:
    """A whole number >= 1 (sizes, steps, intervals): '4' -> 4; '0', '-2', '1.5' are
    refused."""
    value = _int(text, "a whole number >= 1, e.g. 4")
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{value} is too small; give a whole number >= 1, e.g. 4"
        )
    return value


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (0 usually means 'none' or 'off'): '0' -> 0; '-1' is
    refused."""
    value = _int(text, "a whole number >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"{value} is negative; give a whole number >= 0"
        )
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (learning rates, time budgets): '3e-4' -> 0.0003; '0', 'nan',
    'inf' are refused."""
    value = _float(text, "a number > 0, e.g. 3e-4")
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"{value:g} is not above 0; give a number > 0, e.g. 3e-4"
        )
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (weight decay, clipping, minutes; 0 = off): '-1' and 'nan'
    are refused."""
    value = _float(text, "a number >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value:g} is negative; give a number >= 0")
    return value


def probability(text: str) -> float:
    """A number in (0, 1] (top-p): '0.9' -> 0.9; '0', '1.5', 'nan' are refused."""
    value = _float(text, "a number in (0, 1], e.g. 0.9")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"{value:g} is not in (0, 1]; give a number such as 0.9 (1 = no filter)"
        )
    return value


# float32's smallest normal number: a top-p below it rounds to 0 when sampling
MIN_TOP_P = 1.1754943508222875e-38
MAX_BEAM = 1000  # beams are decoded as one batch: far beyond this, memory runs out
MAX_LENGTH_PENALTY = 10.0  # alpha of (5 + length)^alpha / 6^alpha; 0.6 to 2 are usual
MAX_INPUT_BYTES = 64 * 2**20  # --input, --prompt-file: 64 MB of text


def top_p(text: str) -> float:
    """A top-p threshold in [MIN_TOP_P, 1]: '0.9' -> 0.9, '1e-9' -> 1e-9; '0', '1e-300'
    and '1.5' are refused."""
    value = probability(text)
    if value < MIN_TOP_P:
        raise argparse.ArgumentTypeError(
            f"{value:g} is too small for float32 (it rounds to 0); give a number in "
            f"[{MIN_TOP_P:.3g}, 1], or --temperature 0 for the most likely token"
        )
    return value


def beta(text: str) -> float:
    """An Adam beta (decay of a moment average) in [0, 1): '0.9' -> 0.9; '1', '-0.1'
    are refused."""
    value = _float(text, "a number in [0, 1), e.g. 0.9 or 0.99")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(
            f"{value:g} is not in [0, 1); give a beta such as 0.9 or 0.99"
        )
    return value


def beam_size(text: str) -> int:
    """A beam width in [1, MAX_BEAM]: '4' -> 4; '0' and '100000' are refused."""
    value = positive_int(text)
    if value > MAX_BEAM:
        raise argparse.ArgumentTypeError(
            f"{value} beams are too many; give at most {MAX_BEAM} (4 to 8 is usual)"
        )
    return value


def length_penalty(text: str) -> float:
    """Beam search's length penalty alpha in [0, MAX_LENGTH_PENALTY]: '0.6' -> 0.6."""
    value = non_negative_float(text)
    if value > MAX_LENGTH_PENALTY:
        raise argparse.ArgumentTypeError(
            f"{value:g} is too large; give a number in [0, {MAX_LENGTH_PENALTY:g}] "
            "(0.6 to 2 is usual)"
        )
    return value


def temperature(text: str) -> float:
    """A sampling temperature: 0 (greedy) or a finite number >= MIN_TEMPERATURE.

    Sampling divides the logits by t; below 1e-4 the quotient can overflow to inf and
    the softmax gives NaN, so such values are refused with a pointer to 0, which picks
    the top token exactly.
    """
    value = _float(text, "0 (greedy) or a number > 0, e.g. 0.8")
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"{value:g} is negative; give 0 (greedy) or a number > 0, e.g. 0.8"
        )
    if 0 < value < MIN_TEMPERATURE:
        raise argparse.ArgumentTypeError(
            f"{value:g} is so small that logits / temperature overflow; give 0 for "
            f"greedy decoding or a value >= {MIN_TEMPERATURE:g}"
        )
    return value


def seed(text: str) -> int:
    """A random seed: a whole number in [0, 2**63), the range torch.manual_seed
    accepts."""
    value = _int(text, "a whole number in [0, 2**63), e.g. 0")
    if not 0 <= value < MAX_SEED:
        raise argparse.ArgumentTypeError(
            f"{value} is outside [0, 2**63); give a seed such as 0 or 1234"
        )
    return value


def _available_devices() -> list[str]:
    """The device kinds this machine can use now, best first: cuda, mps, cpu."""
    import torch

    found = ["cuda"] if torch.cuda.is_available() else []
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found + ["cpu"]


def device(text: str) -> str:
    """A torch device this machine has, e.g. 'cpu', 'cuda', 'cuda:1'; returned as its
    canonical string.

    Refuses unknown kinds ('foo') and a cuda or mps device this torch cannot use, naming
    what is available, so training never starts on a device that fails at the first
    tensor.
    """
    import torch

    available = _available_devices()
    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a device; available here: {', '.join(available)}"
        ) from None
    if dev.type not in available:
        raise argparse.ArgumentTypeError(
            f"{dev.type} is not available on this machine; available here: "
            f"{', '.join(available)}"
        )
    if (
        dev.type == "cuda"
        and dev.index is not None
        and dev.index >= torch.cuda.device_count()
    ):
        raise argparse.ArgumentTypeError(
            f"{text} does not exist: this machine has {torch.cuda.device_count()} "
            f"CUDA device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}"
        )
    return str(dev)


def default_device() -> str:
    """The device to run on when --device is not given: $TRANSFORMER_DEVICE checked as
    --device is (ValueError naming the variable), else the best available."""
    from transformer_lib.runtime import DEVICE_ENV, get_device

    text = os.environ.get(DEVICE_ENV, "")
    if not text:
        return str(get_device())
    try:
        return device(text)
    except argparse.ArgumentTypeError as e:
        raise ValueError(f"{DEVICE_ENV}={text}: {e}") from None


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr, `PROG: error: MESSAGE (see
    PROG --help)`, exit 2.

    argparse's own error prints the whole usage block first, which buries the one line
    that matters; the pointer to --help keeps the usage one command away. Pass it as
    `parser_class` to
    `add_subparsers` so each command's errors name that command.
    """

    def error(self, message: str) -> NoReturn:
        """Print the one-line error and exit with status 2 (argparse's status for usage
        errors)."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def read_text(path: str) -> str:
    """The text of `path` ('-' = standard input), at most MAX_INPUT_BYTES, or a
    ValueError saying in one line what went wrong."""
    if path == "-":
        if sys.stdin is None:  # started with standard input closed (<&-)
            raise ValueError("standard input is closed; give a file with a path")
        where, data = "standard input", _read_capped(sys.stdin.buffer, "-")
    else:
        p, where = Path(path), path
        if not p.exists():
            raise ValueError(
                f"no file at {path}; give the path of a text file, or - for "
                "standard input"
            )
        if p.is_dir():
            raise ValueError(
                f"{path} is a folder; give the path of a text file, or - for "
                "standard input"
            )
        try:
            with open(p, "rb") as f:
                data = _read_capped(f, path)
        except OSError as e:
            raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    if b"\0" in data:
        raise ValueError(
            f"{where} holds binary data (a NUL byte); give a UTF-8 text file"
        )
    try:
        return data.decode("utf-8").removeprefix("\ufeff")  # a BOM is no text
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{where} is not UTF-8 text (bad byte at offset {e.start}); save "
            "it as UTF-8"
        ) from None


def _read_capped(f, name: str) -> bytes:
    """At most MAX_INPUT_BYTES from the binary stream `f`, or a ValueError if it holds
    more (a huge file, /dev/zero)."""
    try:
        data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as e:
        raise ValueError(f"cannot read {name}: {e.strerror or e}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise ValueError(
            f"{'standard input' if name == '-' else name} holds more than "
            f"{MAX_INPUT_BYTES // 2**20} MB; split it into smaller files"
        )
    return data


def read_texts(args_list: list[str] | None, path: str | None = None) -> list[str]:
    """The non-empty inputs: each positional argument, then each line of the file at
    `path` ('-' = stdin).

    Lines and arguments are stripped of surrounding whitespace and blank ones dropped,
    so
    `translate '' '  '` gives []; the caller decides whether nothing to do is an error.
    A missing, unreadable, binary or non-UTF-8 file raises ValueError with a one-line
    message.
    """
    for i, arg in enumerate(args_list or [], 1):
        check_text(arg, f"argument {i}")
    texts = [t.strip() for t in (args_list or [])]
    if path is not None:
        # lines end at \n (and \r\n) only: not at U+2028, \f or \v as splitlines'
        lines = read_text(path).replace("\r\n", "\n").split("\n")
        texts += [line.strip() for line in lines]
    return [t for t in texts if t]


def check_text(text: str, what: str) -> str:
    """`text` if it is valid Unicode; a ValueError naming `what` if the shell passed
    bytes that are not UTF-8 (Python keeps them as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{what} is not UTF-8 text (a bad byte at character {e.start}); type it "
            "in a UTF-8 terminal, or use a file saved as UTF-8"
        ) from None
    return text


def _convert(key: str, text: str, kind: type):
    """`text` converted to `kind` (bool takes true/false/1/0/yes/no), or a ValueError
    naming the key."""
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ValueError(f"--model {key}={text}: expected true or false")
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise ValueError(
            f"--model {key}={text}: expected {getattr(kind, '__name__', kind)}"
        ) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"--model {key}={text}: expected a finite number")
    return value


def key_value_overrides(items: list[str] | None, allowed: dict[str, type]) -> dict:
    """Parse repeated `--model KEY=VALUE` into {key: value} typed by `allowed` (key ->
    type).

    ['dropout=0.1', 'n_layers=2'] with {'dropout': float, 'n_layers': int} ->
    {'dropout': 0.1, 'n_layers': 2}. An item without '=', an unknown key (named together
    with the allowed ones) or a value of the wrong type raises ValueError; a key given
    twice keeps the last value, as repeated flags do.
    """
    out = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--model expects KEY=VALUE, got {item!r}")
        if key not in allowed:
            raise ValueError(
                f"--model {key}: unknown key; allowed keys: "
                f"{', '.join(sorted(allowed))}"
            )
        out[key] = _convert(key, text.strip(), allowed[key])
    return out


def out_of_memory(error: BaseException) -> bool:
    """True for the errors PyTorch and Python raise when an allocation fails (CPU or
    GPU)."""
    text = str(error).lower()
    return (
        isinstance(error, MemoryError)
        or "out of memory" in text
        or "can't allocate memory" in text
        or "failed to allocate" in text
        or "bad_alloc" in text
    )


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message tells a person what to do: the CLI prints them as one line,
    never a traceback."""
    from transformer_lib.data import DataUnavailableError
    from transformer_lib.training import NonFiniteLossError

    return ValueError, OSError, ImportError, DataUnavailableError, NonFiniteLossError


USER_ERRORS = user_errors()


def add_existing_checkpoint_flags(parser: argparse.ArgumentParser) -> None:
    """--resume and --restart, one or neither: what a trainer does with a checkpoint
    already at --out."""
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--resume",
        action="store_true",
        help="continue the run saved at --out (or extend it)",
    )
    what.add_argument(
        "--restart",
        action="store_true",
        help="train a new run in place of the one at --out (kept until the first save)",
    )


def run_reported(
    prog: str, train: Callable[[], object], oom_hint: str
) -> tuple[int, object]:
    """(exit status, result) of `train()`. What a person can act on becomes one line
    on stderr: status 130 after Ctrl-C, 1 for their errors and for running out of
    memory."""
    from transformer_lib.training import TrainingInterrupted

    try:
        return 0, train()
    except TrainingInterrupted as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 130, None
    except USER_ERRORS as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1, None
    except (MemoryError, RuntimeError) as e:
        if not out_of_memory(e):
            raise
        print(f"{prog}: out of memory; {oom_hint}", file=sys.stderr)
        return 1, None
