"""The framework of the checkers: compare a learner's answer with a reference, turn a
verifier into a checker that prints one line, and the outcome of one check.

Written by hand, as the whole `exercises` package is. A verifier `verify(fn) -> str`
returns what it checked or raises ExerciseError saying what is wrong; `checker(title)`
wraps it into `check(fn) -> None`, which prints

    ✓ TITLE passes: what was checked
    ✗ TITLE: what is wrong
    · TITLE: not implemented yet

An error the learner's code raises is a failure too, said in one line with the line
of the learner's code it came from.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

TODO = "not implemented yet: fill in the cell above, then run this one again"


class ExerciseError(AssertionError):
    """What is wrong with an exercise's solution, in words."""


def _fmt(idx: list[int]) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def compare(
    name: str, got, want: Tensor, atol: float = 1e-5, rtol: float = 1e-4, show: int = 2
) -> None:
    """Raise ExerciseError naming the first differing entries if `got` is not (close to)
    `want`: its type, shape, dtype (for masks) or values."""
    if not isinstance(got, Tensor):
        raise ExerciseError(
            f"{name}: expected a torch.Tensor, got {type(got).__name__}"
        )
    if tuple(got.shape) != tuple(want.shape):
        raise ExerciseError(
            f"{name}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        )
    if want.dtype == torch.bool and got.dtype != torch.bool:
        raise ExerciseError(
            f"{name}: dtype {got.dtype}, expected torch.bool (True = may attend)"
        )
    if want.dtype == torch.bool or not want.is_floating_point():
        bad = got != want
    else:
        g, w = got.detach().double(), want.detach().double()
        bad = ~torch.isclose(g, w, rtol=rtol, atol=atol)
        bad &= ~(torch.isinf(g) & torch.isinf(w) & (g.sign() == w.sign()))
    if bad.any():
        shown = "; ".join(
            f"at {_fmt(i)} got {got[tuple(i)].item():.6g}, expected "
            f"{want[tuple(i)].item():.6g}"
            for i in bad.nonzero()[:show].tolist()
        )
        raise ExerciseError(
            f"{name}: {int(bad.sum())} of {bad.numel()} entries differ from the "
            f"reference: {shown}"
        )


def is_close(got, want: Tensor, atol: float = 1e-6, equal_nan: bool = False) -> bool:
    """Whether `got` is a tensor of want's shape and values (to recognise a mistake);
    with equal_nan, NaN where want has NaN too."""
    return (
        isinstance(got, Tensor)
        and got.shape == want.shape
        and torch.allclose(
            got.detach().double(),
            want.detach().double(),
            atol=atol,
            equal_nan=equal_nan,
        )
    )


def first_output(got):
    """The output of a module that returns (output, weights) or the output alone."""
    return got[0] if isinstance(got, tuple) else got


def tensor_output(got, name: str):
    """The output of a layer whose docstring returns one tensor; a tuple is refused."""
    if isinstance(got, tuple):
        raise ExerciseError(
            f"{name} returned a tuple of {len(got)}: the layer returns its output "
            "tensor alone, not (output, weights)"
        )
    return got


def load_weights(mine: nn.Module, state: dict, name: str) -> None:
    """Copy the reference's weights into the learner's module, made the reference's
    dtype (float64) first, or say which names differ."""
    if not isinstance(mine, nn.Module):
        raise ExerciseError(f"{name}: expected an nn.Module, got {type(mine).__name__}")
    have = mine.state_dict()
    missing = [k for k in state if k not in have]
    extra = [k for k, _ in mine.named_parameters() if k not in state]  # not buffers
    children = dict(mine.named_children())
    absent = sorted({k.split(".")[0] for k in missing if "." in k} - set(children))
    if absent and not extra:
        raise ExerciseError(
            f"{name} has no sub-module {' or '.join(absent)} (missing {missing[0]}, "
            "...): were they created in forward? Build them once in __init__, on "
            "self, so that their weights belong to the module and persist"
        )
    if missing or extra:
        biases = [k for k in missing or extra if k.endswith(".bias")]
        hint = ""
        if biases and len(biases) == len(missing or extra) and not (missing and extra):
            hint = (
                ": nn.Linear has a bias by default; these layers have none, bias=False"
                if extra
                else ": these layers have biases, nn.Linear's default (no bias=False)"
            )
        raise ExerciseError(
            f"{name}: its parameters should be named as the docstring says; missing "
            f"{missing or 'none'}, unexpected {extra or 'none'}{hint}"
        )
    for k, v in state.items():
        if have[k].shape != v.shape:
            raise ExerciseError(
                f"{name}: {k} has shape {tuple(have[k].shape)}, expected "
                f"{tuple(v.shape)}"
            )
    floats = [v.dtype for v in state.values() if v.is_floating_point()]
    if floats:  # in the reference's dtype first, so that its weights load exactly
        mine.to(floats[0])
    mine.load_state_dict(state, strict=False)  # a buffer of its own (a mask) stays


def compare_grads(mine: nn.Module, ref: nn.Module, name: str, rename=None) -> None:
    """After backward on both: each parameter's gradient equals the reference's."""
    ref_params = dict(ref.named_parameters())
    for key, p in mine.named_parameters():
        r = ref_params[rename(key) if rename else key]
        if p.grad is None:
            raise ExerciseError(
                f"{name}: no gradient reached {key}: is it used in forward, and not "
                "detached?"
            )
        compare(f"{name}, the gradient of {key}", p.grad, r.grad, atol=1e-8)


def name_unused(name: str, got, mine: nn.Module) -> None:
    """Raise ExerciseError naming the parameters of `mine` that the output `got` does
    not depend on: a layer left unused explains a wrong output better than numbers."""
    params = [(k, p) for k, p in mine.named_parameters() if p.requires_grad]
    if not (isinstance(got, Tensor) and got.requires_grad and params):
        return
    grads = torch.autograd.grad(
        got.sum(), [p for _, p in params], retain_graph=True, allow_unused=True
    )
    unused = [k for (k, _), g in zip(params, grads) if g is None]
    top = {k.split(".")[0] for k in unused}  # a whole sublayer unused: named once
    whole = {m for m in top if all(k in unused for k, _ in params if k.startswith(m))}
    unused = [m for m in sorted(whole)] + [
        k for k in unused if k.split(".")[0] not in whole
    ]
    if unused:
        raise ExerciseError(
            f"{name}: the output does not depend on {', '.join(unused)}: is each "
            "used in forward, where the docstring says, and not detached?"
        )


def compare_module(
    call: str, got, want: Tensor, mine: nn.Module, ref: nn.Module, rename=None
) -> None:
    """The learner's module's output `got` equals the reference's `want` (named `call`,
    "MyBlock(x)"), every parameter reaching it; then, after backward of the sum of
    squares through both, so does each parameter's gradient."""
    name = call.split("(")[0]
    name_unused(name, got, mine)
    compare(call, got, want)
    got.pow(2).sum().backward()
    want.pow(2).sum().backward()
    compare_grads(mine, ref, name, rename)


def compare_input_grads(
    name: str, mine: Callable, ref: Callable, **inputs: Tensor
) -> None:
    """The gradient of the output's sum of squares with respect to each input equals
    the reference's: mine(**inputs) and ref(**inputs) each return the output (or a
    pair, output first). A component whose input is detached, on one path (the
    residual) or on all, computes the right output and the right parameter
    gradients, but the layers below it learn nothing through that path."""
    leaves = {k: x.detach().clone().requires_grad_() for k, x in inputs.items()}
    grads = []
    for run in (mine, ref):
        out = first_output(run(**leaves))
        if not (isinstance(out, Tensor) and out.requires_grad):
            grads.append(dict.fromkeys(leaves))
            continue
        found = torch.autograd.grad(
            out.pow(2).sum(), list(leaves.values()), allow_unused=True
        )
        grads.append(dict(zip(leaves, found)))
    got, want = grads
    for key in leaves:
        if got[key] is None:
            raise ExerciseError(
                f"{name}: no gradient flows back to its input {key}: is {key} "
                "detached (.detach(), torch.no_grad()) in forward? The layers below "
                "learn only through it"
            )
        if not torch.allclose(
            got[key].double(), want[key].double(), rtol=1e-4, atol=1e-8
        ):
            raise ExerciseError(
                f"{name}: the output is right but the gradient with respect to its "
                f"input {key} is not: is {key} detached on one of its paths (the "
                "residual, say)? Use it as it is, no .detach() in forward"
            )


def jitter(module: nn.Module) -> nn.Module:
    """The module in float64 with noise on every weight, so that no two LayerNorms are
    alike (at initialisation they all are 1 and 0)."""
    module = module.double()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module


def own_state(
    name: str,
    mine: nn.Module,
    build_other: Callable[[], nn.Module],
    run: Callable[[], Tensor],
) -> None:
    """A second instance, built after `mine` (with other sizes where that shows), must
    share no parameter with it and leave its output as it was: state kept on the
    class, or in a module-level dict, is shared by every instance."""
    with torch.no_grad():
        before = run()
        other = build_other()
        shared = {id(p) for p in other.parameters()}
        same = [n for n, p in mine.named_parameters() if id(p) in shared]
        if same:
            raise ExerciseError(
                f"two {name}s share {same[0]} (the same parameter object): a "
                "sub-module kept on the class or in a module-level dict serves every "
                "instance; build each in __init__ on self"
            )
        if not is_close(run(), before):
            raise ExerciseError(
                f"the first {name} changed its output once a second one was built: "
                "it reads something the second one set on the class (or a global), "
                "shared by every instance; keep sizes and sub-modules on self"
            )


# the checkers: a verifier each, wrapped -----------------------------------------------


def outcome(check: Callable, fn) -> tuple[str, str]:
    """Run a checker's verification on `fn`: ("pass", what was checked), ("todo",
    TODO) for the stub, or ("fail", what is wrong)."""
    try:
        with torch.random.fork_rng(devices=[]):
            return "pass", check.verify(fn)
    except NotImplementedError:
        return "todo", TODO
    except ExerciseError as e:
        return "fail", str(e)
    except Exception as e:  # the learner's code failed: say what, and where
        if "modified by an inplace operation" in str(e):  # found by backward, later
            return "fail", (
                "a tensor that autograd needed was changed in place (x += ..., or "
                "an in-place op such as masked_fill_): write x = x + ... and use the "
                "out-of-place ops, so the backward pass sees the values it saved"
            )
        if "view size is not compatible" in str(e):  # torch says: use .reshape
            return "fail", (
                f"{raised(e).partition(': view size')[0]}: .view cannot reorder "
                "memory, and a tensor split from qkv or transposed is not in order; "
                "split heads as t.view(B, T, n_heads, d_head).transpose(1, 2), merge "
                "them as y.transpose(1, 2).reshape(B, T, d_model)"
            )
        for clue, hint in _GENERIC_HINTS:
            if clue in str(e):
                return "fail", f"{raised(e)}: {hint}"
        return "fail", raised(e)


# slips of Python and PyTorch that any build-it can make: a clue in the error, a hint
_GENERIC_HINTS = (
    (
        "before Module.__init__() call",
        "call super().__init__() first in __init__, before any layer is assigned",
    ),
    (
        "The use of `x.T` on tensors",
        ".T reverses every axis of a tensor of more than 2; swap the last two, "
        "x.transpose(-2, -1) (or x.mT)",
    ),
    (
        "The expanded size of the tensor",
        "expand stretches only an axis of size 1; to repeat each head for its group, "
        "repeat_interleave(H // H_kv, dim=1)",
    ),
)


# the course's library and torch: an error raised in them is reported at the learner's
# line that called them
_LIBRARIES = (
    Path(__file__).resolve().parents[1],  # transformer_lib
    Path(torch.__file__).resolve().parent,
)


def first_line(e: BaseException) -> str:
    """The first line of an error's message, to quote inside a one-line message."""
    return (str(e).splitlines() or [""])[0]


def learner_frames(e: BaseException) -> list[traceback.FrameSummary]:
    """The traceback's frames in the learner's code (outside this package and torch)."""
    return [
        f
        for f in traceback.extract_tb(e.__traceback__)
        if not any(Path(f.filename).resolve().is_relative_to(d) for d in _LIBRARIES)
    ]


def learner_line(e: BaseException) -> str:
    """The learner's line that raised `e`, its comment dropped ("" if none)."""
    mine = learner_frames(e)
    return (mine[-1].line or "").split("#")[0].strip() if mine else ""


def raised(e: Exception) -> str:
    """One line for an error: its type and message, and the last line of the traceback
    that is the learner's (outside this package and torch)."""
    mine = learner_frames(e)
    lines = str(e).strip().splitlines() or [""]
    message = lines[0] + (" (...)" if len(lines) > 1 else "")  # torch's can run long
    if not mine:
        return f"the check stopped on {type(e).__name__}: {message}"
    at = f"line {mine[-1].lineno}" + (f": {mine[-1].line}" if mine[-1].line else "")
    return f"your code raised {type(e).__name__} at {at}: {message}"


_MARK = {"pass": "\u2713", "fail": "\u2717", "todo": "\u00b7"}


def status_line(title: str, status: str, text: str) -> str:
    joint = " passes: " if status == "pass" else ": "
    return f"{_MARK[status]} {title}{joint}{text}"


def checker(title: str) -> Callable:
    """Turn verify(fn) -> str (raising ExerciseError) into check(fn) -> None that
    prints one line."""

    def wrap(verify: Callable[..., str]) -> Callable[..., None]:
        @functools.wraps(verify)
        def check(fn) -> None:
            print(status_line(title, *outcome(check, fn)))

        check.verify, check.title = verify, title
        return check

    return wrap
