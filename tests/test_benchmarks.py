"""Every script in benchmarks/ runs end to end in its quick mode (tiny sizes, seconds),
writes no stored result, and is listed in benchmarks/README.md. Marked slow: about two
minutes in all on two cores."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
# script -> its quick command line (the flags after the script's name)
QUICK = {
    "bpe_speed.py": ["--quick"],
    "kv_cache.py": ["--quick"],
    "lm_char_cpu.py": ["--quick", "--budget", "40"],
    "lm_throughput.py": ["--quick"],
    "muon_precision.py": ["--quick"],
    "part4_ablation.py": ["--quick", "--rows", "rope", "--no-combination"],
    "part4_speed_levers.py": ["--quick"],
    "part4_speedrun.py": ["--quick"],
    "part5_adaptation.py": ["arch", "--quick"],
    "translation.py": ["--quick", "--limit", "20", "--out", "{tmp}/translator.pt"],
}
# more quick runs of a script that has several subcommands
MORE_QUICK = [
    ("part5_adaptation.py", ["lora-gpt", "--quick"]),
    ("part5_adaptation.py", ["dpo-translator", "--quick"]),  # pairs from training
    (
        "part5_adaptation.py",
        ["dpo-translator", "--quick", "--pairs-from", "test-split"],
    ),
]
NOT_SCRIPTS = {"timing.py"}  # the timing helper the scripts import


def test_every_script_has_a_quick_run_and_a_line_in_the_readme():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} - NOT_SCRIPTS
    assert scripts == set(QUICK), "a benchmark without a smoke test (or one gone)"
    readme = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    unlisted = sorted(s for s in scripts | NOT_SCRIPTS if f"`{s}`" not in readme)
    assert not unlisted, f"benchmarks/README.md does not list {unlisted}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, flags",
    sorted(QUICK.items()) + MORE_QUICK,
    ids=lambda v: v if isinstance(v, str) else " ".join(v),
)
def test_benchmark_runs_in_quick_mode(script, flags, tmp_path):
    stored = {p: p.read_bytes() for p in RESULTS.glob("*.json")}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCHMARKS)])}
    args = [a.replace("{tmp}", str(tmp_path)) for a in flags]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    changed = [p.name for p, raw in stored.items() if p.read_bytes() != raw]
    assert not changed, f"a quick run rewrote stored results: {changed}"
