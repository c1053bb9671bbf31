"""DSA in both engines over left-padded batches: one selection rule, the actor and rollout hooks.

Design
------
Both engines hold left-padded batches: slot ``t`` is an absolute index into the padded sequence and
RoPE positions are ``cumsum(valid) - 1``. Selection runs in the SLOT space: key slot ``s`` may be
chosen for query slot ``t`` when ``s <= t`` and the key is real (``key_valid``), or ``s == t`` so
that padding rows and rows of finished samples attend to themselves and are never empty (the rule
of the dense kernels). ``select_padded`` is that rule, defined once; the actor applies it to the
full sequence, the rollout engine to each prefill chunk / decode token against its KV cache, and
both get the same set for every query (given float32-identical indexer scores, see
``core.model.dsa``). Telemetry converts slots to positions by subtracting the sample's pad offset.

Indexer parameters live in the actor: ``ActorDSA`` is registered as ``core_attention.dsa``, so
``actor.named_weights()`` lists ``decoder.layers.L.self_attention.core_attention.dsa.indexer.*``
and weight sync forwards them as ``dsa.<name>`` (``core.sync.convert``). ``EngineDSA`` reads them
from the rollout engine's installed weights (cast to the engine precision on load), so both
engines share the seeded, frozen indexer. Either engine may run the ``nondeterministic`` Top-k
kernel emulation: the rollout (``rollout.topk_mode``) or the actor (``train.topk_mode``: the
trainer recomputes Top-k, as GLM-5's does, and a nondeterministic kernel there degraded its RL).
Each nondeterministic hook draws its noise from its own seeded generator.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from core.model.config import ModelConfig
from core.model.dsa import DSAConfig, Indexer, indexer_kl_loss, sparse_attention
from core.model.dsa_select import TopkSelection, select_topk

INDEXER_PARAMS = ("wq", "wk", "head_weights")


def dsa_config(
    cfg: ModelConfig, *, topk_mode: str = "deterministic", noise_scale: float | None = None
) -> DSAConfig:
    """The ``DSAConfig`` of a policy with ``cfg.dsa_topk > 0`` (``topk_mode`` of this engine;
    ``noise_scale``: score-noise std of the nondeterministic kernel, None = DSAConfig's default)."""
    if cfg.dsa_topk < 1:
        raise ValueError(f"model.dsa_topk={cfg.dsa_topk}: DSA needs dsa_topk >= 1")
    return DSAConfig(
        topk=cfg.dsa_topk,
        n_index_heads=cfg.dsa_index_heads,
        index_dim=cfg.dsa_index_dim,
        trainable=cfg.dsa_trainable,
        topk_mode=topk_mode,
        **({} if noise_scale is None else {"noise_scale": noise_scale}),
    )


def indexer_weight_name(layer: int, param: str) -> str:
    """Actor weight name of one indexer parameter (``param`` in ``INDEXER_PARAMS``)."""
    return f"decoder.layers.{layer}.self_attention.core_attention.dsa.indexer.{param}"


def indexer_seed(seed: int, layer: int) -> int:
    """Seed of layer ``layer``'s indexer in a run seeded ``seed`` (distinct per layer)."""
    return 1_000_003 * seed + 7919 * (layer + 1)


def allowed_keys(q_idx: torch.Tensor, key_valid: torch.Tensor) -> torch.Tensor:
    """Keys a query may select besides causality: real keys, plus the query's own slot.

    Args:
        q_idx: [Tq] int query slots.
        key_valid: [B, Tk] bool, False on padding (and on slots of finished samples).

    Returns:
        [B, Tq, Tk] bool.
    """
    keys = torch.arange(key_valid.shape[1], device=key_valid.device)  # [Tk]
    own = keys[None, :] == q_idx.to(torch.int64)[:, None]  # [Tq, Tk]
    return key_valid[:, None, :] | own[None]


def select_padded(
    scores: torch.Tensor,
    q_idx: torch.Tensor,
    key_valid: torch.Tensor,
    *,
    k: int,
    mode: str = "deterministic",
    noise_scale: float = 0.0,
    generator: torch.Generator | None = None,
) -> TopkSelection:
    """Top-``k`` selection of a left-padded batch in the slot space (the rule of both engines).

    Args:
        scores: [B, Tq, Tk] indexer scores; keys are slots 0..Tk-1.
        q_idx: [Tq] int query slots (each < Tk).
        key_valid: [B, Tk] bool.
        k, mode, noise_scale, generator: as ``select_topk``.

    Returns:
        TopkSelection [B, Tq, k] of key slots, ascending, -1 padded.
    """
    return select_topk(
        scores,
        q_idx,
        k=k,
        mode=mode,
        noise_scale=noise_scale,
        generator=generator,
        allowed=allowed_keys(q_idx, key_valid),
    )


def padded_dsa_attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_idx: torch.Tensor,
    key_valid: torch.Tensor,
    *,
    indexer: Indexer,
    cfg: DSAConfig,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, TopkSelection]:
    """Indexer scores -> ``select_padded`` -> sparse attention (scale 1/sqrt(D)).

    Args:
        q: [B, Tq, Hq, D] post-RoPE queries at slots ``q_idx`` [Tq].
        k, v: [B, Tk, Hkv, D] post-RoPE keys / values at slots 0..Tk-1.
        key_valid: [B, Tk] bool.

    Returns:
        (out [B, Tq, Hq, D] in q.dtype, TopkSelection [B, Tq, cfg.topk] of slots).
    """
    with torch.no_grad():  # discrete selection: no gradient through the indexer
        scores = indexer.scores(q.detach(), k.detach())  # [B, Tq, Tk]
    sel = select_padded(
        scores,
        q_idx,
        key_valid,
        k=cfg.topk,
        mode=cfg.topk_mode,
        noise_scale=cfg.noise_scale,
        generator=generator,
    )
    return sparse_attention(q, k, v, sel, scale=1.0 / math.sqrt(q.shape[-1])), sel


