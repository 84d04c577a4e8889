"""Training the translator: configuration, the epoch loop, checkpoints that resume, loading for translation.

Written by hand (not exported): notebook 09 explains each piece and calls `fit`; the command line
(`python -m transformer_lib train-mt`) and benchmarks/translation.py call `train_translator`.

    cfg = TrainConfig()                              # the notebook's full-mode defaults
    history = train_translator(cfg, "runs/translator.pt")
    model, src_tok, tgt_tok = load_translator("runs/translator.pt")
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from transformer_lib.seq2seq import Seq2SeqConfig, Transformer
from transformer_lib.tokenization import tokenizer_from_dict
from transformer_lib.training import (clip_gradients, load_checkpoint, make_adamw, save_checkpoint, warmup_cosine,
                                      warmup_inverse_sqrt)
from transformer_lib.translation_data import (build_tokenizers, collate, encode_pair, label_smoothed_cross_entropy,
                                              length_bucketed_batches, split_by_english)

CHECKPOINT_FORMAT = "transformer_lib.translator/1"


@dataclass
class TrainConfig:
    """Everything that decides a training run. Defaults: the full-mode run of notebook 09 (2 CPU cores, < 30 min)."""

    seed: int = 0
    n_valid: int = 1000  # distinct English sentences held out for early stopping
    n_test: int = 2000  # distinct English sentences held out for the final BLEU (never trained on)
    train_limit: int | None = None  # use only the first N training pairs (quick mode)
    src_vocab_size: int = 4000  # English BPE: ~8k distinct words in training, most frequent whole
    model: dict = field(default_factory=dict)  # overrides of Seq2SeqConfig's defaults
    max_tokens: int = 2500  # padded tokens per batch (source or target side, whichever is longer)
    epochs: int = 20
    max_minutes: float | None = 24.0  # stop after the epoch that would overrun this (wall-clock budget)
    schedule: str = "cosine"  # "cosine" (warm-up + cosine) or "inverse_sqrt" (the paper's)
    peak_lr: float = 1e-3
    warmup_steps: int = 200
    min_lr_ratio: float = 0.02  # cosine decays to this fraction of peak_lr
    weight_decay: float = 0.01  # AdamW, not on biases, LayerNorms or embeddings
    betas: tuple[float, float] = (0.9, 0.98)  # the paper's
    label_smoothing: float = 0.1  # the paper's epsilon_ls
    clip_norm: float = 1.0
    patience: int = 3  # early stopping: epochs without a better validation loss

    @classmethod
    def quick(cls) -> "TrainConfig":
        """A few dozen steps on a small slice with a tiny model: checks that everything runs, in seconds."""
        return cls(train_limit=2000, src_vocab_size=500, epochs=2, max_minutes=None, warmup_steps=20,
                   model=dict(d_model=64, n_heads=2, n_layers=2, d_ff=128), max_tokens=2000)


def lr_at(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Learning rate at optimizer step `step` (from 0): warm-up, then the paper's inverse square root or a cosine."""
    if cfg.schedule == "inverse_sqrt":
        return warmup_inverse_sqrt(step, cfg.peak_lr, cfg.warmup_steps)
    if cfg.schedule == "cosine":
        return warmup_cosine(step, cfg.peak_lr, cfg.warmup_steps, total_steps, cfg.min_lr_ratio * cfg.peak_lr)
    raise ValueError(f"schedule must be 'cosine' or 'inverse_sqrt', got {cfg.schedule!r}")


def _batches(examples, max_tokens: int, seed: int | None):
    lengths = [max(len(s), len(t) - 1) for s, t in examples]
    return length_bucketed_batches(lengths, max_tokens, seed)


@torch.no_grad()
def validation_loss(model: Transformer, examples, max_tokens: int = 8000) -> float:
    """Mean cross-entropy per target token (no label smoothing), teacher forced: exp() of it is the perplexity."""
    model.eval()
    device = next(model.parameters()).device
    c = model.config
    total, count = 0.0, 0
    for idx in _batches(examples, max_tokens, seed=None):
        src, tgt_in, tgt_out = (x.to(device) for x in collate([examples[i] for i in idx], c.src_pad_id, c.tgt_pad_id))
        n = int((tgt_out != c.tgt_pad_id).sum())
        total += label_smoothed_cross_entropy(model(src, tgt_in), tgt_out, 0.0, c.tgt_pad_id).item() * n
        count += n
    return total / max(count, 1)


