"""Solution of notebook 17's build-it (checked by tests/test_exercises.py)."""

import torch


def pack_pairs(pairs):
    """[(ids, n_prompt), ...] -> (inputs, targets, mask (T, T) bool): each pair shifted
    and its prompt's targets set to -100 on its own, the pairs joined into one row; the
    mask lets a query attend its own pair's keys up to itself only."""
    inputs, targets, blocks = [], [], []
    for ids, n_prompt in pairs:
        y = list(ids[1:])
        y[: n_prompt - 1] = [-100] * (n_prompt - 1)  # this pair's prompt
        inputs += ids[:-1]  # shifted on its own: no <eos> -> next <bos> target
        targets += y
        n = len(ids) - 1
        blocks.append(torch.ones(n, n, dtype=torch.bool).tril())  # causal in the pair
    return inputs, targets, torch.block_diag(*blocks)  # False across pairs