def kernel_generator(
    generator: torch.Generator | None, cfg: DSAConfig, device: torch.device, seed: int
) -> torch.Generator | None:
    """A hook's noise generator: ``generator`` once made, else a new one seeded ``seed`` on
    ``device`` for the nondeterministic kernel (None for the deterministic one)."""
    if generator is None and cfg.topk_mode == "nondeterministic":
        generator = torch.Generator(device=device).manual_seed(seed)
    return generator


class ActorDSA(nn.Module):
    """The actor's DSA core attention of one layer; owns the layer's (seeded) indexer."""

    def __init__(
        self, cfg: DSAConfig, *, n_heads: int, n_kv_heads: int, head_dim: int, seed: int
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.seed = seed
        self.generator: torch.Generator | None = None  # the nondeterministic kernel's noise
        self.indexer = Indexer(
            cfg,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            generator=torch.Generator().manual_seed(seed),
        )
        self.warmup = False
        """Dense warm-up mode (``core.model.dsa_warmup``): attend densely and leave the indexer's
        KL to the main attention in ``warmup_loss``."""
        self.warmup_loss: torch.Tensor | None = None

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        pos: torch.Tensor,
        key_valid: torch.Tensor,
    ) -> tuple[torch.Tensor, TopkSelection]:
        """Full sequence: q [B, T, Hq, D], k/v [B, T, Hkv, D], pos/key_valid [B, T] (pos unused:
        RoPE is applied already; selection is in the slot space)."""
        del pos
        q_idx = torch.arange(q.shape[1], device=q.device)  # [T]
        if not self.warmup:
            self.generator = kernel_generator(self.generator, self.cfg, q.device, self.seed + 2)
            return padded_dsa_attend(
                q,
                k,
                v,
                q_idx,
                key_valid,
                indexer=self.indexer,
                cfg=self.cfg,
                generator=self.generator,
            )
        scale = 1.0 / math.sqrt(q.shape[-1])
        scores = self.indexer.scores(q.detach(), k.detach())  # [B, T, T], grads to the indexer
        sel = select_padded(scores.detach(), q_idx, key_valid, k=k.shape[1])  # every allowed key
        self.warmup_loss, _ = indexer_kl_loss(
            scores, q.detach(), k.detach(), q_idx, scale=scale, sel=sel, query_mask=key_valid
        )
        return sparse_attention(q, k, v, sel, scale=scale), sel  # dense attention


