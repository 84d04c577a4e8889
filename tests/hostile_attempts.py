"""The hostile attempts on the course's command line and library that
tests/test_reliability.py runs, one test each: every input a user can type wrong, every
way to damage or lose a run, and each is judged by the policy.

Areas: 1 CLI input, 2 checkpoints, 3 training faults, 4 data, 5 API misuse,
6 numerics, 7 the unit tests themselves, 8 concurrent runs, stop signals, full disks,
damaged resumes and loads, bounded inputs, typed input, the Chinese edition's tool.

Each attempt keeps its row number. A CLI attempt runs `python -m transformer_lib ...`
in a fresh folder under a temporary directory (its own data folder, copied from
$TRANSFORMER_DATA_MIRROR); a library attempt calls the API in this process. The
judges:

- PASS: what the policy asks. For input a user can type that must be refused: a
  non-zero exit, one line on stderr naming what was wrong, no traceback anywhere,
  nothing lost. For valid input: success.
- WEAK: survives, but with a cryptic message, several lines, or a silent acceptance
  of a meaningless value.
- FAIL: a traceback on CLI input (a crash), valid input refused, a flag of the
  interface not recognised, a silent wrong result, or lost, overwritten or corrupted
  work (two runs on one checkpoint that both end as if alone, a stop signal that
  saves nothing, a half-written book).
- SKIP: cannot be run here (no `setpriv` to drop root's capabilities; no root to
  mount a full disk; a CUDA machine for the rows about CPU-only torch; the whole
  unit-test suite unless UNIT_TESTS is set).
"""

from __future__ import annotations

import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PY = sys.executable
MIRROR = os.environ.get("TRANSFORMER_DATA_MIRROR") or str(
    ROOT.parent / "shared" / "data"
)
AREAS = {
    1: "1 CLI input",
    2: "2 Checkpoints",
    3: "3 Training faults",
    4: "4 Data",
    5: "5 API misuse",
    6: "6 Numerics",
    7: "7 Unit tests",
    8: "8 Round two",
}
ORDER = {"PASS": 0, "SKIP": 0, "WEAK": 1, "FAIL": 2}
TRACEBACK = "Traceback (most recent call last)"
OFFLINE = {
    k: "http://127.0.0.1:9"
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")
}
NOCAPS = [
    "setpriv",
    "--inh-caps=-all",
    "--ambient-caps=-all",
    "--bounding-set=-all",
    "--",
]
Outcome = tuple[str, str]  # (verdict, what was seen)


#  -------------------------------------------------------------------------------------
# running commands
@dataclass
class Result:
    """What one command did: exit status, its output, seconds, and whether it was killed
    for time."""

    rc: int
    out: str
    err: str
    seconds: float
    timed_out: bool = False

    def last_err(self) -> str:
        """The last non-empty stderr line (or stdout's, when stderr is empty),
        shortened."""
        lines = [ln for ln in (self.err or self.out).splitlines() if ln.strip()]
        return (
            (lines[-1][:220] + ("..." if len(lines[-1]) > 220 else ""))
            if lines
            else "(no output)"
        )


def _generate(model, *args, **kwargs):
    """The course's generation: `generate(model, ...)`, a free function."""
    from transformer_lib.gpt import generate

    return generate(model, *args, **kwargs)


def _preexec(umask: int | None, address_space: int | None) -> Callable[[], None]:
    """A child-side setup: its own process group (so kill -9 reaches it alone), a umask,
    a memory cap."""

    def setup() -> None:
        os.setpgrp()
        # stop signals as a terminal's job has them, even when the harness runs in the
        # background (where SIGINT is ignored, and the child would inherit that)
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        if umask is not None:
            os.umask(umask)
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return setup


