"""Synthetic telemetry written through the real writer (``observability.DuckDBTelemetry``).

For the dashboard benchmark (a 10 M-token run), the docs screenshots and the tests of pages whose
tables the tiny core run leaves empty (Top-k, MoE routes, qparams, contracts). The numbers are
plausible, not trained: log-probs ~ −Exp(1), train = rollout + N(0, σ_step) with σ rising over
steps, IcePop β = 2, Top-k/route disagreement with probability ∝ σ. Deterministic per seed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from observability import DuckDBTelemetry, TelemetryConfig
from observability.enums import MEMORY_CATEGORIES, SYNC_PHASES

VOCAB = 320
BETA = 2.0


@dataclass(frozen=True)
class SyntheticRun:
    """Shape of a synthetic run: tokens = steps × samples_per_step × (prompt_len + response_len)."""

    steps: int = 20
    samples_per_step: int = 16
    prompt_len: int = 12
    response_len: int = 20
    layers: int = 2
    """Top-k / MoE layers."""
    topk_every: int = 4
    """Top-k and route rows for every ``topk_every``-th sample (sampled rows, as a real run would)."""
    k: int = 8
    tensors: int = 6
    """Quantized tensors per policy version."""
    seed: int = 0


def _step_rows(rng, run: SyntheticRun, step: int, t0: float) -> tuple[dict, dict, dict, dict]:
    """(tokens, samples, steps, per-sample arrays) of one step."""
    n, p, r = run.samples_per_step, run.prompt_len, run.response_len
    length = p + r
    sigma = 1e-3 * (1.0 + 4.0 * step / max(run.steps - 1, 1))  # rising mismatch
    sample_ids = step * n + np.arange(n, dtype=np.int64)
    groups = np.arange(n) // 4
    rewards = (rng.random(n) < 0.3 + 0.3 * step / max(run.steps, 1)).astype(np.float64)
    gm = np.repeat([rewards[groups == g].mean() for g in range(groups.max() + 1)], 4)[:n]
    adv = rewards - gm
    pos = np.tile(np.arange(length, dtype=np.int32), n)
    act = pos >= p
    rollout = -rng.exponential(1.0, size=n * length).astype(np.float32)
    train = np.minimum(rollout + rng.normal(0, sigma, size=n * length).astype(np.float32), 0.0)
    ratio = np.exp(train - rollout)
    kept = (ratio >= 1 / BETA) & (ratio <= BETA)
    reason = np.where(~act, 4, np.where(kept, 0, 1)).astype(np.int8)  # not_action / kept / icepop

    def on_act(x: np.ndarray) -> np.ma.MaskedArray:  # null (not NaN) where the token is no action
        return np.ma.MaskedArray(x, mask=~act)

    tokens = {
        "step": step,
        "sample_id": np.repeat(sample_ids, length),
        "pos": pos,
        "token_id": rng.integers(5, VOCAB, size=n * length, dtype=np.int32),
        "role": act.astype(np.int8),  # enum codes (ROLES): 0 prompt, 1 action
        "loss_mask": act,
        "rollout_logp": on_act(rollout),
        "train_logp": on_act(train),
        "old_logp": on_act(train),
        "ratio": on_act(ratio),
        "trust_mask": act & kept,
        "mask_reason": reason,
        "advantage": on_act(np.repeat(adv, length)),
        "entropy": on_act(rng.exponential(0.8, size=n * length)),
        "prefix_hash": rng.integers(-(2**62), 2**62, size=n * length),
        "policy_version_rollout": step,
    }
    delta = np.abs(train - rollout)[act]
    samples = {
        "sample_id": sample_ids,
        "step": step,
        "prompt_id": [f"p{g}" for g in groups],
        "group_id": groups + step * 100,
        "domain": "arithmetic",
        "engine": "rollout",
        "policy_version_rollout": step,
        "policy_version_train": step + 1,
        "staleness": rng.integers(0, 2, size=n),
        "reward": rewards,
        "advantage": adv,
        "n_prompt_tokens": np.full(n, p, dtype=np.int32),
        "n_response_tokens": np.full(n, r, dtype=np.int32),
        "status": "trained",
        "response_text": [f"{i}" for i in range(n)],
        "finish_reason": "stop",
    }
    masked = float((~kept[act]).mean())
    steps = {
        "step": [step],
        "policy_version": [step + 1],
        "wall_time": [t0 + step],
        "loss": [float(rng.normal(0, 0.1))],
        "policy_loss": [float(rng.normal(0, 0.1))],
        "entropy": [0.8 * (1 - 0.5 * step / run.steps)],
        "grad_norm": [float(rng.random())],
        "lr": [1e-4],
        "reward_mean": [rewards.mean()],
        "reward_std": [rewards.std()],
        "n_tokens": [n * length],
        "n_loss_tokens": [int(act.sum())],
        "n_trusted_tokens": [int((act & kept).sum())],
        "masked_fraction": [masked],
        "icepop_masked_fraction": [masked],
        "clip_fraction": [0.01],
        "mismatch_abs_mean": [float(delta.mean())],
        "mismatch_abs_p99": [float(np.quantile(delta, 0.99))],
        "staleness_max": [1],
        "degenerate_group_fraction": [0.25],
        "step_time_s": [1.0],
        "rollout_time_s": [0.4],
        "train_time_s": [0.5],
        "peak_memory_bytes": [2**30],
        "topk_agreement": [1 - 20 * sigma],
        "route_agreement": [1 - 10 * sigma],
    }
    return tokens, samples, steps, {"sample_ids": sample_ids, "sigma": sigma}


def _twice(a: np.ndarray) -> np.ndarray:
    return np.concatenate([a, a])


def _row_hash(sorted_rows: np.ndarray) -> np.ndarray:
    """A polynomial hash per row of sorted indices (int64, wraps)."""
    weights = np.int64(1_000_003) ** np.arange(sorted_rows.shape[1], dtype=np.int64)
    return (sorted_rows.astype(np.int64) * weights).sum(axis=1)


def _topk_rows(rng, run: SyntheticRun, step: int, sample_ids, sigma: float) -> tuple[dict, dict]:
    chosen = sample_ids[:: run.topk_every]
    pos = np.arange(run.prompt_len, run.prompt_len + run.response_len, dtype=np.int32)
    m = len(chosen) * len(pos) * run.layers
    sid = np.repeat(chosen, len(pos) * run.layers)
    layer = np.tile(np.repeat(np.arange(run.layers, dtype=np.int32), len(pos)), len(chosen))
    ps = np.tile(pos, len(chosen) * run.layers)
    train = np.sort(rng.integers(0, 256, size=(m, run.k), dtype=np.int32), axis=1)
    rollout = train.copy()
    flip = rng.random(m) < 20 * sigma
    rollout[flip, -1] = (rollout[flip, -1] + 1) % 256
    ties = (rng.random(m) < 0.05).astype(np.int32)
    topk = {
        "step": step,
        "sample_id": _twice(sid),
        "layer": _twice(layer),
        "pos": _twice(ps),
        "engine": np.repeat(np.array([0, 1], dtype=np.int8), m),
        "k": run.k,
        "indices": np.concatenate([train, rollout]),
        "index_hash": np.concatenate([_row_hash(train), _row_hash(rollout)]),
        "boundary_ties": _twice(ties),
    }
    experts = np.sort(rng.integers(0, 8, size=(m, 2), dtype=np.int16), axis=1)
    experts_r = experts.copy()
    rflip = rng.random(m) < 10 * sigma
    experts_r[rflip, 0] = (experts_r[rflip, 0] + 1) % 8
    routes = {
        "step": step,
        "sample_id": _twice(sid),
        "layer": _twice(layer),
        "pos": _twice(ps),
        "engine": np.repeat(np.array([0, 1], dtype=np.int8), m),
        "experts": np.concatenate([experts, experts_r]),
    }
    return topk, routes


def _memory_rows(rng, step: int, t0: float, event0: int) -> tuple[dict, dict]:
    names = [f"act/{step}/{i}" for i in range(6)]
    cats = [
        "saved_activations",
        "saved_activations",
        "operator_workspace",
        "live_io",
        "communication_buffers",
        "live_io",
    ]
    size = (rng.integers(1, 64, size=6) << 20).astype(np.int64)
    objects = names + names
    events = {
        "ts": t0 + step + np.arange(12) * 0.05,
        "step": step,
        "rank": 0,
        "device": "cpu",
        "object": objects,
        "category": cats + cats,
        "event": ["create"] * 6 + ["free"] * 6,
        "bytes": np.concatenate([size, size]),
        "owner": ["trainer"] * 12,
        "event_id": event0 + np.arange(12),
        "persistent": False,
        "device_kind": "cpu",
    }
    peak_cats = list(MEMORY_CATEGORIES)
    owners = ["actor", "trainer", "trainer", "rollout", "weight_sync", "allocator", "untracked"]
    peaks = {
        "step": step,
        "category": peak_cats,
        "owner": owners,
        "bytes": (rng.integers(1, 256, size=len(peak_cats)) << 20).astype(np.int64),
    }
    return events, peaks


def write_run(
    run_dir: str | os.PathLike,
    run: SyntheticRun | None = None,
    *,
    status: str = "finished",
    compact: bool = False,
    flush_every_step: bool = False,
) -> Path:
    """Write a complete synthetic run into ``run_dir`` (every table); returns the run dir.

    ``compact``: fold the parts into ``telemetry.duckdb`` at close (as a finished core run does);
    ``flush_every_step``: a part per table at every step end (a live run's parts).
    """
    run = run or SyntheticRun()
    rng = np.random.default_rng(run.seed)
    run_dir = Path(run_dir)
    info = {
        "algorithm": "grpo",
        "vocab_size": VOCAB,
        "icepop_beta": BETA,
        "staleness_limit": 4,
        "device": "synthetic",
        "config": {"synthetic": True},
    }
    cfg = TelemetryConfig(flush_rows=4_000_000, flush_seconds=30.0, compact_on_close=compact)
    sink = DuckDBTelemetry(run_dir, run_info=info, config=cfg)
    t0 = time.time() - run.steps
    for step in range(run.steps):
        tokens, samples, steps, extra = _step_rows(rng, run, step, t0)
        sink.emit("tokens", tokens)
        sink.emit("samples", samples)
        sink.emit("steps", steps)
        topk, routes = _topk_rows(rng, run, step, extra["sample_ids"], extra["sigma"])
        sink.emit("topk", topk)
        sink.emit("moe_routes", routes)
        events, peaks = _memory_rows(rng, step, t0, step * 12)
        sink.emit("memory_events", events)
        sink.emit("memory_peaks", peaks)
        sink.emit(
            "weight_syncs",
            {
                "sync_id": step,
                "policy_version": step + 1,
                "phase": list(SYNC_PHASES),
                "ts": t0 + step + 0.9 + np.arange(len(SYNC_PHASES)) * 0.01,
                "duration_s": np.full(len(SYNC_PHASES), 0.01),
                "bytes": 1 << 20,
                "engine": "rollout",
            },
        )
        write_qparams(sink, version=step + 1, tensors=run.tensors, rng=rng)
        sink.step_end(step)
        if flush_every_step:
            sink.flush()
    write_contract_results(sink)
    sink.close(status)
    return run_dir


def write_qparams(sink, *, version: int, tensors: int, rng, mismatch: int = 1) -> None:
    """qat_fake / offline_real / rollout_load rows; the last ``mismatch`` tensors differ QAT vs offline."""
    names = [f"decoder.layers.{i // 2}.mlp.fc{i % 2 + 1}.weight" for i in range(tensors)]
    hashes = [f"h{version}-{i}" for i in range(tensors)]
    qat = hashes[: tensors - mismatch] + [h + "x" for h in hashes[tensors - mismatch :]]
    for producer, codes in (("qat_fake", qat), ("offline_real", hashes), ("rollout_load", hashes)):
        sink.emit(
            "qparams",
            {
                "policy_version": version,
                "tensor": names,
                "producer": producer,
                "bits": 4,
                "qmin": -8.0,
                "qmax": 7.0,
                "group_size": 32,
                "symmetric": True,
                "scale_dtype": "float32",
                "rounding": "nearest",
                "packing": "int4x2",
                "scale_hash": codes,
                "code_hash": codes,
                "max_abs_err": rng.random(tensors) * 1e-2,
                "numel": np.full(tensors, 4096),
            },
        )


def write_contract_results(sink) -> None:
    """A gate result set: passes, one warning and one failure with an example."""
    now = time.time()
    rows = [
        ("schema", "tokens_columns", "pass", 0.0, 0.0, 0, None),
        ("logprob", "mismatch_abs_p99", "warn", 4e-3, 5e-3, 12, None),
        ("trust", "icepop_band", "pass", 0.0, 0.0, 0, None),
        (
            "quant",
            "qat_equals_offline",
            "fail",
            1.0,
            0.0,
            1,
            {"tensor": "decoder.layers.2.mlp.fc2.weight", "qat": "h1-5x", "offline": "h1-5"},
        ),
    ]
    sink.emit(
        "contract_results",
        {
            "checked_at": now,
            "contract": [r[0] for r in rows],
            "check": [r[1] for r in rows],
            "status": [r[2] for r in rows],
            "observed": [r[3] for r in rows],
            "threshold": [r[4] for r in rows],
            "n_rows": 100,
            "n_violations": [r[5] for r in rows],
            "example": [r[6] for r in rows],
        },
    )


def add_extras(
    run_dir: str | os.PathLike,
    *,
    steps: int,
    samples_per_step: int = 16,
    seed: int = 1,
    contracts: bool = True,
) -> None:
    """Add Top-k, MoE-route, qparams and contract rows to an existing run, as a second writer.

    The writer is rank 1 of 2, so it never writes a ``runs`` row (the run keeps its status).
    Sample ids ``step * samples_per_step + i`` (i < samples_per_step) are assumed to exist.
    """
    run = SyntheticRun(steps=steps, samples_per_step=samples_per_step, layers=2, topk_every=2)
    rng = np.random.default_rng(seed)
    cfg = TelemetryConfig(flush_seconds=30.0, compact_on_close=False)
    sink = DuckDBTelemetry(run_dir, rank=1, world_size=2, config=cfg)
    for step in range(steps):
        sample_ids = step * samples_per_step + np.arange(samples_per_step, dtype=np.int64)
        topk, routes = _topk_rows(rng, run, step, sample_ids, 1e-3 * (1 + step))
        sink.emit("topk", topk)
        sink.emit("moe_routes", routes)
        write_qparams(sink, version=step + 1, tensors=run.tensors, rng=rng)
    if contracts:
        write_contract_results(sink)
    sink.close("finished")
