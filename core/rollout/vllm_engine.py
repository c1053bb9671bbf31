"""The vLLM rollout engine: ``RolloutEngineProtocol`` over vLLM's own APIs, token-in/token-out.

- **Requests** are ``prompt_token_ids`` (no tokenizer in vLLM: ``skip_tokenizer_init``); EOS is a
  stop token id, kept in the output as the embedded engine keeps it. Each prompt gets its own
  sampling seed, drawn from the caller's generator, so a seeded batch is reproducible.
- **Log-probs** of the sampled tokens come from vLLM's sampler in the run's mode:
  ``rollout.logprob_mode = processed | raw`` is vLLM's ``logprobs_mode = processed_logprobs |
  raw_logprobs`` (after / before temperature and top-k/top-p renormalization).
- **Scoring** (``prefill_and_score``) is vLLM's ``prompt_logprobs``, which are untempered: at
  T = 1 the sampled token's entry is used; at T ≠ 1 the full-vocabulary log-probs ℓ are rescaled,
  ``log_softmax(ℓ / T) = log_softmax(logits / T)`` (ℓ differs from the logits by a constant).
- **Weights** arrive in the embedded engine's layout (``core.sync.convert``), are renamed to
  Hugging Face tensors (``core.model.hf_weights``) and installed with vLLM's in-place
  ``reload_weights``; the prefix cache is reset, so no key/value of the old policy is reused. A
  payload with a missing or mis-shaped tensor, or a non-finite value, is refused before anything
  is sent: the engine keeps serving the previous version. Quantized payloads (packed linears) are
  served as their dequantized weights in the engine's dtype: vLLM's CPU backend has no kernel for
  our packed int4/int8/fp8 layout (its CPU int4 path reads AWQ/GPTQ checkpoints, not a live
  payload), so the numerics are W4A16's, the int4 GEMM is not.
- **Held weights** (``weights``) are read back from vLLM (``core.rollout.vllm_runtime.read_back``),
  not assumed: the weight sync checksums them against what it sent.
- **KV cache**: vLLM allocates its paged cache once; ``kv_cache_bytes`` is the part of it live
  requests hold (vLLM's ``kv_cache_usage`` gauge × the cache's bytes), 0 when idle; the peak is
  sampled after every engine step.
Simplifications: MoE and DSA models stay on the embedded engine (no HF export of them here).
"""

from __future__ import annotations

import itertools
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from core.model.config import ModelConfig
from core.model.hf_checkpoint import write_hf_dir
from core.model.hf_config import architecture_of
from core.model.hf_weights import rollout_to_hf
from core.rollout.engine import left_pad
from core.rollout.protocol import RolloutBatch
from core.rollout.sampling import SamplingParams
from core.rollout.vllm_runtime import INSTALL_HINT, import_vllm, read_back, shared_llm
from core.rollout.vllm_weights import check_payload, dequantized, held_to_engine

__all__ = ["INSTALL_HINT", "VllmEngine"]

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}
_REQUEST_IDS = itertools.count()
_KV_GAUGE = "vllm:kv_cache_usage_perc"
_ENGINE_LOCK = threading.RLock()


