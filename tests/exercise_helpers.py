"""What the build-it tests share: a solution module, and a checker's verdict on an
answer (`transformer_lib.exercises.outcome`)."""

import importlib.util
import re
from pathlib import Path

from transformer_lib import exercises as ex

ROOT = Path(__file__).resolve().parent.parent


def solution(nb: str):
    """The module solutions/NN_*.py."""
    path = next((ROOT / "solutions").glob(f"{nb}_*.py"))
    spec = importlib.util.spec_from_file_location(f"solution_{nb}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fails(check, fn, message: str) -> None:
    """The checker says `fn` is wrong, in one line whose words match `message` (a
    regex)."""
    status, text = ex.outcome(check, fn)
    assert status == "fail", (status, text)
    assert "\n" not in text, text
    assert re.search(message, text), text


def passes(check, fn) -> None:
    """The checker accepts `fn`."""
    status, text = ex.outcome(check, fn)
    assert status == "pass", (status, text)
