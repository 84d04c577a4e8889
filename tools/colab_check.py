"""Run every notebook the way Colab runs it, as far as a machine without Colab can.

What Colab does when the launch button opens a notebook, and what this script does
instead:

- Colab opens the notebook alone, in an empty folder: each notebook is copied into an
  empty folder of
  its own, with no checkout beside it, so nothing but the install cell can provide the
  library.
- Colab's Python has torch and Jupyter but not the course's library or its other needs:
  a fresh virtual
  environment gets only `torch` (the CPU wheel) and `ipykernel`/`nbconvert`; no numpy,
  matplotlib, tiktoken, tokenizers or sacrebleu until the notebook's first cell installs
  them.
- Colab has `google.colab` imported: an IPython start-up file registers a stand-in
  module of that name,
  so the notebook's Colab-only cells (the pip install, notebook 11's font install)
  really run.
- The first cell installs `transformer_lib @ git+<repository URL in _config.yml>`: git
  is told to fetch
  that URL from this checkout instead (`url.<checkout>.insteadOf`), so pip clones the
  committed HEAD, as Colab would clone the pushed branch. Uncommitted changes are not
  seen; the script warns about them.

What it cannot imitate: Colab's GPU (the notebooks run on this machine's CPU, in quick
mode unless
`--full`), and Colab's network (the corpora come from `$TRANSFORMER_DATA_MIRROR` when it
is set, as in CI; unset, the loaders download from the canonical URLs as on Colab).

    python tools/colab_check.py                       # all notebooks, quick mode
    python tools/colab_check.py --notebooks 04 11     # some of them
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# stands in for the torch Colab ships; the CPU wheel on a machine without CUDA
TORCH = "torch==2.13.0"
FAKE_COLAB = """\
# Written by tools/colab_check.py: makes `"google.colab" in sys.modules` true, as on
# Colab.
# Each has a module spec, as an imported module does (find_spec reads it).
import importlib.machinery, sys, types
def _module(name):
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return module
google = sys.modules.setdefault("google", _module("google"))
google.colab = sys.modules["google.colab"] = _module("google.colab")
"""
NO_APT = """#!/bin/sh
echo "colab_check: not root, so skipped: apt-get $*" >&2
"""


def run(cmd: list[str], **kwargs) -> None:
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)


def make_environment(work: Path) -> dict[str, str]:
    """A bare Python with torch and Jupyter, plus the environment variables that make it
    look like Colab."""
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    run(
        [
            str(venv / "bin/python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            TORCH,
            "ipykernel",
            "nbconvert",
        ]
    )
    startup = work / "ipython/profile_default/startup"
    startup.mkdir(parents=True)
    (startup / "00-fake-colab.py").write_text(FAKE_COLAB)
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VIRTUAL_ENV", "PYTHON", "JUPYTER"))
    }
    env.update(
        PATH=f"{venv / 'bin'}:{env['PATH']}",
        IPYTHONDIR=str(work / "ipython"),
        JUPYTER_DATA_DIR=str(
            work / "jupyter-data"
        ),  # no user kernels: `python3` is this venv's
        JUPYTER_CONFIG_DIR=str(work / "jupyter-config"),
        MPLCONFIGDIR=str(work / "matplotlib"),
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0=f"url.{ROOT}.insteadOf",
        GIT_CONFIG_VALUE_0=url,
        TRANSFORMER_DATA_DIR=str(
            work / "data"
        ),  # pip-installed, the library would use ~/.cache
    )
    if (
        os.geteuid() != 0
    ):  # Colab runs as root; elsewhere apt-get would fail for want of rights
        shim = work / "shim"
        shim.mkdir()
        (shim / "apt-get").write_text(NO_APT)
        (shim / "apt-get").chmod(0o755)
        env["PATH"] = f"{shim}:{env['PATH']}"
    return env


def check_notebook(notebook: Path, work: Path, env: dict[str, str]) -> float:
    """Copy the notebook alone into an empty folder and run it top to bottom; return the
    seconds it took."""
    folder = work / "content" / notebook.stem
    folder.mkdir(parents=True)
    shutil.copy(notebook, folder)
    start = time.perf_counter()
    run(
        [
            "jupyter",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--output",
            "executed.ipynb",
            "--ExecutePreprocessor.timeout=-1",
            notebook.name,
        ],
        cwd=folder,
        env=env,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--notebooks",
        nargs="*",
        default=[],
        help="numbers such as 04 11 (default: all)",
    )
    parser.add_argument(
        "--full", action="store_true", help="full mode instead of quick mode"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the working folder (its path is printed)",
    )
    args = parser.parse_args()

    if subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip():
        print(
            "warning: uncommitted changes; the notebooks install the "
            "committed HEAD, as Colab would",
            flush=True,
        )
    notebooks = sorted((ROOT / "notebooks").glob("[0-9A][0-9]_*.ipynb"))
    if args.notebooks:
        notebooks = [nb for nb in notebooks if nb.stem[:2] in args.notebooks]
    work = Path(tempfile.mkdtemp(prefix="colab-check-"))
    try:
        env = make_environment(work)
        env["TRANSFORMER_QUICK"] = "0" if args.full else "1"
        results = []
        for nb in notebooks:
            try:
                results.append(
                    (nb.name, f"ran in {check_notebook(nb, work, env):.0f} s")
                )
            except subprocess.CalledProcessError:
                results.append((nb.name, "FAILED"))
        print("\nColab-like run, " + ("full" if args.full else "quick") + " mode:")
        for name, outcome in results:
            print(f"  {name:<42} {outcome}")
        if any(outcome == "FAILED" for _, outcome in results):
            sys.exit(1)
    finally:
        if args.keep:
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
