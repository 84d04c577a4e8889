"""Support for the command line (`__main__`, `mt_cli`, `lm_cli`); written by hand.

A command's knobs are the fields of a settings dataclass (`RunSettings`, `TrainConfig`,
`TrainSettings`, `DecodeSettings`, `GenerateSettings`): `add_settings_flags` makes the
flags from the fields, `settings_from_args` the settings from the flags, and a value
the settings refuse ends as one line on stderr (`Parser`), so `--lr -1` and
`TrainSettings(lr=-1)` give the same message. The rest reads the text a command is
given (`read_texts`) and turns what a person can act on into one line, never a
traceback (`run_reported`).
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

from transformer_lib.downloads import DataUnavailableError
from transformer_lib.training import NonFiniteLossError, TrainingInterrupted

__all__ = [
    "device",
    "Parser",
    "add_settings_flags",
    "settings_from_args",
    "add_existing_flags",
    "read_texts",
    "read_text",
    "check_text",
    "key_value_overrides",
    "run_reported",
    "MAX_INPUT_BYTES",
    "say",
]

MAX_INPUT_BYTES = 64 * 2**20  # --input, --prompt-file: 64 MB of text


def say(text: str) -> None:
    """Print a note or an error for a person: on stderr, so the output stays clean."""
    print(text, file=sys.stderr)


def _number(kind: type, text: str) -> float:
    """`text` as an int, or as a finite float, else an ArgumentTypeError."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value):
        what = "a whole" if kind is int else "a finite" if value else "a"
        example = "4" if kind is int else "0.5"
        raise argparse.ArgumentTypeError(
            f"{text!r} is not {what} number; give one such as {example}"
        )
    return value


def device(text: str | None = None) -> str:
    """A torch device this machine has ('cpu', 'cuda:1'), as its canonical string;
    anything else is refused, naming what is available. None: $TRANSFORMER_DEVICE,
    checked the same way (a ValueError naming the variable), else the best available."""
    import torch

    from transformer_lib.runtime import DEVICE_ENV, get_device

    if text is None:
        env = os.environ.get(DEVICE_ENV, "")
        try:
            return device(env) if env else str(get_device())
        except argparse.ArgumentTypeError as e:
            raise ValueError(f"{DEVICE_ENV}={env}: {e}") from None
    mps = getattr(torch.backends, "mps", None)
    available = ["cuda"] if torch.cuda.is_available() else []
    available += ["mps"] if mps is not None and mps.is_available() else []
    available += ["cpu"]
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


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr, `PROG: error: MESSAGE
    (see PROG --help)`, exit status 2, not argparse's usage block that buries it. Pass
    it as `parser_class` to `add_subparsers`: each command's errors name it."""

    def error(self, message: str) -> NoReturn:
        """Print the one-line error and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# flags not named after their field; fields whose text is checked as it is parsed
FLAG_NAMES = {"time_budget_s": "--time-budget", "use_cache": "--cache"}
FLAG_TYPES = {"device": device}  # a device this machine has
# what a settings flag's text must be to reach the settings, which check the value
_PARSE = {
    int: lambda text: _number(int, text),
    float: lambda text: _number(float, text),
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
    """One flag per field of the dataclass `cls` (not in `skip`; in `only` if given):
    `batch_size: int = 16` becomes `--batch-size N`, its help the field's (and its
    default, or its value in `cls` if that is an instance). A bool is a switch
    (`--compile`, `--no-progress`), a tuple takes one value per element, a `one_of`
    check (or the class's CHOICES) gives the choices. A flag only parses its text; the
    settings check the value. Every default is None: a flag not given keeps the
    settings' own value."""
    defaults = cls() if isinstance(cls, type) else cls
    cls = type(defaults)
    for f in dataclasses.fields(cls):
        if f.name in skip or (only is not None and f.name not in only):
            continue
        kind, default = _field_type(cls, f.name), getattr(defaults, f.name)
        flag = FLAG_NAMES.get(f.name, "--" + f.name.replace("_", "-"))
        text = f.metadata.get("help") or f.name.replace("_", " ")
        check = f.metadata.get("check", ())
        choices = (
            check[2] if len(check) > 2 else getattr(cls, "CHOICES", {}).get(f.name)
        )
        kw: dict = {"dest": f.name, "default": None}
        if kind is bool:  # a switch: --compile turns a field on, --no-progress off
            if default:
                flag, text = "--no-" + flag[2:], "do not " + text
            kw.update(action="store_const", const=not default)
        else:
            if typing.get_origin(kind) is tuple:
                n, kind = len(typing.get_args(kind)), typing.get_args(kind)[0]
                kw["nargs"] = n
                kw["metavar"] = tuple(f"{f.name.upper()[:-1]}{i + 1}" for i in range(n))
            if choices:
                kw["choices"] = choices
            else:
                kw["type"] = FLAG_TYPES.get(f.name) or _PARSE.get(kind, kind)
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


def add_existing_flags(parser: argparse.ArgumentParser) -> None:
    """--resume and --restart: what to do with a checkpoint already at --out (the
    settings' `existing`; neither: refuse)."""
    group = parser.add_mutually_exclusive_group()
    kw = {"dest": "existing", "action": "store_const"}
    old = "continue the run saved at --out"
    new = "train a new run in place of the one at --out (kept until saved)"
    group.add_argument("--resume", const="resume", help=old, **kw)
    group.add_argument("--restart", const="restart", help=new, **kw)


def read_text(path: str) -> str:
    """The text of `path` ('-' = standard input), at most MAX_INPUT_BYTES, its lines
    ending in \n (a Windows file's \r\n too), or a ValueError of one line."""
    p, where = Path(path), "standard input" if path == "-" else path
    if path == "-" and sys.stdin is None:  # started with standard input closed (<&-)
        raise ValueError("standard input is closed; give a file with a path")
    if path != "-" and (p.is_dir() or not p.exists()):  # /dev/zero is read, capped
        what = f"{path} is a folder" if p.is_dir() else f"no file at {path}"
        raise ValueError(
            f"{what}; give the path of a text file, or - for standard input"
        )
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise ValueError(
            f"{where} holds more than {MAX_INPUT_BYTES // 2**20} MB; split it into "
            "smaller files"
        )
    if b"\0" in data:
        raise ValueError(
            f"{where} holds binary data (a NUL byte); give a UTF-8 text file"
        )
    try:  # a BOM is no text
        return data.decode("utf-8").removeprefix("\ufeff").replace("\r\n", "\n")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{where} is not UTF-8 text (bad byte at offset {e.start}); save "
            "it as UTF-8"
        ) from None


