"""Test helpers: a Session on the shipped base model and a real rollout of it (no loop state),
and a small model config."""

from core.config import load_config
from core.loops.grpo import collect_step
from core.loops.session import Session
from core.loops.step import trainer_inputs
from core.model.config import ModelConfig
from observability.telemetry import NullTelemetry

SMALL = ["algorithm.prompts_per_step=4", "algorithm.group_size=4"]


def small_config(**kw) -> ModelConfig:
    """A 2-layer GQA model (vocabulary 64, width 32) small enough to build per test."""
    dims = {"num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "ffn_hidden_size": 48}
    return ModelConfig(vocab_size=64, hidden_size=32, **dims, **kw)


def session(*overrides: str) -> Session:
    """Session of the default config, 4 prompts x 4 samples, then ``overrides``."""
    return Session(load_config(None, [*SMALL, *overrides]), NullTelemetry())


def rollout(s: Session, step: int = 0, *, retokenize: bool = False):
    """The Trajectories of one real rollout with the loop's prompts and sampling, with the
    trainer's inputs filled (``train_ids``/``train_valid``)."""
    traj = collect_step(s, step)
    trainer_inputs(traj, tok=s.tok, retokenize=retokenize)
    return traj
