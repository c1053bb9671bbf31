"""Test helpers: a Session on the shipped base model and a real rollout of it (no loop state)."""

from core.config import load_config
from core.tasks.arithmetic import make_prompts
from core.telemetry import NullTelemetry
from core.tokenizer.chat_template import encode_prompt
from core.train.batch import build_train_batch
from core.train.session import Session

SMALL = ["algorithm.prompts_per_step=4", "algorithm.group_size=4"]


def session(*overrides: str) -> Session:
    """Session of the default config, 4 prompts x 4 samples, then ``overrides``."""
    return Session(load_config(None, [*SMALL, *overrides]), NullTelemetry())


def rollout(s: Session, step: int = 0):
    """(RolloutBatch, TrainBatch) of one real rollout with the loop's prompts and sampling."""
    cfg = s.cfg
    problems = make_prompts(cfg.algorithm.prompts_per_step, seed=step, cfg=cfg.task)
    prompts = [encode_prompt(p.question, tok=s.tok) for p in problems]
    prompts = [p for p in prompts for _ in range(cfg.algorithm.group_size)]
    rb = s.engine.generate(
        prompts,
        cfg.rollout.sampling(),
        eos_id=s.tok.eos_id,
        pad_id=s.tok.pad_id,
        generator=s.generator,
    )
    return rb, build_train_batch(rb, tok=s.tok)