class Env:
    """The temporary world the attempts run in: folders, environment, fixtures built
    once and shared."""

    def __init__(self, root: Path):
        self.root = root
        self.fix = root / "fixtures"
        self.fix.mkdir(parents=True)
        self.data = self.fresh_data("data")
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TRANSFORMER_DATA_MIRROR": MIRROR,
            "TRANSFORMER_DATA_DIR": str(self.data),
            "PYTHONUNBUFFERED": "0",
        }
        self._memo: dict[str, object] = {}
        self._n = 0

    def fresh_data(self, name: str) -> Path:
        """A writable copy of the mirror (plain 0644 files) under `name`, for attempts
        that damage data."""
        dest = self.root / name
        for src in Path(MIRROR).rglob("*"):
            if src.is_file() and src.name != "README.md":
                (dest / src.relative_to(MIRROR)).parent.mkdir(
                    parents=True, exist_ok=True
                )
                shutil.copyfile(src, dest / src.relative_to(MIRROR))
        return dest

    def fresh(self, name: str = "run") -> Path:
        """A new empty working folder."""
        self._n += 1
        path = self.root / f"{self._n:03d}-{name}"
        path.mkdir()
        return path

    def memo(self, key: str, build: Callable[[], object]) -> object:
        """`build()` once per run: fixtures and multi-row scenarios share their
        result."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    def command(self, args: list[str], nocaps: bool = False) -> list[str]:
        """The argv for `python -m transformer_lib ARGS`, niced, and without
        capabilities when asked."""
        return (
            ["nice", "-n", "19"]
            + (NOCAPS if nocaps else [])
            + [PY, "-m", "transformer_lib", *args]
        )

    def popen(
        self,
        args: list[str],
        cwd: Path,
        stdout=subprocess.PIPE,
        extra_env: dict | None = None,
        **kw,
    ) -> subprocess.Popen:
        """Start the CLI in the background (its own process group)."""
        return subprocess.Popen(
            self.command(args),
            cwd=cwd,
            env={**self.env, **(extra_env or {})},
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            preexec_fn=_preexec(None, None),
            **kw,
        )

    def cli(
        self,
        args: list[str],
        cwd: Path | None = None,
        stdin: str | None = None,
        timeout: float = 180,
        extra_env: dict | None = None,
        drop_env: tuple[str, ...] = (),
        nocaps: bool = False,
        umask: int | None = None,
        address_space: int | None = None,
    ) -> Result:
        """Run `python -m transformer_lib ARGS` to the end (or `timeout`, then kill its
        group)."""
        env = {
            k: v
            for k, v in {**self.env, **(extra_env or {})}.items()
            if k not in drop_env
        }
        start = time.perf_counter()
        p = subprocess.Popen(
            self.command(args, nocaps),
            cwd=cwd or self.fresh(),
            env=env,
            text=True,
            errors="replace",
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_preexec(umask, address_space),
        )
        try:
            out, err = p.communicate(stdin, timeout=timeout)
            return Result(p.returncode, out, err, time.perf_counter() - start)
        except subprocess.TimeoutExpired:
            kill_group(p)
            out, err = p.communicate()
            return Result(
                p.returncode, out, err, time.perf_counter() - start, timed_out=True
            )


def kill_group(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to the process group the harness started (nothing else)."""
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def wait_for(
    test: Callable[[], bool],
    timeout: float,
    p: subprocess.Popen | None = None,
    poll: float = 0.002,
) -> bool:
    """Poll `test` until it holds (True), `timeout` passes or `p` exits (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if test():
            return True
        if p is not None and p.poll() is not None:
            return test()
        time.sleep(poll)
    return False


#  -------------------------------------------------------------------------------------
# judges
def worst(outcomes: list[Outcome]) -> Outcome:
    """One outcome for a row of several inputs: its worst verdict, with what each
    non-PASS input showed."""
    verdict = max((v for v, _ in outcomes), key=ORDER.get, default="PASS")
    seen = " || ".join(s for v, s in outcomes if v not in ("PASS", "SKIP") and s)
    return verdict, seen or (outcomes[0][1] if outcomes else "")


def crashed(r: Result) -> Outcome | None:
    """FAIL for a timeout, a traceback, or a flag the new interface has that this CLI
    lacks; else None."""
    if r.timed_out:
        return "FAIL", f"still running after {r.seconds:.0f} s (killed)"
    if TRACEBACK in r.out or TRACEBACK in r.err:
        return "FAIL", f"traceback, rc {r.rc}: {r.last_err()}"
    if "unrecognized arguments" in r.err:
        return (
            "FAIL",
            f"flag not recognised (the new interface is missing): {r.last_err()}",
        )
    return None


def _error_lines(err: str) -> list[str]:
    """stderr lines that are not notes or warnings (a refusal should leave exactly
    one)."""
    return [
        ln
        for ln in err.splitlines()
        if ln.strip()
        and not ln.startswith((" ", "\t"))
        and not re.match(r"(note|warning)\b", ln.strip(), re.I)
        and "Warning:" not in ln
    ]


def refused(r: Result, *patterns: str, silent: str = "WEAK") -> Outcome:
    """A refusal: non-zero exit, no traceback, one stderr line matching every regex in
    `patterns`."""
    bad = crashed(r)
    if bad:
        return bad
    if r.rc == 0:
        return silent, f"accepted (rc 0): {r.last_err()}"
    # a flag's name may be written with - or _ ('top-k' or top_k); '--out' must be the
    # flag itself
    missing = [
        p
        for p in patterns
        if not re.search(
            p if p.startswith("--") else p.replace("-", "[-_ ]"), r.err, re.I
        )
    ]
    if missing:
        return (
            "WEAK",
            f"rc {r.rc}, the message does not say /{missing[0]}/: {r.last_err()}",
        )
    lines = _error_lines(r.err)
    if len(lines) != 1:
        return (
            "WEAK",
            f"rc {r.rc}, {len(lines)} lines on stderr: {' / '.join(lines)[:240]}",
        )
    return "PASS", f"rc {r.rc}: {r.last_err()}"


def succeeded(
    r: Result, check: Callable[[Result], str | None] | None = None
) -> Outcome:
    """Success on valid input: rc 0, no traceback, and `check(r)` (a complaint or None)
    has no complaint."""
    bad = crashed(r)
    if bad:
        return bad
    if r.rc != 0:
        return "FAIL", f"valid input refused, rc {r.rc}: {r.last_err()}"
    complaint = check(r) if check else None
    return ("WEAK", complaint) if complaint else ("PASS", f"rc 0 in {r.seconds:.1f} s")


def either(r: Result, *patterns: str) -> Outcome:
    """Either outcome is acceptable: success, or a clean refusal naming `patterns`."""
    if r.rc == 0 and not crashed(r):
        return "PASS", "accepted, rc 0"
    return refused(r, *patterns)


def api(
    call: Callable[[], object],
    pattern: str = "",
    ok: Callable[[object], bool] | None = None,
    silent: str = "WEAK",
    raised: str = "WEAK",
) -> Outcome:
    """A library call that must raise ValueError/TypeError matching `pattern`, or return
    a result `ok` accepts.

    Another exception (torch's deep RuntimeError, an IndexError, ...) gets `raised`; a
    return value that
    `ok` rejects (or any return when `ok` is None) gets `silent`.
    """
    try:
        value = call()
    except (ValueError, TypeError) as e:
        msg = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        if pattern and re.search(pattern, str(e), re.I):
            return "PASS", msg
        return "WEAK", f"cryptic: {msg}"
    except Exception as e:  # noqa: BLE001 - the judge reports any other exception
        return (
            raised,
            f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
        )
    if ok is not None and ok(value):
        return "PASS", "correct result"
    return silent, f"no error; returned {_short(value)}"


def _short(value: object) -> str:
    """A short description of a returned value."""
    import torch

    if isinstance(value, tuple):
        value = value[0]
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)} {value.dtype}"
    return repr(value)[:120]


def checked(fn: Callable[[], str | None]) -> Outcome:
    """PASS when `fn` (a numeric check) returns no complaint; FAIL with the complaint or
    the exception."""
    try:
        complaint = fn()
    except Exception as e:  # noqa: BLE001
        return (
            "FAIL",
            f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
        )
    return ("FAIL", complaint) if complaint else ("PASS", "ok")


#  -------------------------------------------------------------------------------------
# fixtures
def L(*extra: str) -> list[str]:
    """`L`: a 4-step tiny train-lm."""
    return [
        "train-lm",
        "--preset",
        "tiny",
        "--no-progress",
        "--max-iters",
        "4",
        "--eval-interval",
        "2",
        "--eval-windows",
        "2",
        *extra,
    ]


def M(*extra: str) -> list[str]:
    """`M`: train-mt --quick."""
    return ["train-mt", "--quick", "--no-progress", *extra]


def lm_ckpt(env: Env) -> Path:
    """A 20-step --preset tiny checkpoint ."""

    def build() -> Path:
        out = env.fix / "lm" / "tiny.pt"
        r = env.cli(
            [
                "train-lm",
                "--preset",
                "tiny",
                "--no-progress",
                "--max-iters",
                "20",
                "--eval-interval",
                "10",
                "--eval-windows",
                "2",
                "--out",
                str(out),
            ]
        )
        if not out.is_file():
            raise RuntimeError(f"could not build the LM fixture: {r.last_err()}")
        return out

    return env.memo("lm", build)


def mt_ckpt(env: Env) -> Path:
    """A train-mt --quick checkpoint; --out, or the older --checkpoint."""

    def build() -> Path:
        out = env.fix / "mt" / "quick.pt"
        r = env.cli(M("--out", str(out)))
        if "unrecognized arguments" in r.err:
            r = env.cli(M("--checkpoint", str(out)))
        if not out.is_file():
            raise RuntimeError(
                f"could not build the translator fixture: {r.last_err()}"
            )
        return out

    return env.memo("mt", build)


def G(env: Env, *extra: str) -> list[str]:
    """`G`: 20 new tokens from ROMEO with the tiny LM."""
    return [
        "generate",
        "--checkpoint",
        str(lm_ckpt(env)),
        "--max-new-tokens",
        "20",
        "--prompt",
        "ROMEO",
        *extra,
    ]


def T(env: Env, *extra: str) -> list[str]:
    """`T`: translate with the quick translator."""
    return ["translate", "--checkpoint", str(mt_ckpt(env)), *extra]


class _Evil:
    """A pickle that runs `touch MARKER` when unpickled without weights_only."""

    def __init__(self, marker: Path):
        self.cmd = f"touch {marker}"

    def __reduce__(self):
        return os.system, (self.cmd,)


def _edited(src: Path, dest: Path, edit: Callable[[dict], None]) -> Path:
    """Copy a checkpoint with `edit` applied to its dict."""
    import torch

    state = torch.load(src, weights_only=True)
    edit(state)
    torch.save(state, dest)
    return dest


def crafted(env: Env) -> dict[str, Path]:
    """Crafted checkpoints (ck/ and evil/): broken, wrong-kind, wrong-structure and
    malicious."""
    return env.memo("crafted", lambda: _craft(env, lm_ckpt(env), mt_ckpt(env)))


def _craft(env: Env, lm: Path, mt: Path) -> dict[str, Path]:
    """Write every crafted file into fixtures/ck and return {name: path}."""
    import pickle

    import torch

    ck = env.fix / "ck"
    ck.mkdir()
    f: dict[str, Path] = {}
    f["empty"] = ck / "empty.pt"
    f["empty"].write_bytes(b"")
    for name, src in (("trunc_lm", lm), ("trunc_mt", mt)):
        data = src.read_bytes()
        f[name] = ck / f"{name}.pt"
        f[name].write_bytes(data[: int(len(data) * 0.4)])
    f["random"] = ck / "random.pt"
    f["random"].write_bytes(random.Random(0).randbytes(300_000))
    for name, obj in (
        ("dict", {"foo": 1}),
        ("list", [1, 2, 3]),
        ("tensor", torch.zeros(3)),
    ):
        f[name] = ck / f"{name}.pt"
        torch.save(obj, f[name])
    f["adir"] = ck / "adir.pt"
    f["adir"].mkdir()
    lm_edits: dict[str, Callable[[dict], None]] = {
        "lm_vocab100": lambda s: s["config"].update(vocab_size=100),
        "lm_dmodel64": lambda s: s["config"].update(d_model=64),
        "lm_no_tokemb": lambda s: s["model"].pop("tok_emb.weight"),
        "lm_tok66": lambda s: s["tokenizer"].update(
            chars=s["tokenizer"]["chars"] + "é"
        ),
        "lm_tok10": lambda s: s["tokenizer"].update(chars=s["tokenizer"]["chars"][:10]),
        "lm_rope": lambda s: s["config"].update(rope=True),
        "lm_nomodel": lambda s: s.pop("model"),
        "lm_tokNone": lambda s: s.update(tokenizer=None),
        "lm_configstr": lambda s: s.update(config="gpt"),
    }
    mt_edits: dict[str, Callable[[dict], None]] = {
        "mt_d32": lambda s: s["config"].update(d_model=32),
        "mt_tgt7": lambda s: s["config"].update(
            tgt_vocab_size=s["config"]["tgt_vocab_size"] + 7
        ),
        "mt_nobest": lambda s: s.pop("best_model"),
        "mt_sentencepiece": lambda s: s["tokenizer"]["src"].update(
            type="sentencepiece"
        ),
        "mt_extra": lambda s: s["config"].update(foo=1),
    }
    for name, edit in lm_edits.items():
        f[name] = _edited(lm, ck / f"{name}.pt", edit)
    for name, edit in mt_edits.items():
        f[name] = _edited(mt, ck / f"{name}.pt", edit)
    evil = _Evil(env.root / "pwned")
    lm_state, mt_state = (
        torch.load(lm, weights_only=True),
        torch.load(mt, weights_only=True),
    )
    torch.save(evil, ck / "evil_top.pt")
    torch.save({**lm_state, "step": evil}, ck / "evil_lm.pt")
    torch.save(
        {**lm_state, "step": evil},
        ck / "evil_lm_legacy.pt",
        _use_new_zipfile_serialization=False,
    )
    torch.save({**mt_state, "epoch": evil}, ck / "evil_mt.pt")
    torch.save(
        {**mt_state, "epoch": evil},
        ck / "evil_mt_legacy.pt",
        _use_new_zipfile_serialization=False,
    )
    (ck / "evil_raw.pkl").write_bytes(pickle.dumps(evil))
    for name in ("evil_top", "evil_lm", "evil_lm_legacy", "evil_mt", "evil_mt_legacy"):
        f[name] = ck / f"{name}.pt"
    f["evil_raw"] = ck / "evil_raw.pkl"
    f["unreadable"] = ck / "unreadable.pt"
    shutil.copyfile(lm, f["unreadable"])
    f["unreadable"].chmod(0)
    return f


def copy_to(src: Path, folder: Path, name: str | None = None) -> Path:
    """A private copy of a fixture (attempts that may overwrite a checkpoint never touch
    the shared one)."""
    dest = folder / (name or src.name)
    shutil.copyfile(src, dest)
    return dest


def marker(env: Env) -> Path:
    """The file the malicious pickles would create."""
    return env.root / "pwned"


def nocaps_skip() -> str | None:
    """Why the rows that need a normal user's view of file modes cannot run here (None:
    they can)."""
    if os.geteuid() != 0:
        return None
    if shutil.which("setpriv") is None:
        return (
            "needs root without capabilities (setpriv not found); as root, chmod "
            "000/555 blocks nothing"
        )
    probe = subprocess.run(NOCAPS + ["true"], capture_output=True)
    return (
        None
        if probe.returncode == 0
        else "setpriv cannot drop capabilities here (no permission)"
    )


def cuda_skip() -> str | None:
    """Rows about a CPU-only torch cannot run where CUDA is present."""
    import torch

    return (
        "needs a CPU-only torch (this one has CUDA)"
        if torch.cuda.is_available()
        else None
    )


def big_text(n: int) -> str:
    """n characters of Tiny-Shakespeare-like text (only characters the char tokenizer
    knows)."""
    line = "ROMEO: But soft, what light through yonder window breaks?\n"
    return (line * (n // len(line) + 1))[:n]


#  -------------------------------------------------------------------------------------
# the attempts
@dataclass
class Attempt:
    """One attempt: its row number, area, the input as a user would type it, and how to
    run and judge it."""

    id: int
    area: int
    what: str
    run: Callable[[Env], Outcome]
    skip: Callable[[], str | None] | None = None


ATTEMPTS: list[Attempt] = []


def row(id: int, area: int, what: str, skip: Callable[[], str | None] | None = None):
    """Register the decorated function as attempt `id`."""

    def add(fn: Callable[[Env], Outcome]) -> Callable[[Env], Outcome]:
        ATTEMPTS.append(Attempt(id, area, what, fn, skip))
        return fn

    return add


def cli_row(
    id: int,
    what: str,
    make: Callable[[Env], list[str]],
    judge: Callable[[Result], Outcome],
    area: int = 1,
    timeout: float = 180,
    skip: Callable[[], str | None] | None = None,
    **kw,
) -> None:
    """Register a one-command attempt: run `make(env)` and apply `judge`."""

    def run(env: Env) -> Outcome:
        return judge(env.cli(make(env), timeout=timeout, **kw))

    row(id, area, what, skip)(run)


def multi_row(
    id: int,
    what: str,
    inputs: Callable[[Env], list[list[str]]],
    judge: Callable[[Result], Outcome],
    area: int = 1,
    **kw,
) -> None:
    """Register an attempt of several commands, judged each, kept at the worst."""
    row(id, area, what)(
        lambda env: worst([judge(env.cli(a, **kw)) for a in inputs(env)])
    )


def _generated(r: Result) -> str | None:
    return None if r.out.strip() else "rc 0 but no text on stdout"


# ---- 1 CLI input: generate
cli_row(
    1,
    "G --prompt ''",
    lambda e: G(e, "--prompt", ""),
    lambda r: succeeded(r, _generated),
)
cli_row(
    2,
    "G --prompt 'ROMEO: 😀'",
    lambda e: G(e, "--prompt", "ROMEO: 😀"),
    lambda r: refused(r, "😀"),
)
cli_row(
    3,
    "G --prompt '你好，世界'",
    lambda e: G(e, "--prompt", "你好，世界"),
    lambda r: refused(r, "你"),
)


@row(4, 1, "G --prompt-file 1MB.txt, and the same 1 MB on stdin (--prompt-file -)")
def _r4(env: Env) -> Outcome:
    folder = env.fresh("prompt")
    (folder / "1MB.txt").write_text(big_text(1_000_000))
    return worst(
        [
            succeeded(
                env.cli(G(env, "--prompt-file", "1MB.txt"), cwd=folder), _generated
            ),
            succeeded(
                env.cli(G(env, "--prompt-file", "-"), stdin=big_text(1_000_000)),
                _generated,
            ),
        ]
    )


cli_row(
    5,
    'G --prompt "$(cat 120KB.txt)"',
    lambda e: G(e, "--prompt", big_text(120_000)),
    lambda r: succeeded(
        r,
        lambda r: (
            None if re.search(r"context", r.err) else "no note that the prompt was cut"
        ),
    ),
)
cli_row(6, "G --max-new-tokens 0", lambda e: G(e, "--max-new-tokens", "0"), succeeded)
cli_row(
    7,
    "G --max-new-tokens -5",
    lambda e: G(e, "--max-new-tokens", "-5"),
    lambda r: refused(r, "max-new-tokens"),
)


@row(
    8,
    1,
    "G --max-new-tokens 1000000000 (timeout 25 s): refused, or text streamed "
    "as it is made",
)
def _r8(env: Env) -> Outcome:
    r = env.cli(G(env, "--max-new-tokens", "1000000000"), timeout=25)
    if not r.timed_out:
        return refused(r, "max-new-tokens")
    return (
        ("PASS", "streamed before the timeout")
        if len(r.out) > len("ROMEO")
        else ("WEAK", "nothing streamed in 25 s; an interrupt loses everything")
    )


cli_row(9, "G --temperature 0", lambda e: G(e, "--temperature", "0"), succeeded)
cli_row(
    10,
    "G --temperature -1",
    lambda e: G(e, "--temperature", "-1"),
    lambda r: refused(r, "temperature"),
)
cli_row(
    11,
    "G --temperature 1e-30",
    lambda e: G(e, "--temperature", "1e-30"),
    lambda r: either(r, "temperature"),
)
cli_row(
    12,
    "G --temperature 1e-40",
    lambda e: G(e, "--temperature", "1e-40"),
    lambda r: either(r, "temperature"),
)
cli_row(
    13,
    "G --temperature nan",
    lambda e: G(e, "--temperature", "nan"),
    lambda r: refused(r, "temperature"),
)
cli_row(
    14,
    "G --temperature inf",
    lambda e: G(e, "--temperature", "inf"),
    lambda r: refused(r, "temperature"),
)
cli_row(15, "G --top-k 0", lambda e: G(e, "--top-k", "0"), succeeded)
cli_row(
    16, "G --top-k -3", lambda e: G(e, "--top-k", "-3"), lambda r: refused(r, "top-k")
)
cli_row(17, "G --top-k 1000000000", lambda e: G(e, "--top-k", "1000000000"), succeeded)
multi_row(
    18,
    "G --top-p 0 / 1.5 / nan",
    lambda e: [G(e, "--top-p", v) for v in ("0", "1.5", "nan")],
    lambda r: refused(r, "top-p"),
)
cli_row(19, "G --top-p 1e-9", lambda e: G(e, "--top-p", "1e-9"), succeeded)
cli_row(20, "G --seed -1", lambda e: G(e, "--seed", "-1"), lambda r: either(r, "seed"))
cli_row(
    21,
    "G --seed 100000000000000000000000",
    lambda e: G(e, "--seed", "100000000000000000000000"),
    lambda r: refused(r, "seed"),
)
row(22, 1, "G --device cuda (CPU-only torch)", cuda_skip)(
    lambda e: refused(e.cli(G(e, "--device", "cuda")), "cuda", "cpu")
)
cli_row(
    23,
    "G --device foo",
    lambda e: G(e, "--device", "foo"),
    lambda r: refused(r, "foo", "cpu"),
)
cli_row(
    24,
    "G --checkpoint ck/nope.pt (nonexistent)",
    lambda e: G(e, "--checkpoint", str(e.fix / "nope.pt")),
    lambda r: refused(r, "nope.pt"),
)
cli_row(
    25,
    "G --checkpoint ck/adir.pt (a directory)",
    lambda e: G(e, "--checkpoint", str(crafted(e)["adir"])),
    lambda r: refused(r, "adir"),
)
row(
    26,
    1,
    "NC G --checkpoint unreadable.pt (mode 000, capabilities dropped)",
    nocaps_skip,
)(
    lambda e: refused(
        e.cli(G(e, "--checkpoint", str(crafted(e)["unreadable"])), nocaps=True),
        "unreadable|permission",
    )
)
cli_row(
    27,
    "G --checkpoint runs/mt/quick.pt (a translator checkpoint)",
    lambda e: G(e, "--checkpoint", str(mt_ckpt(e))),
    lambda r: refused(r, "translat"),
)

# ---- 1 CLI input: translate
multi_row(
    28,
    "T '' / T (no sentence) / T '   ' ''",
    lambda e: [T(e, ""), T(e), T(e, "   ", "")],
    lambda r: refused(r, "nothing to translate|sentence"),
)
cli_row(
    29,
    "T 'Hello 😀'",
    lambda e: T(e, "Hello 😀"),
    lambda r: succeeded(r, lambda r: None if "😀" in r.err else "no note about '😀'"),
)
cli_row(
    30,
    "T '你好，世界'",
    lambda e: T(e, "你好，世界"),
    lambda r: succeeded(
        r, lambda r: None if "你" in r.err else "no note about the unseen characters"
    ),
)
cli_row(
    31,
    'T "$(cat 120KB.txt)"',
    lambda e: T(e, big_text(120_000).replace("\n", " ")),
    lambda r: succeeded(
        r,
        lambda r: (
            None
            if len(r.err) < 5000
            else f"{len(r.err)} characters on stderr (the sentence is echoed in full)"
        ),
    ),
)
cli_row(
    32,
    "T --beam-size 0 Hello.",
    lambda e: T(e, "--beam-size", "0", "Hello."),
    lambda r: refused(r, "beam"),
)
cli_row(
    33,
    "T --beam-size -2 Hello.",
    lambda e: T(e, "--beam-size", "-2", "Hello."),
    lambda r: refused(r, "beam"),
)
multi_row(
    34,
    "T --beam-size 1 / --beam-size 500",
    lambda e: [T(e, "--beam-size", v, "Hello.") for v in ("1", "500")],
    succeeded,
)
cli_row(
    35,
    "T --method sample --temperature 0",
    lambda e: T(e, "--method", "sample", "--temperature", "0", "Hello."),
    lambda r: either(r, "temperature"),
)
for _id, _t in ((36, "-1"), (37, "nan"), (38, "inf")):
    cli_row(
        _id,
        f"T --method sample --temperature {_t}",
        lambda e, t=_t: T(e, "--method", "sample", "--temperature", t, "Hello."),
        lambda r: refused(r, "temperature"),
    )
multi_row(
    39,
    "T --checkpoint nonexistent / empty / directory / truncated / random "
    "bytes / LM checkpoint",
    lambda e: [
        T(e, "--checkpoint", str(p), "Hello.")
        for p in (
            e.fix / "nope.pt",
            *(crafted(e)[k] for k in ("empty", "adir", "trunc_mt", "random")),
            lm_ckpt(e),
        )
    ],
    lambda r: refused(r, "checkpoint"),
)
row(40, 1, "NC T --checkpoint unreadable.pt", nocaps_skip)(
    lambda e: refused(
        e.cli(
            T(e, "--checkpoint", str(crafted(e)["unreadable"]), "Hello."), nocaps=True
        ),
        "unreadable|permission",
    )
)
multi_row(
    41,
    "PM (no command) / PM frobnicate / train-lm --preset huge / generate "
    "without --checkpoint / "
    "translate --method foo / G --max-new-tokens abc / L --batch-size 1.5",
    lambda e: [
        [],
        ["frobnicate"],
        ["train-lm", "--preset", "huge"],
        ["generate"],
        ["translate", "--method", "foo", "Hello."],
        G(e, "--max-new-tokens", "abc"),
        L("--batch-size", "1.5"),
    ],
    lambda r: refused(r, r"error"),
)

# ---- 1 CLI input: train-lm and train-mt
cli_row(
    42,
    "L --batch-size 0",
    lambda e: L("--batch-size", "0"),
    lambda r: refused(r, "batch-size"),
)
cli_row(
    43,
    "L --batch-size -4",
    lambda e: L("--batch-size", "-4"),
    lambda r: refused(r, "batch-size"),
)
cli_row(
    44,
    "(ulimit -v 8000000; L --batch-size 100000000)",
    lambda e: L("--batch-size", "100000000"),
    lambda r: refused(r, "memory|batch"),
    address_space=8_000_000 * 1024,
    timeout=240,
    skip=lambda: None if sys.platform == "linux" else "ulimit -v caps memory on Linux",
)
cli_row(
    45,
    "L --max-iters 0",
    lambda e: L("--max-iters", "0"),
    lambda r: either(r, "max-iters"),
)
cli_row(
    46,
    "L --max-iters -5",
    lambda e: L("--max-iters", "-5"),
    lambda r: refused(r, "max-iters"),
)
cli_row(
    47,
    "L --lr 0 --min-lr 0",
    lambda e: L("--lr", "0", "--min-lr", "0"),
    lambda r: either(r, "lr"),
)
multi_row(
    48,
    "L --lr -1 / L --lr nan",
    lambda e: [L("--lr", "-1"), L("--lr", "nan")],
    lambda r: refused(r, "lr"),
)
cli_row(
    49,
    "L --lr 1e10 --max-iters 20 --eval-interval 10",
    lambda e: L("--lr", "1e10", "--max-iters", "20", "--eval-interval", "10"),
    lambda r: refused(
        r, r"nan|finite|diverg", r"step", r"lr|learning rate", silent="FAIL"
    ),
)
cli_row(
    50,
    "L --eval-interval 0",
    lambda e: L("--eval-interval", "0"),
    lambda r: refused(r, "eval-interval"),
)
cli_row(
    51,
    "L --eval-interval -1",
    lambda e: L("--eval-interval", "-1"),
    lambda r: refused(r, "eval-interval"),
)
cli_row(
    52,
    "L --eval-windows 0",
    lambda e: L("--eval-windows", "0"),
    lambda r: refused(r, "eval-windows"),
)
cli_row(
    53,
    "L --eval-windows -1",
    lambda e: L("--eval-windows", "-1"),
    lambda r: refused(r, "eval-windows"),
)
cli_row(
    54,
    "L --warmup-steps -10 ",
    lambda e: L("--warmup-steps", "-10"),
    lambda r: refused(r, "warmup"),
)
cli_row(
    55,
    "L --model n_heads=5",
    lambda e: L("--model", "n_heads=5"),
    lambda r: refused(r, "n_heads"),
)
cli_row(
    56,
    "L --model n_heads=0",
    lambda e: L("--model", "n_heads=0"),
    lambda r: refused(r, "n_heads"),
)
cli_row(
    57,
    "L --model foo=1",
    lambda e: L("--model", "foo=1"),
    lambda r: refused(r, "foo", "d_model"),
)
cli_row(
    58,
    "L --model dropout (no =)",
    lambda e: L("--model", "dropout"),
    lambda r: refused(r, "KEY=VALUE"),
)
cli_row(
    59,
    "L --model context_len=0",
    lambda e: L("--model", "context_len=0"),
    lambda r: refused(r, "context_len"),
)
cli_row(
    60,
    "L --model context_len=2000000",
    lambda e: L("--model", "context_len=2000000"),
    lambda r: refused(r, "context"),
)
multi_row(
    61,
    "L --model dropout=1.5 / --model norm=batch",
    lambda e: [L("--model", "dropout=1.5"), L("--model", "norm=batch")],
    lambda r: refused(r, "dropout|norm"),
)
multi_row(
    62,
    "L --tokenizer bpe --bpe-vocab 0 / --bpe-vocab 10",
    lambda e: [L("--tokenizer", "bpe", "--bpe-vocab", v) for v in ("0", "10")],
    lambda r: refused(r, "bpe-vocab|256"),
)
row(63, 1, "L --device cuda (CPU-only torch)", cuda_skip)(
    lambda e: refused(e.cli(L("--device", "cuda")), "cuda", "cpu")
)
cli_row(
    64,
    "L --device foo",
    lambda e: L("--device", "foo"),
    lambda r: refused(r, "foo", "cpu"),
)
multi_row(
    65,
    "L --stop-at 0 / L --time-budget -1",
    lambda e: [L("--stop-at", "0"), L("--time-budget", "-1")],
    lambda r: either(r, "stop-at|time-budget"),
)
cli_row(
    66, "L --resume (no --out)", lambda e: L("--resume"), lambda r: refused(r, "--out")
)
cli_row(
    67,
    "L --resume --out ck/none.pt",
    lambda e: L("--resume", "--out", str(e.fix / "none.pt")),
    lambda r: refused(r, "none.pt"),
)


@row(68, 1, "L --out ck/new/deep/dir/x.pt (folder does not exist)")
def _r68(env: Env) -> Outcome:
    folder = env.fresh("deep")
    out = folder / "new" / "deep" / "dir" / "x.pt"
    return succeeded(
        env.cli(L("--out", str(out)), cwd=folder),
        lambda r: None if out.is_file() else "no checkpoint",
    )


row(
    69,
    1,
    "L --compile (CPU, gcc present)",
    lambda: (
        None
        if shutil.which("gcc") or shutil.which("cc")
        else "needs a C compiler for torch.compile"
    ),
)(lambda e: succeeded(e.cli(L("--compile"), timeout=420)))


@row(
    70,
    1,
    "L --tokenizer bpe --bpe-vocab 300 --out bpe.pt, then generate --prompt "
    "'ROMEO 😀 你好' and ''",
)
def _r70(env: Env) -> Outcome:
    folder = env.fresh("bpe")
    r = env.cli(
        L("--tokenizer", "bpe", "--bpe-vocab", "300", "--out", "bpe.pt"),
        cwd=folder,
        timeout=300,
    )
    if r.rc != 0 or crashed(r):
        return succeeded(r)
    gen = ["generate", "--checkpoint", "bpe.pt", "--max-new-tokens", "20", "--prompt"]
    return worst(
        [succeeded(env.cli(gen + [p], cwd=folder)) for p in ("ROMEO 😀 你好", "")]
    )


multi_row(
    71,
    "M --epochs 0 / M --epochs -1",
    lambda e: [M("--epochs", "0"), M("--epochs", "-1")],
    lambda r: refused(r, "epochs"),
)
cli_row(
    72,
    "M --max-minutes 0",
    lambda e: M("--max-minutes", "0"),
    lambda r: either(r, "max-minutes"),
)
cli_row(
    73,
    "M --max-minutes nan (refused before training)",
    lambda e: M("--max-minutes", "nan"),
    lambda r: (
        ("FAIL", "trained an epoch before refusing")
        if "epoch" in r.out and r.rc != 0 and not crashed(r)
        else refused(r, "max-minutes")
    ),
)


# ---- 2 Checkpoints
def _gck(name: str, *patterns: str, area: int = 2, what: str = "", id: int = 0) -> None:
    """Register `G --checkpoint <crafted name>`, refused naming `patterns`."""
    cli_row(
        id,
        what or f"G --checkpoint {name}.pt",
        lambda e: G(e, "--checkpoint", str(crafted(e)[name])),
        lambda r: refused(r, *patterns),
        area=area,
    )


def _no_unsafe_advice(o: Outcome, r: Result) -> Outcome:
    """FAIL a message that tells the user to load with weights_only=False."""
    if "weights_only set to False" in r.err or "weights_only=False" in r.err:
        return (
            "FAIL",
            "the message advises weights_only=False (the unsafe load): " + r.last_err(),
        )
    return o


_gck("empty", "empty|checkpoint", id=74, what="G --checkpoint empty.pt (0 bytes)")
_gck("trunc_lm", "checkpoint", id=75, what="G --checkpoint trunc_lm.pt (first 40%)")
cli_row(
    76,
    "G --checkpoint random.pt (300 kB of random bytes)",
    lambda e: G(e, "--checkpoint", str(crafted(e)["random"])),
    lambda r: _no_unsafe_advice(refused(r, "checkpoint"), r),
    area=2,
)
multi_row(
    77,
    "T --checkpoint trunc_mt.pt / random.pt / empty.pt",
    lambda e: [
        T(e, "--checkpoint", str(crafted(e)[k]), "Hello.")
        for k in ("trunc_mt", "random", "empty")
    ],
    lambda r: refused(r, "checkpoint"),
    area=2,
)
_gck("dict", "checkpoint", id=78, what="G on torch.save({'foo': 1})")
_gck("list", "checkpoint", id=79, what="G on torch.save([1, 2, 3])")
_gck("tensor", "checkpoint", id=80, what="G on torch.save(torch.zeros(3))")
_gck(
    "lm_vocab100",
    "vocab|size",
    id=81,
    what="G on an LM checkpoint with config.vocab_size=100 (weights 65)",
)
_gck(
    "lm_dmodel64",
    "d_model|size|shape",
    id=82,
    what="G on an LM checkpoint with config.d_model=64 (weights 32)",
)
_gck(
    "lm_no_tokemb",
    "tok_emb",
    id=83,
    what="G on an LM checkpoint missing tok_emb.weight",
)
_gck(
    "lm_tok66",
    "vocab|tokenizer",
    id=84,
    what="G on an LM checkpoint whose tokenizer has 66 characters, model 65",
)
_gck(
    "lm_tok10",
    "vocab|tokenizer",
    id=85,
    what="G on an LM checkpoint whose tokenizer has 10 characters, model 65",
)
_gck(
    "lm_rope",
    "rope",
    id=86,
    what="G on an LM checkpoint with an unknown config key `rope`",
)
_gck("lm_nomodel", "model", id=87, what="G on an LM checkpoint with no `model` key")
_gck("lm_tokNone", "tokenizer", id=88, what="G on an LM checkpoint with tokenizer=None")
_gck(
    "lm_configstr",
    "config",
    id=89,
    what="G on an LM checkpoint with config='gpt' (a string)",
)
multi_row(
    90,
    "T on {'foo': 1} / [1, 2, 3] / a tensor",
    lambda e: [
        T(e, "--checkpoint", str(crafted(e)[k]), "Hello.")
        for k in ("dict", "list", "tensor")
    ],
    lambda r: refused(r, "translator"),
    area=2,
)
for _id, _name, _pat, _what in (
    (91, "mt_d32", "d_model|size|shape", "config d_model 32 (weights 64)"),
    (92, "mt_tgt7", "vocab|size|shape", "config tgt_vocab_size + 7"),
    (93, "mt_nobest", "best_model", "no `best_model`"),
    (94, "mt_sentencepiece", "sentencepiece", "src tokenizer type 'sentencepiece'"),
    (95, "mt_extra", "foo", "an extra config key `foo`"),
):
    cli_row(
        _id,
        f"T on a translator checkpoint with {_what}",
        lambda e, n=_name: T(e, "--checkpoint", str(crafted(e)[n]), "Hello."),
        lambda r, p=_pat: refused(r, p),
        area=2,
    )


@row(96, 2, "train-lm --preset cpu --resume --out <tiny checkpoint>")
def _r96(env: Env) -> Outcome:
    out = copy_to(lm_ckpt(env), env.fresh("r96"))
    return refused(
        env.cli(L("--preset", "cpu", "--resume", "--out", str(out))), "d_model"
    )


@row(97, 2, "train-lm --tokenizer bpe --resume --out <char checkpoint>")
def _r97(env: Env) -> Outcome:
    out = copy_to(lm_ckpt(env), env.fresh("r97"))
    return refused(
        env.cli(L("--tokenizer", "bpe", "--resume", "--out", str(out)), timeout=300),
        "tokenizer|vocab",
    )


@row(
    98,
    2,
    "train-lm --resume --out <translator checkpoint> / train-mt --resume "
    "--out <LM checkpoint>",
)
def _r98(env: Env) -> Outcome:
    folder = env.fresh("r98")
    mt, lm = (
        copy_to(mt_ckpt(env), folder, "mt.pt"),
        copy_to(lm_ckpt(env), folder, "lm.pt"),
    )
    return worst(
        [
            refused(
                env.cli(L("--resume", "--out", str(mt))), "translat|config|differ|match"
            ),
            refused(
                env.cli(M("--resume", "--out", str(lm)), timeout=120),
                "language|LM|config|differ|match",
            ),
        ]
    )


@row(99, 2, "control: torch.load(evil_lm.pt, weights_only=False) runs the payload")
def _r99(env: Env) -> Outcome:
    import torch

    files = crafted(env)
    torch.load(
        files["evil_lm"], weights_only=False
    )  # the positive control: this must run `touch`
    ran = marker(env).exists()
    marker(env).unlink(missing_ok=True)
    return (
        ("PASS", "the payload ran: the files are malicious")
        if ran
        else ("FAIL", "the control payload did not run")
    )


EVIL_LM = ("evil_top", "evil_lm", "evil_lm_legacy", "evil_raw")
EVIL_MT = ("evil_top", "evil_mt", "evil_mt_legacy", "evil_raw")


def _nothing_ran(
    env: Env, judge: Callable[[Result], Outcome], runs: list[list[str]], **kw
) -> Outcome:
    """Run each command; FAIL if the marker appears, else `judge` each result."""
    outcomes = []
    for args in runs:
        r = env.cli(args, **kw)
        if marker(env).exists():
            marker(env).unlink()
            return "FAIL", f"the malicious pickle RAN ({' '.join(args[:3])} ...)"
        outcomes.append(judge(r))
    return worst(outcomes)


def _rc_nonzero(r: Result) -> Outcome:
    return (
        ("PASS", "refused") if r.rc != 0 else ("FAIL", "loaded a malicious file, rc 0")
    )


row(
    100,
    2,
    "G --checkpoint evil_top.pt / evil_lm.pt / evil_lm_legacy.pt / "
    "evil_raw.pkl: nothing runs",
)(
    lambda e: _nothing_ran(
        e, _rc_nonzero, [G(e, "--checkpoint", str(crafted(e)[k])) for k in EVIL_LM]
    )
)
row(101, 2, "the same 4 malicious files: the message generate shows")(
    lambda e: _nothing_ran(
        e,
        lambda r: _no_unsafe_advice(refused(r, "checkpoint"), r),
        [G(e, "--checkpoint", str(crafted(e)[k])) for k in EVIL_LM],
    )
)
row(102, 2, "T --checkpoint evil_top / evil_mt / evil_mt_legacy / evil_raw")(
    lambda e: _nothing_ran(
        e,
        lambda r: _no_unsafe_advice(refused(r, "checkpoint"), r),
        [T(e, "--checkpoint", str(crafted(e)[k]), "Hello.") for k in EVIL_MT],
    )
)


@row(
    103,
    2,
    "train-lm --resume --out evil_resume.pt; train-mt --quick --resume --out "
    "evil_mtresume.pt",
)
def _r103(env: Env) -> Outcome:
    folder = env.fresh("r103")
    lm, mt = (
        copy_to(crafted(env)["evil_lm"], folder),
        copy_to(crafted(env)["evil_mt"], folder),
    )
    return _nothing_ran(
        env,
        lambda r: _no_unsafe_advice(refused(r, "checkpoint"), r),
        [L("--resume", "--out", str(lm)), M("--resume", "--out", str(mt))],
        timeout=120,
    )


def _call_spans(text: str, name: str):
    """The argument text of each call `name(...)` in `text` (parentheses matched)."""
    for m in re.finditer(re.escape(name) + r"\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield text[m.end() : i - 1]


@row(
    104,
    2,
    "source audit: every torch.load in transformer_lib, tests, benchmarks "
    "passes weights_only=True",
)
def _r104(env: Env) -> Outcome:
    unsafe = []
    for folder in ("transformer_lib", "tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() == Path(__file__).resolve():
                # this harness loads a malicious file unsafely on purpose, as the
                # control of row 99
                continue
            for args in _call_spans(path.read_text(encoding="utf-8"), "torch.load"):
                if not re.search(r"weights_only\s*=\s*True", args):
                    unsafe.append(f"{path.relative_to(ROOT)}: torch.load({args[:60]})")
    return (
        ("FAIL", "; ".join(unsafe))
        if unsafe
        else ("PASS", "every call passes weights_only=True")
    )


@row(
    105,
    2,
    "dependency floor: torch>=X in pyproject.toml and requirements.txt is a "
    "torch where weights_only is safe",
)
def _r105(env: Env) -> Outcome:
    floors = {}
    for name in ("pyproject.toml", "requirements.txt"):
        m = re.search(
            r"torch\s*>=\s*([0-9]+)\.([0-9]+)",
            (ROOT / name).read_text(encoding="utf-8"),
        )
        floors[name] = (int(m.group(1)), int(m.group(2))) if m else None
    low = {k: v for k, v in floors.items() if v is None or v < (2, 6)}
    if low:
        return "FAIL", (
            "floor below 2.6, where weights_only=True can be bypassed "
            "(CVE-2025-32434): "
            + ", ".join(
                f"{k} {'.'.join(map(str, v)) if v else 'no floor'}"
                for k, v in low.items()
            )
        )
    return "PASS", ", ".join(
        f"{k} >= {'.'.join(map(str, v))}" for k, v in floors.items()
    )


# ---- 3 Training faults
def _load(path: Path) -> dict | None:
    """The checkpoint's dict, or None when it cannot be read (weights_only=True)."""
    import torch

    try:
        return torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001 - unreadable is the answer
        return None


