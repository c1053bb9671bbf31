"""Telemetry rows the async agentic loop adds to ``core.telemetry.rows``: the ``turns`` table and
the per-worker rows of a phased weight sync (``weight_syncs``: send, switch, ack per worker).

A turn row carries two prefix hashes: ``context_hash`` of the ids the engine received and
``prefix_hash`` of the exact trajectory up to the turn's first action token — equal iff TITO held
across turns. A worker's sync rows use ``engine = "worker-<id>"``; *switch* and *ack* are written
only when the worker reports the switch (the version it went live with), never at send time.
"""

from __future__ import annotations

from datetime import UTC, datetime

import torch

from core.rollout.episode import Episode
from core.tokenizer.tito import prefix_hashes


def _ts(t: float) -> datetime | None:
    return datetime.fromtimestamp(t, UTC) if t > 0 else None


def turn_rows(episodes: list[Episode], *, step: int) -> dict[str, list]:
    """Columns of ``turns``: one row per policy turn of ``episodes``."""
    cols: dict[str, list] = {
        k: []
        for k in (
            "step sample_id turn worker start_pos context_len context_hash prefix_hash "
            "n_action_tokens n_observation_tokens policy_version_first policy_version_last "
            "kv_version_min kv_reused_tokens env_latency_s env_event t_request t_gen_start "
            "t_gen_end t_env_end"
        ).split()
    }
    for e in episodes:
        if not e.turn_records:
            continue
        seq = torch.tensor([e.prompt + e.ids], dtype=torch.int64)
        hashes = prefix_hashes(seq)[0]  # [T]
        for r in e.turn_records:
            if r.n_action == 0:  # requested but never generated (the run stopped first)
                continue
            values = {
                "step": step,
                "sample_id": e.sample_id,
                "turn": r.turn,
                "worker": r.worker,
                "start_pos": r.start_pos,
                "context_len": r.context_len,
                "context_hash": r.context_hash,
                "prefix_hash": int(hashes[r.start_pos - 1]),
                "n_action_tokens": r.n_action,
                "n_observation_tokens": r.n_observation,
                "policy_version_first": r.version_first,
                "policy_version_last": r.version_last,
                "kv_version_min": r.kv_version_min,
                "kv_reused_tokens": r.reused,
                "env_latency_s": r.env_latency_s,
                "env_event": r.env_event,
                "t_request": _ts(r.t_request),
                "t_gen_start": _ts(r.t_gen_start),
                "t_gen_end": _ts(r.t_gen_end),
                "t_env_end": _ts(r.t_env_end),
            }
            for k, v in values.items():
                cols[k].append(v)
    return cols


SYNC_COLUMNS = (
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


def sync_rows(rows: list[tuple]) -> dict[str, list]:
    """``weight_syncs`` columns from ``(sync_id, version, phase, t, bytes, checksum, worker,
    duration_s)`` tuples."""
    cols: dict[str, list] = {k: [] for k in SYNC_COLUMNS}
    for sync_id, version, phase, t, nbytes, checksum, worker, duration in rows:
        for k, v in zip(
            SYNC_COLUMNS,
            (sync_id, version, phase, _ts(t), nbytes, checksum, f"worker-{worker}", None, duration),
            strict=True,
        ):
            cols[k].append(v)
    return cols
