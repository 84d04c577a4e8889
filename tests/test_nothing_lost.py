"""Issue 23, "nothing lost, round two": one writer per checkpoint, every stop signal
saves, full disks, damaged resumes and loads, bounded checkpoint configs."""

import errno
import os
import signal
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch

from transformer_lib import checkpoints, files, lm_train
from transformer_lib.checkpoints import CheckpointError, start_run
from transformer_lib.files import (
    DiskFullError,
    RunLockedError,
    atomic_write,
    lock_run,
    save_patiently,
    stale_temporaries,
    unlock_run,
)
from transformer_lib.training import (
    NonFiniteLossError,
    StopRequest,
    TrainingInterrupted,
)

ROOT = Path(__file__).resolve().parent.parent

from test_lm_train import train  # noqa: E402  (the tiny LM run of those tests)
from test_mt_train import run as run_mt  # noqa: E402


def _other_process(code: str, *args: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh Python (another process, so another lock owner)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


START_RUN = """
import sys
from transformer_lib.checkpoints import start_run
try:
    start_run(sys.argv[1], sys.argv[2], log=print)
except OSError as e:
    print(type(e).__name__, e)
"""


def test_a_second_run_on_a_locked_checkpoint_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "race.pt"
    assert start_run(out, "refuse", log=lambda *_: None) is False  # we hold the lock
    tmp = out.parent / f".{out.name}.1234.tmp"  # as if our save were being written
    tmp.write_bytes(b"half")
    try:
        seen = _other_process(START_RUN, str(out), "restart").stdout
        assert seen.startswith("RunLockedError") and f"process {os.getpid()}" in seen
        assert tmp.exists()  # another run's start never deletes our save
    finally:
        unlock_run(out)
    seen = _other_process(START_RUN, str(out), "restart").stdout
    assert "removed" in seen and not tmp.exists()  # no one holds it: stale, removed


class HeldElsewhere:
    """`with HeldElsewhere(path) as holder:` another process holds the lock of `path`
    until the block ends or `holder.kill()`."""

    def __init__(self, path: Path):
        code = START_RUN + "import time; print('held', flush=True); time.sleep(120)"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, str(path), "restart"],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            text=True,
        )

    def __enter__(self) -> "HeldElsewhere":
        assert self.process.stdout.readline().strip() == "held"
        return self

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def __exit__(self, *exc) -> None:
        self.kill()


def test_the_lock_dies_with_its_process(tmp_path):
    out = tmp_path / "killed.pt"
    with HeldElsewhere(out) as holder:
        with pytest.raises(RunLockedError):
            lock_run(out)
        holder.kill()
        lock_run(out)  # the kernel released it: no stale lock
        unlock_run(out)


def test_two_trainings_on_one_new_path_cannot_both_write(tmp_path):
    out = tmp_path / "same.pt"
    with HeldElsewhere(out):  # a first run, between its start and its end
        with pytest.raises(RunLockedError, match="in use by another run .process"):
            train(out)
        assert not out.exists()
    train(out)  # once it has ended, a new run may start
    assert not files._held  # and this one released its lock at its end


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_ask_to_stop_like_ctrl_c(name):
    if not hasattr(signal, name):
        pytest.skip(f"no {name} here")
    if signal.getsignal(getattr(signal, name)) is signal.SIG_IGN:
        pytest.skip(f"{name} is ignored here (nohup), and StopRequest leaves it so")
    # raise_signal delivers to this thread at once; os.kill may land on another thread
    # (torch's), and the handler then runs a moment later (flaky on a loaded machine).
    with StopRequest() as stop:
        signal.raise_signal(getattr(signal, name))
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):  # a second one stops at once
            signal.raise_signal(getattr(signal, name))


def test_a_stop_during_the_final_evaluation_says_the_run_is_saved(
    tmp_path, monkeypatch
):
    name = "SIGHUP" if hasattr(signal, "SIGHUP") else "SIGINT"
    if signal.getsignal(getattr(signal, name)) is signal.SIG_IGN:
        pytest.skip(f"{name} is ignored here (nohup), and StopRequest leaves it so")

    def stopped(*args):  # a closed terminal (or timeout) during the evaluation
        signal.raise_signal(getattr(signal, name))
        raise AssertionError("the signal did not stop the evaluation")

    monkeypatch.setattr(lm_train, "bits_per_char", stopped)
    out = tmp_path / "lm.pt"
    with pytest.raises(TrainingInterrupted) as e:
        train(out)
    step = torch.load(out, weights_only=True)["step"]
    assert str(e.value) == (
        f"stopped at the final evaluation, after step {step}; saved {out}: run again "
        "with --resume to continue"
    )


