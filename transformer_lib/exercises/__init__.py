"""The checkers of the build-it exercises, and the learner's record.

Written by hand, not exported from a notebook: grading is not what any notebook teaches.
Each notebook ends with build-its: a stub cell (the signature, the docstring and
`raise NotImplementedError`) that the learner fills in, then a checker call such as
`check_multi_head_attention(MyMultiHeadAttention)`. A checker compares the learner's
code with the library's reference on shapes, values, masks, gradients and edge cases and
prints one line:

    ✓ multi-head attention passes: ...          right
    ✗ multi-head attention: scores divided ...   wrong, and what is wrong
    · multi-head attention: not implemented yet  the stub, untouched

It returns None and never raises for a wrong answer (so "Run all" goes on). An error
the learner's code raises is one line too: the mistake it is typical of when there is
one (a file read as text, a mask or a slice of the wrong size), else its type, the first
line of its message and the learner's line that raised it (or called the library that
did). Checkers draw their random inputs
inside `torch.random.fork_rng`, so the notebook's random stream is left as it was.

    python -m transformer_lib check 05     # which build-its of notebook 05 pass
    python -m transformer_lib check        # all notebooks

reads the learner's saved notebook, runs its cells tagged `build-it`, and checks each;
in a running notebook (Colab), `record("05", globals())` does the same with the kernel's
definitions.
"""

import argparse
import json
import linecache
from collections.abc import Callable
from pathlib import Path

from transformer_lib.exercises.framework import (
    TODO,
    ExerciseError,
    compare,
    outcome,
    status_line,
)
from transformer_lib.exercises.part1 import (
    check_alibi_attention,
    check_attention_with_mask,
    check_bpe_encode,
    check_multi_head_attention,
    check_sha256,
    check_shift_encoding,
    check_sliding_window_mask,
    check_tied_output,
    shift_reference,
)
from transformer_lib.exercises.part2 import (
    beam_search_reference,
    bleu_reference,
    check_beam_search,
    check_corpus_bleu,
    check_decoder_layer,
    check_encoder_layer,
    check_min_p_sampling,
    check_shift_targets,
    check_train_step,
    check_training_loop,
    train_step_reference,
)
from transformer_lib.exercises.part3 import (
    check_cosine_by_distance,
    check_gpt_block,
    check_kv_cache,
    check_tiled_attention,
)
from transformer_lib.exercises.part4 import (
    check_geglu,
    check_grouped_attention,
    check_newton_schulz,
    check_rope,
    rope_reference,
)
from transformer_lib.exercises.part5 import (
    check_dpo_nll_loss,
    check_merge_and_unload,
    check_pack_pairs,
)

__all__ = [
    "TODO",
    "ExerciseError",
    "compare",
    "outcome",
    "rope_reference",
    "shift_reference",
    "train_step_reference",
    "beam_search_reference",
    "check_sha256",
    "check_bpe_encode",
    "check_tied_output",
    "check_shift_encoding",
    "check_attention_with_mask",
    "check_multi_head_attention",
    "check_sliding_window_mask",
    "check_alibi_attention",
    "check_encoder_layer",
    "check_decoder_layer",
    "check_shift_targets",
    "check_train_step",
    "check_training_loop",
    "check_min_p_sampling",
    "check_beam_search",
    "check_corpus_bleu",
    "bleu_reference",
    "check_gpt_block",
    "check_kv_cache",
    "check_cosine_by_distance",
    "check_tiled_attention",
    "check_rope",
    "check_grouped_attention",
    "check_geglu",
    "check_newton_schulz",
    "check_pack_pairs",
    "check_merge_and_unload",
    "check_dpo_nll_loss",
    "BUILD_ITS",
    "record",
    "build_it_cells",
    "check_notebooks",
    "register",
]

# the learner's record -----------------------------------------------------------------

