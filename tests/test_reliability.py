"""benchmarks/reliability.py, the hostile testers' harness, run as a test: area 8 (the
attacks of issue 23: concurrent runs, stop signals, full disks, damaged resumes and
loads, bounded inputs, typed input, silent acceptance, the Chinese edition's tool) by
default, a few minutes; every attempt with RELIABILITY_FULL=1 (about 15 minutes).

A FAIL of any attempt fails the test, and its row is printed with what was seen."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_no_attempt_of_the_reliability_harness_fails():
    full = os.environ.get("RELIABILITY_FULL", "0") not in ("", "0")
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "reliability.py")]
        + ([] if full else ["--quick"]),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=3600 if full else 900,
    )
    table = r.stdout[r.stdout.find("| area") :]
    assert "| **all** |" in r.stdout, r.stderr[-3000:]
    assert r.returncode == 0, table[-6000:]
