"""Test helpers for the TRL integration: a tiny ``GRPOTrainer`` on the exported base model
(benchmarks/vs_trl.py's TRL side) and a profiler hook that keeps what TRL itself computed —
the locals of ``GRPOTrainer._compute_loss`` at its return and the batches that
``_generate_and_score_completions`` and ``_calculate_rewards`` return — to compare the recorded
run against."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "vs_trl.py"
LOSS_LOCALS = (
    "inputs",
    "per_token_logps",
    "old_per_token_logps",
    "entropies",
    "advantages",
    "mask",
    "is_low_clipped",
    "is_high_clipped",
)


def vs_trl():
    spec = importlib.util.spec_from_file_location("bench_vs_trl", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_trainer(root: Path, *, steps: int = 2, **trl_args):
    """benchmarks/vs_trl.py's TRL trainer at 2 prompts x 4 completions per step (``trl_args``:
    other ``GRPOConfig`` values)."""
    from core.driver import resolve_config
    from core.model.hf_export import export_hf

    bench = vs_trl()
    sets = ["algorithm.prompts_per_step=2", "algorithm.group_size=4"]
    cfg = resolve_config(None, sets, steps=steps, seed=0)
    base = root / "base"
    if not base.exists():
        export_hf(base)
    questions = bench.step_questions(cfg, steps)
    return bench.make_trl_trainer(cfg, base, root / "trl", questions=questions, **trl_args)


class TRLCapture:
    """``with TRLCapture() as cap: trainer.train()``: ``cap.losses`` (one dict of
    ``LOSS_LOCALS`` per ``_compute_loss`` call), ``cap.batches`` (generation batches),
    ``cap.rewards`` (``[B, K]`` reward tensors), all detached copies."""

    def __init__(self) -> None:
        from trl import GRPOTrainer

        def code(f):  # TRL's own function under its profiling decorator
            return inspect.unwrap(f).__code__

        self.codes = {
            code(GRPOTrainer._compute_loss): self._loss,
            code(GRPOTrainer._generate_and_score_completions): self._batch,
            code(GRPOTrainer._calculate_rewards): self._rewards,
        }
        self.losses, self.batches, self.rewards = [], [], []

    def _loss(self, frame, _ret):
        loc = frame.f_locals
        self.losses.append({k: _copy(loc.get(k)) for k in LOSS_LOCALS})

    def _batch(self, _frame, ret):
        self.batches.append({k: _copy(v) for k, v in ret.items()})

    def _rewards(self, _frame, ret):
        self.rewards.append(_copy(ret))

    def _hook(self, frame, event, arg):
        if event == "return" and frame.f_code in self.codes:
            self.codes[frame.f_code](frame, arg)

    def __enter__(self) -> TRLCapture:
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)


def _copy(v):
    if hasattr(v, "detach"):
        return v.detach().clone()
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    return v