def actor_dsa_factory(
    cfg: ModelConfig,
    *,
    seed: int,
    topk_mode: str = "deterministic",
    noise_scale: float | None = None,
):
    """``layer -> ActorDSA`` for ``Actor(dsa_factory=...)``; indexers seeded by ``indexer_seed``
    (``topk_mode`` / ``noise_scale``: the actor's Top-k kernel, see ``dsa_config``)."""
    dcfg = dsa_config(cfg, topk_mode=topk_mode, noise_scale=noise_scale)

    def make(layer: int) -> ActorDSA:
        return ActorDSA(
            dcfg,
            n_heads=cfg.num_heads,
            n_kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim,
            seed=indexer_seed(seed, layer),
        )

    return make


class EngineDSA:
    """The rollout engine's DSA hook of one layer, over the indexer weights the engine holds.

    Called by the engine as ``(q, k_all, v_all, q_pos, key_valid, q_idx)`` with q [B, Tq, Hq, D]
    at slots ``q_idx`` [Tq], k_all/v_all [B, Tk, Hkv, D] from the KV cache, key_valid [B, Tk];
    returns (out [B, Tq, Hq, D], TopkSelection [B, Tq, k] of slots).
    """

    def __init__(self, engine, layer: int, cfg: DSAConfig, *, seed: int) -> None:
        mc = engine.cfg
        self.engine, self.layer, self.cfg, self.seed = engine, layer, cfg, seed
        self.names = tuple("dsa." + indexer_weight_name(layer, p) for p in INDEXER_PARAMS)
        self.indexer = Indexer(  # the parameters are overwritten from the engine's weights
            cfg,
            n_heads=mc.num_heads,
            n_kv_heads=mc.num_kv_heads,
            head_dim=mc.head_dim,
            generator=torch.Generator().manual_seed(0),
        )
        self._source: tuple | None = None
        self.generator: torch.Generator | None = None

    def _refresh(self) -> None:
        """Copy the indexer weights in after every weight sync (identity of the installed tensors)."""
        missing = [n for n in self.names if n not in self.engine.weights]
        if missing:
            raise RuntimeError(f"rollout engine has no DSA indexer weights {missing}: sync first")
        source = tuple(self.engine.weights[n] for n in self.names)
        if self._source is not None and all(a is b for a, b in zip(source, self._source)):
            return
        with torch.no_grad():
            for param, value in zip(INDEXER_PARAMS, source):
                getattr(self.indexer, param).copy_(value)
        self._source = source

    def __call__(self, q, k_all, v_all, *, key_valid, q_idx):
        """q [B, Tq, Hq, D] at slots ``q_idx`` [Tq] (RoPE applied; selection in slot space)."""
        self._refresh()
        if self.indexer.wq.device != q.device:
            self.indexer.to(q.device)
        self.generator = kernel_generator(self.generator, self.cfg, q.device, self.seed)
        return padded_dsa_attend(
            q,
            k_all,
            v_all,
            q_idx,
            key_valid,
            indexer=self.indexer,
            cfg=self.cfg,
            generator=self.generator,
        )


def engine_dsa(
    engine, *, topk_mode: str, seed: int, noise_scale: float | None = None
) -> dict[int, EngineDSA]:
    """The rollout engine's ``dsa`` hooks (``{}`` for a dense policy, ``dsa_topk == 0``)."""
    if engine.cfg.dsa_topk == 0:
        return {}
    dcfg = dsa_config(engine.cfg, topk_mode=topk_mode, noise_scale=noise_scale)
    return {
        layer: EngineDSA(engine, layer, dcfg, seed=indexer_seed(seed, layer) + 1)
        for layer in range(engine.cfg.num_layers)
    }