def _tmp_files(out: Path) -> list[Path]:
    """Temp files a save of `out` leaves beside it."""
    return sorted(out.parent.glob(f".{out.name}.*.tmp"))


def _same_weights(a: dict, b: dict, key: str = "model") -> str | None:
    """None when the two checkpoints hold bit-identical `key` weights; else what
    differs."""
    import torch

    if a is None or b is None:
        return "a checkpoint is missing or unreadable"
    diff = [k for k in a[key] if not torch.equal(a[key][k], b[key][k])]
    return f"{key} differs in {diff[:3]}" if diff else None


def _new_save(out: Path, delay: float) -> Callable[[subprocess.Popen], None]:
    """A trigger: once `out` is (re)written after the start, wait `delay` s, then kill
    -9."""

    def trigger(p: subprocess.Popen) -> None:
        before = out.stat().st_mtime_ns if out.exists() else None
        wait_for(lambda: out.exists() and out.stat().st_mtime_ns != before, 120, p)
        time.sleep(delay)
        kill_group(p)

    return trigger


def _temp_appears(out: Path, delay: float) -> Callable[[subprocess.Popen], None]:
    """A trigger: once a save's temp file exists, wait `delay` s, then kill -9 (the
    write is caught midway)."""

    def trigger(p: subprocess.Popen) -> None:
        wait_for(lambda: bool(_tmp_files(out)), 120, p, poll=0.0005)
        time.sleep(delay)
        kill_group(p)

    return trigger


