"""GRPO / OPD + trust-mask hyperparameters (the ``[algorithm]`` config section)."""

from __future__ import annotations

from dataclasses import dataclass

from core.algorithms.policy import AGG_MODES, POLICY_LOSSES, TRUST_RULES

OLD_LOGP_SOURCES = ("recompute", "separate", "rollout")
ALGORITHMS = ("grpo", "sao", "compaction")
"""``grpo``: group baseline (``core.loops.grpo``); ``sao``: single rollout + critic with
skip-observation GAE (``core.loops.sao``); ``compaction``: CompactionRL, the critic loop over
compacted trajectories (``core.loops.compaction_rl``). The last two read ``[critic]``."""
ADVANTAGES = ("grpo", "opd", "grpo+opd")
"""``grpo``: the group-normalized task advantage; ``opd``: the teacher log-ratio per token
(``core.algorithms.distill``); ``grpo+opd``: their sum, the OPD part weighted by ``opd_weight``."""
OPD_LOSSES = ("sampled", "topk")
"""How the teacher signal enters the loss: ``sampled`` — the log-ratio as a per-token advantage
of the policy loss (the sampled-token reverse-KL gradient); ``topk`` — the Top-k reverse KL with
the truncation correction as its own loss term (``core.algorithms.distill``)."""


def run_label(name: str, advantage: str, n_teachers: int) -> str:
    """What a run records as its algorithm (``runs.algorithm``): the advantage actually used —
    ``grpo``, ``opd``, ``grpo+opd``, with ``mopd`` for OPD over several teacher checkpoints —
    or the critic algorithm's name (``sao``, ``compaction``: GAE advantages)."""
    if name != "grpo":
        return name
    return advantage.replace("opd", "mopd") if n_teachers > 1 else advantage


