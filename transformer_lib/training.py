"""Training helpers shared by the language model (Part III) and the translator (Part II).

- learning-rate schedules: linear warm-up then cosine decay (GPT), or then inverse square root
  (Attention Is All You Need);
- AdamW parameter groups: weight decay on the weight matrices of Linear layers only; embeddings,
  norms and biases are not decayed (see `param_groups` for why);
- gradient clipping by global norm;
- checkpoints: written atomically (temporary file, then `os.replace`), read with
  `torch.load(weights_only=True)`, holding the model config and tokenizer as plain dicts, and refused
  with a message naming the difference when they do not match what the caller expects.

Written by hand (not exported from a notebook): notebook 11 explains each piece.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import torch
import torch.nn as nn

__all__ = [
    "CheckpointMismatchError", "clip_gradients", "load_checkpoint", "make_adamw", "param_groups",
    "save_checkpoint", "warmup_cosine", "warmup_inverse_sqrt",
]


def warmup_cosine(step: int, max_lr: float, warmup_steps: int, decay_steps: int, min_lr: float = 0.0) -> float:
    """Learning rate at `step` (from 0): linear warm-up to max_lr, cosine decay to min_lr at decay_steps.

    The warm-up is nanoGPT's: max_lr * (step + 1) / (warmup_steps + 1), so step 0 is not 0. After
    decay_steps the rate stays at min_lr.
    """
    if step < warmup_steps:
        return max_lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)  # 0 -> 1
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (max_lr - min_lr)


def warmup_inverse_sqrt(step: int, max_lr: float, warmup_steps: int) -> float:
    """Learning rate at `step` (from 0): linear warm-up to max_lr, then max_lr * sqrt(warmup / step).

    This is the schedule of Attention Is All You Need, d_model^-0.5 * min(s^-0.5, s * w^-1.5) with
    s = step + 1, written with its peak: it equals that formula when max_lr = (d_model * warmup_steps)^-0.5.
    """
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be >= 1, got {warmup_steps}")
    s = step + 1
    return max_lr * min(s / warmup_steps, math.sqrt(warmup_steps / s))


def param_groups(model: nn.Module, weight_decay: float, decay_embeddings: bool = False) -> list[dict]:
    """Two AdamW groups: decay on the weight matrices of Linear layers, none on everything else.

    Weight decay pulls parameters towards 0. That is a sensible prior for the matrices that mix
    features, but not for gains of norms (whose neutral value is 1) or biases (a shift, not a scale).
    Embedding rows are updated only when their token appears, so decaying them shrinks rare tokens
    at every step for no reason; we leave them out (nanoGPT decays them: pass decay_embeddings=True
    to reproduce it). A weight tied between the embedding and the output layer counts as an embedding.
    """
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for p in model.parameters():  # each shared parameter once
        if not p.requires_grad:
            continue
        matrix = p.dim() >= 2 and (decay_embeddings or id(p) not in embedding_ids)
        (decay if matrix else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_adamw(model: nn.Module, lr: float, weight_decay: float = 0.1, betas: tuple[float, float] = (0.9, 0.99),
               decay_embeddings: bool = False) -> torch.optim.AdamW:
    """AdamW over `param_groups(model, weight_decay)`; the fused kernel on CUDA."""
    fused = next(model.parameters()).is_cuda
    return torch.optim.AdamW(param_groups(model, weight_decay, decay_embeddings), lr=lr, betas=betas,
                             fused=fused or None)


def clip_gradients(model: nn.Module, max_norm: float) -> float:
    """Scale all gradients together so their global L2 norm is at most max_norm; the norm before clipping.

    One bad batch can give a huge gradient; clipping its norm keeps the step's direction but bounds its
    size. max_norm <= 0 turns clipping off (the norm is still returned, for logging).
    """
    params = [p for p in model.parameters() if p.grad is not None]
    return float(nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf")))


class CheckpointMismatchError(ValueError):
    """A checkpoint's model config or tokenizer differs from the one the caller expects."""


def save_checkpoint(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                    *, config: dict, tokenizer: dict | None = None, step: int = 0, **extra) -> Path:
    """Write model (and optimizer) state, the config and tokenizer as plain dicts, and `extra`, atomically.

    The file is written next to its destination and renamed into place, so an interrupted save never
    leaves a half-written checkpoint where a good one was. Everything stored is a tensor or a plain
    Python value, so `torch.load(..., weights_only=True)` can read it without running any code.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"model": model.state_dict(), "config": dict(config), "tokenizer": tokenizer, "step": step, **extra}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _differences(saved: dict | None, expected: dict | None) -> list[str]:
    """'key: saved X, expected Y' for each key whose value differs (missing keys included)."""
    saved, expected = saved or {}, expected or {}
    return [f"{k}: checkpoint has {saved.get(k, '<missing>')!r}, expected {expected.get(k, '<missing>')!r}"
            for k in sorted(set(saved) | set(expected)) if saved.get(k) != expected.get(k)]


def load_checkpoint(path: str | os.PathLike, *, expected_config: dict | None = None,
                    expected_tokenizer: dict | None = None, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint with weights_only=True; refuse it if its config or tokenizer differs from the expected.

    Raises FileNotFoundError naming the path, and CheckpointMismatchError naming every differing field
    (for a tokenizer, the vocabulary size and the first differing entries), instead of failing later
    with a shape error or, worse, loading weights under the wrong vocabulary.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    state = torch.load(path, map_location=map_location, weights_only=True)
    problems = []
    if expected_config is not None:
        problems += [f"config {d}" for d in _differences(state.get("config"), expected_config)]
    if expected_tokenizer is not None and state.get("tokenizer") != expected_tokenizer:
        diffs = _differences(state.get("tokenizer"), expected_tokenizer)
        problems += [f"tokenizer {d[:200]}" for d in diffs[:3]] or ["tokenizer differs"]
    if problems:
        raise CheckpointMismatchError(f"checkpoint {path.name} does not match this run:\n  " + "\n  ".join(problems))
    return state
