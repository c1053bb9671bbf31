"""Everything a training run holds: models (actor + optimizer, teachers, …), rollout engine,
environments, reward mixer, weight sync, memory ledger, telemetry.

Built once from a ``RunConfig``; the loop functions in ``core.loops.grpo`` take it as their only
state. The policy version starts at 0 (the base model) and increments per optimizer step.
"""

from __future__ import annotations

import dataclasses
import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from core.envs.registry import chat_template_rev, make_env_source
from core.loops.critic import build_critic
from core.loops.step import Models, TrainableModel, adamw
from core.memory.hooks import TrainingMemory
from core.model.actor import Actor
from core.model.dsa_engines import actor_dsa_factory, engine_dsa
from core.model.dsa_warmup import warmup_indexers
from core.model.source import load_policy
from core.model.upcycle import sparse_from_dense
from core.quant.wiring import build_quant_wiring
from core.rewards.mix import RewardMixer
from core.rollout.engine import left_pad
from core.rollout.engines import build_engine
from core.sync.weight_sync import WeightSync
from core.tasks.arithmetic import make_prompts
from core.teachers.provenance import route_provenance
from core.teachers.routing import load_teachers
from core.telemetry.rows import RunConstants
from core.tokenizer.chat_template import encode_prompt, encode_response
from core.tokenizer.tokenizer import Tokenizer

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
ENGINE_PRECISION = {"fp32": "fp32", "bf16": "bf16", "w4a16": "bf16", "w8a16": "bf16", "fp8": "bf16"}


class IdCounter:
    """Run-unique sample and group ids, assigned when the rollout creates the samples."""

    def __init__(self) -> None:
        self._samples = itertools.count()
        self._groups = itertools.count()

    def samples(self, n: int) -> torch.Tensor:
        """[n] int64 fresh sample ids."""
        return torch.tensor([next(self._samples) for _ in range(n)], dtype=torch.int64)

    def groups(self, n: int) -> torch.Tensor:
        """[n] int64 fresh group ids."""
        return torch.tensor([next(self._groups) for _ in range(n)], dtype=torch.int64)


