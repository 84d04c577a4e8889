import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from transformer_lib.gpt import GPT, KVCache
from transformer_lib.tokenization import Tokenizer
from transformer_lib.training import clip_gradients, make_adamw, set_lr

IGNORE = -100  # F.cross_entropy's ignore_index: a target that costs nothing


@dataclass
class PairVocab:
    """One vocabulary for both languages: the English BPE ids, then the Chinese
    characters' ids shifted past them. The Chinese <bos> is the prompt's last token,
    `<zh>`: "the Chinese starts here"."""

    src_tok: Tokenizer  # English BPE, with <pad> = 0, <bos>, <eos>
    tgt_tok: Tokenizer  # Chinese characters

    @property
    def offset(self) -> int:
        """Where the Chinese ids start."""
        return self.src_tok.vocab_size

    @property
    def vocab_size(self) -> int:
        """V: English and Chinese tokens together."""
        return self.src_tok.vocab_size + self.tgt_tok.vocab_size

    @property
    def zh_id(self) -> int:
        """`<zh>`: the end of the prompt, where the translation begins."""
        return self.offset + self.tgt_tok.bos_id

    @property
    def eos_id(self) -> int:
        """The Chinese <eos>: the end of the translation."""
        return self.offset + self.tgt_tok.eos_id

    def prompt(self, en: str, max_len: int) -> list[int]:
        """`<bos> English <zh>`, the English cut to fit `max_len` tokens."""
        if max_len < 3:
            raise ValueError(f"a prompt needs max_len >= 3 tokens, got {max_len}")
        english = self.src_tok.encode(en)[: max_len - 2]
        return [self.src_tok.bos_id, *english, self.zh_id]

    def example(self, en: str, zh: str, context_len: int) -> tuple[list[int], int]:
        """(`<bos> English <zh> Chinese <eos>`, the prompt's length), at most
        context_len + 1 tokens: the model reads all but the last."""
        prompt = self.prompt(en, context_len // 2)
        chinese = [self.offset + i for i in self.tgt_tok.encode(zh)] + [self.eos_id]
        return (prompt + chinese)[: context_len + 1], len(prompt)

    def decode(self, ids: list[int]) -> str:
        """The model's Chinese ids (shifted) -> text, up to the first <eos>."""
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        chinese = [i - self.offset for i in ids if i >= self.offset]
        return self.tgt_tok.decode(chinese, skip_special=True)


def shift_and_mask(
    ids: list[int], n_prompt: int, mask_prompt: bool = True
) -> tuple[list[int], list[int]]:
    """ids -> (inputs ids[:-1], targets ids[1:]); with mask_prompt, the targets that
    lie inside the prompt become IGNORE, so only the translation is learnt.

    [<bos>, a, b, <zh>, 你, 好, <eos>], n_prompt=4 ->
    ([<bos>, a, b, <zh>, 你, 好], [IGNORE, IGNORE, IGNORE, 你, 好, <eos>])
    """
    x, y = ids[:-1], list(ids[1:])
    if mask_prompt:
        y[: n_prompt - 1] = [IGNORE] * (n_prompt - 1)  # <zh> is given, not guessed
    return x, y


def collate_prompts(
    examples: list[tuple[list[int], list[int]]], pad_id: int
) -> tuple[Tensor, Tensor]:
    """[(inputs, targets), ...] -> x (B, T) padded with pad_id, y (B, T) with IGNORE."""
    T = max(len(x) for x, _ in examples)
    x = torch.full((len(examples), T), pad_id, dtype=torch.long)
    y = torch.full((len(examples), T), IGNORE, dtype=torch.long)
    for row, (xs, ys) in enumerate(examples):
        x[row, : len(xs)], y[row, : len(ys)] = torch.tensor(xs), torch.tensor(ys)
    return x, y


def masked_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy (nats) over the targets (B, T) that are not IGNORE."""
    flat = logits.float().reshape(-1, logits.size(-1))  # (B*T, V)
    return F.cross_entropy(flat, targets.reshape(-1), ignore_index=IGNORE)


@torch.no_grad()
def complete(
    model: GPT,
    prompts: list[list[int]],
    eos_id: int,
    max_new: int,
    temperature: float = 0.0,
    batch_size: int = 64,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Continue each prompt until <eos> or max_new tokens, through the KV cache:
    greedy at temperature 0, else sampled. Prompts of one length go in one batch,
    so no padding is needed; the results come back in the prompts' order."""
    model.eval()
    device, N = next(model.parameters()).device, model.config.context_len
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_length.setdefault(len(p), []).append(i)
    out: list[list[int]] = [[] for _ in prompts]
    for length, rows in sorted(by_length.items()):
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            idx = torch.tensor([prompts[i] for i in chunk], device=device)  # (B, P)
            cache = KVCache(model.config, len(chunk))
            logits, _ = model(idx, cache=cache)  # (B, P, V)
            done = torch.zeros(len(chunk), dtype=torch.bool, device=device)
            new = []
            for _ in range(min(max_new, N - length + 1)):
                last = logits[:, -1].float()  # (B, V)
                if temperature == 0:
                    next_id = last.argmax(-1)  # (B,)
                else:
                    probs = F.softmax(last / temperature, dim=-1)
                    next_id = torch.multinomial(probs, 1, generator=generator)[:, 0]
                next_id = next_id.masked_fill(done, eos_id)  # finished rows stay done
                new.append(next_id)
                done |= next_id == eos_id
                if done.all() or cache.length == N:
                    break
                logits, _ = model(next_id[:, None], cache=cache)  # (B, 1, V)
            for row, ids in zip(chunk, torch.stack(new, 1).tolist()):  # (B, new)
                out[row] = ids[: ids.index(eos_id)] if eos_id in ids else ids
    return out


def translate_gpt(
    model: GPT, vocab: PairVocab, sentences: list[str], **kwargs
) -> list[str]:
    """Greedy translations of English sentences by a decoder-only model (kwargs go to
    `complete`)."""
    N = model.config.context_len
    prompts = [vocab.prompt(s, N // 2) for s in sentences]
    kwargs = {"max_new": N} | kwargs
    return [
        vocab.decode(ids) for ids in complete(model, prompts, vocab.eos_id, **kwargs)
    ]


def batches_forever(
    n_examples: int, lengths: list[int], batch_size: int, seed: int
) -> Iterator[list[int]]:
    """Index batches of `batch_size` examples of similar lengths (less padding), in a
    new random order every epoch, for as long as training asks."""
    rng = random.Random(seed)
    while True:
        order = sorted(range(n_examples), key=lambda i: (lengths[i], rng.random()))
        batches = [order[i : i + batch_size] for i in range(0, n_examples, batch_size)]
        rng.shuffle(batches)
        yield from batches


def fit_cpu_budget(
    model: nn.Module,
    loss_of: Callable[[list[int]], Tensor],
    batches: Iterator[list[int]],
    budget_s: float,
    lr: float = 2e-3,
    warmup_steps: int = 50,
    weight_decay: float = 0.01,
    log_every: int = 0,
) -> dict:
    """Train with AdamW until `budget_s` seconds of this process's CPU time
    (`time.process_time()`, which other programs on the machine do not inflate).
    The learning rate warms up over `warmup_steps`, then follows a cosine over the
    fraction of the budget spent, down to lr / 10. Returns the steps, the CPU
    seconds and the history of (CPU seconds, training loss)."""
    if budget_s <= 0:
        raise ValueError(f"budget_s must be > 0 CPU seconds, got {budget_s}")
    optimizer = make_adamw(model, lr, weight_decay, betas=(0.9, 0.98))
    model.train()
    start, step, history = time.process_time(), 0, []
    while (spent := time.process_time() - start) < budget_s:
        cosine = 0.5 * (1 + math.cos(math.pi * min(spent / budget_s, 1.0)))
        set_lr(optimizer, lr * min(1, (step + 1) / warmup_steps) * (0.1 + 0.9 * cosine))
        loss = loss_of(next(batches))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip_gradients(model, 1.0)
        optimizer.step()
        step += 1
        if log_every and step % log_every == 0:
            history.append(
                (round(time.process_time() - start, 2), round(loss.item(), 4))
            )
    return {"steps": step, "cpu_s": time.process_time() - start, "history": history}
