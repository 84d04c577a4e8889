"""Stored notebook outputs must not depend on the machine that executed them.

The notebooks' outputs were stored on one machine; a learner's laptop, Colab or CI is
another. This test runs every notebook under `pytest --nbval` in quick mode (as
`make test` does) in kernels that answer the machine's questions the other way: bf16
native where it is emulated and vice versa, another number of CPU threads. Any output
nbval compares that changes is a cell showing one machine's answer as everyone's: tag it
`nbval-ignore-output` and word its prose for every machine.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Runs first in every kernel (an IPython startup file): flips what the machine reports.
OTHER_MACHINE = """\
import os
import torch

_native_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
torch.ops.mkldnn._is_mkldnn_bf16_supported = lambda: not _native_bf16
_threads = 1 if torch.get_num_threads() > 1 else 2
torch.set_num_threads(_threads)
os.cpu_count = lambda: _threads
"""


def other_machine_env(tmp_path: Path) -> dict:
    """An environment whose IPython kernels run OTHER_MACHINE before the notebook."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00_other_machine.py").write_text(OTHER_MACHINE)
    return {
        **os.environ,
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "TRANSFORMER_QUICK": "1",
    }


def test_startup_file_flips_the_answers(tmp_path):
    code = (
        "import torch; from transformer_lib.training import bf16_supported; "
        "print(bf16_supported(torch.device('cpu')), torch.get_num_threads())"
    )
    here = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    env = other_machine_env(tmp_path)
    there = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.split()
    assert there[-2] != here[0], "the startup file did not flip bf16_supported"
    assert there[-1] != here[1], "the startup file did not change the thread count"


@pytest.mark.slow
def test_notebooks_agree_on_another_machine(tmp_path):
    notebooks = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb")
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbval",
            "-q",
            "-p",
            "no:cacheprovider",
            *notebooks,
        ],
        cwd=ROOT,
        env=other_machine_env(tmp_path),
        capture_output=True,
        text=True,
    )
    failed = [line for line in run.stdout.splitlines() if line.startswith("FAILED")]
    assert run.returncode == 0, (
        "on a machine that answers bf16 and thread questions the other way, nbval "
        f"finds different outputs: {failed or run.stdout[-3000:]}; tag such cells "
        "nbval-ignore-output and word the prose for every machine"
    )