def fit(model: Transformer, train_examples: list, valid_examples: list, cfg: TrainConfig,
        checkpoint_path: str | Path | None = None, tokenizers: dict | None = None, resume: bool = True,
        progress: bool = True, log=print, extra: dict | None = None) -> list[dict]:
    """Train with teacher forcing, one checkpoint per epoch; returns the history, one dict per epoch.

    Each epoch: length-bucketed batches (shuffled by seed + epoch), label-smoothed loss ignoring PAD,
    clipped gradients, the learning rate set per step from `lr_at`. After each epoch: validation loss,
    then an atomic checkpoint holding the model, the best model so far, the optimizer, the RNG state and
    the history, so a run killed at any moment resumes from its last finished epoch, repeating nothing else.
    Stops after `cfg.epochs`, after `cfg.patience` epochs without a better validation loss, or when the
    next epoch would overrun `cfg.max_minutes`; the model ends with the best validation weights.
    `extra` (plain data) is stored in the checkpoint as it is.
    """
    from tqdm.auto import tqdm

    device = next(model.parameters()).device
    c = model.config
    optimizer = make_adamw(model, cfg.peak_lr, cfg.weight_decay, cfg.betas)
    steps_per_epoch = len(_batches(train_examples, cfg.max_tokens, cfg.seed))
    state = {"epoch": 0, "step": 0, "history": [], "best_valid": float("inf"), "bad_epochs": 0, "seconds": 0.0,
             "planned_epochs": cfg.epochs, "curve": []}  # curve: [step, train loss] every 10 steps
    best_model = {k: v.detach().clone() for k, v in model.state_dict().items()}
    path = Path(checkpoint_path) if checkpoint_path else None
    stop = False
    if path and resume and path.exists():
        payload = load_checkpoint(path, expected_config=c.to_dict(), expected_tokenizer=tokenizers)
        mine = {k: v for k, v in asdict(cfg).items() if k != "max_minutes"}
        theirs = {k: v for k, v in payload["train_config"].items() if k != "max_minutes"}
        if mine != theirs:
            changed = sorted(k for k in mine if mine[k] != theirs.get(k))
            raise ValueError(f"{path.name} was trained with other settings ({', '.join(changed)}); "
                             f"resume with the same TrainConfig or choose another checkpoint path")
        model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        best_model = payload["best_model"]
        torch.set_rng_state(payload["rng"])
        state = {k: payload[k] for k in state}
        stop = payload["finished"]  # early-stopped or out of time: nothing left to do
        log(f"resumed from {path.name} after epoch {state['epoch']} (step {state['step']})")
    for epoch in range(state["epoch"], cfg.epochs):
        if stop:
            break
        total_steps = state["planned_epochs"] * steps_per_epoch  # where the cosine reaches its floor
        t0 = time.perf_counter()
        model.train()
        batches = _batches(train_examples, cfg.max_tokens, cfg.seed + epoch)
        bar = tqdm(batches, desc=f"epoch {epoch + 1}/{cfg.epochs}", disable=not progress, leave=False, mininterval=5)
        loss_sum, tokens = 0.0, 0
        for idx in bar:
            src, tgt_in, tgt_out = (x.to(device) for x in collate([train_examples[i] for i in idx],
                                                                   c.src_pad_id, c.tgt_pad_id))
            lr = lr_at(state["step"], cfg, total_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = label_smoothed_cross_entropy(model(src, tgt_in), tgt_out, cfg.label_smoothing, c.tgt_pad_id)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clip_gradients(model, cfg.clip_norm)
            optimizer.step()
            state["step"] += 1
            n = int((tgt_out != c.tgt_pad_id).sum())
            loss_sum, tokens = loss_sum + loss.item() * n, tokens + n
            bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{lr:.2e}")
            if state["step"] % 10 == 0:
                state["curve"].append([state["step"], loss.item()])
        valid = validation_loss(model, valid_examples)
        seconds = time.perf_counter() - t0
        state["seconds"] += seconds
        if valid < state["best_valid"]:
            state["best_valid"], state["bad_epochs"] = valid, 0
            best_model = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            state["bad_epochs"] += 1
        state["epoch"] = epoch + 1
        state["history"].append({"epoch": epoch + 1, "step": state["step"], "train_loss": loss_sum / tokens,
                                 "valid_loss": valid, "lr": lr, "seconds": seconds})
        log(f"epoch {epoch + 1:>2}  step {state['step']:>5}  train loss {loss_sum / tokens:.3f}  "
            f"valid loss {valid:.3f}  lr {lr:.2e}  {seconds:.0f} s")
        if epoch == 0 and cfg.max_minutes is not None:  # fit the schedule to the budget, from epoch 1's time
            state["planned_epochs"] = max(1, min(cfg.epochs, int(60 * cfg.max_minutes // seconds)))
            log(f"epoch 1 took {seconds:.0f} s: {state['planned_epochs']} epochs fit in {cfg.max_minutes} minutes")
        stop = state["bad_epochs"] >= cfg.patience or epoch + 1 >= state["planned_epochs"]
        if cfg.max_minutes is not None and state["seconds"] + seconds > 60 * cfg.max_minutes:
            log(f"stopping: another epoch would pass the {cfg.max_minutes} minute budget")
            stop = True
        if path:
            save_checkpoint(path, model, optimizer, config=c.to_dict(), tokenizer=tokenizers, format=CHECKPOINT_FORMAT,
                            train_config=asdict(cfg), best_model=best_model, rng=torch.get_rng_state(),
                            finished=stop, **(extra or {}), **state)
    model.load_state_dict(best_model)
    return state["history"]


def prepare_data(cfg: TrainConfig, pairs: list | None = None) -> dict:
    """Splits, tokenizers (learnt on train) and encoded examples for `cfg`: what training and evaluation need."""
    from transformer_lib.data import load_tatoeba_pairs

    splits = split_by_english(pairs if pairs is not None else load_tatoeba_pairs(), cfg.n_valid, cfg.n_test, cfg.seed)
    if cfg.train_limit is not None:
        splits["train"] = splits["train"][: cfg.train_limit]
    src_tok, tgt_tok = build_tokenizers(splits["train"], cfg.src_vocab_size)
    model_config = Seq2SeqConfig(src_tok.vocab_size, tgt_tok.vocab_size, src_pad_id=src_tok.pad_id,
                                 tgt_pad_id=tgt_tok.pad_id, **cfg.model)
    encode = lambda ps: [encode_pair(en, zh, src_tok, tgt_tok, model_config.context_len) for en, zh in ps]
    return {"splits": splits, "src_tok": src_tok, "tgt_tok": tgt_tok, "model_config": model_config,
            "train": encode(splits["train"]), "valid": encode(splits["valid"])}


def train_translator(cfg: TrainConfig, checkpoint_path: str | Path, resume: bool = True, progress: bool = True,
                     device: torch.device | str = "cpu", log=print) -> tuple[Transformer, dict, list[dict]]:
    """Prepare the data, build the model and `fit` it; returns (best model, data, history)."""
    torch.manual_seed(cfg.seed)
    data = prepare_data(cfg)
    model = Transformer(data["model_config"]).to(device)
    tokenizers = {"src": data["src_tok"].to_dict(), "tgt": data["tgt_tok"].to_dict()}
    src_chars = "".join(sorted({ch for en, _ in data["splits"]["train"] for ch in en}))  # for `translate`'s warning
    history = fit(model, data["train"], data["valid"], cfg, checkpoint_path, tokenizers, resume, progress, log,
                  extra={"src_chars": src_chars})
    return model, data, history


def load_translator(path: str | Path, device: torch.device | str = "cpu", best: bool = True):
    """(model, src_tok, tgt_tok, payload) from a checkpoint, read with weights_only=True (no code runs).

    best=True loads the weights with the best validation loss, best=False the last epoch's.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}; train one with `python -m transformer_lib train-mt`")
    try:
        payload = load_checkpoint(path)
    except (FileNotFoundError, ValueError):
        raise
    except Exception as e:  # a truncated file, or a pickle holding code, which weights_only refuses to run
        raise ValueError(f"{path.name} is not a readable checkpoint ({type(e).__name__}): truncated, "
                         f"or not written by train-mt") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path.name} is not a translator checkpoint (expected format {CHECKPOINT_FORMAT!r})")
    model = Transformer(Seq2SeqConfig(**payload["config"]))
    model.load_state_dict(payload["best_model" if best else "model"])
    src_tok, tgt_tok = (tokenizer_from_dict(payload["tokenizer"][s]) for s in ("src", "tgt"))
    return model.to(device).eval(), src_tok, tgt_tok, payload


def test_pairs(payload: dict, pairs: list | None = None) -> list:
    """The held-out test pairs of the run that wrote `payload` (the split is rebuilt from its seed and sizes)."""
    from transformer_lib.data import load_tatoeba_pairs

    t = payload["train_config"]
    return split_by_english(pairs if pairs is not None else load_tatoeba_pairs(), t["n_valid"], t["n_test"],
                            t["seed"])["test"]
