"""Support for the command line (`__main__`, `mt_cli`, `lm_cli`); written by hand.

The flags of `train-mt` and `train-lm` come from the fields of the settings
dataclasses: `add_settings_flags` turns each field into `--field-name`, with its type,
its default and its help (`field(metadata={"help": ...})`), and `settings_from_args`
builds the settings back from the parsed flags. A value the settings refuse (a
ValueError from their `__post_init__`) ends as argparse's one-line error, so
`--lr -1` and `TrainSettings(lr=-1)` give the same message.

`Parser` makes every argparse error one line on stderr, exit status 2:

    PROG: error: argument --top-p: 1.5 is not a number in (0, 1]; give one such
    as 0.9 (see PROG --help)

The rest reads the text a command is given (`read_texts`) and turns what a person can
act on into one line, never a traceback (`run_reported`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

__all__ = [
    "non_negative_int",
    "probability",
    "top_p",
    "beam_size",
    "length_penalty",
    "temperature",
    "seed",
    "device",
    "default_device",
    "Parser",
    "add_settings_flags",
    "settings_from_args",
    "add_run_flags",
    "read_texts",
    "read_text",
    "check_text",
    "key_value_overrides",
    "run_reported",
    "MIN_TEMPERATURE",
    "MAX_SEED",
    "MAX_INPUT_BYTES",
]

# logits / t must stay finite: with |logits| ~ 1e3, t below this overflows fp32's 3e38
MIN_TEMPERATURE = 1e-4
# torch.manual_seed takes a signed 64-bit int (it folds negative seeds; we refuse them)
MAX_SEED = 2**63
# float32's smallest normal number: a top-p below it rounds to 0 when sampling
MIN_TOP_P = 1.1754943508222875e-38
MAX_BEAM = 1000  # beams are decoded as one batch: far beyond this, memory runs out
MAX_LENGTH_PENALTY = 10.0  # alpha of (5 + length)^alpha / 6^alpha; 0.6 to 2 are usual
MAX_INPUT_BYTES = 64 * 2**20  # --input, --prompt-file: 64 MB of text


def _int(text: str, what: str) -> int:
    """`text` as an int, or an ArgumentTypeError saying `what` to give."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number; give {what}"
        ) from None


def _float(text: str, what: str) -> float:
    """`text` as a finite float (NaN and inf refused), or an ArgumentTypeError saying
    `what` to give."""
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


def _ranged(
    kind: type, ok: Callable[[float], bool], what: str, example: str
) -> Callable[[str], float]:
    """A `type=` callable: the text as `kind` (int or a finite float) where `ok(value)`,
    else an ArgumentTypeError: '0 is not a whole number >= 1; give one such as 4'."""
    parse = _int if kind is int else _float

    def check(text: str) -> float:
        value = parse(text, f"{what}, e.g. {example}")
        if not ok(value):
            raise argparse.ArgumentTypeError(
                f"{value:g} is not {what}; give one such as {example}"
            )
        return value

    check.__doc__ = f"Text to {what} (e.g. {example}); anything else is refused."
    return check


non_negative_int = _ranged(int, lambda v: v >= 0, "a whole number >= 0", "0")
probability = _ranged(float, lambda v: 0 < v <= 1, "a number in (0, 1]", "0.9")
seed = _ranged(int, lambda v: 0 <= v < MAX_SEED, "a seed in [0, 2**63)", "0 or 1234")
beam_size = _ranged(
    int, lambda v: 1 <= v <= MAX_BEAM, "a beam width of at most 1000", "4"
)
length_penalty = _ranged(
    float, lambda v: 0 <= v <= MAX_LENGTH_PENALTY, "a length penalty in [0, 10]", "0.6"
)


