"""A batch with nothing trusted (every sample stale) takes no optimizer step: weights and AdamW
state are bit-identical after it, the policy version does not move, and the step is recorded as
skipped with its reason."""

from __future__ import annotations

import torch

from core.config import load_config
from core.loops.grpo import train_step
from core.loops.session import Session
from tests.core.loops.sinks import RecordingSink


def _snapshot(s) -> tuple[dict, dict]:
    weights = {k: v.detach().clone() for k, v in s.actor.named_weights().items()}
    state = {
        id(p): {k: v.clone() if torch.is_tensor(v) else v for k, v in st.items()}
        for p, st in s.optimizer.state.items()
    }
    return weights, state


def test_stale_batch_never_steps_the_optimizer():
    sink = RecordingSink()
    cfg = load_config(
        None,
        [
            "algorithm.prompts_per_step=2",
            "algorithm.group_size=4",
            "algorithm.staleness_limit=0",
            "rollout.sync_every=2",  # the engine keeps version 0 while the trainer reaches 1
        ],
    )
    s = Session(cfg, sink)
    first = train_step(s, 0)  # fresh: trains, version 0 -> 1, no sync (1 % 2 != 0)
    assert first["optimizer_stepped"] and s.version == 1 and s.engine.policy_version == 0
    weights, state = _snapshot(s)
    m = train_step(s, 1)  # every sample has staleness 1 > τ = 0
    assert not m["optimizer_stepped"] and m["skip_reason"] == "stale"
    assert m["stale_fraction"] == 1.0 and m["n_trusted_tokens"] == 0
    assert s.version == 1 and m["policy_version"] == 1
    after_w, after_state = _snapshot(s)
    assert all(torch.equal(weights[k], after_w[k]) for k in weights)
    assert state.keys() == after_state.keys()
    for pid, st in state.items():
        for k, v in st.items():
            assert (
                torch.equal(v, after_state[pid][k])
                if torch.is_tensor(v)
                else v == after_state[pid][k]
            )
    row = sink.last("steps")
    assert row["optimizer_stepped"] == [False] and row["skip_reason"] == ["stale"]
    samples = sink.last("samples")
    assert samples["status"] == ["stale"] * 8 and list(samples["staleness"]) == [1] * 8