def kill_runs(
    env: Env, base: list[str], out: Path, triggers: list, cwd: Path
) -> list[str]:
    """Run `base` (+ --resume once `out` exists) under each trigger; complaints about
    the checkpoint after each kill."""
    problems = []
    for trigger in triggers:
        p = env.popen(base + (["--resume"] if out.exists() else []), cwd)
        trigger(p)
        p.communicate()
        if out.exists() and _load(out) is None:
            problems.append("the checkpoint was left unreadable by a kill")
    return problems


def finish(env: Env, base: list[str], out: Path, cwd: Path) -> Result:
    """Run `base` to the end, resuming when `out` exists."""
    return env.cli(base + (["--resume"] if out.exists() else []), cwd=cwd, timeout=300)


def _lm_kill(env: Env, iters: int, interval: int, delays: list[float]) -> Outcome:
    """An uninterrupted run against one killed after saves and resumed: same weights and
    history?"""
    folder = env.fresh("kill-lm")
    base = L("--max-iters", str(iters), "--eval-interval", str(interval))
    ref = env.cli(base + ["--out", str(folder / "ref.pt")], cwd=folder)
    out = folder / "k.pt"
    problems = kill_runs(
        env,
        base + ["--out", str(out)],
        out,
        [_new_save(out, d) for d in delays],
        folder,
    )
    r = finish(env, base + ["--out", str(out)], out, folder)
    if crashed(r) or r.rc != 0 or ref.rc != 0:
        return (
            crashed(r)
            or crashed(ref)
            or ("FAIL", f"rc {r.rc}/{ref.rc}: {r.last_err()}")
        )
    a, b = _load(folder / "ref.pt"), _load(out)
    problems += [p for p in (_same_weights(a, b),) if p]
    if (
        a
        and b
        and [h["val_loss"] for h in a["history"]]
        != [h["val_loss"] for h in b["history"]]
    ):
        problems.append("validation history differs")
    return (
        ("FAIL", "; ".join(problems))
        if problems
        else ("PASS", f"{len(delays)} kills, bit-identical")
    )


row(
    106,
    3,
    "kill -9 train-lm (tiny, 60 iters, eval every 10) after a save, resume: "
    "same weights",
)(lambda e: _lm_kill(e, 60, 10, [0.0]))
row(
    107,
    3,
    "tiny, 120 iters, eval every 20, 3 kills -9 at 0-0.3 s after saves: "
    "bit-identical to uninterrupted",
)(lambda e: _lm_kill(e, 120, 20, [0.0, 0.15, 0.3]))


def _killwrite_lm(env: Env) -> dict[int, Outcome]:
    """Rows 108-110: kill -9 preset cpu while its checkpoint is being written; then
    resume and look for litter."""
    folder = env.fresh("killwrite-lm")
    out = folder / "lm.pt"
    base = [
        "train-lm",
        "--preset",
        "cpu",
        "--no-progress",
        "--max-iters",
        "30",
        "--eval-interval",
        "3",
        "--eval-windows",
        "1",
        "--out",
        str(out),
    ]
    p108 = kill_runs(
        env, base, out, [_temp_appears(out, 0.0) for _ in range(6)], folder
    )
    p109 = kill_runs(
        env,
        base,
        out,
        [_temp_appears(out, d) for d in (0.002, 0.01, 0.03, 0.1)],
        folder,
    )
    left = len(_tmp_files(out))
    r = finish(env, base, out, folder)
    after = _tmp_files(out)
    o110 = crashed(r) or (
        ("FAIL", f"the resumed run failed, rc {r.rc}: {r.last_err()}")
        if r.rc
        else (
            ("WEAK", f"{len(after)} temp files remain (of {left} after the kills)")
            if after
            else ("PASS", f"{left} temp files after the kills, none after the next run")
        )
    )
    return {
        108: ("FAIL", "; ".join(p108))
        if p108
        else ("PASS", "always absent or readable"),
        109: ("FAIL", "; ".join(p109))
        if p109
        else ("PASS", "always absent or readable"),
        110: o110,
    }


for _id, _what in (
    (
        108,
        "kill -9 train-lm --preset cpu the instant a checkpoint temp file "
        "appears (6 times)",
    ),
    (109, "kill -9 during the write, 2-100 ms after the temp file appears (4 times)"),
    (110, "temp files after those kills are removed by the next run"),
):
    row(_id, 3, _what)(
        lambda e, i=_id: e.memo("killwrite-lm", lambda: _killwrite_lm(e))[i]
    )


def _mt_kill(env: Env, trigger_of, n: int, compare: bool) -> Outcome:
    """train-mt --quick --epochs 4 killed `n` times, then finished; compared with an
    uninterrupted run."""
    folder = env.fresh("kill-mt")
    out = folder / "k.pt"
    base = M("--epochs", "4", "--out", str(out))
    problems = kill_runs(
        env, base, out, [trigger_of(out, 0.05 * i) for i in range(n)], folder
    )
    r = finish(env, base, out, folder)
    if crashed(r) or r.rc != 0:
        return crashed(r) or ("FAIL", f"rc {r.rc}: {r.last_err()}")
    if compare:
        ref = env.cli(
            M("--epochs", "4", "--out", str(folder / "ref.pt")), cwd=folder, timeout=300
        )
        a, b = _load(folder / "ref.pt"), _load(out)
        problems += (
            [p for p in (_same_weights(a, b), _same_weights(a, b, "best_model")) if p]
            if ref.rc == 0
            else [f"the uninterrupted run failed: {ref.last_err()}"]
        )
        if (
            a
            and b
            and [h["valid_loss"] for h in a["history"]]
            != [h["valid_loss"] for h in b["history"]]
        ):
            problems.append("validation history differs")
    return (
        ("FAIL", "; ".join(problems))
        if problems
        else ("PASS", f"{n} kills, checkpoint always readable")
    )


row(
    111,
    3,
    "kill -9 train-mt --quick --epochs 4 three times after epoch saves, "
    "rerun: bit-identical",
)(lambda e: _mt_kill(e, _new_save, 3, compare=True))
row(
    112, 3, "kill -9 train-mt during the checkpoint write (4 times): never half-written"
)(lambda e: _mt_kill(e, _temp_appears, 4, compare=False))


@row(
    113,
    3,
    "Ctrl-C (SIGINT) train-lm 1 s after a save: saves at the next step, exits "
    "with a message",
)
def _r113(env: Env) -> Outcome:
    folder = env.fresh("sigint")
    out = folder / "s.pt"
    p = env.popen(
        L("--max-iters", "100000", "--eval-interval", "50", "--out", str(out)), folder
    )
    wait_for(out.exists, 120, p)
    time.sleep(1.0)
    sent = time.time()
    os.killpg(p.pid, signal.SIGINT)
    try:
        stdout, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        kill_group(p)
        return "FAIL", "still running 30 s after SIGINT"
    if TRACEBACK in err:
        return "FAIL", f"traceback: {err.strip().splitlines()[-1][:200]}"
    saved = out.exists() and out.stat().st_mtime > sent - 0.01
    if not saved:
        return (
            "WEAK",
            "no save at the interrupt (the steps since the last evaluation are lost)",
        )
    said = re.search(r"interrupt|resume|stopp", stdout + err, re.I)
    return (
        ("PASS", f"rc {p.returncode}, saved")
        if said
        else ("WEAK", "saved, but no message")
    )


@row(
    114,
    3,
    "train-lm ... --out buf.pt > log, kill -9 after 3 saves: the log shows "
    "the checkpoint's progress",
)
def _r114(env: Env) -> Outcome:
    folder = env.fresh("log")
    out = folder / "buf.pt"
    with open(folder / "log", "w") as log:
        p = env.popen(
            L("--max-iters", "100000", "--eval-interval", "10", "--out", str(out)),
            folder,
            stdout=log,
        )
        for _ in range(3):
            before = out.stat().st_mtime_ns if out.exists() else None
            wait_for(lambda: out.exists() and out.stat().st_mtime_ns != before, 60, p)
        kill_group(p)
        p.communicate()
    state = _load(out)
    steps = [int(s) for s in re.findall(r"step\s+(\d+)", (folder / "log").read_text())]
    if state is None:
        return "FAIL", "no readable checkpoint"
    if not steps or max(steps) < state["step"]:
        return (
            "WEAK",
            f"checkpoint at step {state['step']}, log at step "
            f"{max(steps, default=0)} (buffered)",
        )
    return "PASS", f"log at step {max(steps)}, checkpoint at {state['step']}"


def _unchanged(path: Path, before: bytes) -> str | None:
    return (
        None if path.read_bytes() == before else "the existing checkpoint was changed"
    )


@row(
    115,
    3,
    "L --out keep.pt where keep.pt is a finished run (no --resume, no --restart)",
)
def _r115(env: Env) -> Outcome:
    out = copy_to(lm_ckpt(env), env.fresh("keep"), "keep.pt")
    before = out.read_bytes()
    o = refused(env.cli(L("--out", str(out))), "--resume", "--restart", silent="FAIL")
    lost = _unchanged(out, before)
    return ("FAIL", f"{lost}; {o[1]}") if lost else o


def _has_nan(state: dict | None) -> bool:
    import torch

    return state is not None and any(
        not torch.isfinite(t).all()
        for t in state["model"].values()
        if t.is_floating_point()
    )


