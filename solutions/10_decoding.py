"""Solutions of notebook 10's build-its (checked by tests/test_exercises.py)."""

import torch


def my_sample_min_p(logits, min_p, generator=None):
    """logits (B, V) -> (B,) ids drawn from the tokens whose probability is at least
    min_p times the top one, renormalised."""
    probs = logits.softmax(-1)  # (B, V)
    top = probs.max(dim=-1, keepdim=True).values  # (B, 1): each row's top probability
    probs = probs.masked_fill(probs < min_p * top, 0.0)  # below the scaled threshold
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # renormalised


def my_beam_search(step, beam: int, max_len: int, eos: int):
    """The best finished sequence and its log-probability, keeping the `beam` best
    prefixes at each step."""
    alive, done = [((), 0.0)], []  # (prefix, log-probability)
    for _ in range(max_len):
        # every live prefix grown by every token, best first
        grown = sorted(
            ((p + (t,), s + lp) for p, s in alive for t, lp in enumerate(step(p))),
            key=lambda c: -c[1],
        )
        alive = []
        for p, s in grown[:beam]:
            (done if p[-1] == eos else alive).append((p, s))
        if not alive:
            break
    tokens, score = max(done or alive, key=lambda c: c[1])  # live: if none finished
    return list(tokens), float(score)
