"""Solutions of notebook 10's build-its (checked by tests/test_exercises.py)."""

import torch


def my_sample_top_p(logits, p, generator=None):
    """logits (B, V) -> (B,) ids drawn from the smallest set of top tokens whose
    probability reaches p, renormalised."""
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)  # (B, V)
    before = probs.cumsum(-1) - probs  # the mass of the tokens ranked above
    probs = probs.masked_fill(before >= p, 0.0)  # p already reached without it
    pick = torch.multinomial(probs, 1, generator=generator)  # (B, 1), renormalised
    return order.gather(-1, pick).squeeze(-1)  # (B,): back to token ids


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
    tokens, score = max(done + alive, key=lambda c: c[1])
    return list(tokens), float(score)
