"""Linux-only paths, checked on Linux: the tests that need POSIX features skip on other
systems with a reason, and notebook 14's memory probe has a portable path (macOS) or
says it measures nothing (Windows) instead of failing there."""

import ast
import math
import os
import sys
from pathlib import Path

import posix_only
import pytest

from transformer_lib import perf

TESTS = Path(__file__).resolve().parent
# what a test may only touch under a skip, and the words that show its skip
POSIX_ONLY = {
    "os.mkfifo(": ("needs_fifo", "mkfifo"),
    '"/dev/zero"': ("needs_dev_zero", "/dev/zero"),
    '"/dev/full"': ("needs_dev_full", "/dev/full"),
}


def _tests_touching(needle: str):
    """(file, test function, its decorators' source) of each test whose body has
    `needle`."""
    for path in sorted(TESTS.glob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                body = ast.get_source_segment(source, node)
                marks = "\n".join(
                    ast.get_source_segment(source, d) for d in node.decorator_list
                )
                if needle in body:
                    yield path.name, node.name, marks


@pytest.mark.parametrize("needle", sorted(POSIX_ONLY))
def test_every_test_needing_a_posix_feature_skips_without_it(needle):
    unguarded = [
        f"{file}::{name}"
        for file, name, marks in _tests_touching(needle)
        if "skipif" not in marks and not any(w in marks for w in POSIX_ONLY[needle])
    ]
    assert not unguarded, f"{needle} without a skip on other systems: {unguarded}"


def test_the_marks_skip_where_the_feature_is_missing(monkeypatch):
    assert posix_only.fifo_missing() == (not hasattr(os, "mkfifo"))
    monkeypatch.delattr(os, "mkfifo", raising=False)
    assert posix_only.fifo_missing()
    assert posix_only.device_missing("/no/such/device")
    for mark in (posix_only.needs_fifo, posix_only.needs_dev_zero):
        assert mark.name == "skipif" and "POSIX" in mark.kwargs["reason"]


@pytest.mark.skipif(
    not os.path.exists("/proc/self/clear_refs"), reason="the exact probe is Linux's"
)
def test_memory_probe_measures_on_linux():
    explicit = perf.attention_peak_memory_mb("explicit", 2, 2, 128, 16)
    fused = perf.attention_peak_memory_mb("sdpa", 2, 2, 128, 16)
    assert explicit > fused >= 0  # the (T, T) weights of the explicit path


def _no_proc(monkeypatch):
    real = os.path.exists
    fake = lambda p: False if str(p).startswith("/proc/") else real(p)  # noqa: E731
    monkeypatch.setattr(os.path, "exists", fake)


@pytest.mark.skipif(sys.platform == "win32", reason="needs the resource module")
@pytest.mark.parametrize("platform", ["darwin", "freebsd14"])
def test_memory_probe_without_proc_reads_getrusage(monkeypatch, platform):
    """macOS and the BSDs: no /proc, the peak from getrusage (bytes on macOS)."""
    import resource

    _no_proc(monkeypatch)
    monkeypatch.setattr(sys, "platform", platform)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert perf._peak_kib() == (peak / 1024 if platform == "darwin" else peak)
    extra = perf._attention_memory("explicit", 1, 1, 16, 8)
    assert math.isfinite(extra) and extra >= 0


def test_memory_probe_says_nan_where_nothing_can_be_read(monkeypatch):
    """Windows: neither /proc nor the resource module: NaN, not an exception."""
    _no_proc(monkeypatch)
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setitem(sys.modules, "resource", None)  # and importing it fails
    assert perf._peak_kib() is None
    assert math.isnan(perf._attention_memory("sdpa", 1, 1, 16, 8))
