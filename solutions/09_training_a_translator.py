"""Solutions of notebook 09's build-its (checked by tests/test_exercises.py)."""

import math

import torch.nn.functional as F


def my_train_step(model, optimizer, src, tgt_in, tgt_out, pad_id, label_smoothing):
    """One update: the label-smoothed cross-entropy of model(src, tgt_in) against
    tgt_out over the real targets, backward, a step; returns the loss as a float."""
    logits = model(src, tgt_in)  # (B, T, V)
    loss = F.cross_entropy(
        logits.flatten(0, 1),  # (B*T, V)
        tgt_out.flatten(),  # (B*T,)
        ignore_index=pad_id,  # <pad> targets count neither in the sum nor the mean
        label_smoothing=label_smoothing,
    )
    optimizer.zero_grad()  # the last step's gradients are spent
    loss.backward()
    optimizer.step()
    return loss.item()


def my_train(model, optimizer, batches, lr_at, train_step):
    """Train on each batch in turn at rate lr_at(step); returns the losses, stopping
    with a ValueError at the first loss that is not finite."""
    model.train()  # dropout on
    losses = []
    for step, batch in enumerate(batches):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)  # the schedule, before the update
        loss = train_step(model, optimizer, batch)
        if not math.isfinite(loss):
            raise ValueError(f"the loss is {loss} at step {step}: stopping")
        losses.append(loss)
    return losses
