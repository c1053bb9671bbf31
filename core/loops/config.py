"""Optimizer and loop settings (the ``[optim]`` and ``[train]`` config sections)."""

from __future__ import annotations

from dataclasses import dataclass

from core.model.dsa_select import check_topk_kernel


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-4
    """AdamW learning rate (> 0)."""
    weight_decay: float = 0.0
    """AdamW weight decay (≥ 0)."""
    beta1: float = 0.9
    """AdamW β1 in [0, 1)."""
    beta2: float = 0.99
    """AdamW β2 in [0, 1)."""
    grad_clip: float = 1.0
    """Global grad-norm clip (0 = off)."""
    reset_on_sync: bool = False
    """Reset the optimizer state (AdamW moments and step, in place) after each weight sync to the
    rollout, the seed's async-RL rule; recorded per step as ``steps.optimizer_reset``."""
    eps: float = 1e-8
    """AdamW ε (> 0). Large values (≈ the gradients' scale) damp the steps of parameters whose
    gradient is mostly noise: the RL update then moves only where the signal is."""

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError(f"optim.lr={self.lr} must be > 0")
        if self.weight_decay < 0:
            raise ValueError(f"optim.weight_decay={self.weight_decay} must be >= 0")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"optim.{name}={getattr(self, name)} must be in [0, 1)")
        if not self.eps > 0:
            raise ValueError(f"optim.eps={self.eps} must be > 0")
        if self.grad_clip < 0:
            raise ValueError(f"optim.grad_clip={self.grad_clip} must be >= 0")


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 40
    """Optimizer steps."""
    seed: int = 0
    """Seed of prompts, sampling and initialization."""
    base_model: str = "core/assets/base_model"
    """Checkpoint directory the actor starts from (relative to the repo root)."""
    eval_every: int = 10
    """Greedy held-out accuracy every N steps (0 = only at the start and end)."""
    eval_size: int = 128
    """Held-out prompts per evaluation."""
    retokenize: bool = False
    """Fault: the trainer re-tokenizes decoded text instead of using the rollout's token IDs."""
    probe_size: int = 8
    """Probe batch size for the weight-sync log-prob check."""
    probe_every: int = 10
    """Run the probe at the first weight sync and then every N-th (≥ 1; 1 = every sync). Every
    sync still checksums what it sends and what went live, and every step records the train and
    rollout log-probs of every token: the probe adds the same comparison on a fixed batch."""
    shared_prefix: bool = True
    """The training forward runs each distinct prompt of the batch once (a GRPO group's G copies
    share it; ``core.model.shared_prefix``): same math per row, float rounding aside. Dense
    actors without tensor parallelism only; others forward every row."""
    routing_replay: bool = False
    """MoE routing replay: the actor's MoE layers use the rollout's recorded routes."""
    dsa_warmup_steps: int = 0
    """DSA dense warm-up before RL (``core.model.dsa_warmup``): Adam steps training the indexers
    to match the main attention, 64 prompt + reference-answer sequences each (needs
    ``model.dsa_topk > 0``; 0 = keep the seeded indexers)."""
    dsa_warmup_lr: float = 1e-3
    """Learning rate of the DSA warm-up (> 0)."""
    topk_mode: str = "deterministic"
    """The actor's DSA Top-k kernel: ``deterministic`` | ``nondeterministic`` (fault emulation:
    the trainer recomputes Top-k, as GLM-5's does, where a nondeterministic kernel degraded RL)."""
    topk_noise: float = 1e-3
    """Nondeterministic actor kernel only: std of the additive indexer-score noise (≥ 0)."""
    save_checkpoint: bool = True
    """Write the final actor weights to ``RUN_DIR/checkpoint`` (the checkpoint format of
    ``core.model.checkpoint``): a trained run can then serve as a teacher or a new base."""
    checkpoint_dir: str = ""
    """Where the final checkpoint goes: empty = ``RUN_DIR/checkpoint``; else this directory
    (relative paths from the repo root), e.g. ``runs/experts/addition``, the path the teacher
    configs route to (``configs/expert_*.toml``)."""

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"train.steps={self.steps} must be >= 0")
        if self.eval_every < 0:
            raise ValueError(f"train.eval_every={self.eval_every} must be >= 0")
        if self.eval_size < 1:
            raise ValueError(f"train.eval_size={self.eval_size} must be >= 1")
        if self.probe_size < 1:
            raise ValueError(f"train.probe_size={self.probe_size} must be >= 1")
        if not (isinstance(self.probe_every, int) and self.probe_every >= 1):
            raise ValueError(f"train.probe_every={self.probe_every!r} must be an int >= 1")
        if not (isinstance(self.dsa_warmup_steps, int) and self.dsa_warmup_steps >= 0):
            raise ValueError(
                f"train.dsa_warmup_steps={self.dsa_warmup_steps!r} must be an int >= 0"
            )
        if not self.dsa_warmup_lr > 0:
            raise ValueError(f"train.dsa_warmup_lr={self.dsa_warmup_lr} must be > 0")
        check_topk_kernel("train", self.topk_mode, self.topk_noise)
