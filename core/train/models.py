"""``Models``: every model a run holds, and which of them train.

The actor always trains; a reference policy, teachers (scoring engines keyed by id) and a critic
are optional. Each trainable model carries its own optimizer and is its own owner in the memory
ledger (``TrainableModel.name``), so a critic's states and gradients never hide in the actor's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class TrainableModel:
    """A module with its own optimizer (and memory-ledger owner ``name``)."""

    name: str
    module: torch.nn.Module
    optimizer: torch.optim.Optimizer
    grad_clip: float = 1.0
    """Global grad-norm clip (0 = off)."""

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]


@dataclass
class Models:
    """The actor plus, when configured, reference, teachers and critic."""

    actor: TrainableModel
    reference: torch.nn.Module | None = None
    teachers: dict[str, object] = field(default_factory=dict)
    """teacher id -> a scoring engine (``prefill`` log-probs of exact ids)."""
    critic: TrainableModel | None = None

    def trainable(self) -> list[TrainableModel]:
        """The models that take optimizer steps, actor first."""
        return [m for m in (self.actor, self.critic) if m is not None]


def adamw(module: torch.nn.Module, cfg) -> torch.optim.AdamW:
    """AdamW over ``module``'s trainable parameters from an ``OptimConfig``."""
    return torch.optim.AdamW(
        [p for p in module.parameters() if p.requires_grad],
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
    )
