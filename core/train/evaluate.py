"""Greedy held-out accuracy on the task's fixed eval set, through the rollout engine."""

from __future__ import annotations

from core.rollout.engine import RolloutEngine
from core.rollout.sampling import SamplingParams
from core.tasks.arithmetic import ArithmeticConfig, eval_set, verify
from core.tokenizer.chat_template import encode_prompt
from core.tokenizer.tokenizer import Tokenizer


def greedy_accuracy(
    engine: RolloutEngine,
    tok: Tokenizer,
    task: ArithmeticConfig,
    *,
    n: int = 256,
    max_new_tokens: int = 8,
    batch_size: int = 128,
) -> dict:
    """Fraction of held-out problems answered exactly with greedy decoding."""
    problems = eval_set(task, n)
    params = SamplingParams(max_new_tokens=max_new_tokens)
    correct = 0.0
    for start in range(0, len(problems), batch_size):
        chunk = problems[start : start + batch_size]
        rb = engine.generate(
            [encode_prompt(p.question, tok=tok) for p in chunk],
            params,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            greedy=True,
        )
        for i, p in enumerate(chunk):
            ids = rb.response_ids[i][rb.response_mask[i]].tolist()
            finished = bool(rb.finished[i])
            text = tok.decode(ids[:-1] if finished else ids)
            correct += verify(text, p, finished=finished).reward
    acc = correct / len(problems)
    return {"accuracy": acc, "n": len(problems), "reward_mean": acc}
