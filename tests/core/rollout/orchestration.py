"""Test helper: an orchestrator over real engine replicas of the shipped base model."""

from __future__ import annotations

import dataclasses
import threading

from core.loops.session import IdCounter
from core.model.checkpoint import load_checkpoint
from core.rollout.executor import start_workers
from core.rollout.orchestrator import Orchestrator
from core.rollout.sampling import SamplingParams
from core.rollout.worker import WorkerSpec
from core.sync.convert import actor_to_rollout


def base_weights(path: str = "core/assets/base_model"):
    w, cfg, _ = load_checkpoint(path)
    return cfg, actor_to_rollout(w, cfg)


def orchestrator(
    source,
    tok,
    *,
    executor="threads",
    workers=2,
    group_size=4,
    in_flight=2,
    max_turns=2,
    max_new_tokens=4,
    history="exact",
    kv_on_switch="invalidate",
    path="core/assets/base_model",
    seed=0,
):
    cfg, payload = base_weights(path)
    specs = [
        WorkerSpec(
            i,
            dataclasses.asdict(cfg),
            "fp32",
            SamplingParams(max_new_tokens=max_new_tokens),
            tok.eos_id,
            tok.pad_id,
            kv_on_switch=kv_on_switch,
        )
        for i in range(workers)
    ]
    wake = threading.Event()  # the workers wake the orchestrator when they have outputs
    orch = Orchestrator(
        start_workers(executor, specs, notify=wake.set),
        source,
        tok=tok,
        ids=IdCounter(),
        group_size=group_size,
        max_turns=max_turns,
        max_new_tokens=max_new_tokens,
        max_seq_len=cfg.max_seq_len,
        in_flight_groups=in_flight,
        env_threads=8,
        history=history,
        seed=seed,
        wake=wake,
    )
    orch.publish(payload, 0)
    return orch, cfg, payload
