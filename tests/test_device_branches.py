"""Every branch that picks by device, run here with CUDA and Apple's MPS *reported* as
available (monkeypatched), so that a branch which would crash on a GPU or a Mac fails
on this CPU first.

No tensor is ever put on cuda or mps: the tests check the choices (device, dtype,
autocast settings, synchronisation calls, error messages), not the devices.
"""

import pytest
import torch

from transformer_lib import cli_args, muon, perf, runtime, training

CUDA, MPS, CPU = torch.device("cuda"), torch.device("mps"), torch.device("cpu")


@pytest.fixture
def machine(monkeypatch):
    """A function that makes this process report a machine: which of cuda and mps
    exist, the CUDA capability's major number, the macOS major version."""

    def report(cuda=False, mps=False, capability=8, macos=14):
        monkeypatch.delenv(runtime.DEVICE_ENV, raising=False)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: int(cuda))
        monkeypatch.setattr(
            torch.cuda, "get_device_capability", lambda device=None: (capability, 0)
        )
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "GPU X")
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        monkeypatch.setattr(
            torch.backends.mps,
            "is_macos_or_newer",
            lambda major, minor: (macos, 0) >= (major, minor),
        )

    return report


@pytest.mark.parametrize(
    "cuda, mps, expected",
    [(True, True, CUDA), (True, False, CUDA), (False, True, MPS), (False, False, CPU)],
)
def test_get_device_prefers_cuda_then_mps_then_cpu(machine, cuda, mps, expected):
    machine(cuda=cuda, mps=mps)
    assert runtime.get_device() == expected


@pytest.mark.parametrize("override", ["cpu", "mps", "cuda:1"])
def test_transformer_device_overrides_the_order(machine, monkeypatch, override):
    machine(cuda=True, mps=True)
    monkeypatch.setenv(runtime.DEVICE_ENV, override)
    assert runtime.get_device() == torch.device(override)


def test_describe_machine_names_each_kind(machine):
    machine(cuda=True, mps=True)
    assert runtime.describe_machine(CUDA).startswith("GPU X | ")
    assert runtime.describe_machine(MPS).startswith("Apple GPU (mps) on ")
    assert "CPU thread" in runtime.describe_machine(CPU)


@pytest.mark.parametrize(
    "device, capability, native",
    [(CUDA, 7, False), (CUDA, 8, True), (CUDA, 9, True), (MPS, 8, False)],
)
def test_bf16_supported_on_gpus(machine, device, capability, native):
    machine(cuda=True, mps=True, capability=capability)
    assert training.bf16_supported(device) is native


@pytest.mark.parametrize("native", [True, False])
def test_bf16_supported_on_cpus_asks_onednn(monkeypatch, native):
    monkeypatch.setattr(
        torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: native, raising=False
    )
    assert training.bf16_supported(CPU) is native


def test_bf16_supported_without_onednn_is_false(monkeypatch):
    def missing():
        raise RuntimeError("no oneDNN")

    monkeypatch.setattr(
        torch.ops.mkldnn, "_is_mkldnn_bf16_supported", missing, raising=False
    )
    assert training.bf16_supported(CPU) is False


# (device, CUDA capability, macOS version) -> whether "auto" and "bf16" compute in bf16
CASES = [
    (CUDA, 7, 14, False, True),  # a T4: bf16 only emulated, so auto is fp32
    (CUDA, 8, 14, True, True),  # Ampere and later: native
    (MPS, 8, 14, False, True),  # a Mac: auto stays fp32; bf16 on request
    (MPS, 8, 15, False, True),
]


@pytest.mark.parametrize("device, capability, macos, auto, bf16", CASES)
def test_uses_bf16_and_mixed_precision(machine, device, capability, macos, auto, bf16):
    machine(cuda=True, mps=True, capability=capability, macos=macos)
    assert training.uses_bf16("auto", device) is auto
    assert training.uses_bf16("bf16", device) is bf16
    assert training.uses_bf16("fp32", device) is False
    for dtype, on in [("auto", auto), ("bf16", bf16), ("fp32", False)]:
        context = training.mixed_precision(dtype, device)  # built, never entered
        assert context.device == device.type
        assert context.fast_dtype == torch.bfloat16
        assert context._enabled is on


def test_mixed_precision_enters_on_mps(machine):
    machine(mps=True, macos=14)
    with training.mixed_precision("bf16", MPS):
        assert torch.is_autocast_enabled("mps")
    assert not torch.is_autocast_enabled("mps")


def test_bf16_on_an_old_mac_is_one_clear_error(machine):
    machine(mps=True, macos=13)
    assert training.uses_bf16("auto", MPS) is False
    assert training.uses_bf16("fp32", MPS) is False
    with pytest.raises(ValueError, match="bf16 on mps needs macOS 14") as error:
        training.uses_bf16("bf16", MPS)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="macOS 14"):
        training.mixed_precision("bf16", MPS)


def test_check_bf16_passes_wherever_bf16_runs(machine):
    machine(cuda=True, mps=True, capability=7, macos=14)
    for device in (CUDA, MPS, CPU):
        training.check_bf16(device)


@pytest.mark.parametrize(
    "device, capability, expected",
    [
        (CUDA, 8, torch.bfloat16),
        (CUDA, 7, torch.float32),
        (MPS, 8, torch.float32),
        (CPU, 8, None),  # what oneDNN says about this CPU
    ],
)
def test_muon_iterates_in_bf16_only_where_native(
    machine, monkeypatch, device, capability, expected
):
    """Muon asks bf16_supported about its parameters' device; the parameters stay on
    the CPU, and the question is answered for `device`."""
    machine(cuda=True, mps=True, capability=capability)
    asked = []

    def about(param_device):
        asked.append(param_device)
        return training.bf16_supported(device)

    monkeypatch.setattr(muon, "bf16_supported", about)
    optimizer = muon.Muon([torch.nn.Parameter(torch.zeros(4, 4))], lr=0.02)
    assert asked == [CPU]
    if expected is None:
        expected = torch.bfloat16 if training.bf16_supported(CPU) else torch.float32
    assert optimizer.dtype == expected
    assert (
        muon.Muon(
            [torch.nn.Parameter(torch.zeros(4, 4))], 0.02, dtype=torch.float64
        ).dtype
        == torch.float64
    )


@pytest.mark.parametrize("device", [CUDA, MPS, CPU])
def test_sync_waits_for_the_right_device(monkeypatch, device):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: calls.append("cuda"))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("mps"))
    perf.sync(device)
    assert calls == ([] if device == CPU else [device.type])


def test_cli_lists_and_accepts_every_available_kind(machine):
    machine(cuda=True, mps=True)
    with pytest.raises(Exception, match="available here: cuda, mps, cpu$"):
        cli_args.device("garbage")
    assert cli_args.device("mps") == "mps"
    assert cli_args.device("cuda") == "cuda"
    assert cli_args.device() == "cuda"  # none given: the best available


def test_cli_refuses_a_missing_mps_in_one_line(machine, monkeypatch):
    machine(cuda=False, mps=False)
    with pytest.raises(Exception, match="mps is not available.*available here: cpu$"):
        cli_args.device("mps")
    machine(mps=True)
    assert cli_args.device() == "mps"
    monkeypatch.setenv(runtime.DEVICE_ENV, "cuda")
    with pytest.raises(ValueError, match="TRANSFORMER_DEVICE=cuda"):
        cli_args.device()
