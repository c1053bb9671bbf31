"""The outer loop every trainer shares: first eval, steps, periodic evals, last eval, ledger close.

``run_steps`` runs ``step_fn(session, step)`` ``steps`` times, timing each step (telemetry emission
included) and handing its metrics to ``progress``; evaluates every ``train.eval_every`` steps and
once at the end with ``evaluate_fn``; ``stop`` (e.g. the async rollout workers) runs when the steps
end, also on an error, before the last evaluation; then the memory ledger is closed (its last
events written; it raises if a non-persistent object was never freed). Per-domain accuracies of
the first and last evaluation (``s.eval_by_domain``, e.g. per arithmetic operation) come back too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from core.loops.evaluate import evaluate


def run_steps(
    s,
    step_fn: Callable,
    *,
    steps: int,
    progress: Callable | None = None,
    evaluate_fn: Callable = evaluate,
    first: float | None = None,
    stop: Callable | None = None,
) -> dict:
    """Train ``steps`` steps; returns ``eval_accuracy_start``/``_end``, ``eval_by_domain_start``/
    ``_end`` and the per-step metrics. ``first``: the step-0 evaluation if the caller already ran
    it."""
    first = evaluate_fn(s, 0) if first is None else first
    first_by_domain = dict(getattr(s, "eval_by_domain", {}))
    history = []
    try:
        for step in range(steps):
            t0 = time.perf_counter()
            m = step_fn(s, step)
            m["wall_step_s"] = time.perf_counter() - t0  # includes telemetry emission
            history.append(m)
            if progress is not None:
                progress(m)
            every = s.cfg.train.eval_every
            if every and (step + 1) % every == 0 and step + 1 < steps:
                evaluate_fn(s, step + 1)
    finally:
        if stop is not None:
            stop()
    last = evaluate_fn(s, steps) if steps else first
    s.memory.finish()
    return {
        "eval_accuracy_start": first,
        "eval_accuracy_end": last,
        "eval_by_domain_start": first_by_domain,
        "eval_by_domain_end": dict(getattr(s, "eval_by_domain", {})),
        "steps": history,
    }
