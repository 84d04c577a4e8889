import math

import torch
import torch.nn as nn
from torch import Tensor


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank update (Hu et al., 2021):
    y = x W^T + b + (alpha / r) * dropout(x) A^T B^T, with A (r, in) and B (out, r).
    B starts at zero, so the layer starts as the base layer."""

    def __init__(
        self, base: nn.Linear, rank: int, alpha: float = 1.0, dropout: float = 0.0
    ):
        super().__init__()
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        self.base = base.requires_grad_(False)  # W and b stay as they were
        self.rank, self.alpha, self.scaling = rank, alpha, alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features))  # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))  # (out, r)
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as nn.Linear (and peft)
        self.drop = nn.Dropout(dropout)
        self.merged = False

    def delta_weight(self) -> Tensor:
        """The update as a full matrix: (alpha / r) B A, shaped like W (out, in)."""
        return self.scaling * self.lora_B @ self.lora_A

    def forward(self, x: Tensor) -> Tensor:
        y = self.base(x)  # (..., out)
        if self.merged:  # the update is already inside W
            return y
        low_rank = (
            self.drop(x) @ self.lora_A.T @ self.lora_B.T
        )  # (..., r) -> (..., out)
        return y + self.scaling * low_rank

    @torch.no_grad()
    def merge(self) -> None:
        """W <- W + (alpha / r) B A: one matrix again, no extra cost per token."""
        if self.merged:
            raise RuntimeError("this LoRALinear is already merged")
        self.base.weight += self.delta_weight().to(self.base.weight.dtype)
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """W <- W - (alpha / r) B A: the base weights back (to train on, or swap)."""
        if not self.merged:
            raise RuntimeError("this LoRALinear is not merged")
        self.base.weight -= self.delta_weight().to(self.base.weight.dtype)
        self.merged = False


def add_lora(
    model: nn.Module,
    rank: int,
    alpha: float = 1.0,
    dropout: float = 0.0,
    targets: tuple[str, ...] = ("qkv", "proj", "fc"),
) -> list[str]:
    """Freeze every parameter of `model`, then put a LoRALinear around each nn.Linear
    whose name ends with one of `targets`; returns the names wrapped."""
    model.requires_grad_(False)
    wrapped = []
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear) and name.split(".")[-1] in targets:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, LoRALinear(module, rank, alpha, dropout))
            wrapped.append(name)
    if not wrapped:
        raise ValueError(f"no nn.Linear named like {targets} in the model")
    return wrapped


def lora_layers(model: nn.Module) -> list[LoRALinear]:
    """Every LoRALinear inside `model`."""
    return [m for m in model.modules() if isinstance(m, LoRALinear)]


def trainable_parameters(model: nn.Module) -> int:
    """Parameters the optimizer updates (requires_grad), shared ones once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
