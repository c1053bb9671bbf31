"""Per-rank telemetry of a tensor-parallel training job: one run, every rank writing its own parts.

Each rank opens its own sink on the shared run directory (``DuckDBTelemetry(rank=r,
world_size=W)``: parts named by rank, so ranks never collide) and keeps its own memory ledger
(``MemoryLedger(rank=r)``: its shard of the model state, AdamW included). Per step it writes a
``steps`` row (its step time, grad norm, ledger peak), its ``memory_events`` / ``memory_peaks``
and the ``train_logprobs`` rows of the scored targets (every TP rank holds the full, identical
vocab-parallel result; the rows record the TP size for the contract check against a TP = 1 run).
Closing: every rank reports ok/failed, ranks > 0 close first, then rank 0 writes the ``runs``
status for all of them (``failed`` if any rank failed) and compacts the complete run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.distributed as dist

from core.memory.ledger import MemoryLedger
from core.memory.model_state import track_model_state
from core.parallel.group import tp_size
from observability import DuckDBTelemetry

UNRECORDED = (
    *("samples", "tokens", "reward_components", "topk", "moe_routes", "qparams"),
    *("weight_syncs", "evals"),
    *("steps.mismatch_abs_mean", "steps.mismatch_abs_p99", "steps.masked_fraction"),
)
"""What a TP training job has no source for (no rollout engine, no sync, no evaluation): declared
in ``runs.unrecorded`` so the gate reports the checks needing them not applicable."""


def _world() -> tuple[int, int]:
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class RankRecorder:
    """Telemetry sink + memory ledger of this rank for one run directory."""

    def __init__(self, run_dir: str | Path, *, config: dict, vocab_size: int) -> None:
        self.rank, self.world_size = _world()
        self.run_dir = Path(run_dir)
        info = {
            "config": json.dumps(config, sort_keys=True),
            "device": "cpu",
            "algorithm": "grpo",
            "vocab_size": vocab_size,
            "unrecorded": UNRECORDED,
        }
        self.sink = DuckDBTelemetry(
            self.run_dir,
            run_id=self.run_dir.name,
            rank=self.rank,
            world_size=self.world_size,
            run_info=info,
        )
        self.ledger = MemoryLedger(rank=self.rank)

    def step(self, step: int, out: dict, batch, *, actor, optimizer, seconds: float) -> None:
        """Record optimizer step ``step`` (``out`` from ``policy_step`` on ``batch``)."""
        self.ledger.set_step(step)
        track_model_state(self.ledger, actor.gpt, optimizer, owner="actor")
        peak = self.ledger.flush_to(self.sink, step)
        real = batch.valid[:, 1:] & batch.valid[:, :-1]  # [B, T-1] targets after a real token
        mask = batch.action_mask
        self.sink.emit(
            "steps",
            {
                "step": [step],
                "policy_version": [step],
                "wall_time": [time.time()],
                "loss": [float(out["loss"])],
                "policy_loss": [float(out["loss"])],
                "grad_norm": [float(out["grad_norm"])],
                "n_tokens": [int(batch.valid.sum())],
                "n_loss_tokens": [int(mask.sum())],
                "n_trusted_tokens": [int(mask.sum())],
                "step_time_s": [seconds],
                "train_time_s": [seconds],
                "peak_memory_bytes": [peak.total],
                "optimizer_stepped": [True],
            },
        )
        rows, cols = real.nonzero(as_tuple=True)  # [N] each
        self.sink.emit(
            "train_logprobs",
            {
                "step": torch.full_like(rows, step),
                "policy_version": torch.full_like(rows, step),
                "tp_size": torch.full_like(rows, tp_size()).to(torch.int32),
                "sample_id": rows,
                "pos": (cols + 1).to(torch.int32),  # the target's position in the sequence
                "token_id": batch.input_ids[:, 1:][rows, cols].to(torch.int32),
                "logp": out["logp"][rows, cols],
                "logsumexp": out["logsumexp"][rows, cols],
            },
        )
        self.sink.step_end(step)

    def close(self, *, failed: bool = False) -> None:
        """Close every rank's sink; rank 0 last, with the status of all ranks."""
        status = torch.tensor([1 if failed else 0])
        if self.world_size > 1:
            dist.all_reduce(status, op=dist.ReduceOp.MAX)
        final = "failed" if int(status) else "finished"
        if self.rank != 0:
            self.sink.close(final)
        if self.world_size > 1:
            dist.barrier()  # every other rank's parts are committed before rank 0 compacts
        if self.rank == 0:
            self.sink.close(final)