def test_a_full_disk_is_named_and_the_old_file_kept(tmp_path, monkeypatch):
    out = tmp_path / "ck.pt"
    atomic_write(out, lambda f: f.write(b"old"))

    def full(f):
        f.write(b"new, half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DiskFullError, match=f"cannot write {out}: the disk is full"):
        atomic_write(out, full)
    assert out.read_bytes() == b"old" and not stale_temporaries(out)
    Usage = type("Usage", (), {"free": 1000, "total": 10**9})
    monkeypatch.setattr(files.shutil, "disk_usage", lambda p: Usage)
    with pytest.raises(DiskFullError, match="MB needed"):
        files.check_free_space(out, 10**6)


def test_a_save_larger_than_the_whole_disk_gives_up_at_once(tmp_path, monkeypatch):
    Usage = type("Usage", (), {"free": 500, "total": 1000})
    monkeypatch.setattr(files.shutil, "disk_usage", lambda p: Usage)
    said = []
    with pytest.raises(DiskFullError, match="holds 0.001 MB in all") as e:
        save_patiently(
            lambda: files.check_free_space(tmp_path / "ck.pt", 10**6),
            said.append,
            waits=(3600,),  # no waiting: freeing space cannot help
        )
    assert said == [] and "larger disk" in str(e.value)


def test_a_save_that_finds_the_disk_full_waits_and_tries_again():
    calls, said = [], []

    def save():
        calls.append(1)
        if len(calls) < 3:
            raise DiskFullError(Path("ck.pt"))

    save_patiently(save, said.append, waits=(0, 0, 0))
    assert len(calls) == 3 and "trying again" in said[0]
    with pytest.raises(DiskFullError):
        save_patiently(
            lambda: (_ for _ in ()).throw(DiskFullError(Path("x"))),
            said.append,
            waits=(0,),
        )


def test_the_translator_keeps_its_epoch_through_a_full_disk(tmp_path, monkeypatch):
    real, failures = checkpoints.save_checkpoint, []

    def flaky(path, *args, **kwargs):  # the disk is full twice, then space is freed
        if len(failures) < 2:
            failures.append(path)
            raise DiskFullError(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(checkpoints, "save_checkpoint", flaky)
    monkeypatch.setattr(files, "SAVE_WAITS", (0, 0, 0))
    _, history = run_mt(tmp_path / "ck.pt")
    saved = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert len(failures) == 2 and saved["epoch"] == len(history) == 3


def _edited(src: Path, dest: Path, edit) -> Path:
    state = torch.load(src, weights_only=True)
    edit(state)
    torch.save(state, dest)
    return dest


@pytest.fixture(scope="module")
def lm_checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lm") / "lm.pt"
    train(out)
    return out


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.pop("train_config"), "train_config is missing"),
        (lambda s: s.update(history="x"), "history is a str"),
        (lambda s: s.pop("rng"), "rng is missing"),
        (lambda s: s.update(batch_rng=torch.zeros(3, dtype=torch.uint8)), "batch_rng"),
        (lambda s: s.update(step="7"), "step is a str"),
        (
            lambda s: s["model"].update({"tok_emb.weight": torch.zeros(3, 3)}),
            "tok_emb.weight has shape",
        ),
        (
            lambda s: s["optimizer"]["state"][0].update(exp_avg=torch.zeros(2)),
            "optimizer state is damaged",
        ),
    ],
)
def test_a_damaged_lm_resume_is_refused_before_training(
    lm_checkpoint, tmp_path, edit, message
):
    bad = _edited(lm_checkpoint, tmp_path / "bad.pt", edit)
    before = bad.read_bytes()
    with pytest.raises(CheckpointError, match=message):
        train(bad, existing="resume", max_iters=12)
    assert bad.read_bytes() == before


