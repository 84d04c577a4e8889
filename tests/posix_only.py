"""Skips for tests that need what only POSIX systems have (Linux, macOS): a test that
makes a FIFO or reads a device file is skipped on Windows with the reason, instead of
failing there. tests/test_platforms.py checks that each such test carries its mark."""

import os

import pytest


def fifo_missing() -> bool:
    """No `os.mkfifo` (Windows)."""
    return not hasattr(os, "mkfifo")


def device_missing(path: str) -> bool:
    """No device file at `path` (/dev/zero on Windows)."""
    return not os.path.exists(path)


needs_fifo = pytest.mark.skipif(
    fifo_missing(), reason="needs os.mkfifo (POSIX; Windows has no FIFOs)"
)
needs_dev_zero = pytest.mark.skipif(
    device_missing("/dev/zero"), reason="needs /dev/zero (POSIX; not on Windows)"
)