@row(
    116,
    3,
    "train-lm --lr 1e10 (fresh --out, and --resume on a good checkpoint): "
    "divergence stops, nothing NaN saved",
)
def _r116(env: Env) -> Outcome:
    folder = env.fresh("nan")
    fresh, keep = folder / "fresh.pt", copy_to(lm_ckpt(env), folder, "keep2.pt")
    before = keep.read_bytes()
    outcomes = [
        refused(
            env.cli(
                L(
                    "--lr",
                    "1e10",
                    "--max-iters",
                    "20",
                    "--eval-interval",
                    "10",
                    "--out",
                    str(fresh),
                )
            ),
            r"nan|finite|diverg",
            silent="FAIL",
        )
    ]
    if _has_nan(_load(fresh)):
        outcomes.append(("FAIL", "a checkpoint with NaN weights was saved"))
    r = env.cli(
        L(
            "--lr",
            "1e10",
            "--max-iters",
            "80",
            "--eval-interval",
            "10",
            "--resume",
            "--out",
            str(keep),
        )
    )
    outcomes.append(refused(r, r"nan|finite|diverg|lr", silent="FAIL"))
    if _unchanged(keep, before) and _has_nan(_load(keep)):
        outcomes.append(("FAIL", "NaN weights saved over the good checkpoint"))
    return worst(outcomes)


@row(
    117,
    3,
    "--resume with --batch-size 4 --lr 0.05 (trained with 16 / default): "
    "refused naming both; "
    "--resume with only a larger --max-iters: extends",
)
def _r117(env: Env) -> Outcome:
    folder = env.fresh("extend")
    out = copy_to(lm_ckpt(env), folder, "extend.pt")
    base = [
        "train-lm",
        "--preset",
        "tiny",
        "--no-progress",
        "--eval-interval",
        "10",
        "--eval-windows",
        "2",
    ]
    changed = refused(
        env.cli(
            base
            + [
                "--max-iters",
                "40",
                "--batch-size",
                "4",
                "--lr",
                "0.05",
                "--resume",
                "--out",
                str(out),
            ]
        ),
        "batch",
        "lr",
    )
    extend = succeeded(
        env.cli(base + ["--max-iters", "30", "--resume", "--out", str(out)]),
        lambda r: (
            None
            if (_load(out) or {}).get("step") == 30
            else "the run did not reach step 30"
        ),
    )
    return worst([changed, extend])


@row(118, 3, "two train-lm runs writing the same --out at once: lock or warning")
def _r118(env: Env) -> Outcome:
    folder = env.fresh("two")
    args = L(
        "--max-iters", "200", "--eval-interval", "10", "--out", str(folder / "same.pt")
    )
    a = env.popen(args, folder)
    time.sleep(0.5)
    b = env.popen(args, folder)
    (_, ea), (_, eb) = a.communicate(timeout=300), b.communicate(timeout=300)
    if TRACEBACK in ea + eb:
        return "FAIL", "traceback"
    if (
        a.returncode
        or b.returncode
        or re.search(r"lock|already|another|running", ea + eb, re.I)
    ):
        return "PASS", "one run refused or warned"
    return "FAIL", "both ran to the end, no warning: one run's work is lost"


def _before_training(r: Result, *patterns: str) -> Outcome:
    """Refused naming `patterns`, and before any training (no step or epoch line
    printed)."""
    o = refused(r, *patterns, silent="FAIL")
    if o[0] == "PASS" and re.search(r"^(step|epoch)\s", r.out, re.M):
        return "FAIL", "refused only after training: " + o[1]
    return o


def _ro_folder(env: Env) -> Path:
    folder = env.fresh("ro")
    (folder / "ro").mkdir()
    (folder / "ro").chmod(0o555)
    return folder / "ro"


row(119, 3, "NC L --out ro/x.pt (folder mode 555, capabilities dropped)", nocaps_skip)(
    lambda e: _before_training(
        e.cli(L("--out", str(_ro_folder(e) / "x.pt")), nocaps=True),
        r"ro|writ|permission",
    )
)
row(120, 3, "NC L --out ro/sub/x.pt (the folder cannot be created)", nocaps_skip)(
    lambda e: _before_training(
        e.cli(L("--out", str(_ro_folder(e) / "sub" / "x.pt")), nocaps=True),
        r"sub|writ|permission|create",
    )
)
row(121, 3, "L --out ck/adir.pt (the path is a directory)")(
    lambda e: _before_training(
        e.cli(L("--out", str(crafted(e)["adir"]))), r"adir|director|folder"
    )
)
row(122, 3, "NC M --out ro/t.pt (folder mode 555)", nocaps_skip)(
    lambda e: _before_training(
        e.cli(M("--out", str(_ro_folder(e) / "t.pt")), nocaps=True),
        r"ro|writ|permission",
    )
)
row(123, 3, "M --out ck/adir.pt (a directory)")(
    lambda e: _before_training(
        e.cli(M("--out", str(crafted(e)["adir"]))), r"director|folder"
    )
)


@row(
    124,
    3,
    "checkpoint modes under umask 022 (train-lm and train-mt): 0644 like other files",
)
def _r124(env: Env) -> Outcome:
    folder = env.fresh("modes")
    env.cli(L("--out", "m.pt"), cwd=folder, umask=0o022)
    env.cli(M("--out", "mm.pt"), cwd=folder, umask=0o022)
    modes = {
        n: (
            oct((folder / n).stat().st_mode & 0o777)
            if (folder / n).exists()
            else "missing"
        )
        for n in ("m.pt", "mm.pt")
    }
    bad = {n: m for n, m in modes.items() if m != "0o644"}
    return ("WEAK", f"modes {bad}") if bad else ("PASS", "both 0644")


def _finished_mt(env: Env, name: str) -> Path:
    return copy_to(mt_ckpt(env), env.fresh(name), "quick.pt")


row(125, 3, "M --schedule inverse_sqrt --resume on a cosine checkpoint")(
    lambda e: refused(
        e.cli(
            M(
                "--schedule",
                "inverse_sqrt",
                "--resume",
                "--out",
                str(_finished_mt(e, "r125")),
            )
        ),
        "schedule",
    )
)
row(126, 3, "M --epochs 4 --resume on a finished 2-epoch checkpoint: extends")(
    lambda e: succeeded(
        e.cli(
            M("--epochs", "4", "--resume", "--out", str(_finished_mt(e, "r126"))),
            timeout=300,
        )
    )
)
row(127, 3, "M --resume again on a finished checkpoint: nothing to do")(
    lambda e: succeeded(e.cli(M("--resume", "--out", str(_finished_mt(e, "r127")))))
)
row(
    128,
    3,
    "train-mt (full mode) --resume --out <quick checkpoint>: refused (killed "
    "after 90 s if it trains)",
)(
    lambda e: refused(
        e.cli(
            [
                "train-mt",
                "--no-progress",
                "--resume",
                "--out",
                str(_finished_mt(e, "r128")),
            ],
            timeout=90,
        ),
        "d_model|vocab|setting|config",
    )
)


# ---- 4 Data
SHAKESPEARE, CMN = "tinyshakespeare/input.txt", "cmn-eng/cmn.txt"


def _data_env(
    env: Env, name: str, mirror: str | None = MIRROR, online: bool = False
) -> tuple[Path, dict]:
    """A fresh data folder and the environment pointing at it (offline unless `online`;
    mirror or none)."""
    data = env.fresh_data(f"data-{name}-{random.randrange(10**6)}")
    extra = {"TRANSFORMER_DATA_DIR": str(data), "TRANSFORMER_DATA_MIRROR": mirror or ""}
    return data, {**extra, **({} if online else OFFLINE)}


def _flip(path: Path, at: int = 1000) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@row(
    129,
    4,
    "truncate data/tinyshakespeare/input.txt to 500 kB, then L (mirror set): "
    "detected, replaced",
)
def _r129(env: Env) -> Outcome:
    data, extra = _data_env(env, "129")
    os.truncate(data / SHAKESPEARE, 500_000)
    r = env.cli(L(), extra_env=extra)
    return succeeded(
        r,
        lambda r: (
            None
            if _sha(data / SHAKESPEARE) == _sha(Path(MIRROR) / SHAKESPEARE)
            else "the file was not replaced"
        ),
    )


@row(
    130,
    4,
    "same truncation, no mirror, offline, L: one message naming URL, path, "
    "sha256; bad file not used",
)
def _r130(env: Env) -> Outcome:
    data, extra = _data_env(env, "130", mirror=None)
    os.truncate(data / SHAKESPEARE, 500_000)
    return _before_training(
        env.cli(L(), extra_env=extra), "sha256", "http", "TRANSFORMER_DATA_MIRROR"
    )


@row(131, 4, "flip one byte of cmn.txt, offline, no mirror, M")
def _r131(env: Env) -> Outcome:
    data, extra = _data_env(env, "131", mirror=None)
    _flip(data / CMN)
    return _before_training(env.cli(M(), extra_env=extra), "sha256", "cmn")


@row(132, 4, "offline fetch-data, no mirror, two damaged files: reports every file")
def _r132(env: Env) -> Outcome:
    data, extra = _data_env(env, "132", mirror=None)
    os.truncate(data / SHAKESPEARE, 500_000)
    _flip(data / CMN)
    r = env.cli(["fetch-data"], extra_env=extra)
    bad = crashed(r)
    if bad:
        return bad
    if r.rc == 0:
        return "FAIL", "rc 0 with damaged files"
    named = [n for n in ("input.txt", "cmn.txt") if n in r.err + r.out]
    return (
        ("PASS", "both files reported")
        if len(named) == 2
        else ("WEAK", f"only {named} reported")
    )


@row(
    133,
    4,
    "rm input.txt; TRANSFORMER_DATA_MIRROR=/nonexistent/mirror, offline fetch-data",
)
def _r133(env: Env) -> Outcome:
    data, extra = _data_env(env, "133", mirror="/nonexistent/mirror")
    (data / SHAKESPEARE).unlink()
    r = env.cli(["fetch-data"], extra_env=extra)
    if crashed(r) or r.rc == 0:
        return crashed(r) or ("FAIL", "rc 0")
    if re.search("mirror", r.err) and re.search("fix", r.err, re.I):
        return "PASS", r.last_err()
    return "WEAK", "no mirror / fix advice: " + r.last_err()


@row(
    134,
    4,
    "the mirror holds a truncated input.txt (1000 bytes): refused, nothing written",
)
def _r134(env: Env) -> Outcome:
    mirror = env.fresh("badmirror")
    (mirror / "tinyshakespeare").mkdir()
    (mirror / SHAKESPEARE).write_bytes((Path(MIRROR) / SHAKESPEARE).read_bytes()[:1000])
    data, extra = _data_env(env, "134", mirror=str(mirror))
    (data / SHAKESPEARE).unlink()
    r = env.cli(["fetch-data"], extra_env=extra)
    if (data / SHAKESPEARE).exists():
        return "FAIL", "a bad file was written to the data folder"
    if crashed(r) or r.rc == 0:
        return crashed(r) or ("FAIL", "rc 0")
    return ("PASS", r.last_err()) if "sha256" in r.err else ("WEAK", r.last_err())


@row(
    135,
    4,
    "TRANSFORMER_DATA_MIRROR= (empty), offline, input.txt missing: treated as unset",
)
def _r135(env: Env) -> Outcome:
    data, extra = _data_env(env, "135", mirror="")
    (data / SHAKESPEARE).unlink()
    r = env.cli(["fetch-data"], extra_env=extra)
    if crashed(r) or r.rc == 0:
        return crashed(r) or ("FAIL", "rc 0")
    return (
        ("WEAK", "talks about a mirror: " + r.last_err())
        if re.search(r"^mirror:", r.err, re.M)
        else ("PASS", r.last_err())
    )


@row(136, 4, "data/tinyshakespeare/input.txt is a folder; fetch-data")
def _r136(env: Env) -> Outcome:
    data, extra = _data_env(env, "136")
    (data / SHAKESPEARE).unlink()
    (data / SHAKESPEARE).mkdir()
    return refused(env.cli(["fetch-data"], extra_env=extra), "input.txt")


@row(
    137,
    4,
    "TRANSFORMER_DATA_DIR is a file: the message blames the data folder, not "
    "the mirror",
)
def _r137(env: Env) -> Outcome:
    folder = env.fresh("ddfile")
    (folder / "afile").write_text("x")
    r = env.cli(
        ["fetch-data"],
        extra_env={"TRANSFORMER_DATA_DIR": str(folder / "afile"), **OFFLINE},
    )
    o = refused(r, "afile")
    if o[0] == "PASS" and re.search(r"^mirror:.*afile", r.err, re.M):
        return "WEAK", "blamed on the mirror: " + r.last_err()
    return o


row(
    138,
    4,
    "NC TRANSFORMER_DATA_DIR mode 555, files missing: the message blames the "
    "data folder",
    nocaps_skip,
)(lambda e: _r138(e))


def _r138(env: Env) -> Outcome:
    ro = _ro_folder(env)
    r = env.cli(
        ["fetch-data"],
        nocaps=True,
        extra_env={"TRANSFORMER_DATA_DIR": str(ro), **OFFLINE},
    )
    o = refused(r, "permission|writ")
    if o[0] == "PASS" and re.search(r"^mirror:.*ro", r.err, re.M):
        return "WEAK", "blamed on the mirror: " + r.last_err()
    return o


def _killfetch(env: Env) -> dict[int, Outcome]:
    """Rows 139-140: kill -9 fetch-data while it copies cmn.txt (3 times), then fetch
    again."""
    data, extra = _data_env(env, "139")
    problems = []
    for _ in range(3):
        (data / CMN).unlink(missing_ok=True)
        p = env.popen(["fetch-data"], env.fresh("kf"), extra_env=extra)
        _temp_appears(data / CMN, 0.0)(p)
        p.communicate()
        if (data / CMN).exists() and _sha(data / CMN) != _sha(Path(MIRROR) / CMN):
            problems.append("cmn.txt half-written")
    r = env.cli(["fetch-data"], extra_env=extra)
    left = _tmp_files(data / CMN)
    o140 = succeeded(
        r,
        lambda r: (
            None if _sha(data / CMN) == _sha(Path(MIRROR) / CMN) else "bad cmn.txt"
        ),
    )
    if o140[0] == "PASS" and left:
        o140 = ("PASS", f"recovered ({len(left)} temp files left from the kills)")
    return {
        139: ("FAIL", "; ".join(problems))
        if problems
        else ("PASS", "never half-written"),
        140: o140,
    }


row(
    139, 4, "kill -9 fetch-data while it copies cmn.txt (3 times): no half-written file"
)(lambda e: e.memo("killfetch", lambda: _killfetch(e))[139])
row(140, 4, "fetch-data after those kills: recovers")(
    lambda e: e.memo("killfetch", lambda: _killfetch(e))[140]
)


@row(141, 4, "flip one byte of cmn.txt, fetch-data with the mirror: detected, replaced")
def _r141(env: Env) -> Outcome:
    data, extra = _data_env(env, "141")
    _flip(data / CMN)
    return succeeded(
        env.cli(["fetch-data"], extra_env=extra),
        lambda r: (
            None if _sha(data / CMN) == _sha(Path(MIRROR) / CMN) else "not replaced"
        ),
    )


