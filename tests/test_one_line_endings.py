"""The last ways to end in a traceback (reliability review, re-run on 3cd84fd, items
5-7), each now one line: a command started with standard output closed, a second
Ctrl-C that lands in an exit hook after the command ended, and tools/zh_edition.py
refusing a file it cannot read, naming it."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_zh_edition import edition  # noqa: F401  (a copy of the edition)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import zh_edition  # noqa: E402


def _cli(*args, code: str = "", **kw) -> subprocess.CompletedProcess:
    """`python -m transformer_lib ARGS`, after `code` (run first, in the process)."""
    run = "import runpy, sys; sys.argv = ['transformer_lib', *sys.argv[1:]]; "
    run += "runpy.run_module('transformer_lib', run_name='__main__', alter_sys=True)"
    return subprocess.run(
        [sys.executable, "-c", code + run, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        **kw,
    )


@pytest.mark.skipif(sys.platform == "win32", reason="closes a descriptor POSIX-style")
def test_closed_standard_output_is_one_line(tmp_path):
    """`translate ... >&-`: one line says the output is lost, then the command's own
    answer (here: no checkpoint), no traceback; a file opened later never gets fd 1."""
    missing = tmp_path / "none.pt"
    done = subprocess.run(
        [sys.executable, "-m", "transformer_lib", "translate", "--checkpoint"]
        + [str(missing), "Hello."],
        stdout=None,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].endswith("standard output is closed; what it prints is lost")
    assert lines[1:] == [f"translate: no checkpoint at {missing}"]
    assert done.returncode == 1


@pytest.mark.skipif(not hasattr(signal, "SIGINT"), reason="needs SIGINT")
def test_ctrl_c_in_an_exit_hook_ends_at_once_without_a_traceback(tmp_path):
    """A Ctrl-C during the exit hooks (as torch's, after a stopped training saved):
    the process ends at once with the command's status, not a traceback from a hook."""
    empty = tmp_path / "notebooks"
    empty.mkdir()
    plain = _cli("check", "--notebooks", str(empty))
    hook = (
        "import atexit, os, signal, time\n"
        "def hook():\n"
        "    os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C lands here\n"
        "    time.sleep(30)\n"
        "atexit.register(hook)\n"
    )
    done = _cli("check", "--notebooks", str(empty), code=hook)
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert (done.returncode, done.stderr) == (plain.returncode, plain.stderr)


def _zh_main(monkeypatch, *flags) -> tuple[str, object]:
    monkeypatch.setattr(sys, "argv", ["zh_edition.py", *flags])
    with pytest.raises(SystemExit) as ended:
        zh_edition.main()
    return ended.value.code


@pytest.mark.parametrize("flags", [(), ("--check",)])
def test_zh_edition_names_a_file_cut_inside_a_character(edition, monkeypatch, flags):  # noqa: F811
    path = zh_edition.TRANSLATIONS / "02_embeddings.md"
    raw = path.read_bytes()
    cut = raw.index("嵌".encode()) + 1  # inside the three bytes of one character
    path.write_bytes(raw[:cut])
    message = _zh_main(monkeypatch, *flags)
    assert isinstance(message, str) and "\n" not in message
    assert "02_embeddings.md: not UTF-8 at byte" in message, message


def test_zh_edition_names_an_english_notebook_that_is_not_json(edition, monkeypatch):  # noqa: F811
    edition.write_text('{"cells": [', encoding="utf-8")  # notebook 02, cut short
    message = _zh_main(monkeypatch)
    assert "\n" not in message and "02_embeddings.ipynb: not a notebook" in message
    edition.write_text(json.dumps({"cells": 3}), encoding="utf-8")
    assert "02_embeddings.ipynb: not a notebook" in _zh_main(monkeypatch, "--check")


def test_zh_edition_names_a_malformed_yaml_file(tmp_path):
    bad = tmp_path / "terms.yml"
    bad.write_text("terms: [\n  - a: b\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"terms.yml: not valid YAML at line \d"):
        zh_edition.read_yaml(bad)


def test_zh_edition_warns_of_a_stale_translation_on_standard_error(
    edition,  # noqa: F811
    monkeypatch,
    capsys,
):
    nb = json.loads(edition.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    cell["source"][-1] += " One more sentence."
    edition.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", "utf-8")
    monkeypatch.setattr(sys, "argv", ["zh_edition.py"])
    zh_edition.main()  # written (exit 0): the book still builds; --check fails
    out, err = capsys.readouterr()
    assert out == ""
    assert f"cell {cell['id']} is stale" in err and "--check fails" in err
    assert "1 problem(s)" in _zh_main(monkeypatch, "--check")
