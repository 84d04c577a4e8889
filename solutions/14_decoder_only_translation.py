"""Solution of notebook 14's build-it (checked by tests/test_decoder_only.py)."""


def mask_targets(ids: list[int], n_prompt: int) -> list[int]:
    """ids[1:], the first n_prompt - 1 targets (inside the prompt) set to -100."""
    targets = list(ids[1:])
    targets[: n_prompt - 1] = [-100] * (n_prompt - 1)  # <zh> is given, not guessed
    return targets