# ---- 5 API misuse (in this process)
def _lib():
    """The library pieces the API rows call, imported once (sampling helpers from their
    new home if present)."""
    import torch

    import transformer_lib.decoding as dec
    from transformer_lib import (
        attention,
        gpt,
        masks,
        multi_head,
        positional,
        seq2seq,
        tokenization,
    )

    try:
        from transformer_lib.sampling import filter_logits, sample_next
    except ImportError:
        filter_logits, sample_next = dec.filter_logits, gpt.sample_next
    return dict(
        torch=torch,
        dec=dec,
        attn=attention,
        gpt=gpt,
        masks=masks,
        mh=multi_head,
        pos=positional,
        s2s=seq2seq,
        tok=tokenization,
        filter_logits=filter_logits,
        sample_next=sample_next,
    )


def _api_rows() -> None:
    """Register rows 142-196."""
    import torch

    K = _lib()
    mh, G_, s2s, dec = K["mh"], K["gpt"], K["s2s"], K["dec"]
    r = torch.randn
    torch.manual_seed(0)
    mha = mh.MultiHeadAttention(32, 4)
    q = r(2, 5, 32)
    tiny = G_.GPT(G_.GPTConfig.tiny(vocab_size=65)).eval()
    tr = s2s.Transformer(s2s.Seq2SeqConfig.tiny(context_len=32)).eval()
    src = torch.randint(3, 20, (2, 6))
    pad = torch.ones(2, 5, dtype=torch.bool)
    pad[:, -2:] = False

    def mha_pad_square():
        m5 = torch.ones(5, 5, dtype=torch.bool)
        for i in range(1, 5):
            m5[i, 5 - i :] = (
                # sequence i hides its last i keys; read as (T_q, T_k) it hides them
                # from query i
                False
            )
        x = r(5, 5, 32)
        got, _ = mha(x, mask=m5)
        want, _ = mha(x, mask=m5[:, None, None, :])
        return torch.allclose(got, want, atol=1e-6)

    def cached(batch_in: int):
        cache = G_.KVCache(tiny.config, batch_size=2)
        return tiny(torch.zeros(batch_in, 3, dtype=torch.long), cache=cache)

    def kv_35():
        cache = G_.KVCache(tiny.config, 1)
        tiny(torch.zeros(1, 30, dtype=torch.long), cache=cache)
        return tiny(torch.zeros(1, 5, dtype=torch.long), cache=cache)

    ok_shape = lambda shape: (  # noqa: E731
        lambda v: tuple((v[0] if isinstance(v, tuple) else v).shape) == shape
    )  # noqa: E731
    entries = [
        (
            142,
            "MultiHeadAttention(32,4): query 2-D (5, 32)",
            lambda: mha(r(5, 32)),
            "query",
            None,
            {},
        ),
        (143, "MHA: query width 16", lambda: mha(r(2, 5, 16)), "query", None, {}),
        (
            144,
            "MHA: key batch 3, query batch 2",
            lambda: mha(q, r(3, 5, 32)),
            r"query.*key|key.*query",
            None,
            {},
        ),
        (
            145,
            "MHA: key T_k=5, value T_v=6 (and 6, 5)",
            lambda: (
                mha(q, r(2, 5, 32), r(2, 6, 32)),
                mha(q, r(2, 6, 32), r(2, 5, 32)),
            ),
            r"key.*value|value.*key",
            None,
            {"silent": "FAIL"},
        ),
        (
            146,
            "MHA: float64 input to an fp32 module",
            lambda: mha(q.double()),
            "dtype|float64|double",
            None,
            {},
        ),
        (
            147,
            "MHA: int64 input",
            lambda: mha(q.long()),
            "dtype|int64|long|float",
            None,
            {},
        ),
        (
            148,
            "MHA: float mask / int mask",
            lambda: (mha(q, mask=pad.float()[:, None, None]),),
            "bool",
            None,
            {},
        ),
        (
            149,
            "MHA: mask (6, 6) for T=5",
            lambda: mha(q, mask=torch.ones(6, 6, dtype=torch.bool)),
            r"\(6, 6\)",
            None,
            {},
        ),
        (
            150,
            "MHA: (B, T_k) padding mask not unsqueezed, B != T",
            lambda: mha(q, mask=pad),
            r"\(2, 5\)",
            None,
            {},
        ),
        (
            151,
            "MHA: (B, T) padding mask when B == T == 5",
            mha_pad_square,
            r"mask",
            lambda v: v is True,
            {},
        ),
        (
            152,
            "MultiHeadAttention(30, 4)",
            lambda: mh.MultiHeadAttention(30, 4),
            "divisible",
            None,
            {},
        ),
        (
            153,
            "MultiHeadAttention(32, 0)",
            lambda: mh.MultiHeadAttention(32, 0),
            "n_heads",
            None,
            {},
        ),
        (
            154,
            "MultiHeadAttention(-4, 2)",
            lambda: mh.MultiHeadAttention(-4, 2),
            "d_model",
            None,
            {},
        ),
        (
            155,
            "MHA: all-NaN / all-inf input",
            lambda: (
                mha(torch.full((2, 5, 32), float("nan"))),
                mha(torch.full((2, 5, 32), float("inf"))),
            ),
            "nan|finite",
            lambda v: True,
            {},
        ),
        (
            156,
            "MHA: T = 0",
            lambda: mha(r(2, 0, 32)),
            "empty|T",
            ok_shape((2, 0, 32)),
            {},
        ),
        (
            157,
            "split_heads on a 2-D tensor",
            lambda: mh.split_heads(r(5, 32), 4),
            r"shape|\(B",
            None,
            {},
        ),
        (
            158,
            "scaled_dot_product_attention / fast_: q D=8, k D=16",
            lambda: [
                f(r(2, 4, 8), r(2, 4, 16), r(2, 4, 8))
                for f in (
                    K["attn"].scaled_dot_product_attention,
                    K["attn"].fast_scaled_dot_product_attention,
                )
            ],
            r"8.*16|16.*8",
            None,
            {},
        ),
        (
            159,
            "scaled_dot_product_attention: k T=5, v T=6",
            lambda: K["attn"].scaled_dot_product_attention(
                r(2, 4, 8), r(2, 5, 8), r(2, 6, 8)
            ),
            r"5.*6|6.*5",
            None,
            {},
        ),
        (
            160,
            "GPTConfig(n_heads=5)",
            lambda: G_.GPTConfig(n_heads=5),
            "divisible",
            None,
            {},
        ),
        (
            161,
            "GPTConfig(n_heads=0)",
            lambda: G_.GPTConfig(n_heads=0),
            "n_heads",
            None,
            {},
        ),
        (
            162,
            "GPT(GPTConfig.tiny(vocab_size=0))",
            lambda: G_.GPT(G_.GPTConfig.tiny(vocab_size=0)),
            "vocab",
            None,
            {},
        ),
        (
            163,
            "GPT(GPTConfig.tiny(context_len=-1))",
            lambda: G_.GPT(G_.GPTConfig.tiny(context_len=-1)),
            "context",
            None,
            {},
        ),
        (
            164,
            "GPT forward, 33 tokens, context 32",
            lambda: tiny(torch.zeros(1, 33, dtype=torch.long)),
            "33",
            None,
            {},
        ),
        (
            165,
            "GPT forward, id 65 (= vocab) / id -1",
            lambda: [tiny(torch.tensor([[1, i]])) for i in (65, -1)],
            r"\[0, 65\)|65",
            None,
            {"raised": "FAIL"},
        ),
        (
            166,
            "GPT forward, float ids",
            lambda: tiny(torch.zeros(1, 4)),
            "integer|dtype|long",
            None,
            {},
        ),
        (
            167,
            "GPT forward, 1-D / 3-D ids",
            lambda: [
                tiny(torch.zeros(*s, dtype=torch.long)) for s in ((4,), (1, 2, 4))
            ],
            r"\(B, T\)|shape",
            None,
            {},
        ),
        (
            168,
            "GPT forward, targets (1, 3) for ids (1, 4)",
            lambda: tiny(
                torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long)
            ),
            r"\(1, 3\)",
            None,
            {},
        ),
        (
            169,
            "GPT forward, target id 99",
            lambda: tiny(torch.zeros(1, 4, dtype=torch.long), torch.full((1, 4), 99)),
            "99",
            None,
            {},
        ),
        (
            170,
            "GPT forward, T = 0",
            lambda: tiny(torch.zeros(1, 0, dtype=torch.long)),
            "empty",
            ok_shape((1, 0, 65)),
            {},
        ),
        (
            171,
            "GPT.generate: prompt id 70 / empty prompt / 1-D prompt",
            lambda: [
                _generate(tiny, x, 2)
                for x in (
                    torch.tensor([[70]]),
                    torch.zeros(1, 0, dtype=torch.long),
                    torch.zeros(3, dtype=torch.long),
                )
            ],
            r"\[0, 65\)|prompt",
            None,
            {},
        ),
        (
            172,
            "GPT.generate(max_new_tokens=-3)",
            lambda: _generate(tiny, torch.zeros(1, 2, dtype=torch.long), -3),
            "max_new_tokens",
            None,
            {},
        ),
        (
            173,
            "GPT.generate(temperature=nan)",
            lambda: _generate(
                tiny, torch.zeros(1, 2, dtype=torch.long), 2, temperature=float("nan")
            ),
            "temperature",
            None,
            {},
        ),
        (
            174,
            "GPT.generate(top_k=0)",
            lambda: _generate(tiny, torch.zeros(1, 2, dtype=torch.long), 2, top_k=0),
            "top_k",
            None,
            {},
        ),
        (
            175,
            "GPT.generate(float prompt)",
            lambda: _generate(tiny, torch.zeros(1, 2), 2),
            "integer|dtype|long",
            None,
            {},
        ),
        (
            176,
            "GPT forward with KVCache: 30 then 5 tokens (context 32)",
            kv_35,
            "35",
            None,
            {},
        ),
        (
            177,
            "GPT forward, input batch 1 with KVCache(batch_size=2)",
            lambda: cached(1),
            "batch",
            None,
            {},
        ),
        (
            178,
            "Seq2SeqConfig d_model 30, n_heads 4",
            lambda: s2s.Transformer(s2s.Seq2SeqConfig.tiny(d_model=30, n_heads=4)),
            "divisible",
            None,
            {},
        ),
        (
            179,
            "Transformer: source of 33 tokens (context 32)",
            lambda: tr(
                torch.ones(1, 33, dtype=torch.long), torch.ones(1, 3, dtype=torch.long)
            ),
            "33",
            None,
            {},
        ),
        (
            180,
            "Transformer: src id 20 (= vocab) / tgt id -1",
            lambda: [
                tr(torch.tensor([[1, 20]]), torch.ones(1, 2, dtype=torch.long)),
                tr(torch.ones(1, 2, dtype=torch.long), torch.tensor([[1, -1]])),
            ],
            r"\[0, 20\)",
            None,
            {},
        ),
        (
            181,
            "Transformer: float src",
            lambda: tr(torch.ones(1, 3), torch.ones(1, 3, dtype=torch.long)),
            "integer",
            None,
            {},
        ),
        (
            182,
            "Transformer: src batch 2, tgt batch 3",
            lambda: tr(
                torch.ones(2, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.long)
            ),
            "batch",
            None,
            {},
        ),
        (
            183,
            "Transformer: 1-D src",
            lambda: tr(
                torch.ones(4, dtype=torch.long), torch.ones(1, 2, dtype=torch.long)
            ),
            r"\(B, |shape",
            None,
            {},
        ),
        (
            184,
            "Transformer / greedy_decode: all-PAD source (every key masked)",
            lambda: (
                bool(
                    torch.isfinite(
                        tr(
                            torch.zeros(1, 4, dtype=torch.long),
                            torch.ones(1, 2, dtype=torch.long),
                        )
                    ).all()
                )
                and dec.greedy_decode(
                    tr, torch.zeros(1, 4, dtype=torch.long), 1, 2, max_len=5
                )
                is not None
            ),
            "pad",
            lambda v: v is True,
            {},
        ),
        (
            185,
            "beam_search(beam_size=0)",
            lambda: dec.beam_search(tr, src, 1, 2, beam_size=0),
            "beam",
            None,
            {},
        ),
        (
            186,
            "beam_search(beam_size=1000 > vocab 20)",
            lambda: dec.beam_search(tr, src, 1, 2, beam_size=1000, max_len=4),
            "beam",
            lambda v: isinstance(v, list),
            {},
        ),
        (
            187,
            "sample_decode(top_k=0)",
            lambda: dec.sample_decode(tr, src, 1, 2, top_k=0),
            "top_k",
            None,
            {},
        ),
        (
            188,
            "sample_decode(top_p=0) / (top_p=-1)",
            lambda: [dec.sample_decode(tr, src, 1, 2, top_p=p) for p in (0, -1)],
            "top_p",
            None,
            {},
        ),
        (
            189,
            "filter_logits(top_k=-1)",
            lambda: K["filter_logits"](r(2, 20), top_k=-1),
            "top_k",
            None,
            {},
        ),
        (
            190,
            "greedy_decode(max_len=0) (and sample_decode): zero new tokens",
            lambda: (
                dec.greedy_decode(tr, src, 1, 2, max_len=0)
                + dec.sample_decode(tr, src, 1, 2, max_len=0)
            ),
            "max_len",
            lambda v: all(len(x) == 0 for x in v),
            {"silent": "FAIL"},
        ),
        (
            191,
            "greedy_decode(max_len=-5)",
            lambda: dec.greedy_decode(tr, src, 1, 2, max_len=-5),
            "max_len",
            None,
            {},
        ),
        (
            192,
            "SinusoidalPositionalEncoding: offset -1 / T > context",
            lambda: [
                K["pos"].SinusoidalPositionalEncoding(32, 8)(r(1, t, 32), offset=o)
                for t, o in ((2, -1), (9, 0))
            ],
            "offset|context",
            None,
            {},
        ),
        (
            193,
            "padding_mask(1-D ids)",
            lambda: K["masks"].padding_mask(torch.ones(4, dtype=torch.long), 0),
            "shape",
            None,
            {},
        ),
        (194, "causal_mask(-1)", lambda: K["masks"].causal_mask(-1), "-1|T", None, {}),
        (
            195,
            "CharTokenizer: decode id 99 / encode an unknown character",
            lambda: [
                f()
                for f in (
                    lambda: K["tok"].CharTokenizer("abc").decode([99]),
                    lambda: K["tok"].CharTokenizer("abc").encode("z"),
                )
            ],
            "99|z",
            None,
            {},
        ),
        (
            196,
            "BPETokenizer().train(text, 100)",
            lambda: K["tok"].BPETokenizer().train("hello world", 100),
            "256",
            None,
            {},
        ),
    ]
    for id_, what, call, pattern, ok, kw in entries:
        row(id_, 5, what)(lambda env, c=call, p=pattern, o=ok, k=kw: _each(c, p, o, k))


