"""Embedded rollout engine: token-in/token-out batched generation with a KV cache.

A separate implementation of the policy's math from the megatron actor (its own parameter
layout — separate q/k/v, gate/up — its own attention kernel and KV cache), as vLLM/SGLang are
separate from Megatron in production, so train/rollout mismatch is real. Precision ``fp32`` or
``bf16`` (matmuls in bf16, norms/softmax in fp32). Prompts are left-padded; positions count from
each sample's first real token. Optional q/k/v biases (``bq/bk/bv``), per-head q/k RMSNorm
(``q_norm/k_norm``) and a tied output head follow ``ModelConfig``. Linear weights may be replaced
by quantized weights (any object with ``.linear(x, bias)``), which the quantization path installs.
Implements ``core.rollout.protocol.RolloutEngineProtocol``; a request's KV cache is allocated at
its start and released at its end (also on error), nothing is cached across requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from core.model.config import ModelConfig
from core.model.moe import route
from core.model.rope import apply_rope, positions_from_padding, rope_angles
from core.model.shared_prefix import distinct_rows
from core.rollout.protocol import RolloutBatch
from core.rollout.sampling import SamplingParams, sample_tokens

__all__ = ["RolloutBatch", "RolloutEngine", "left_pad"]

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """prompts -> (ids [B, T], valid [B, T] bool), left-padded."""
    t = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), t), pad_id, dtype=torch.int64)
    valid = torch.zeros((len(prompts), t), dtype=torch.bool)
    for i, p in enumerate(prompts):
        if p:
            ids[i, t - len(p) :] = torch.tensor(p, dtype=torch.int64)
            valid[i, t - len(p) :] = True
    return ids, valid


class RolloutEngine:
    """Generates with weights in the engine's own layout (see ``core.sync.convert``)."""

    def __init__(self, cfg: ModelConfig, *, precision: str = "fp32", dsa=None) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"rollout.precision={precision!r} not in {sorted(PRECISIONS)}")
        self.cfg = cfg
        self.precision = precision
        self.dtype = PRECISIONS[precision]
        self.weights: dict[str, object] = {}
        self.policy_version = -1
        self.dsa = dsa or {}  # layer -> callable(q, k, v, *, key_valid, q_idx) -> (out, selection)
        self.memory_hooks = None  # core.memory.hooks.TrainingMemory: KV caches to the ledger
        self._kv_bytes = 0  # live KV cache bytes (requests in flight)
        self._kv_peak = 0

    # ---- weights -------------------------------------------------------------------------
    def load_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Install weights (engine layout) as ``version``; float tensors are cast to the engine
        precision. A version below the installed one is refused (``ValueError``)."""
        if version < self.policy_version:
            raise ValueError(
                f"weight update version {version} < installed policy_version {self.policy_version}"
            )
        self.weights = {
            k: (v.to(self.dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
            for k, v in weights.items()
        }
        self.policy_version = version

    def _lin(self, name: str, x: torch.Tensor, bias: str | None = None) -> torch.Tensor:
        w = self.weights[name]
        b = None if bias is None else self.weights[bias]
        if not isinstance(w, torch.Tensor):
            return w.linear(x, b)
        y = x @ w.t()
        return y if b is None else y + b

    def _norm(self, name: str, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.norm_eps)
        return (xf * self.weights[name].float()).to(self.dtype)

    # ---- forward over a chunk with the cache ---------------------------------------------
    def _ffn(self, l: int, x: torch.Tensor, routes: dict) -> torch.Tensor:
        p = f"layers.{l}."
        if l not in self.cfg.moe_layers:
            return self._lin(
                p + "w_down", F.silu(self._lin(p + "w_gate", x)) * self._lin(p + "w_up", x)
            )
        b, t, h = x.shape
        flat = x.reshape(b * t, h)
        experts, gates = route(self._lin(p + "router", flat), self.cfg.moe_topk)
        routes.setdefault(l, []).append(experts.reshape(b, t, -1))
        out = torch.zeros_like(flat)
        for e in range(self.cfg.num_experts):
            hit = experts == e
            rows = hit.any(-1).nonzero(as_tuple=True)[0]
            if rows.numel() == 0:
                continue
            xe = flat[rows]
            g = xe @ self.weights[p + "experts.w_gate"][e].t()
            u = xe @ self.weights[p + "experts.w_up"][e].t()
            y = (F.silu(g) * u) @ self.weights[p + "experts.w_down"][e].t()
            out[rows] += y * (gates * hit).sum(-1)[rows, None].to(self.dtype)
        return out.reshape(b, t, h)

    def _attend(self, l, q, kv, *, q_idx, key_valid, topk) -> torch.Tensor:
        """q [B, T, Hq, D]; kv = (k_all, v_all) [B, Tk, Hkv, D]; q_idx [T] absolute slots."""
        k_all, v_all = kv
        if l in self.dsa:
            out, sel = self.dsa[l](q, k_all, v_all, key_valid=key_valid, q_idx=q_idx)
            topk.setdefault(l, []).append(sel)
            return out
        rep = q.shape[2] // k_all.shape[2]
        k = k_all.repeat_interleave(rep, dim=2).float()
        v = v_all.repeat_interleave(rep, dim=2).float()
        scores = torch.einsum("bthd,bshd->bhts", q.float(), k) / q.shape[-1] ** 0.5
        tk = k_all.shape[1]
        kpos = torch.arange(tk)
        allowed = (kpos[None, :] <= q_idx[:, None])[None] & key_valid[:, None, :]  # [B, T, Tk]
        allowed |= kpos[None, None, :] == q_idx[None, :, None]
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        out = torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v)
        return out.to(self.dtype)

    def _forward(
        self, ids, key_valid, *, start: int, cache: list, routes: dict, topk: dict, last=False
    ):
        """ids [B, T] for slots start..start+T; key_valid [B, start+T]. Returns logits [B, T, V]
        ([B, 1, V] with ``last``: the head runs on the last slot only, as decoding needs)."""
        cfg = self.cfg
        b, t = ids.shape
        pos_all = positions_from_padding(key_valid)  # [B, start+T]
        q_pos = pos_all[:, start:]
        q_idx = torch.arange(start, start + t)
        cos, sin = rope_angles(q_pos, cfg.head_dim, cfg.rope_base)
        x = self.weights["embed"][ids]  # [B, T, H]
        for l in range(cfg.num_layers):
            p = f"layers.{l}."
            h = self._norm(p + "attn_norm", x)
            bq, bk, bv = (p + n if cfg.qkv_bias else None for n in ("bq", "bk", "bv"))
            q = self._lin(p + "wq", h, bq).view(b, t, cfg.num_heads, cfg.head_dim)
            k = self._lin(p + "wk", h, bk).view(b, t, cfg.num_kv_heads, cfg.head_dim)
            v = self._lin(p + "wv", h, bv).view(b, t, cfg.num_kv_heads, cfg.head_dim)
            if cfg.qk_norm:  # per-head RMSNorm before RoPE (Qwen3)
                q, k = self._norm(p + "q_norm", q), self._norm(p + "k_norm", k)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            cache[l][0][:, start : start + t] = k
            cache[l][1][:, start : start + t] = v
            k_all, v_all = cache[l][0][:, : start + t], cache[l][1][:, : start + t]
            a = self._attend(l, q, (k_all, v_all), q_idx=q_idx, key_valid=key_valid, topk=topk)
            x = x + self._lin(p + "wo", a.reshape(b, t, -1))
            x = x + self._ffn(l, self._norm(p + "ffn_norm", x), routes)
        if last:
            x = x[:, -1:]
        return self._lin("lm_head", self._norm("final_norm", x)).float()

    def _new_cache(self, b: int, t: int) -> list:
        shape = (b, t, self.cfg.num_kv_heads, self.cfg.head_dim)
        cache = [
            (torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype))
            for _ in range(self.cfg.num_layers)
        ]
        if self.memory_hooks is not None:  # the ledger frees it when the tensors die
            self.memory_hooks.kv_cache_allocated(cache)
        self._kv_bytes += 2 * self.cfg.num_layers * cache[0][0].numel() * cache[0][0].element_size()
        self._kv_peak = max(self._kv_peak, self._kv_bytes)
        return cache

    def _release_cache(self, cache: list) -> None:
        """End of a request: drop the engine's references to its cache (views may outlive it)."""
        if cache:
            self._kv_bytes -= 2 * len(cache) * cache[0][0].numel() * cache[0][0].element_size()
            cache.clear()

    def kv_cache_bytes(self) -> int:
        """KV cache bytes held by requests in flight (0 when idle)."""
        return self._kv_bytes

    def kv_cache_peak_bytes(self) -> int:
        """Largest ``kv_cache_bytes`` since construction or the last ``reset_kv_cache``."""
        return self._kv_peak

    def reset_kv_cache(self) -> None:
        """Nothing is cached across requests here; resets the peak."""
        self._kv_peak = self._kv_bytes

    # ---- public API --------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        *,
        eos_id: int,
        pad_id: int,
        generator: torch.Generator | None = None,
        greedy: bool = False,
    ) -> RolloutBatch:
        """Token IDs in, token IDs + log-probs + finish reasons out."""
        if not self.weights:
            raise RuntimeError(
                "rollout engine has no weights: call load_weights (weight sync) first"
            )
        prompt_ids, prompt_valid = left_pad(prompts, pad_id)
        b, tp = prompt_ids.shape
        tr = params.max_new_tokens
        if tp + tr > self.cfg.max_seq_len:
            raise ValueError(
                f"prompt ({tp}) + max_new_tokens ({tr}) > model.max_seq_len={self.cfg.max_seq_len}"
            )
        cache = self._new_cache(b, tp + tr)
        try:
            return self._decode(
                prompt_ids,
                prompt_valid,
                params,
                cache=cache,
                eos_id=eos_id,
                pad_id=pad_id,
                generator=generator,
                greedy=greedy,
            )
        finally:
            self._release_cache(cache)

    def _decode(
        self, prompt_ids, prompt_valid, params, *, cache, eos_id, pad_id, generator, greedy
    ):
        """Prefill the prompts, then sample ``params.max_new_tokens`` steps (or until all stop)."""
        b, tp = prompt_ids.shape
        tr = params.max_new_tokens
        routes: dict = {}
        topk: dict = {}
        key_valid = prompt_valid.clone()
        logits = self._prefill(prompt_ids, prompt_valid, cache=cache, routes=routes, topk=topk)
        out_ids = torch.full((b, tr), pad_id, dtype=torch.int64)
        out_lp = torch.zeros((b, tr), dtype=torch.float32)
        mask = torch.zeros((b, tr), dtype=torch.bool)
        done = torch.zeros(b, dtype=torch.bool)
        for s in range(tr):
            tok, lp = sample_tokens(logits, params, generator, greedy=greedy)
            alive = ~done
            out_ids[:, s] = torch.where(alive, tok, pad_id)
            out_lp[:, s] = torch.where(alive, lp, 0.0)
            mask[:, s] = alive
            done = done | (alive & (tok == eos_id))
            if bool(done.all()) or s == tr - 1:
                break
            key_valid = torch.cat([key_valid, alive[:, None]], dim=1)
            logits = self._forward(
                out_ids[:, s : s + 1],
                key_valid,
                start=tp + s,
                cache=cache,
                routes=routes,
                topk=topk,
                last=True,
            )[:, -1]
        return RolloutBatch(
            prompt_ids,
            prompt_valid,
            out_ids,
            mask,
            out_lp,
            done,
            self.policy_version,
            routes={l: torch.cat(r, dim=1) for l, r in routes.items()},
            topk=topk,
        )

    def _prefill(self, ids, valid, *, cache: list, routes: dict, topk: dict) -> torch.Tensor:
        """The prompts' prefill into ``cache``; returns each row's next-token logits [B, V].

        Prefix sharing (as vLLM's prefix cache): identical prompt rows (a GRPO group's G copies)
        are prefilled once and their KV rows copied to every copy, so a batch of B prompts in
        B / G groups prefills B / G rows. Engines with DSA layers (whose selection records are
        per row) prefill every row.
        """
        rows, inverse = distinct_rows(ids, valid)
        if self.dsa or rows.shape[0] == ids.shape[0]:
            return self._forward(
                ids, valid, start=0, cache=cache, routes=routes, topk=topk, last=True
            )[:, -1]
        t = ids.shape[1]
        shared = self._new_cache(rows.shape[0], t)
        try:
            logits = self._forward(
                rows[:, :t],
                rows[:, t:].bool(),
                start=0,
                cache=shared,
                routes=routes,
                topk=topk,
                last=True,
            )[:, -1]
            for (k, v), (ks, vs) in zip(cache, shared, strict=True):
                k[:, :t], v[:, :t] = ks[inverse], vs[inverse]
        finally:
            self._release_cache(shared)
        for r in routes.values():  # the prefill's MoE routes, per unique row -> per row
            r[-1] = r[-1][inverse]
        return logits[inverse]

    @torch.no_grad()
    def prefill_logprobs(self, ids: torch.Tensor, valid: torch.Tensor, temperature: float = 1.0):
        """Teacher-forced log-probs of ids[:, 1:] given the prefix (the sync probe).

        Args:
            ids: [B, T] int64; valid: [B, T] bool.
        Returns:
            [B, T-1] fp32.
        """
        logits = self.prefill_logits(ids, valid)[:, :-1] / temperature
        return logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)

    @torch.no_grad()
    def prefill_logits(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Next-token logits of a left-padded batch in one prefill (a fresh cache, then freed).

        Args:
            ids: [B, T] int64; valid: [B, T] bool.
        Returns:
            [B, T, V] fp32 (rows of padding positions are unspecified).
        """
        if not self.weights:
            raise RuntimeError("rollout engine has no weights: call load_weights first")
        if ids.shape[1] > self.cfg.max_seq_len:
            raise ValueError(
                f"sequence length {ids.shape[1]} > model.max_seq_len={self.cfg.max_seq_len}"
            )
        cache = self._new_cache(ids.shape[0], ids.shape[1])
        try:
            return self._forward(ids, valid, start=0, cache=cache, routes={}, topk={})
        finally:
            self._release_cache(cache)

    def prefill_and_score(
        self, sequences: Sequence[Sequence[int]], *, temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Teacher-forced log-probs of each exact token sequence (no re-tokenization).

        Returns, per sequence, [len(seq) - 1] fp32: log softmax(logits / temperature) of token
        i + 1 given tokens 0..i. Sequences are left-padded into one prefill (padding never
        attended), so a sequence scores the same alone or in any batch up to float rounding.
        """
        if not temperature > 0:
            raise ValueError(f"temperature={temperature} must be > 0")
        if not sequences or any(len(s) < 1 for s in sequences):
            raise ValueError("prefill_and_score needs non-empty token sequences")
        ids, valid = left_pad([list(s) for s in sequences], 0)
        lp = self.prefill_logprobs(ids, valid, temperature)  # [B, T-1]
        t = ids.shape[1]
        return [lp[i, t - len(s) :].clone() for i, s in enumerate(sequences)]
