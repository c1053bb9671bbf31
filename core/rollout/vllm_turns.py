"""One policy turn for a batch of sessions on a vLLM rollout worker (``core.rollout.worker``).

vLLM's prefix cache is the session KV: a session's next turn is its exact previous context plus
the action and observation ids (TITO), so vLLM serves the shared prefix from the blocks the last
turn computed (``reused`` = its ``num_cached_tokens``) as long as the session stays on this worker,
which the orchestrator's routing ensures. Switch points, by ``rollout.kv_on_switch``:
- ``invalidate``: a staged version goes live only between turns (no request in flight), and the
  reload drops the prefix cache, so every key/value is recomputed under the new weights;
- ``keep`` (the fault): it goes live between two decode steps of a running turn; vLLM keeps the
  keys/values it computed under the old version, and a finished session's cached prefix survives
  (the cache cannot be dropped while blocks are in use): tokens attend KV of an older version.
Each token records ``version`` (the weights that sampled it) and ``kv_version`` (the oldest
version among the keys/values it attended, tracked per session on this worker).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from core.rollout.sampling import SamplingParams
from core.rollout.turn_decode import TurnOutput, TurnRequest


def decode_turns_vllm(
    engine,
    requests: list[TurnRequest],
    params: SamplingParams,
    *,
    eos_id: int,
    kv_on_switch: str,
    kv_versions: dict[int, int],
    switch: Callable[[], object] | None = None,
    worker: int = 0,
) -> list[TurnOutput]:
    """Generate one turn for each request. ``kv_versions``: session id -> oldest version among
    its cached keys/values on this worker (updated here)."""
    t_start = time.time()
    switches: list[int] = []

    def offer() -> None:
        if switch is not None and switch() is not None:
            switches.append(engine.policy_version)
            if engine.prefix_cache_dropped:  # nothing in flight: the reload dropped every prefix
                kv_versions.clear()

    offer()  # a version staged before the turn
    start = engine.policy_version
    outs = engine.generate_turns(
        [list(r.context) for r in requests],
        params,
        seeds=[r.seed for r in requests],
        greedy=[r.greedy for r in requests],
        eos_id=eos_id,
        between_steps=offer if kv_on_switch == "keep" else None,
    )
    t_end = time.time()
    result = []
    for r, o in zip(requests, outs, strict=True):
        c = o.outputs[0]
        reused = int(o.num_cached_tokens or 0)
        oldest = min(start, kv_versions.get(r.session_id, start)) if reused else start
        kv_versions[r.session_id] = oldest
        kv = [min(oldest, v) for v in o.versions]
        result.append(
            TurnOutput(
                r.session_id,
                r.turn,
                worker,
                list(c.token_ids),
                engine.sampled_logprobs(c),
                list(o.versions),
                kv,
                finished=c.finish_reason == "stop",
                reused=reused,
                t_start=t_start,
                t_end=t_end,
                switches=list(switches),
            )
        )
    return result