def _each(call, pattern, ok, kw) -> Outcome:
    """Judge a call that makes a list of calls: each must raise, so they are tried one
    by one."""
    return api(call, pattern, ok, **kw)


# ---- 6 Numerics (in this process)
def _finite(*ts) -> bool:
    import torch

    return all(bool(torch.isfinite(t).all()) for t in ts)


def _masked_row(fast: bool, every: bool) -> str | None:
    """Attention with one (or every) query row fully masked: finite output and
    gradients."""
    import torch

    K = _lib()
    q, k, v = (torch.randn(2, 2, 4, 8, requires_grad=True) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[:] = False if every else mask
    mask[1] = False
    f = (
        K["attn"].fast_scaled_dot_product_attention
        if fast
        else K["attn"].scaled_dot_product_attention
    )
    out = f(q, k, v, mask)
    out = out[0] if isinstance(out, tuple) else out
    out.sum().backward()
    return (
        None
        if _finite(out, q.grad, k.grad, v.grad)
        else "NaN or inf in the output or gradients"
    )


def _low_precision(dtype, big: bool = False) -> str | None:
    """Both attention paths in fp16/bf16 (causal) against fp32: finite and close."""
    import torch

    K = _lib()
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 16, 64) * (40 if big else 1) for _ in range(3))
    mask = torch.ones(16, 16, dtype=torch.bool).tril()
    for f in (
        K["attn"].scaled_dot_product_attention,
        K["attn"].fast_scaled_dot_product_attention,
    ):
        ref = f(q, k, v, mask)
        got = f(q.to(dtype), k.to(dtype), v.to(dtype), mask)
        ref, got = (x[0] if isinstance(x, tuple) else x for x in (ref, got))
        if not _finite(got):
            return f"{f.__name__}: NaN or inf in {dtype}"
        if not big and (got.float() - ref).abs().max() > (
            2e-2 if dtype == torch.float16 else 6e-2
        ):
            return (
                f"{f.__name__}: error {(got.float() - ref).abs().max():.3g} in {dtype}"
            )
    return None


def _mha_dtypes() -> str | None:
    import torch

    for dtype in (torch.float16, torch.bfloat16):
        m = _lib()["mh"].MultiHeadAttention(32, 4).to(dtype)
        for need in (False, True):
            out, _ = m(torch.randn(2, 5, 32, dtype=dtype), need_weights=need)
            if out.dtype != dtype or not _finite(out):
                return (
                    f"{dtype}, need_weights={need}: {out.dtype}, finite={_finite(out)}"
                )
    return None


def _mha_autocast() -> str | None:
    import torch

    m = _lib()["mh"].MultiHeadAttention(32, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = m(torch.randn(2, 5, 32))
    return (
        None
        if out.dtype == torch.bfloat16 and _finite(out)
        else f"{out.dtype}, finite={_finite(out)}"
    )


def _trained_tiny(env: Env):
    import torch

    from transformer_lib.lm_train import config_from_dict
    from transformer_lib.modern import ModernGPT

    state = torch.load(lm_ckpt(env), weights_only=True)
    model = ModernGPT(config_from_dict(state["config"]))
    model.load_state_dict(state["model"])
    return model.eval()


def _untrained(context: int = 128, dtype=None, **kw):
    import torch

    G_ = _lib()["gpt"]
    torch.manual_seed(0)
    model = G_.GPT(
        G_.GPTConfig.cpu(vocab_size=65, context_len=context, dropout=0.0, **kw)
    ).eval()
    return model.to(dtype) if dtype is not None else model


def _same_tokens(
    model,
    lengths,
    batch: int = 1,
    temperature: float = 0.0,
    prompt_len: int = 5,
    top_k: int | None = None,
) -> str | None:
    """Cached and uncached generation give identical tokens for each length."""
    import torch

    x = torch.randint(
        0, 65, (batch, prompt_len), generator=torch.Generator().manual_seed(1)
    )
    for n in lengths:
        a, b = (
            _generate(
                model,
                x,
                n,
                temperature=temperature,
                top_k=top_k,
                use_cache=c,
                generator=torch.Generator().manual_seed(2),
            )
            for c in (True, False)
        )
        if not torch.equal(a, b):
            return f"{n} new tokens: cached and uncached differ"
    return None


def _sdpa_vs_explicit() -> str | None:
    import torch

    a = _untrained(attn_impl="explicit")
    problem = _same_tokens(a, [300])
    if problem:
        return problem
    b = _untrained()
    b.load_state_dict(a.state_dict())
    x = torch.randint(0, 65, (1, 5), generator=torch.Generator().manual_seed(1))
    return (
        None
        if torch.equal(
            _generate(a, x, 300, temperature=0), _generate(b, x, 300, temperature=0)
        )
        else "sdpa and explicit differ"
    )


def _numeric_rows() -> None:
    """Register rows 197-215."""
    import torch

    num = [
        (
            197,
            "explicit attention, one query row fully masked, forward + backward",
            lambda e: _masked_row(False, False),
        ),
        (198, "fast (fused) attention, same", lambda e: _masked_row(True, False)),
        (
            199,
            "explicit / fast, every row masked",
            lambda e: _masked_row(False, True) or _masked_row(True, True),
        ),
        (
            200,
            "explicit and fast, fp16 q/k/v, causal, vs fp32",
            lambda e: _low_precision(torch.float16),
        ),
        (
            201,
            "explicit and fast, bf16, causal, vs fp32",
            lambda e: _low_precision(torch.bfloat16),
        ),
        (
            202,
            "explicit and fast, fp16 / bf16 with |q|,|k| ~ 40, D=64",
            lambda e: (
                _low_precision(torch.float16, True)
                or _low_precision(torch.bfloat16, True)
            ),
        ),
        (
            203,
            "MultiHeadAttention converted to fp16 / bf16, need_weights False and True",
            lambda e: _mha_dtypes(),
        ),
        (205, "MultiHeadAttention under CPU bf16 autocast", lambda e: _mha_autocast()),
        (
            206,
            "trained tiny GPT (context 32): greedy 10/31/32/33/100/200, cache "
            "vs no cache",
            lambda e: _same_tokens(_trained_tiny(e), [10, 31, 32, 33, 100, 200]),
        ),
        (
            207,
            "trained tiny: sampling T=0.8, top-k 200, 200 tokens, same seed",
            lambda e: _same_tokens(_trained_tiny(e), [200], temperature=0.8, top_k=200),
        ),
        (
            208,
            "trained tiny: batch of 3, greedy 100",
            lambda e: _same_tokens(_trained_tiny(e), [100], batch=3),
        ),
        (
            209,
            "untrained cpu preset (context 128): greedy 50/127/128/129/300",
            lambda e: _same_tokens(_untrained(), [50, 127, 128, 129, 300]),
        ),
        (
            210,
            "untrained cpu preset: sampling 300 tokens",
            lambda e: _same_tokens(_untrained(), [300], temperature=1.0),
        ),
        (
            211,
            "untrained cpu preset in bf16 weights: greedy 300",
            lambda e: _same_tokens(_untrained(dtype=torch.bfloat16), [300]),
        ),
        (
            212,
            "attn_impl='explicit', greedy 300, cache vs no cache; sdpa vs "
            "explicit, same weights",
            lambda e: _sdpa_vs_explicit(),
        ),
        (
            213,
            "5000-token prompt into context 128, 20 new tokens",
            lambda e: _same_tokens(_untrained(), [20], prompt_len=5000),
        ),
        (
            214,
            "cpu preset with context 1024: greedy 1018 and 1030 new tokens",
            lambda e: _same_tokens(_untrained(1024), [1018, 1030]),
        ),
        (
            215,
            "same, bf16 weights, greedy 1018",
            lambda e: _same_tokens(_untrained(1024, torch.bfloat16), [1018]),
        ),
    ]
    for id_, what, fn in num:
        row(id_, 6, what)(lambda env, f=fn: checked(lambda: f(env)))

    def fp16_into_fp32(env: Env) -> Outcome:
        m = _lib()["mh"].MultiHeadAttention(32, 4)
        return api(
            lambda: m(torch.randn(2, 5, 32, dtype=torch.float16)),
            "dtype|float16|half",
            ok=lambda v: _finite(v[0]),
        )

    row(204, 6, "fp32 MultiHeadAttention, fp16 input")(fp16_into_fp32)


# ---- 7 Unit tests
def _unit_tests(extra: list[str]) -> Callable[[Env], Outcome]:
    def run(env: Env) -> Outcome:
        r = subprocess.run(
            [
                "nice",
                "-n",
                "19",
                PY,
                "-m",
                "pytest",
                "tests",
                "-q",
                "-p",
                "no:cacheprovider",
                *extra,
            ],
            cwd=ROOT,
            env={**env.env, "TRANSFORMER_QUICK": "1"},
            capture_output=True,
            text=True,
        )
        last = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
        return ("PASS", last) if r.returncode == 0 else ("FAIL", last)

    return run


UNIT_TESTS = False  # the whole suite takes minutes; tests set it from RELIABILITY_UNIT


def _unit_skip() -> str | None:
    """Why rows 216-217 are skipped: they run the whole suite, unless asked to."""
    return None if UNIT_TESTS else "the whole test suite (minutes): RELIABILITY_UNIT=1"


row(216, 7, "TRANSFORMER_QUICK=1 pytest tests -q", _unit_skip)(_unit_tests([]))
row(
    217,
    7,
    "second run without the browser tests (--deselect tests/test_book_browser.py)",
    _unit_skip,
)(_unit_tests(["--deselect", "tests/test_book_browser.py"]))


# ---- 8 Round two : one writer per checkpoint, every stop signal, full
# disks, damaged resumes and loads, bounded inputs, typed input, silent acceptance,
# the Chinese edition's tool. A run whose work is lost is a FAIL.
def _one_line(r: Result, *patterns: str) -> Outcome:
    """A refusal of input a user gave: a lost or silent acceptance is a FAIL here."""
    return refused(r, *patterns, silent="FAIL")


def _wait_text(p: subprocess.Popen, stream, text: str, timeout: float) -> str:
    """Read `stream` of `p` line by line until one holds `text` (or it ends)."""
    seen, end = "", time.monotonic() + timeout
    while time.monotonic() < end:
        line = stream.readline()
        if not line:
            break
        seen += line
        if text in line:
            break
    return seen


@row(218, 8, "two train-lm runs on one new --out: the second refused naming the first")
def _r218(env: Env) -> Outcome:
    folder = env.fresh("lock")
    out = folder / "same.pt"
    args = L("--max-iters", "300", "--eval-interval", "5", "--out", str(out))
    first = env.popen(args + ["--seed", "1"], folder)
    _wait_text(first, first.stdout, "layers,", 120)  # it has started: lock taken
    second = env.cli(args + ["--seed", "2"], cwd=folder, timeout=300)
    kill_group(first, signal.SIGINT)  # the first run stops and saves
    first.communicate(timeout=300)
    saved = (_load(out) or {}).get("train_config", {}).get("seed")
    if second.rc == 0:
        return (
            "FAIL",
            f"both ran (rc 0); the checkpoint holds seed {saved}: one is lost",
        )
    o = _one_line(second, r"in use by another run", r"process \d+")
    if o[0] == "PASS" and saved != 1:
        return "FAIL", f"the first run's checkpoint was not kept (seed {saved})"
    return o


@row(219, 8, "a start (start_run) during another run's save keeps that save's file")
def _r219(env: Env) -> Outcome:
    from transformer_lib.checkpoints import start_run

    folder = env.fresh("race")
    out = folder / "race.pt"
    holder = subprocess.Popen(
        [
            PY,
            "-c",
            "import sys, time; from transformer_lib.checkpoints import "
            "start_run; start_run(sys.argv[1], 'refuse'); print('held', flush=True); "
            "time.sleep(60)",
            str(out),
        ],
        env=env.env,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=os.setpgrp,
    )
    try:
        _wait_text(holder, holder.stdout, "held", 60)
        tmp = folder / f".{out.name}.saving.tmp"  # the save it is writing
        tmp.write_bytes(b"half a checkpoint")
        try:
            start_run(out, "restart", log=lambda *_: None)
            return "FAIL", "a second start_run was allowed while another run held it"
        except OSError as e:
            if not tmp.exists():
                return "FAIL", "the other run's save was deleted"
            return "PASS", f"{type(e).__name__}: {e}"[:200]
    finally:
        kill_group(holder)
        holder.wait()


def _stopped_by(env: Env, sig: int, name: str) -> Outcome:
    """train-lm stopped by `sig` mid-run saves the step it reached, as Ctrl-C does."""
    folder = env.fresh(name)
    out = folder / "t.pt"
    args = L("--max-iters", "100000", "--eval-interval", "100000", "--out", str(out))
    p = env.popen(args, folder)
    _wait_text(p, p.stdout, "layers,", 120)
    time.sleep(3)  # some steps, no evaluation (so no save) yet
    kill_group(p, sig)
    _, err = p.communicate(timeout=120)
    step = (_load(out) or {}).get("step")
    if not step:
        return "FAIL", f"killed by {name} without a save (rc {p.returncode}): work lost"
    o = refused(Result(p.returncode, "", err, 0), r"stopped at step", r"saved")
    return o[0], f"saved step {step}; " + o[1]


row(220, 8, "train-lm stopped by SIGTERM (timeout, docker stop, Slurm)")(
    lambda e: _stopped_by(e, signal.SIGTERM, "sigterm")
)
row(221, 8, "train-lm stopped by SIGHUP (the terminal closed)")(
    lambda e: _stopped_by(e, signal.SIGHUP, "sighup")
)


@row(222, 8, "Ctrl-C during generate: status 130, one line, no traceback")
def _r222(env: Env) -> Outcome:
    p = env.popen(G(env, "--max-new-tokens", "100000"), env.fresh("int"))
    time.sleep(8)  # loading and generating
    kill_group(p, signal.SIGINT)
    _, err = p.communicate(timeout=60)
    o = refused(Result(p.returncode, "", err, 0), r"interrupted")
    return ("FAIL", f"rc {p.returncode}: {o[1]}") if p.returncode != 130 else o


def _tmpfs_skip() -> str | None:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return "needs root to mount a small tmpfs (a full disk)"
    return None


@row(
    223,
    8,
    "train-lm onto a full disk (600 kB tmpfs): one line, path and space",
    _tmpfs_skip,
)
def _r223(env: Env) -> Outcome:
    folder = env.fresh("full")
    disk = folder / "tiny"
    disk.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)],
        capture_output=True,
    ).returncode:
        return "SKIP", "mount refused (no CAP_SYS_ADMIN)"
    try:
        out = disk / "a.pt"
        (disk / "filler").write_bytes(b"\0" * 200_000)  # the disk is partly full
        p = env.popen(
            L("--max-iters", "30", "--eval-interval", "10", "--out", str(out)), folder
        )
        seen = _wait_text(p, p.stdout, "disk is full", 240)  # said, then retried
        kill_group(p)
        p.communicate()
        if "disk is full" not in seen:
            return "FAIL", f"no full-disk message: {seen.strip()[-200:]}"
        line = next(ln for ln in seen.splitlines() if "disk is full" in ln)
        if str(out) not in line or "MB free" not in line:
            return "WEAK", f"the message lacks the path or the space: {line[:200]}"
        return "PASS", line[:200]
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def _damage(env: Env, src: Path, name: str, edit) -> Path:
    return _edited(src, env.fresh(name) / f"{name}.pt", edit)