def read_texts(args_list: list[str] | None, path: str | None = None) -> list[str]:
    """The non-blank inputs, stripped: each argument, then each line of the file at
    `path` ('-': stdin). A file that is missing, unreadable, binary, not UTF-8 or too
    big raises a ValueError of one line."""
    for i, arg in enumerate(args_list or [], 1):
        check_text(arg, f"argument {i}")
    texts = [t.strip() for t in (args_list or [])]
    if path is not None:
        # lines end at \n only: not at U+2028, \f or \v as splitlines'
        lines = read_text(path).split("\n")
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
    """`text` as `kind` (a bool from true/false/1/0/yes/no), or a ValueError naming
    the key."""
    truth = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": 0}
    try:
        value = bool(truth[text.lower()]) if kind is bool else kind(text)
    except (KeyError, TypeError, ValueError):
        wanted = "true or false" if kind is bool else getattr(kind, "__name__", kind)
        raise ValueError(f"--model {key}={text}: expected {wanted}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"--model {key}={text}: expected a finite number")
    return value


def key_value_overrides(items: list[str] | None, allowed: dict[str, type]) -> dict:
    """Repeated `--model KEY=VALUE` as {key: value}, typed by `allowed` (key -> type):
    ['dropout=0.1'] -> {'dropout': 0.1}. An item without '=', an unknown key or a value
    of the wrong type raises ValueError; a key given twice keeps the last value."""
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
    signs = (
        "out of memory",
        "can't allocate memory",
        "failed to allocate",
        "bad_alloc",
    )
    return isinstance(error, MemoryError) or any(s in str(error).lower() for s in signs)


# errors whose message tells a person what to do: one line, never a traceback
USER_ERRORS = (
    ValueError,
    OSError,
    ImportError,
    DataUnavailableError,
    NonFiniteLossError,
)


def run_reported(
    prog: str, train: Callable[[], object], oom_hint: str
) -> tuple[int, object]:
    """(exit status, result) of `train()`. What a person can act on becomes one line
    on stderr: status 130 after Ctrl-C, 1 for their errors and for running out of
    memory."""
    try:
        return 0, train()
    except TrainingInterrupted as e:
        say(f"{prog}: {e}")
        return 130, None
    except USER_ERRORS as e:
        say(f"{prog}: {e}")
        return 1, None
    except (MemoryError, RuntimeError) as e:
        if not out_of_memory(e):
            raise
        say(f"{prog}: out of memory; {oom_hint}")
        return 1, None
