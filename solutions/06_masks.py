"""Solution of notebook 06's build-it (checked by tests/test_exercises.py)."""

import torch


def my_masks(src, tgt_in, pad_id):
    """src (B, S), tgt_in (B, T) -> (src_mask (B, 1, 1, S), tgt_mask (B, 1, T, T)),
    bool, True = may attend."""
    src_mask = (src != pad_id)[:, None, None, :]  # (B, 1, 1, S): real source keys
    T = tgt_in.size(1)
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T): key j <= query i
    tgt_pad = (tgt_in != pad_id)[:, None, None, :]  # (B, 1, 1, T): real target keys
    return src_mask, causal & tgt_pad  # (B, 1, T, T) by broadcasting
