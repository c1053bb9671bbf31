"""Step phases for benchmarks/vs_trl.py: wall and main-thread CPU timers around each side's own
functions, which run unchanged (a timer calls the original and returns what it returns).

Phases, the same five on both sides:
  rollout    sampling the completions (TRL ``_generate`` without its vLLM weight sync;
             closedloop ``collect_step``: engine sampling, environment, verifier)
  scoring    rewards, advantages, π_old where a side computes it apart from the update
             (TRL ``_generate_and_score_completions`` minus ``_generate``; closedloop the rest
             of ``train_step``: reward mix, advantages, trust mask, loss terms, step metrics)
  update     the training forward with grad, backward, clip, optimizer step (TRL: the rest of
             its step, i.e. ``compute_loss``, backward, clip, ``optimizer.step``; closedloop
             ``score`` + ``optimizer_step``)
  sync       weights to the rollout engine (TRL: ``vllm_generation.sync_weights``, none without
             vLLM, the policy samples itself; closedloop ``Session.sync`` with its probe)
Each phase is timed in wall seconds and main-thread CPU seconds; closedloop's telemetry writer
thread is charged to its telemetry phase by vs_trl_report.py.
  telemetry  what each side records per step (TRL ``_maybe_log_save_evaluate``, its logging
             after ``on_step_end``; closedloop ``record_step``: records + the sink's emit)
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict

PHASES = ("rollout", "scoring", "update", "sync", "telemetry")


class PhaseClock:
    """Accumulates (wall s, main-thread CPU s) per named timer until ``take``."""

    def __init__(self) -> None:
        self.acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.trl_log: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
        """TRL's logging time by the global step it logs (it runs after ``on_step_end``)."""

    @contextlib.contextmanager
    def time(self, name: str, into: dict | None = None, key=None):
        w, c = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            slot = self.acc[name] if into is None else into[key]
            slot[0] += time.perf_counter() - w
            slot[1] += time.thread_time() - c

    def take(self, *names: str) -> dict[str, tuple[float, float]]:
        """The named timers' totals since the last take (zero if not run), reset."""
        return {n: tuple(self.acc.pop(n, (0.0, 0.0))) for n in names}


def timed_trl_class(clock: PhaseClock):
    """A ``GRPOTrainer`` subclass whose generation, generate-and-score and logging methods are
    timed into ``clock`` (each calls TRL's own method and returns its result)."""
    from trl import GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate(self, prompts):
            with clock.time("trl.generate"):
                return super()._generate(prompts)

        def _generate_and_score_completions(self, inputs):
            with clock.time("trl.gen_score"):
                return super()._generate_and_score_completions(inputs)

        def _maybe_log_save_evaluate(self, *args, **kw):
            with clock.time("", into=clock.trl_log, key=self.state.global_step):
                return super()._maybe_log_save_evaluate(*args, **kw)

    return TimedGRPOTrainer


def time_trl_vllm_sync(trainer, clock: PhaseClock) -> None:
    """Time TRL's vLLM weight sync (an attribute of its ``vllm_generation`` helper), if any."""
    gen = getattr(trainer, "vllm_generation", None)
    if gen is None:
        return
    original = gen.sync_weights

    def sync_weights(*args, **kw):
        with clock.time("trl.sync"):
            return original(*args, **kw)

    gen.sync_weights = sync_weights


def trl_phases(window: tuple, t: dict, log: tuple) -> dict:
    """TRL's step phases, (wall s, CPU s) each, from its step window (``on_step_begin`` →
    ``on_step_end``), the timers taken at ``on_step_end`` and its logging after it; plus
    ``total``."""
    gen, gs, sync = t["trl.generate"], t["trl.gen_score"], t["trl.sync"]
    return {
        "rollout": _sub(gen, sync),
        "scoring": _sub(gs, gen),
        "update": _sub(window, gs),
        "sync": tuple(sync),
        "telemetry": tuple(log),
        "total": (window[0] + log[0], window[1] + log[1]),
    }


def _sub(a, b) -> tuple[float, float]:
    return a[0] - b[0], a[1] - b[1]


CL_TIMERS = {
    "collect_step": "cl.rollout",
    "score": "cl.forward",
    "optimizer_step": "cl.opt",
    "record_step": "cl.record",
}
"""``core.loops.grpo``'s names timed inside ``train_step``, and their timers."""


def _timed(fn, clock: PhaseClock, timer: str):
    def wrapper(*args, **kw):
        with clock.time(timer):
            return fn(*args, **kw)

    return wrapper


@contextlib.contextmanager
def timed_closedloop(clock: PhaseClock):
    """Time closedloop's rollout, training forward, optimizer step and step records inside
    ``train_step`` (``core.loops.grpo``'s module names, restored on exit)."""
    import core.loops.grpo as grpo

    originals = {n: getattr(grpo, n) for n in CL_TIMERS}
    for n, timer in CL_TIMERS.items():
        setattr(grpo, n, _timed(originals[n], clock, timer))
    try:
        yield
    finally:
        for n, fn in originals.items():
            setattr(grpo, n, fn)


def time_closedloop_sync(session, clock: PhaseClock) -> None:
    """Time one session's weight sync (``Session.sync``: gather → send → switch, probe)."""
    session.sync = _timed(session.sync, clock, "cl.sync")


def closedloop_phases(took: tuple, t: dict) -> dict:
    """closedloop's step phases, (wall s, CPU s) each, from its whole step and the timers;
    scoring is the rest of the step (reward mix, advantages, trust mask, loss terms, step
    metrics, memory ledger); plus ``total``."""
    update = (t["cl.forward"][0] + t["cl.opt"][0], t["cl.forward"][1] + t["cl.opt"][1])
    known = [t["cl.rollout"], update, t["cl.sync"], t["cl.record"]]
    return {
        "rollout": tuple(t["cl.rollout"]),
        "scoring": tuple(took[i] - sum(k[i] for k in known) for i in (0, 1)),
        "update": update,
        "sync": tuple(t["cl.sync"]),
        "telemetry": tuple(t["cl.record"]),
        "total": tuple(took),
    }