LM_RESUME_DAMAGE = {
    "no train_config": lambda s: s.pop("train_config"),
    "history a string": lambda s: s.update(history="x"),
    "no rng": lambda s: s.pop("rng"),
    "short batch_rng": lambda s: s.update(batch_rng=s["rng"][:3]),
    "step a string": lambda s: s.update(step="20"),
    "misshapen weight": lambda s: s["model"].update(
        {"tok_emb.weight": s["model"]["tok_emb.weight"][:3]}
    ),
    "misshapen moment": lambda s: s["optimizer"]["state"][0].update(
        exp_avg=s["optimizer"]["state"][0]["exp_avg"].flatten()[:2]
    ),
}


@row(224, 8, "train-lm --resume of 7 damaged checkpoints: refused before training")
def _r224(env: Env) -> Outcome:
    from transformer_lib.lm_train import TrainSettings, load_lm_data, train_lm

    outcomes, data = [], load_lm_data()
    for name, edit in LM_RESUME_DAMAGE.items():
        bad = _damage(env, lm_ckpt(env), "resume", edit)
        before = bad.read_bytes()
        s = TrainSettings(
            preset="tiny",
            max_iters=30,
            eval_interval=10,
            eval_windows=2,
            out=str(bad),
            existing="resume",
            device="cpu",
            progress=False,
            verbose=False,
        )
        o = api(
            lambda: train_lm(s, data), r"cannot be resumed|do not fit", raised="FAIL"
        )
        if bad.read_bytes() != before:
            o = ("FAIL", "the checkpoint was rewritten")
        outcomes.append((o[0], f"{name}: {o[1]}"))
    return worst(outcomes)


MT_RESUME_DAMAGE = {
    "no train_config": lambda s: s.pop("train_config"),
    "rng a list": lambda s: s.update(rng=[1, 2]),
    "best_model a list": lambda s: s.update(best_model=[]),
    "misshapen recent": lambda s: s["recent_models"].append({"x": s["rng"]}),
    "history missing": lambda s: s.pop("history"),
}


@row(225, 8, "train-mt resume (resume_run) of 5 damaged checkpoints: refused")
def _r225(env: Env) -> Outcome:
    from dataclasses import asdict

    import torch

    from transformer_lib.checkpoints import resume_run
    from transformer_lib.mt_train import RESUMABLE, BudgetedRun, TrainConfig
    from transformer_lib.seq2seq import Seq2SeqConfig, Transformer
    from transformer_lib.training import make_adamw
    from transformer_lib.translator import CHECKPOINT_FORMAT

    good = torch.load(mt_ckpt(env), weights_only=True)
    t = dict(good["train_config"], betas=tuple(good["train_config"]["betas"]))
    kept = {"best_model": dict, "recent_models": list}
    outcomes = []
    for name, edit in MT_RESUME_DAMAGE.items():
        bad = _damage(env, mt_ckpt(env), "mt-resume", edit)
        model = Transformer(Seq2SeqConfig(**good["config"]))
        opt = make_adamw(model, 1e-3)
        settings = asdict(TrainConfig(**t))
        o = api(
            lambda: resume_run(
                bad,
                model,
                opt,
                BudgetedRun,
                settings,
                RESUMABLE,
                good["tokenizer"],
                CHECKPOINT_FORMAT,
                kept=kept,
            ),
            r"cannot be resumed|do not fit",
            raised="FAIL",
        )
        outcomes.append((o[0], f"{name}: {o[1]}"))
    return worst(outcomes)


def _flip_weights(src: Path, dest: Path) -> Path:
    """A copy of `src` with one byte of its first tensor flipped (its CRC now wrong)."""
    import struct
    import zipfile

    data = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as z:
        info = next(i for i in z.infolist() if "/data/" in i.filename)
    n, m = struct.unpack("<HH", data[info.header_offset + 26 :][:4])
    data[info.header_offset + 30 + n + m + 8] ^= 0xFF
    dest.write_bytes(bytes(data))
    return dest


@row(
    226, 8, "generate/translate loaders: bad merges, bad HF JSON, NaN, CRC, huge config"
)
def _r226(env: Env) -> Outcome:
    from transformer_lib.lm_train import load_lm
    from transformer_lib.mt_train import load_checked_translator

    lm, mt = lm_ckpt(env), mt_ckpt(env)
    load_translator = lambda path, _device: load_checked_translator(path)  # noqa: E731
    nan = lambda s: [w.fill_(float("nan")) for w in s["model"].values()]  # noqa: E731
    cases = {
        "mt merge out of range": (
            load_translator,
            _damage(
                env,
                mt,
                "oob",
                lambda s: s["tokenizer"]["src"]["merges"].append([99999, 3]),
            ),
        ),
        "lm HF tokenizer JSON broken": (
            load_lm,
            _damage(
                env, lm, "hf", lambda s: s["tokenizer"].update(type="hf_bpe", json="{")
            ),
        ),
        "lm NaN weights": (load_lm, _damage(env, lm, "nan", nan)),
        "mt NaN weights": (
            load_translator,
            _damage(
                env,
                mt,
                "mtnan",
                lambda s: [w.fill_(float("nan")) for w in s["best_model"].values()],
            ),
        ),
        "lm flipped byte (CRC)": (
            load_lm,
            _flip_weights(lm, env.fresh("crc") / "crc.pt"),
        ),
        "lm n_layers=100000": (
            load_lm,
            _damage(env, lm, "big", lambda s: s["config"].update(n_layers=100_000)),
        ),
        "lm integer weights": (
            load_lm,
            _damage(
                env,
                lm,
                "int",
                lambda s: s["model"].update(
                    {k: v.long() for k, v in s["model"].items()}
                ),
            ),
        ),
    }
    outcomes = []
    for name, (load, path) in cases.items():
        o = api(
            lambda: load(str(path), "cpu"),
            r"damaged|do not fit|absurd|checksum",
            raised="FAIL",
        )
        outcomes.append((o[0], f"{name}: {o[1]}"))
    return worst(outcomes)


@row(
    227,
    8,
    "T --input /dev/zero, G --prompt-file /dev/zero: capped, one line",
    lambda: None if os.path.exists("/dev/zero") else "needs /dev/zero (POSIX)",
)
def _r227(env: Env) -> Outcome:
    return worst(
        [
            _one_line(
                env.cli(T(env, "--input", "/dev/zero"), timeout=120), r"more than"
            ),
            _one_line(
                env.cli(G(env, "--prompt-file", "/dev/zero"), timeout=120), r"more than"
            ),
        ]
    )


def _closed_stdin() -> None:
    os.setpgrp()
    os.close(0)


@row(228, 8, "typed input: non-UTF-8 argument, closed stdin, | head, top-p 1e-300, ...")
def _r228(env: Env) -> Outcome:
    outcomes = [
        _one_line(env.cli(T(env, "caf\udce9")), r"not UTF-8"),
        _one_line(env.cli(G(env, "--top-p", "1e-300")), r"--top-p"),
        _one_line(
            env.cli(T(env, "--length-penalty", "1e308", "Hello.")), r"--length-penalty"
        ),
        _one_line(env.cli(T(env, "--beam-size", "100000", "Hello.")), r"--beam-size"),
    ]
    p = subprocess.run(
        env.command(T(env, "--input", "-")),
        env=env.env,
        capture_output=True,
        text=True,
        preexec_fn=_closed_stdin,
    )
    outcomes.append(
        _one_line(
            Result(p.returncode, p.stdout, p.stderr, 0), r"standard input is closed"
        )
    )
    many = env.fresh("pipe") / "many.txt"
    many.write_text("This is a sentence.\n" * 200)
    head = subprocess.Popen(
        ["head", "-c", "5"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    p = subprocess.run(
        env.command(T(env, "--method", "greedy", "--input", str(many))),
        env=env.env,
        stdout=head.stdin,
        stderr=subprocess.PIPE,
        text=True,
    )
    head.stdin.close()
    head.wait()
    outcomes.append(
        ("FAIL", f"| head: traceback: {p.stderr.strip()[-150:]}")
        if TRACEBACK in p.stderr
        else ("PASS", f"| head: rc {p.returncode}, quiet")
    )
    return worst(outcomes)


@row(229, 8, "TRANSFORMER_DEVICE=garbage / meta for train-mt and generate")
def _r229(env: Env) -> Outcome:
    return worst(
        [
            _one_line(
                env.cli(M("--out", "x.pt"), extra_env={"TRANSFORMER_DEVICE": d}),
                r"TRANSFORMER_DEVICE",
            )
            for d in ("garbage", "meta")
        ]
        + [
            _one_line(
                env.cli(G(env), extra_env={"TRANSFORMER_DEVICE": "garbage"}),
                r"TRANSFORMER_DEVICE",
            )
        ]
    )


@row(230, 8, "--restart over a README, a symlink --out, --min-lr above --lr")
def _r230(env: Env) -> Outcome:
    folder = env.fresh("accept")
    notes = folder / "notes.txt"
    notes.write_text((ROOT / "README.md").read_text())
    readme = _one_line(
        env.cli(L("--restart", "--out", str(notes)), cwd=folder), r"not a checkpoint"
    )
    if notes.read_text() != (ROOT / "README.md").read_text():
        readme = ("FAIL", "the README copy was replaced")
    (folder / "store").mkdir()
    link = folder / "link.pt"
    link.symlink_to(folder / "store" / "real.pt")
    r = env.cli(L("--out", str(link)), cwd=folder)
    linked = succeeded(
        r,
        lambda r: (
            None
            if link.is_symlink() and (folder / "store" / "real.pt").is_file()
            else "the link became a regular file"
        ),
    )
    crossed = _one_line(
        env.cli(L("--lr", "0.001", "--min-lr", "0.01")), r"-?-?min[-_]lr"
    )  # flag or field
    return worst([readme, linked, crossed])


@row(231, 8, "a finite divergence (--lr 10): stopped, nothing saved")
def _r231(env: Env) -> Outcome:
    folder = env.fresh("diverge")
    out = folder / "d.pt"
    r = env.cli(
        L(
            "--lr",
            "10",
            "--min-lr",
            "10",
            "--warmup-steps",
            "0",
            "--max-iters",
            "60",
            "--eval-interval",
            "20",
            "--out",
            str(out),
        ),
        cwd=folder,
    )
    if r.rc == 0:
        return "FAIL", f"a diverged run was saved with rc 0: {r.last_err()}"
    return _one_line(r, r"diverged")


@row(232, 8, "--resume with --max-iters below the saved step; train-lm without --out")
def _r232(env: Env) -> Outcome:
    folder = env.fresh("past")
    copy = copy_to(lm_ckpt(env), folder, "c.pt")
    before = copy.read_bytes()
    past = _one_line(
        env.cli(L("--max-iters", "5", "--resume", "--out", str(copy))), r"past"
    )
    if copy.read_bytes() != before:
        past = ("FAIL", "the checkpoint was rewritten")
    r = env.cli(L())
    said = succeeded(r, lambda r: None if "not saved" in r.err else "nothing said")
    return worst([past, said])


def _quick_modes() -> str | None:
    from transformer_lib import runtime

    accepted, kept = [], os.environ.get("TRANSFORMER_QUICK")
    for value in ("2", "y", "quick", "1.0"):
        os.environ["TRANSFORMER_QUICK"] = value
        try:
            runtime.is_quick()
            accepted.append(value)
        except ValueError:
            pass
    os.environ.pop("TRANSFORMER_QUICK")
    if kept is not None:
        os.environ["TRANSFORMER_QUICK"] = kept
    return f"TRANSFORMER_QUICK={accepted} accepted as a mode" if accepted else None


row(233, 8, "TRANSFORMER_QUICK=2 / y / quick / 1.0 refused, not taken as full mode")(
    lambda e: checked(_quick_modes)
)


def _zh_copy(env: Env) -> Path:
    """A copy of what tools/zh_edition.py reads and writes."""
    root = env.fresh("zh")
    skip = shutil.ignore_patterns("runs", "*.pt", "_build")
    for part in ("notebooks", "zh", "book", "tools"):
        shutil.copytree(ROOT / part, root / part, ignore=skip)
    (root / "transformer_lib").mkdir()
    for name in ("__init__.py", "files.py"):
        shutil.copy(ROOT / "transformer_lib" / name, root / "transformer_lib")
    return root


@row(
    234, 8, "zh_edition.py with a translation missing, cut or doubled: nothing written"
)
def _r234(env: Env) -> Outcome:
    outcomes = []
    for damage in ("missing", "cut", "doubled"):
        root = _zh_copy(env)
        md = root / "zh" / "translations" / "05_multi_head_attention.md"
        text = md.read_text(encoding="utf-8")
        if damage == "missing":
            md.unlink()
        elif damage == "cut":
            md.write_text(text[: len(text) // 2], encoding="utf-8")
        else:
            md.write_text(text + "\n" + text[: text.index("<!--", 1)], encoding="utf-8")
        before = {p: p.read_bytes() for p in (root / "zh" / "notebooks").glob("*")}
        p = subprocess.run(
            [PY, "tools/zh_edition.py"],
            cwd=root,
            capture_output=True,
            text=True,
            env=env.env,
        )
        after = {p: p.read_bytes() for p in (root / "zh" / "notebooks").glob("*")}
        if p.returncode == 0 or after != before:
            outcomes.append(("FAIL", f"{damage}: rc {p.returncode}, written anyway"))
        elif TRACEBACK in p.stderr or "nothing written" not in p.stderr:
            outcomes.append(("WEAK", f"{damage}: {p.stderr.strip()[-200:]}"))
        else:
            outcomes.append(("PASS", f"{damage}: rc {p.returncode}, nothing written"))
    return worst(outcomes)