@dataclass(frozen=True)
class AlgorithmConfig:
    name: str = "grpo"
    """Algorithm: ``grpo`` | ``sao`` | ``compaction`` (``ALGORITHMS``)."""
    prompts_per_step: int = 8
    """B: prompts per optimizer step."""
    group_size: int = 8
    """G: responses per prompt (≥ 2 for a group baseline; exactly 1 for ``sao``, whose critic
    replaces the group; 1 allowed with ``advantage = "opd"``)."""
    trust_rule: str = "icepop"
    """``icepop`` | ``dis`` | ``none`` (no train/rollout trust mask)."""
    icepop_beta: float = 2.0
    """IcePop band [1/β, β] on π_train/π_rollout (β > 1)."""
    eps_low: float = 0.2
    """PPO clip (and DIS band) below 1."""
    eps_high: float = 0.28
    """PPO clip (and DIS band) above 1."""
    adv_eps: float = 1e-6
    """ε in (R − mean)/(std + ε)."""
    loss_agg_mode: str = "token-mean"
    """Token aggregation (see ``core.algorithms.policy``)."""
    staleness_limit: int = 4
    """τ: samples with v_train − v_rollout > τ are dropped (status ``stale``)."""
    policy_loss: str = "clip"
    """``clip``: PPO clipped surrogate (GRPO, the seed's reasoning RL); ``is``: unclipped
    importance-weighted policy gradient, the seed's async-RL update (bounded only by the trust
    mask: pair it with ``trust_rule = "dis"``)."""
    old_logp: str = "recompute"
    """π_old of the PPO ratio: ``recompute`` (the trainer's own log-probs at step start, from the
    training forward itself, the seed's reasoning-RL pseudocode); ``separate`` (the same
    recompute as its own no-grad forward before the update, as frameworks with an old-log-prob
    stage run it: identical when the actor's forward is deterministic, but a nondeterministic
    kernel then gives π_old and π_θ different computations, so the ratio carries its noise); or
    ``rollout`` (the rollout engine's reported log-probs, as in the seed's async-RL update
    ``exp(train_logp − rollout_logp)`` and frameworks that skip the recompute): then every
    train/rollout mismatch enters the ratio itself."""

    @property
    def uses_critic(self) -> bool:
        """The algorithm trains a value model (``[critic]``)."""
        return self.name in ("sao", "compaction")

    advantage: str = "grpo"
    """``grpo`` | ``opd`` | ``grpo+opd`` (``ADVANTAGES``); the OPD kinds need ``[teachers]``."""
    opd_weight: float = 1.0
    """w of the OPD part: Â = Â^GRPO + w·Â^OPD (``grpo+opd``), Â = w·Â^OPD (``opd``), and the
    Top-k loss term's weight (``opd_loss = "topk"``); > 0."""
    opd_loss: str = "sampled"
    """``sampled`` | ``topk`` (``OPD_LOSSES``); ``topk`` needs ``teachers.payload`` ``topk`` or
    ``full`` (``full``: the exact reverse KL)."""

    @property
    def uses_teacher(self) -> bool:
        """The advantage reads teacher log-probs."""
        return self.advantage != "grpo"

    def __post_init__(self) -> None:
        if self.name not in ALGORITHMS:
            raise ValueError(f"algorithm.name={self.name!r} not in {list(ALGORITHMS)}")
        if self.prompts_per_step < 1:
            raise ValueError(f"algorithm.prompts_per_step={self.prompts_per_step} must be >= 1")
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"algorithm.advantage={self.advantage!r} not in {list(ADVANTAGES)}")
        if self.advantage != "grpo" and self.name != "grpo":
            raise ValueError(
                f"algorithm.advantage={self.advantage!r} needs algorithm.name='grpo' (not "
                f"{self.name!r})"
            )
        if self.opd_loss not in OPD_LOSSES:
            raise ValueError(f"algorithm.opd_loss={self.opd_loss!r} not in {list(OPD_LOSSES)}")
        if not self.opd_weight > 0:
            raise ValueError(f"algorithm.opd_weight={self.opd_weight} must be > 0")
        if self.name == "sao" and self.group_size != 1:
            raise ValueError(f"algorithm.group_size={self.group_size} must be 1 for 'sao'")
        if self.name == "grpo" and self.group_size < (1 if self.advantage == "opd" else 2):
            need = "1 with advantage = 'opd'" if self.advantage == "opd" else "2 (a group baseline)"
            raise ValueError(f"algorithm.group_size={self.group_size} must be >= {need}")
        if self.group_size < 1:
            raise ValueError(f"algorithm.group_size={self.group_size} must be >= 1")
        if self.trust_rule not in TRUST_RULES:
            raise ValueError(f"algorithm.trust_rule={self.trust_rule!r} not in {list(TRUST_RULES)}")
        if not self.icepop_beta > 1:
            raise ValueError(f"algorithm.icepop_beta={self.icepop_beta} must be > 1")
        if not 0 <= self.eps_low < 1:
            raise ValueError(f"algorithm.eps_low={self.eps_low} must be in [0, 1)")
        if self.eps_high < 0:
            raise ValueError(f"algorithm.eps_high={self.eps_high} must be >= 0")
        if self.adv_eps <= 0:
            raise ValueError(f"algorithm.adv_eps={self.adv_eps} must be > 0")
        if self.loss_agg_mode not in AGG_MODES:
            raise ValueError(
                f"algorithm.loss_agg_mode={self.loss_agg_mode!r} not in {list(AGG_MODES)}"
            )
        if self.policy_loss not in POLICY_LOSSES:
            raise ValueError(
                f"algorithm.policy_loss={self.policy_loss!r} not in {list(POLICY_LOSSES)}"
            )
        if self.old_logp not in OLD_LOGP_SOURCES:
            raise ValueError(
                f"algorithm.old_logp={self.old_logp!r} not in {list(OLD_LOGP_SOURCES)}"
            )
        if self.staleness_limit < 0:
            raise ValueError(f"algorithm.staleness_limit={self.staleness_limit} must be >= 0")
