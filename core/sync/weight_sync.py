"""Weight sync actor → rollout engine: phases, per-tensor checksums, version bump and a probe.

Phases (the telemetry enum): ``gather`` (actor weights by name) → ``reshard`` (engine layout) →
``quantize`` (only for quantized rollout precisions) → ``send`` (checksum per tensor of the
payload) → ``switch`` (the engine installs the weights under the new version) → ``ack`` (the
engine's copy re-checksummed and compared; a tensor the engine kept as sent, the same object, reuses
its send checksum). After the ack, when the caller passes a probe batch, a probe compares rollout
prefill log-probs with the actor's on it: the train/rollout agreement on fixed inputs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

import torch
import xxhash

from core.algorithms.policy import token_logprobs
from core.model.actor import Actor
from core.rollout.engine import RolloutEngine
from core.sync.convert import actor_to_rollout


def tensor_checksum(t: torch.Tensor) -> str:
    """XXH3-64 of the tensor's bytes (16 hex chars): equal iff the bits are equal (up to a
    2^-64 collision). A non-cryptographic integrity hash, several times faster than blake2b: it guards
    against corrupted or mismatched weights, not against an adversary."""
    data = t.detach().contiguous().cpu()
    if data.dtype == torch.bfloat16:
        data = data.view(torch.int16)
    elif data.dtype == torch.float8_e4m3fn:  # fp8 rollout codes: no numpy dtype, hash the bits
        data = data.view(torch.uint8)
    return xxhash.xxh3_64_hexdigest(data.numpy())  # hashed in place


def _tensors(w) -> dict:
    return w.tensors() if hasattr(w, "tensors") else {"": w}


def payload_bytes(weights: dict) -> int:
    """Bytes of a weight payload (packed quantized weights count their codes and scales)."""
    return sum(t.numel() * t.element_size() for w in weights.values() for t in _tensors(w).values())


def payload_checksum(
    weights: dict, *, hashed: dict | None = None
) -> tuple[str, dict[str, str], int]:
    """(combined checksum, per-tensor checksums, bytes) of a weight payload.

    ``hashed`` (name -> (weight, its per-tensor checksum)) names weights hashed already: an entry
    whose weight *is* that object (the same tensors, not a copy: the receiver kept what was sent)
    reuses its checksum, since its bits are those hashed; any other is hashed.
    """
    per = {}
    for name in sorted(weights):
        w = weights[name]
        if hashed is not None and name in hashed and hashed[name][0] is w:
            per[name] = hashed[name][1]
        else:
            per[name] = "".join(tensor_checksum(t) for _, t in sorted(_tensors(w).items()))
    nbytes = payload_bytes(weights)
    combined = xxhash.xxh3_64_hexdigest("".join(per[k] for k in sorted(per)).encode())
    return combined, per, nbytes


def _expected_checksum(payload: dict, sent: str, dtype: torch.dtype | None) -> str | None:
    """The checksum the engine's copy must have: the sent one (fp32 engine), that of the payload
    cast to a bf16 engine's dtype, or None for a quantized payload (its layout is the engine's)."""
    if not all(isinstance(v, torch.Tensor) for v in payload.values()):
        return None
    if dtype in (None, torch.float32):
        return sent
    cast = {k: v.to(dtype) if v.is_floating_point() else v for k, v in payload.items()}
    return payload_checksum(cast)[0]


@dataclass
class SyncReport:
    sync_id: int
    policy_version: int
    probe_mismatch_abs_max: float | None
    """None when this sync ran no probe."""
    probe_mismatch_abs_mean: float | None
    bytes: int


class WeightSync:
    """Moves actor weights into the rollout engine and records every phase."""

    def __init__(
        self, engine: RolloutEngine, telemetry, *, quantizer=None, temperature: float = 1.0
    ):
        self.engine = engine
        self.telemetry = telemetry
        self.quantizer = quantizer  # callable(engine_weights, version) -> engine_weights, or None
        self.temperature = temperature
        self.sync_id = 0
        self.memory_hooks = None  # core.memory.hooks.TrainingMemory: buffers to the ledger

    def sync(
        self, actor: Actor, version: int, probe: tuple[torch.Tensor, torch.Tensor] | None
    ) -> SyncReport:
        """One sync under ``version``; ``probe`` (ids, valid) [P, T] or None: no probe this time
        (the ack row's probe column and the report's probe numbers are then null)."""
        rows: dict[str, list] = {
            k: []
            for k in (
                "sync_id",
                "policy_version",
                "phase",
                "ts",
                "bytes",
                "checksum",
                "engine",
                "probe_mismatch_abs_max",
                "duration_s",
            )
        }
        t = time.perf_counter()

        def phase(name: str, nbytes: int | None, checksum: str | None, probe_max=None) -> None:
            nonlocal t
            now = time.perf_counter()
            for k, v in (
                ("sync_id", self.sync_id),
                ("policy_version", version),
                ("phase", name),
                ("ts", datetime.now(UTC)),
                ("bytes", nbytes),
                ("checksum", checksum),
                ("engine", "rollout"),
                ("probe_mismatch_abs_max", probe_max),
                ("duration_s", now - t),
            ):
                rows[k].append(v)
            t = now

        gathered = {k: v.detach().clone() for k, v in actor.named_weights().items()}
        mem = self.memory_hooks
        if mem is not None:
            mem.sync_gathered(gathered)
        gbytes = payload_bytes(gathered)
        phase("gather", gbytes, None)
        payload = actor_to_rollout(gathered, actor.cfg)
        if mem is not None:
            mem.sync_buffers("reshard", payload)
        phase("reshard", gbytes, None)
        if self.quantizer is not None:
            payload = self.quantizer(payload, version)
            if mem is not None:
                mem.sync_buffers("quantize", payload, replaces="reshard")
            phase("quantize", payload_bytes(payload), None)
        sent, per_tensor, nbytes = payload_checksum(payload)
        phase("send", nbytes, sent)
        self.engine.load_weights(payload, version)  # refuses a bad payload: nothing switched
        held = self.engine.weights  # what the engine holds now (vLLM: read back from it)
        if mem is not None:
            mem.weights_switched(held, version)
        phase("switch", nbytes, None)
        hashed = {k: (payload[k], c) for k, c in per_tensor.items()}  # kept as sent: not re-hashed
        received, _, _ = payload_checksum({k: held[k] for k in per_tensor}, hashed=hashed)
        expected = _expected_checksum(payload, sent, getattr(self.engine, "dtype", None))
        if expected is not None and received != expected:
            raise RuntimeError(
                f"weight sync {self.sync_id}: the engine holds other weights than were sent "
                f"(checksum {received} != {expected} after the switch)"
            )
        probe_max, probe_mean = self.probe(actor, *probe) if probe is not None else (None, None)
        phase("ack", nbytes, received, probe_max)
        self.telemetry.emit("weight_syncs", rows)
        if mem is not None:
            mem.sync_done()
        report = SyncReport(self.sync_id, version, probe_max, probe_mean, nbytes)
        self.sync_id += 1
        return report

    @torch.no_grad()
    def probe(self, actor: Actor, ids: torch.Tensor, valid: torch.Tensor) -> tuple[float, float]:
        """max and mean |train − rollout| log-prob over the probe batch's real tokens.

        Args:
            ids, valid: [P, T] probe sequences (left-padded) and their validity.
        """
        rollout = self.engine.prefill_logprobs(ids, valid, self.temperature)
        train, _ = token_logprobs(
            actor.logits(ids, valid)[:, :-1], ids[:, 1:], temperature=self.temperature
        )
        diff = (train - rollout).abs()[valid[:, 1:] & valid[:, :-1]]
        return float(diff.max()), float(diff.mean())
