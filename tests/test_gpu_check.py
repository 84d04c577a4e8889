"""tools/gpu_check.py end to end on the CPU with tiny sizes (--device cpu --quick):
every stage runs and the record holds each stage's figures, under a CPU name that never
replaces a GPU record. Marked slow: about a minute."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "gpu_check", ROOT / "tools" / "gpu_check.py"
)
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


def test_a_record_is_named_by_its_device_and_mode():
    results = ROOT / "benchmarks" / "results"
    assert gpu_check.default_out("cuda", False) == results / "gpu_check.json"
    assert gpu_check.default_out("cuda:1", False) == results / "gpu_check.json"
    assert gpu_check.default_out("cpu", True).name == "gpu_check_cpu_quick.json"
    assert gpu_check.default_out("cuda", True).name == "gpu_check_cuda_quick.json"
    with pytest.raises(SystemExit, match="full run on CUDA"):
        gpu_check.main(["--device", "cpu", "--out", str(results / "gpu_check.json")])


def test_the_same_way_loss_reads_every_character_once():
    import torch

    ids = torch.arange(23) % 5
    seen = []

    def forward(x, y):  # a "model" whose loss is the mean of its targets
        seen.extend(y.flatten().tolist())
        return None, y.float().mean()

    loss = gpu_check.same_way_loss(forward, ids, window=4, device="cpu", batch=2)
    assert sorted(seen) == sorted(ids[1:].tolist())  # each target once
    assert loss == pytest.approx(ids[1:].float().mean().item())


@pytest.mark.slow
def test_cpu_smoke_run_writes_every_stage(tmp_path):
    out = tmp_path / "gpu_check_cpu_quick.json"
    done = subprocess.run(
        [sys.executable, "tools/gpu_check.py", "--device", "cpu", "--quick"]
        + ["--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["device"] == "cpu" and record["card"] is None and record["torch"]
    stages = record["stages"]
    assert set(stages) == set(gpu_check.STAGES)
    assert all(s["ok"] for s in stages.values()), stages
    tests = stages["tests"]
    assert tests["device_tests"]["failed"] == 0 and tests["device_tests"]["passed"]
    assert tests["ddp"]["backend"] == "gloo" and tests["ddp"]["world_size"] == 1
    assert set(stages["notebooks"]["notebooks"].values()) == {"passed"}
    lm = stages["lm"]
    for run in ("nanogpt", "ours"):
        assert lm[run]["wall_s"] > 0 and 0 < lm[run]["val_loss_same_way"] < 5
    # our final loss over every validation token is the same measurement
    ours = lm["ours"]
    assert ours["val_loss_same_way"] == pytest.approx(
        ours["final_val_loss_reported"], abs=1e-3
    )
    mt = stages["mt"]
    assert mt["sentences"] == 20 and {"bleu", "chrf"} <= set(mt["greedy"])
    assert {"bleu", "chrf"} <= set(mt["beam"])
    speed = stages["speed"]
    assert speed["attention_fwd_bwd"][0]["fused_speedup"] > 0
    variants = speed["training_throughput"]["variants"]
    assert variants["fp32, explicit softmax (baseline)"]["ratio_to_fp32"] == 1.0
    assert all(r["same_tokens"] for r in speed["kv_cache"])