# notebook -> (the name the learner defines, its checker), in the notebook's order
BUILD_ITS: dict[str, list[tuple[str, Callable]]] = {
    "00": [("sha256_file", check_sha256)],
    "01": [("my_bpe_encode", check_bpe_encode)],
    "02": [("MyTiedOutput", check_tied_output)],
    "03": [("my_shift_encoding", check_shift_encoding)],
    "04": [("my_attention_with_mask", check_attention_with_mask)],
    "05": [("MyMultiHeadAttention", check_multi_head_attention)],
    "06": [
        ("my_sliding_window_mask", check_sliding_window_mask),
        ("my_alibi_attention", check_alibi_attention),
    ],
    "07": [("MyEncoderLayer", check_encoder_layer)],
    "08": [
        ("MyDecoderLayer", check_decoder_layer),
        ("my_shift_targets", check_shift_targets),
    ],
    "09": [("my_train_step", check_train_step), ("my_train", check_training_loop)],
    "10": [
        ("my_beam_search", check_beam_search),
        ("my_sample_min_p", check_min_p_sampling),
    ],
    "11": [("my_corpus_bleu", check_corpus_bleu)],
    "12": [("MyBlock", check_gpt_block), ("MyKVCache", check_kv_cache)],
    "13": [("my_cosine_by_distance", check_cosine_by_distance)],
    "14": [("my_tiled_attention", check_tiled_attention)],
    "15": [
        ("my_apply_rope", check_rope),
        ("my_grouped_attention", check_grouped_attention),
    ],
    "16": [("MyGeGLU", check_geglu), ("my_newton_schulz", check_newton_schulz)],
    "17": [("pack_pairs", check_pack_pairs)],
    "18": [("merge_and_unload", check_merge_and_unload)],
    "19": [("my_dpo_nll_loss", check_dpo_nll_loss)],
}


def record(notebook: str, namespace: dict, raised: dict | None = None) -> int:
    """Print which build-its of `notebook` ("05") the definitions in `namespace` pass;
    returns how many do. raised: name -> the error its cell raised, if it did."""
    key = f"{notebook:02d}" if isinstance(notebook, int) else str(notebook).zfill(2)
    if key not in BUILD_ITS:
        raise ExerciseError(
            f"no build-its for notebook {notebook!r}: choose one of "
            f'{", ".join(BUILD_ITS)}, as a string ("05")'
        )
    passed = 0
    for name, check in BUILD_ITS[key]:
        if name not in namespace and name in (raised or {}):
            status, text = "fail", f"its cell raised {raised[name]}"
        elif name not in namespace:
            status, text = "todo", f"{name} is not defined: run its cell"
        else:
            try:
                status, text = outcome(check, namespace[name])
            except Exception as e:  # the learner's code failed: say how, go on
                status, text = "fail", f"raised {type(e).__name__}: {e}"
        passed += status == "pass"
        print(status_line(f"{key} {name}", status, text))
    return passed


def build_it_cells(path: Path) -> list[str]:
    """The sources of a notebook's cells tagged `build-it`, in order."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "code" and "build-it" in c["metadata"].get("tags", [])
    ]


def check_notebooks(args: argparse.Namespace) -> int:
    """`python -m transformer_lib check [NN ...]`: run each notebook's build-it cells as
    saved, then their checkers; 0 when every build-it asked for passes."""
    folder = Path(args.notebooks)
    total = passed = 0
    for nb in args.numbers or sorted(BUILD_ITS):
        nb = nb.zfill(2) if nb.isdigit() else nb  # "7" is notebook 07
        if nb not in BUILD_ITS:
            print(f"check: no notebook {nb!r}; choose from {', '.join(BUILD_ITS)}")
            return 2
        paths = sorted(folder.glob(f"{nb}_*.ipynb"))
        if not paths:
            print(f"check: no {nb}_*.ipynb in {folder}; pass --notebooks FOLDER")
            return 2
        namespace: dict = {"__name__": f"build_its_{nb}"}
        raised: dict = {}
        for i, source in enumerate(build_it_cells(paths[0]), 1):
            cell = f"<{paths[0].name}, build-it cell {i}>"  # what a traceback names
            linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)
            try:
                exec(compile(source, cell, "exec"), namespace)
            except Exception as e:  # a half-written cell: its build-it fails below
                print(f"  a build-it cell of {paths[0].name} raised {e!r}")
                for name, _ in BUILD_ITS[nb]:
                    if f"def {name}(" in source or f"class {name}(" in source:
                        raised[name] = f"{type(e).__name__}: {e}"
        passed += record(nb, namespace, raised)
        total += len(BUILD_ITS[nb])
    print(f"{passed} of {total} build-its pass")
    return 0 if passed == total else 1


def register(commands) -> None:
    """Add `check` to the subparsers of `python -m transformer_lib`."""
    c = commands.add_parser(
        "check",
        help="which build-it exercises of your notebooks pass",
        description=check_notebooks.__doc__,
        epilog="To check the cells you have run, not the saved file, call inside the "
        "notebook: "
        '`from transformer_lib.exercises import record; record("05", globals())`.',
    )
    c.add_argument("numbers", nargs="*", help="notebooks, e.g. 05 07 (default: all)")
    c.add_argument(
        "--notebooks",
        default="notebooks",
        help="the folder of your notebooks (default: notebooks)",
    )
    c.set_defaults(run=check_notebooks)