def test_a_resume_below_the_saved_step_is_refused(lm_checkpoint, tmp_path):
    copy = tmp_path / "copy.pt"
    copy.write_bytes(lm_checkpoint.read_bytes())
    with pytest.raises(ValueError, match="is at step 8, past the 4 steps"):
        train(copy, existing="resume", max_iters=4)
    assert copy.read_bytes() == lm_checkpoint.read_bytes()


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda s: s["config"].update(n_layers=100_000),
            "absurd model .n_layers=100000",
        ),
        (lambda s: s["config"].update(context_len=2**23), "do not fit"),
        (
            lambda s: [w.fill_(float("nan")) for w in s["model"].values()],
            "holds NaN or inf",
        ),
        (
            lambda s: s["model"].update(
                {"tok_emb.weight": s["model"]["tok_emb.weight"].long()}
            ),
            "not a float",
        ),
        (lambda s: s["tokenizer"].update(type="hf_bpe", json="{broken"), "damaged"),
    ],
)
def test_generate_refuses_damaged_or_absurd_checkpoints(
    lm_checkpoint, tmp_path, edit, message
):
    bad = _edited(lm_checkpoint, tmp_path / "bad.pt", edit)
    with pytest.raises(CheckpointError, match=message):
        lm_train.load_lm(str(bad), "cpu")


def test_a_corrupted_zip_member_is_found_by_its_checksum(lm_checkpoint, tmp_path):
    bad = tmp_path / "flipped.pt"
    data = bytearray(lm_checkpoint.read_bytes())
    with zipfile.ZipFile(lm_checkpoint) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data/0"))
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 :][:4])
    at = info.header_offset + 30 + name_len + extra_len + 8
    data[at] ^= 0xFF  # one byte of the weights, as a bad disk would
    bad.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        lm_train.load_lm(str(bad), "cpu")


def test_a_finite_divergence_is_stopped_and_not_saved(tmp_path):
    # at lr 10 this run's loss climbs past 6,000 and stays finite: no NaN to catch
    with pytest.raises(NonFiniteLossError, match="the loss is [0-9.e+]+ at step 10"):
        train(
            tmp_path / "ck.pt",
            lr=10.0,
            min_lr=10.0,
            warmup_steps=0,
            max_iters=40,
            eval_interval=10,
            model={"dropout": 0.0},
        )
    assert not (tmp_path / "ck.pt").exists()


