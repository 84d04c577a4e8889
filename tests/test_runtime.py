"""transformer_lib.runtime: quick mode, device choice and seeding."""

import pytest
import torch

from transformer_lib import runtime


@pytest.mark.parametrize(
    "value, quick",
    [("1", True), ("true", True), ("YES", True), ("0", False), ("", False)],
)
def test_quick_mode_flag(monkeypatch, value, quick):
    monkeypatch.setenv(runtime.QUICK_ENV, value)
    assert runtime.is_quick() is quick
    assert runtime.pick(full=100, quick=3) == (3 if quick else 100)


def test_device_override(monkeypatch):
    monkeypatch.setenv(runtime.DEVICE_ENV, "cpu")
    assert runtime.get_device() == torch.device("cpu")


def test_seed_repeats():
    runtime.set_seed(123)
    a = torch.randn(5)
    runtime.set_seed(123)
    torch.testing.assert_close(torch.randn(5), a)