def top_p(text: str) -> float:
    """A top-p threshold in [MIN_TOP_P, 1]: '0.9' -> 0.9, '1e-9' -> 1e-9; '0',
    '1e-300' and '1.5' are refused."""
    value = probability(text)
    if value < MIN_TOP_P:
        raise argparse.ArgumentTypeError(
            f"{value:g} is too small for float32 (it rounds to 0); give a number in "
            f"[{MIN_TOP_P:.3g}, 1], or --temperature 0 for the most likely token"
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


def _available_devices() -> list[str]:
    """The device kinds this machine can use now, best first: cuda, mps, cpu."""
    import torch

    found = ["cuda"] if torch.cuda.is_available() else []
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found + ["cpu"]


def device(text: str) -> str:
    """A torch device this machine has, e.g. 'cpu', 'cuda', 'cuda:1', as its canonical
    string.

    Refuses unknown kinds ('foo') and a cuda or mps device this torch cannot use,
    naming what is available, so training never starts on a device that fails at the
    first tensor.
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
    count = torch.cuda.device_count()
    if dev.type == "cuda" and dev.index is not None and dev.index >= count:
        raise argparse.ArgumentTypeError(
            f"{text} does not exist: this machine has {count} CUDA device(s), "
            f"cuda:0 to cuda:{count - 1}"
        )
    return str(dev)


def default_device() -> str:
    """The device to run on when --device is not given: $TRANSFORMER_DEVICE, checked
    as --device is (a ValueError naming the variable), else the best available."""
    from transformer_lib.runtime import DEVICE_ENV, get_device

    text = os.environ.get(DEVICE_ENV, "")
    if not text:
        return str(get_device())
    try:
        return device(text)
    except argparse.ArgumentTypeError as e:
        raise ValueError(f"{DEVICE_ENV}={text}: {e}") from None


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr, `PROG: error: MESSAGE
    (see PROG --help)`, exit status 2.

    argparse's own error prints the whole usage block first, which buries the one line
    that matters; the pointer to --help keeps the usage one command away. Pass it as
    `parser_class` to `add_subparsers`, so that each command's errors name that
    command.
    """

    def error(self, message: str) -> NoReturn:
        """Print the one-line error and exit with status 2 (argparse's status for
        usage errors)."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


FLAG_NAMES = {"time_budget_s": "--time-budget"}  # a flag not named after its field
# what a settings flag's text must be to reach the settings, which check the value
_PARSE = {
    int: lambda text: _int(text, "one such as 4"),
    float: lambda text: _float(text, "one such as 0.5"),
}


def _field_type(cls: type, name: str) -> type:
    """The type of field `name` of `cls`, without `| None`."""
    kind = typing.get_type_hints(cls)[name]
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        kind = next(k for k in typing.get_args(kind) if k is not type(None))
    return kind


def _shown(value: object) -> str:
    """A default as a person types it: 0.9 0.98 for a tuple, 'none' for None."""
    if isinstance(value, (tuple, list)):
        return " ".join(str(v) for v in value)
    return "none" if value is None else str(value)


def add_settings_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    skip: tuple[str, ...] = (),
    only: tuple[str, ...] | None = None,
) -> None:
    """Add one flag per field of the dataclass `cls` (not in `skip`; in `only` if
    given): `batch_size: int = 16` becomes `--batch-size N` (default: 16).

    The help is the field's `metadata["help"]` (else its name, spelled out). A bool
    that defaults to False becomes a switch (`--compile`), one that defaults to True a
    `--no-` switch (`--no-progress`); a tuple takes one value per element; a field
    named in the class's CHOICES offers those. A flag only parses its text (a number
    is a finite number): the settings check the value, where each check is written
    once. Every default is None, so that `settings_from_args` keeps the settings' own
    value of each flag not given.
    """
    defaults, choices = cls(), getattr(cls, "CHOICES", {})
    for f in dataclasses.fields(cls):
        if f.name in skip or (only is not None and f.name not in only):
            continue
        kind, default = _field_type(cls, f.name), getattr(defaults, f.name)
        flag = FLAG_NAMES.get(f.name, "--" + f.name.replace("_", "-"))
        text = f.metadata.get("help") or f.name.replace("_", " ")
        if kind is str and "check" in f.metadata:  # the names the settings accept
            text += f": {f.metadata['check'][1]}"
        kw: dict = {"dest": f.name, "default": None}
        if kind is bool:
            flag = flag if not default else "--no-" + flag[2:]
            kw.update(action="store_const", const=not default)
        else:
            if typing.get_origin(kind) is tuple:
                n, kind = len(typing.get_args(kind)), typing.get_args(kind)[0]
                kw["nargs"] = n
                kw["metavar"] = tuple(f"{f.name.upper()[:-1]}{i + 1}" for i in range(n))
            if f.name in choices:
                kw["choices"] = choices[f.name]
            else:
                kw["type"] = _PARSE.get(kind, kind)
            if kind in (int, float) and "nargs" not in kw:
                kw["metavar"] = "N" if kind is int else "X"
            text += f" (default: {_shown(default)})"
        parser.add_argument(flag, help=text.replace("%", "%%"), **kw)


def settings_from_args(parser: argparse.ArgumentParser, args, base):
    """The settings `base` (a dataclass instance) with every flag given on the command
    line; a value they refuse ends as `parser.error`: one line, exit status 2."""
    changes = {}
    for f in dataclasses.fields(base):
        value = getattr(args, f.name, None)
        if value is not None:
            changes[f.name] = tuple(value) if isinstance(value, list) else value
    try:
        settings = dataclasses.replace(base, **changes)
    except ValueError as e:
        parser.error(str(e))
    return settings


def add_run_flags(parser: argparse.ArgumentParser, out_default: str | None) -> None:
    """The flags of a training run that are not its settings: where the checkpoint
    goes, what to do with one already there, the device and what the run prints."""
    parser.add_argument(
        "--out",
        "--checkpoint",
        dest="out",
        default=out_default,
        metavar="PATH",
        help="checkpoint path, written atomically "
        f"(default: {out_default or 'none, nothing is saved'})",
    )
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument(
        "--resume", action="store_true", help="continue the run saved at --out"
    )
    existing.add_argument(
        "--restart",
        action="store_true",
        help="train a new run in place of the one at --out (kept until the first save)",
    )
    parser.add_argument(
        "--device", type=device, help="cpu, cuda, mps (default: the best available)"
    )
    parser.add_argument(
        "--log-dir",
        metavar="PATH",
        help="write TensorBoard curves here (needs `pip install tensorboard`)",
    )
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no progress bar (for logs)",
    )


def read_text(path: str) -> str:
    """The text of `path` ('-' = standard input), at most MAX_INPUT_BYTES, or a
    ValueError saying in one line what went wrong."""
    if path == "-":
        if sys.stdin is None:  # started with standard input closed (<&-)
            raise ValueError("standard input is closed; give a file with a path")
        where, data = "standard input", _read_capped(sys.stdin.buffer, "-")
    else:
        p, where = Path(path), path
        if not p.exists() or p.is_dir():
            what = f"{path} is a folder" if p.is_dir() else f"no file at {path}"
            raise ValueError(
                f"{what}; give the path of a text file, or - for standard input"
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
    so `translate '' '  '` gives []; the caller decides whether nothing to do is an
    error. A missing, unreadable, binary or non-UTF-8 file raises ValueError with a
    one-line message.
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
        if lowered in ("true", "1", "yes", "false", "0", "no"):
            return lowered in ("true", "1", "yes")
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
    """Parse repeated `--model KEY=VALUE` into {key: value}, typed by `allowed` (key ->
    type).

    ['dropout=0.1', 'n_layers=2'] with {'dropout': float, 'n_layers': int} gives
    {'dropout': 0.1, 'n_layers': 2}. An item without '=', an unknown key (named
    together with the allowed ones) or a value of the wrong type raises ValueError; a
    key given twice keeps the last value, as repeated flags do.
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
    signs = (
        "out of memory",
        "can't allocate memory",
        "failed to allocate",
        "bad_alloc",
    )
    return isinstance(error, MemoryError) or any(s in text for s in signs)


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message tells a person what to do: the CLI prints them as one
    line, never a traceback."""
    from transformer_lib.data import DataUnavailableError
    from transformer_lib.training import NonFiniteLossError

    return ValueError, OSError, ImportError, DataUnavailableError, NonFiniteLossError


USER_ERRORS = user_errors()


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