def test_restart_replaces_only_a_checkpoint(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    with pytest.raises(FileExistsError, match="is not a checkpoint"):
        start_run(notes, "restart", log=lambda *_: None)
    assert notes.read_text() == "my notes"


def test_a_symlinked_checkpoint_stays_a_link(tmp_path):
    target = tmp_path / "store" / "real.pt"
    target.parent.mkdir()
    atomic_write(target, lambda f: f.write(b"old"))
    link = tmp_path / "ck.pt"
    try:
        link.symlink_to(target)
    except OSError as e:  # Windows: symlinks need Developer Mode or admin rights
        pytest.skip(f"cannot make a symlink here: {e}")
    atomic_write(link, lambda f: f.write(b"new"))
    assert link.is_symlink() and target.read_bytes() == b"new"


def test_a_second_run_through_a_symbolic_link_is_refused_like_one_by_name(tmp_path):
    target = tmp_path / "store" / "real.pt"
    target.parent.mkdir()
    link = tmp_path / "ck.pt"
    link.symlink_to(target)
    assert start_run(target, "refuse", log=lambda *_: None) is False  # we hold it
    tmp = target.parent / f".{target.name}.1234.tmp"  # our save, being written
    tmp.write_bytes(b"half")
    try:
        for name in (link, target):  # through the link, and by its own name
            seen = _other_process(START_RUN, str(name), "restart").stdout
            assert seen.startswith("RunLockedError"), seen
            assert f"process {os.getpid()}" in seen and tmp.exists()
    finally:
        unlock_run(target)
    seen = _other_process(START_RUN, str(link), "restart").stdout  # no one holds it
    assert "removed .real.pt.1234.tmp" in seen and not tmp.exists()
    assert not files._held


def test_a_dangling_link_makes_no_folder_elsewhere(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    link = tmp_path / "out.pt"
    link.symlink_to(elsewhere / "deep" / "model.pt")
    with pytest.raises(PermissionError) as error:
        start_run(link, "refuse", log=lambda *_: None)
    assert "symbolic link" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(FileNotFoundError):
        atomic_write(link, lambda f: f.write(b"new"))
    assert not elsewhere.exists() and link.is_symlink() and not files._held


def test_a_folder_named_like_a_temporary_file_is_left_alone(tmp_path):
    out = tmp_path / "ck.pt"
    (tmp_path / ".ck.pt.abc.tmp").mkdir()
    assert start_run(out, "refuse", log=lambda *_: None) is False
    unlock_run(out)


sys.path.insert(0, str(ROOT / "tools"))
import zh_edition  # noqa: E402
from test_zh_edition import edition  # noqa: E402, F401  (a copy of the edition)


def _zh_notebooks(edition_path: Path) -> dict[str, bytes]:
    folder = edition_path.parent.parent / "zh" / "notebooks"
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.ipynb"))}


@pytest.mark.parametrize("damage", ["missing", "cut", "doubled"])
def test_zh_edition_never_writes_half_a_book(edition, damage):  # noqa: F811
    translations = edition.parent.parent / "zh" / "translations"
    path = translations / "05_multi_head_attention.md"
    text = path.read_text(encoding="utf-8")
    if damage == "missing":
        path.unlink()
    elif damage == "cut":
        path.write_text(text[: len(text) // 2], encoding="utf-8")
    else:
        first = text[: text.index("<!--", 1)]  # the first entry, given again
        path.write_text(text + "\n" + first, encoding="utf-8")
    before = _zh_notebooks(edition)
    with pytest.raises(zh_edition.IncompleteTranslations) as refused:
        zh_edition.run(update=False, check=False)
    assert all("05_multi_head_attention.md" in line for line in refused.value.args[0])
    assert _zh_notebooks(edition) == before  # not one notebook written
    if damage == "doubled":
        problems = zh_edition.run(update=False, check=True)
        assert any(p.endswith("has two entries") for p in problems)


def test_zh_edition_writes_notebooks_whole_or_not_at_all(edition, monkeypatch):  # noqa: F811
    target = edition.parent.parent / "zh" / "notebooks" / "06_masks.ipynb"
    before = target.read_bytes()
    real = zh_edition.atomic_write

    def full_disk(path, write):
        def half(f):
            write(f)
            raise OSError(errno.ENOSPC, "No space left on device")

        return real(path, half)

    monkeypatch.setattr(zh_edition, "atomic_write", full_disk)
    with pytest.raises(DiskFullError):
        zh_edition.run(update=False, check=False)
    assert target.read_bytes() == before  # still the whole, valid notebook


def test_quick_mode_refuses_values_it_does_not_know(monkeypatch):
    from transformer_lib import runtime

    for value in ("2", "y", "quick", "1.0"):
        monkeypatch.setenv("TRANSFORMER_QUICK", value)
        with pytest.raises(ValueError, match="give 1 .quick mode. or 0"):
            runtime.is_quick()


# ---- the review's last rows: RANK, a full output device, the tools' refused files ----


@pytest.mark.parametrize(
    "env, named",
    [
        ({"RANK": "abc"}, "RANK='abc' is not a whole number"),
        ({"WORLD_SIZE": "-1"}, "WORLD_SIZE='-1' is not a whole number"),
        ({"RANK": "3", "WORLD_SIZE": "2"}, "RANK=3 with WORLD_SIZE=2"),
    ],
)
def test_a_bad_rank_is_refused_before_any_rendezvous(monkeypatch, env, named):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=named):
        lm_train.init_distributed("cpu")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_full_output_device_is_one_line_not_missing_files():
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "transformer_lib", "fetch-data"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "python -m transformer_lib: cannot write the output: No space left on device"
    ]


@pytest.mark.parametrize(
    "script", ["tools/beam_tree.py", "benchmarks/kv_cache.py --checkpoint"]
)
def test_the_tools_refuse_a_damaged_checkpoint_in_one_line(tmp_path, script):
    bad = tmp_path / "bad.pt"
    bad.write_text("not a checkpoint")
    done = subprocess.run(
        [sys.executable, *script.split(), str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and "not a readable checkpoint" in errors[0], errors