class VllmEngine:
    """A vLLM ``LLM`` (shared per model shape in this process) behind the rollout protocol."""

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        precision: str = "fp32",
        logprob_mode: str = "processed",
        instance: str = "shared",
    ) -> None:
        """``instance``: handles of the same instance name (and model, precision, mode) drive one
        vLLM ``LLM``, reloading their own weights when another handle's are resident; a
        teacher or a rollout worker names its own to get an engine of its own."""
        if precision not in PRECISIONS:
            raise ValueError(f"rollout.precision={precision!r} not in {sorted(PRECISIONS)}")
        architecture_of(cfg)  # MoE / DSA: a ValueError naming the field
        import_vllm()  # a RuntimeError naming the install command, before any work
        self.cfg = cfg
        self.precision = precision
        self.dtype = PRECISIONS[precision]
        self.logprob_mode = logprob_mode
        self.instance = instance
        self.prefix_cache_dropped = True
        """Whether the last weight load dropped vLLM's prefix cache (read at switch points)."""
        self.policy_version = -1
        self.memory_hooks = None
        self.dsa: dict = {}
        self._payload: dict[str, torch.Tensor] = {}  # HF-named, what this handle installed
        self._res = None
        self._held = None  # (payload, its read-back): read once per installed payload
        self._kv_peak = 0
        self._dir = tempfile.TemporaryDirectory(prefix="closedloop-vllm-")

    # ---- weights -------------------------------------------------------------------------
    @property
    def _key(self) -> tuple:
        return (repr(self.cfg), self.precision, self.logprob_mode, self.instance)

    def load_weights(self, weights: Mapping[str, object], version: int) -> None:
        """Install a full payload (engine layout) as ``version`` with vLLM's ``reload_weights``."""
        if version < self.policy_version:
            raise ValueError(
                f"weight update version {version} < installed policy_version {self.policy_version}"
            )
        dense = dequantized(weights, self.dtype)
        check_payload(dense, self.cfg)
        hf = rollout_to_hf(dense, self.cfg)
        if self._res is None:
            model_dir = write_hf_dir(Path(self._dir.name) / "model", hf, self.cfg)
            per_token = 2 * self.cfg.num_layers * self.cfg.num_kv_heads * self.cfg.head_dim * 4
            with _ENGINE_LOCK:
                self._res, started = shared_llm(
                    self._key,
                    model_dir,
                    dtype=self.precision,
                    logprob_mode=self.logprob_mode,
                    max_len=self.cfg.max_seq_len,
                    kv_bytes=max(
                        64 << 20, 64 * self.cfg.max_seq_len * per_token
                    ),  # 64 full contexts
                )
            if started:  # vLLM started from this very payload
                self._res.owner, self._res.installed = id(self), hf
            if self.memory_hooks is not None:  # the paged cache, as vLLM allocated it
                self.memory_hooks.kv_pool_allocated(self._res.kv_tensors)
        self._payload = hf
        self.policy_version = version
        self._install()

    def _install(self) -> None:
        """Make this handle's payload the one vLLM serves (reload in place, drop cached KV)."""
        res = self._res
        if res.owner == id(self) and res.installed is self._payload:
            return
        with _ENGINE_LOCK:
            self._reload(res)

    def _reload(self, res) -> None:
        res.llm.collective_rpc(
            "reload_weights",
            kwargs={"weights_iterator": list(self._payload.items()), "is_checkpoint_format": True},
        )
        # False while a running request holds blocks (a switch between decode steps): then
        # vLLM keeps the keys/values computed under the old weights.
        self.prefix_cache_dropped = bool(res.llm.reset_prefix_cache())
        res.owner, res.installed = id(self), self._payload

    def _ready(self) -> None:
        if self._res is None:
            raise RuntimeError("vLLM rollout engine has no weights: call load_weights first")
        self._install()

    @property
    def weights(self) -> dict[str, torch.Tensor]:
        """What vLLM holds now, read back (engine layout); empty before the first load."""
        if self._res is None:
            return {}
        self._ready()
        if self._held is None or self._held[0] is not self._payload:  # once per installed payload
            with _ENGINE_LOCK:
                held = self._res.llm.collective_rpc(read_back)[0]
            self._held = (self._payload, held_to_engine(held, self.cfg))
        return self._held[1]

    def switch_to(self, weights: Mapping[str, object], version: int) -> None:
        """A rollout worker's switch point (``core.rollout.weight_buffer``): reload in place."""
        self.load_weights(weights, version)

    # ---- requests ------------------------------------------------------------------------
    def _run(self, prompts: list[list[int]], params: list, between_steps=None) -> list:
        """Drive vLLM's engine step by step: ``between_steps()`` before every step (a weight
        switch lands there, never inside a forward), the KV gauge after it. Returns each
        request's final output with ``versions`` (the policy version of each generated token)."""
        engine = self._res.llm.llm_engine
        ids = [f"cl-{next(_REQUEST_IDS)}" for _ in prompts]
        versions: dict[str, list[int]] = {r: [] for r in ids}
        with _ENGINE_LOCK:  # one in-process vLLM engine core at a time (threads executor)
            for rid, p, sp in zip(ids, prompts, params, strict=True):
                engine.add_request(rid, {"prompt_token_ids": list(p)}, sp)
            done = {}
            try:
                while engine.has_unfinished_requests():
                    if between_steps is not None:
                        between_steps()
                    live = self.policy_version
                    ended = 0  # blocks of requests that finished (freeing them) inside the step
                    for out in engine.step():
                        got = versions[out.request_id]
                        got += [live] * (len(out.outputs[0].token_ids) - len(got))
                        if out.finished:
                            done[out.request_id] = out
                            n = len(out.prompt_token_ids) + len(out.outputs[0].token_ids) - 1
                            ended += -(-n // self._res.block_size)
                    self._kv_peak = max(self._kv_peak, self._live_kv(ended))
            except BaseException:
                engine.abort_request(ids)
                raise
        for r in ids:
            done[r].versions = versions[r]
        return [done[r] for r in ids]

    def _sampling(self, params: SamplingParams, seeds: list[int], greedy: list[bool], eos_id):
        """vLLM ``SamplingParams`` per request: its own seed, or greedy (temperature 0)."""
        untouched = params.temperature == 1.0 and params.top_k == 0 and params.top_p == 1.0
        if params.logprob_mode != self.logprob_mode and not (all(greedy) or untouched):
            raise ValueError(
                f"rollout.logprob_mode={params.logprob_mode!r}: this vLLM engine was built "
                f"with {self.logprob_mode!r} (vLLM's logprobs_mode is per engine; the two agree "
                "only for greedy requests or untempered, untruncated sampling)"
            )
        vllm = import_vllm()
        common = dict(
            max_tokens=params.max_new_tokens, logprobs=0, stop_token_ids=[eos_id], detokenize=False
        )
        return [
            vllm.SamplingParams(temperature=0.0, **common)
            if g
            else vllm.SamplingParams(
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k if params.top_k > 0 else -1,
                seed=s,
                **common,
            )
            for s, g in zip(seeds, greedy, strict=True)
        ]

    @staticmethod
    def sampled_logprobs(completion) -> list[float]:
        """The log-prob vLLM reported with each sampled token of a completion."""
        return [
            lp[t].logprob for t, lp in zip(completion.token_ids, completion.logprobs, strict=True)
        ]

    @torch.no_grad()
    def generate_turns(
        self,
        contexts: list[list[int]],
        params: SamplingParams,
        *,
        seeds: list[int],
        greedy: list[bool],
        eos_id: int,
        between_steps=None,
    ) -> list:
        """One turn per context (a session's exact ids so far) with per-request seeds; vLLM's
        prefix cache serves what an earlier turn of the session computed (``num_cached_tokens``).
        Returns vLLM's outputs, each with ``versions`` per generated token."""
        self._ready()
        longest = max(len(c) for c in contexts)
        self._check_len(longest + params.max_new_tokens, f"context ({longest}) + max_new_tokens")
        return self._run(contexts, self._sampling(params, seeds, greedy, eos_id), between_steps)

    def _live_kv(self, ended_blocks: int = 0) -> int:
        """vLLM's ``kv_cache_usage`` gauge as whole blocks (plus ``ended_blocks``, held by
        requests that finished inside the last step) × bytes per block."""
        res = self._res
        usage = next(
            (m.value for m in res.llm.llm_engine.get_metrics() if m.name == _KV_GAUGE), 0.0
        )
        blocks = min(res.num_blocks, round(usage * res.num_blocks) + ended_blocks)
        return blocks * (res.kv_bytes_total // res.num_blocks)

    def _check_len(self, longest: int, what: str) -> None:
        if longest > self.cfg.max_seq_len:
            raise ValueError(f"{what} ({longest}) > model.max_seq_len={self.cfg.max_seq_len}")

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
        """Token IDs in, token IDs + log-probs (the run's mode) + finish reasons out."""
        self._ready()
        longest = max(len(p) for p in prompts)
        self._check_len(longest + params.max_new_tokens, f"prompt ({longest}) + max_new_tokens")
        seeds = torch.randint(0, 2**31 - 1, (len(prompts),), generator=generator).tolist()
        sps = self._sampling(params, seeds, [greedy] * len(prompts), eos_id)
        outs = self._run(prompts, sps)
        prompt_ids, prompt_valid = left_pad(prompts, pad_id)
        b, tr = len(prompts), max(len(o.outputs[0].token_ids) for o in outs)
        out_ids = torch.full((b, tr), pad_id, dtype=torch.int64)
        out_lp = torch.zeros((b, tr), dtype=torch.float32)
        mask = torch.zeros((b, tr), dtype=torch.bool)
        finished = torch.zeros(b, dtype=torch.bool)
        for i, o in enumerate(outs):
            c = o.outputs[0]
            n = len(c.token_ids)
            out_ids[i, :n] = torch.tensor(c.token_ids, dtype=torch.int64)
            out_lp[i, :n] = torch.tensor(self.sampled_logprobs(c))
            mask[i, :n] = True
            finished[i] = c.finish_reason == "stop"
        return RolloutBatch(
            prompt_ids=prompt_ids,
            prompt_valid=prompt_valid,
            response_ids=out_ids,
            response_mask=mask,
            logprobs=out_lp,
            finished=finished,
            policy_version=self.policy_version,
        )

    @torch.no_grad()
    def prompt_logprobs(self, sequences: Sequence[Sequence[int]], k: int) -> list:
        """vLLM's ``prompt_logprobs`` (untempered) of each sequence: ``k`` top entries (-1: the
        whole vocabulary) plus the actual token, per position after the first."""
        self._ready()
        if not all(len(s) for s in sequences):
            raise ValueError("prefill_and_score needs non-empty token sequences")
        self._check_len(max(len(s) for s in sequences), "sequence length")
        vllm = import_vllm()
        sp = vllm.SamplingParams(max_tokens=1, prompt_logprobs=k, detokenize=False)
        outs = self._run([list(s) for s in sequences], [sp] * len(sequences))
        return [o.prompt_logprobs[1:] for o in outs]

    def prefill_and_score(
        self, sequences: Sequence[Sequence[int]], *, temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Teacher-forced log-probs of ``seq[1:]`` at ``temperature``, [len(seq) - 1] fp32 each."""
        if not temperature > 0:
            raise ValueError(f"temperature={temperature} must be > 0")
        if temperature == 1.0:
            rows = self.prompt_logprobs(sequences, 0)
            return [
                torch.tensor([pos[t].logprob for t, pos in zip(s[1:], row, strict=True)])
                for s, row in zip(sequences, rows, strict=True)
            ]
        rows = self.prompt_logprobs(sequences, -1)
        out = []
        v = self.cfg.vocab_size
        for s, row in zip(sequences, rows, strict=True):
            full = torch.full((len(row), v), float("-inf"))
            for j, pos in enumerate(row):
                tok = torch.tensor(list(pos.keys()))
                full[j, tok] = torch.tensor([lp.logprob for lp in pos.values()])
            scaled = (full / temperature).log_softmax(-1)
            out.append(scaled.gather(-1, torch.tensor(s[1:])[:, None]).squeeze(-1))
        return out

    def prefill_logits(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """[N, T, V] next-token scores of a padded batch (one contiguous run of real slots per
        row): vLLM's full-vocabulary ``prompt_logprobs``, i.e. the logits less their per-position
        log-sum-exp, which every ``log_softmax(· / T)`` downstream is invariant to. Slot ``j``
        predicts token ``j + 1``; the last real slot and padding are 0 (nothing to predict)."""
        n, t = ids.shape
        out = torch.zeros((n, t, self.cfg.vocab_size))
        first = valid.long().argmax(dim=1).tolist()
        seqs = [ids[i][valid[i]].tolist() for i in range(n)]
        for i, row in enumerate(self.prompt_logprobs(seqs, -1)):
            for j, pos in enumerate(row):
                out[i, first[i] + j, list(pos.keys())] = torch.tensor(
                    [lp.logprob for lp in pos.values()]
                )
        return out

    def prefill_logprobs(self, ids: torch.Tensor, valid: torch.Tensor, temperature: float = 1.0):
        """[P, T-1] log-probs of ``ids[:, 1:]`` (left-padded [P, T] batch; 0 on padding)."""
        seqs = [ids[i][valid[i]].tolist() for i in range(ids.shape[0])]
        scores = self.prefill_and_score(seqs, temperature=temperature)
        out = torch.zeros(ids.shape[0], ids.shape[1] - 1)
        for i, s in enumerate(scores):
            if len(s):
                out[i, -len(s) :] = s
        return out

    # ---- KV cache ------------------------------------------------------------------------
    def kv_cache_bytes(self) -> int:
        """Bytes of vLLM's KV cache held by live requests (0 when idle: requests run to the end
        inside ``generate`` / ``prefill_and_score``)."""
        return 0 if self._res is None else self._live_kv()

    def kv_cache_peak_bytes(self) -> int:
        return self._kv_peak

    @property
    def kv_pool(self) -> list[torch.Tensor]:
        """The paged KV cache tensors vLLM allocated (empty before the first load)."""
        return [] if self._res is None else self._res.kv_tensors

    def kv_cache_capacity_bytes(self) -> int:
        """The paged cache vLLM allocated (all blocks), 0 before the first load."""
        return 0 if self._res is None else self._res.kv_bytes_total

    def reset_kv_cache(self) -> None:
        """Drop vLLM's prefix cache and reset the peak."""
        if self._res is not None:
            self._res.llm.reset_prefix_cache()
        self._kv_peak = 0
