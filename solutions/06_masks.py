"""Solution of notebook 06's build-it (checked by tests/test_exercises.py)."""

import torch


def my_sliding_window_mask(ids, pad_id, window):
    """ids (B, T) -> (B, 1, T, T) bool, True = may attend: query t sees the non-<pad>
    keys t - window + 1 .. t."""
    T = ids.size(1)
    pos = torch.arange(T)
    back = pos[:, None] - pos[None, :]  # (T, T): t - s, how far back key s is
    window_mask = (back >= 0) & (back < window)  # s <= t, and at most window - 1 back
    keys = (ids != pad_id)[:, None, None, :]  # (B, 1, 1, T): real keys
    return window_mask & keys  # (B, 1, T, T) by broadcasting