class Session:
    def __init__(self, cfg, telemetry, *, tok: Tokenizer | None = None) -> None:
        self.cfg = cfg
        self.telemetry = telemetry
        self.tok = tok or Tokenizer.load()
        torch.manual_seed(cfg.train.seed)
        base = Path(cfg.train.base_model)
        base = base if base.is_absolute() else REPO_ROOT / base
        source = cfg.model.hf_path or base  # a Hugging Face directory, else our checkpoint
        weights, model_cfg, self.base_meta = load_policy(source, tokenizer=self.tok)
        if self.tok.vocab_size > model_cfg.vocab_size:
            raise ValueError(
                f"tokenizer vocab {self.tok.vocab_size} > model.vocab_size {model_cfg.vocab_size}"
            )
        overrides = {
            k: v
            for k, v in dataclasses.asdict(cfg.model).items()
            if k
            in (
                "dsa_topk",
                "dsa_index_heads",
                "dsa_index_dim",
                "dsa_trainable",
                "moe_layers",
                "num_experts",
                "moe_topk",
            )
        }
        self.model_cfg = dataclasses.replace(model_cfg, **overrides)
        self.quant = build_quant_wiring(
            cfg.quant,
            precision=cfg.rollout.precision,
            quant_preset=cfg.rollout.quant_preset,
            model_cfg=self.model_cfg,
        )
        dsa_factory = None
        if self.model_cfg.dsa_topk > 0:
            dsa_factory = actor_dsa_factory(
                self.model_cfg,
                seed=cfg.train.seed,
                topk_mode=cfg.train.topk_mode,
                noise_scale=cfg.train.topk_noise,
            )
        self.actor = Actor(
            self.model_cfg,
            seed=cfg.train.seed,
            linear_overrides=self.quant.linear_overrides,
            dsa_factory=dsa_factory,
        )
        self.quant.attach(self.actor)
        self.actor.load_weights(sparse_from_dense(weights, self.actor, seed=cfg.train.seed))
        self.dsa_warmup_kl = self._dsa_warmup(cfg.train.dsa_warmup_steps, cfg.train.dsa_warmup_lr)
        critic = None
        if cfg.algorithm.uses_critic:  # a value model from the same base (core.loops.critic)
            critic = build_critic(
                self.model_cfg, weights, cfg.critic, cfg.optim, seed=cfg.train.seed
            )
        self.models = Models(
            actor=TrainableModel(
                "actor", self.actor, adamw(self.actor, cfg.optim), grad_clip=cfg.optim.grad_clip
            ),
            critic=critic,
        )
        self.envs = make_env_source(cfg, tok=self.tok)
        self.env_pool = ThreadPoolExecutor(cfg.rollout.env_threads, thread_name_prefix="env")
        """Steps a turn's environments concurrently in the sync loop (their latencies overlap)."""
        self.engine = build_engine(
            cfg.rollout.engine,
            self.model_cfg,
            precision=ENGINE_PRECISION[cfg.rollout.precision],
            logprob_mode=cfg.rollout.logprob_mode,
        )
        self.engine.dsa = engine_dsa(
            self.engine,
            topk_mode=cfg.rollout.topk_mode,
            seed=cfg.train.seed,
            noise_scale=cfg.rollout.topk_noise,
        )
        self.weight_sync = WeightSync(
            self.engine,
            telemetry,
            quantizer=self.quant.quantizer,
            temperature=cfg.rollout.temperature,
        )
        self.memory = TrainingMemory(
            self.actor,
            self.models.actor.optimizer,
            telemetry=telemetry,
            engine=self.engine,
            weight_sync=self.weight_sync,
        )
        for model in self.models.trainable()[1:]:  # the actor is tracked above
            self.memory.add_model(model.name, model.module, model.optimizer)
        student = {
            "tokenizer_rev": self.tok.revision,
            "vocab_hash": self.tok.vocab_hash,
            "chat_template_rev": chat_template_rev(cfg.env.name),
            "vocab_size": self.model_cfg.vocab_size,
        }
        # teachers: domain -> teacher id, and the engines (compatibility checked on load)
        self.teacher_routes, self.models.teachers = load_teachers(
            cfg.teachers, repo_root=REPO_ROOT, **student
        )
        self.memory.teachers_loaded(self.models.teachers)
        self.teacher_provenance = route_provenance(
            self.teacher_routes,
            {tid: t.meta for tid, t in self.models.teachers.items()},
            self.base_meta,
            cfg.teachers.sources,
            repo_root=REPO_ROOT,
        )
        self.rewards = RewardMixer(cfg.rewards, tok=self.tok, repo_root=REPO_ROOT, student=student)
        self.eval_by_domain: dict[str, float] = {}  # the latest evaluation, per domain
        self.generator = torch.Generator().manual_seed(cfg.train.seed)
        self.version = 0
        self.ids = IdCounter()
        self.run_constants = RunConstants(
            tokenizer_rev=self.tok.revision,
            chat_template_rev=chat_template_rev(cfg.env.name),
            sampling=dataclasses.asdict(cfg.rollout.sampling()) | {"seed": cfg.train.seed},
            token_sample_rate=cfg.telemetry.token_sample_rate,
        )
        self.probe_batch = self._probe_batch(cfg.train.probe_size)
        self.last_sync = self.sync()

    def _dsa_warmup(self, steps: int, lr: float) -> list[float]:
        """Train the indexers on prompt + reference-answer sequences (seeds apart from RL's)."""
        if steps == 0:
            return []
        if self.model_cfg.dsa_topk == 0:
            raise ValueError("train.dsa_warmup_steps > 0 needs DSA: set model.dsa_topk > 0")

        batches = (self._reference_batch(64, seed=2_000_003 + i) for i in range(steps))
        return warmup_indexers(self.actor, batches, lr=lr)

    def _reference_batch(self, n: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` seeded problems as prompt + reference answer, left-padded (ids, valid) [n, T]."""
        problems = make_prompts(n, seed=seed, cfg=self.cfg.task)
        seqs = [
            encode_prompt(p.question, tok=self.tok) + encode_response(p.answer, tok=self.tok)
            for p in problems
        ]
        return left_pad(seqs, self.tok.pad_id)

    def _probe_batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Fixed probe sequences: prompt + reference answer of seeded problems."""
        return self._reference_batch(n, seed=999_983)

    def sync(self):
        """Weight sync actor → rollout engine; the fixed-batch probe at the first sync and every
        ``train.probe_every``-th (``last_sync`` then carries its numbers, else None)."""
        probe = (
            self.probe_batch if self.weight_sync.sync_id % self.cfg.train.probe_every == 0 else None
        )
        self.last_sync = self.weight_sync.sync(self.actor, self.version, probe)
        self.quant.record(self.actor, self.engine, self.version, self.telemetry)  # qparams rows
        return self.last_sync

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The actor's optimizer."""
        return self.models.actor.optimizer

    def peak_memory(self, step: int) -> int | None:
        """Tracked bytes at ``step``'s memory peak (the ledger, ``core.memory.hooks``)."""
        return self.memory.peak_bytes(step)
