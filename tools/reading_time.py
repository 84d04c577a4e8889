"""How long each notebook takes to read, and to run, as the learner audit measures it.

Reading: the prose of the markdown cells at 200 words a minute, plus the code the
book shows and its text outputs at 15 lines a minute; the build-its (their prose,
stub, checker and solution) are left out, as they are work, not reading. Running: the
time printed by the notebook's last cell ("executed in 93.1 s on ..."), its stored
full-mode run.

    python tools/reading_time.py          # a table, one row per notebook
    python tools/reading_time.py --json   # the same as JSON

A word is a run of letters and digits (\\w+) outside HTML tags (a box's markup, an
image's address and its alt text are not read as prose) and outside a link's target
(`[the results](https://github.com/...)`: a reader reads the link's text); a line of
code is any line, blank or not, of a code cell not tagged remove-cell, remove-input or
hide-input (a hide-input cell's code is folded behind a "show" button, like the folded
literalinclude folds of plumbing: there for the curious, not on the reading
path); an output line is a line of a stored text output of a cell not tagged
remove-cell, remove-output or hide-output (a hide-output cell's output is folded, as
A1's listings of the library's files are; figures are not counted).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS_PER_MINUTE, LINES_PER_MINUTE = 200, 15
HIDDEN = {"remove-cell", "remove-input", "hide-input"}  # code not on the page
RUN = re.compile(r"executed in ([\d.]+) s on")
TAG = re.compile(r"<[^>]*>|(?<=\])\([^)\s]*\)")  # HTML tags, links' targets


def _tags(cell: dict) -> set[str]:
    return set(cell["metadata"].get("tags", []))


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def is_build_it(cell: dict) -> bool:
    """A build-it's cell: its prose ("**Build it"), stub, checker or solution."""
    return (
        cell.get("id", "").startswith("bi")
        or "build-it" in _tags(cell)
        or (cell["cell_type"] == "markdown" and _source(cell).startswith("**Build it"))
    )


def _output_lines(cell: dict) -> int:
    if _tags(cell) & {"remove-output", "hide-output"}:  # not on the page, or folded
        return 0
    n = 0
    for out in cell.get("outputs", []):
        text = "".join(out.get("text", "")) or (
            ""
            if "image/png" in out.get("data", {})
            else "".join(out.get("data", {}).get("text/plain", ""))
        )
        n += len(text.rstrip("\n").splitlines())
    return n


def measure(path: Path) -> dict:
    """{"words", "code_lines", "output_lines", "read_min", "run_s"} of one notebook."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    words = code = outputs = 0
    for cell in cells:
        if is_build_it(cell) or "remove-cell" in _tags(cell):
            continue
        if cell["cell_type"] == "markdown":
            words += len(re.findall(r"\w+", TAG.sub(" ", _source(cell))))
        elif cell["cell_type"] == "code":
            if not HIDDEN & _tags(cell):
                code += len(_source(cell).splitlines())
            outputs += _output_lines(cell)
    last = "".join("".join(o.get("text", "")) for o in cells[-1].get("outputs", []))
    run = RUN.search(last)
    read = words / WORDS_PER_MINUTE + (code + outputs) / LINES_PER_MINUTE
    return {
        "words": words,
        "code_lines": code,
        "output_lines": outputs,
        "read_min": round(read),
        "run_s": float(run.group(1)) if run else None,
    }


def notebooks(root: Path = ROOT) -> list[Path]:
    """The course's notebooks, in file order (00_..., A1_...)."""
    return sorted((root / "notebooks").glob("[0-9A][0-9]_*.ipynb"))


def run_time(seconds: float | None) -> str:
    """12 s, 95 s, 4.4 min, 23.6 min: the run time as the landing page prints it."""
    if seconds is None:
        return "–"
    if seconds < 100:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON, not a table")
    args = parser.parse_args()
    rows = {p.stem: measure(p) for p in notebooks()}
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(
        f"{'notebook':<42} {'words':>6} {'code':>5} {'out':>5} {'read':>7} {'run':>8}"
    )
    for name, r in rows.items():
        print(
            f"{name:<42} {r['words']:>6,} {r['code_lines']:>5} {r['output_lines']:>5}"
            f" {r['read_min']:>4} min {run_time(r['run_s']):>8}"
        )
    total = sum(r["read_min"] for r in rows.values())
    print(f"{'all':<42} {'':>6} {'':>5} {'':>5} {total:>4} min")


if __name__ == "__main__":
    main()
