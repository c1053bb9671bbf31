"""The generative judge: a small LM reads a question and a response and writes a verdict we parse.

Prompt: the chat template around ``"{question}{response}?"`` (e.g. ``37+45=82?``); the judge
writes up to ``rewards.judge_max_tokens`` tokens greedily. The verdict grammar is ``yes`` or
``no`` followed by EOS (surrounding spaces allowed): ``yes`` → 1, ``no`` → 0. Anything else is
not a zero but a failure: the component is null for that sample and its failure reason is
``judge_unparseable`` (other text) or ``judge_truncated`` (no EOS within the budget), so a judge
that drifts into nonsense shows as failures, never as a silent reward. The judge is an engine
with its own weights (a checkpoint of the policy architecture, ``core.rewards.train``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from core.model.checkpoint import load_checkpoint
from core.rollout.engine import RolloutEngine
from core.rollout.sampling import SamplingParams
from core.sync.convert import actor_to_rollout
from core.teachers.compat import check_compatible
from core.tokenizer.chat_template import encode_prompt
from core.tokenizer.tokenizer import SPECIAL_TOKENS, Tokenizer

VERDICTS = {"yes": 1.0, "no": 0.0}
_VERDICT_RE = re.compile(r"\s*(yes|no)\s*")
JUDGE_FAILURES = ("judge_unparseable", "judge_truncated")


def judge_question(question: str, response: str) -> str:
    """The judge's user turn (special-token strings removed from the response)."""
    for token in SPECIAL_TOKENS:
        response = response.replace(token, "")
    return f"{question}{response}?"


@dataclass(frozen=True)
class Verdict:
    value: float | None
    """1.0 (yes), 0.0 (no) or None (not parsed)."""
    failure_reason: str | None
    text: str
    """What the judge wrote (EOS stripped)."""


def parse_verdict(text: str, *, finished: bool) -> Verdict:
    """The verdict of the judge's text (``finished``: it ended on EOS)."""
    if not finished:
        return Verdict(None, "judge_truncated", text)
    m = _VERDICT_RE.fullmatch(text)
    if m is None:
        return Verdict(None, "judge_unparseable", text)
    return Verdict(VERDICTS[m.group(1)], None, text)


class Judge:
    """A judge engine: greedy verdicts for (question, response) pairs."""

    def __init__(self, engine, *, tok: Tokenizer, max_tokens: int = 4, name: str = "judge"):
        self.engine, self.tok, self.max_tokens, self.name = engine, tok, max_tokens, name

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, tok: Tokenizer, max_tokens: int, **student):
        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"no judge at {path}; train one with `closedloop rewards train-judge --runs RUN`"
            )
        weights, cfg, meta = load_checkpoint(path)
        check_compatible(f"judge {str(path)!r}", meta, cfg, **student)
        engine = RolloutEngine(cfg)
        engine.load_weights(actor_to_rollout(weights, cfg), version=0)
        return cls(engine, tok=tok, max_tokens=max_tokens, name=path.name)

    @torch.no_grad()
    def verdicts(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        """One verdict per (question, response)."""
        if not pairs:
            return []
        prompts = [encode_prompt(judge_question(q, r), tok=self.tok) for q, r in pairs]
        rb = self.engine.generate(
            prompts,
            SamplingParams(max_new_tokens=self.max_tokens),
            eos_id=self.tok.eos_id,
            pad_id=self.tok.pad_id,
            greedy=True,
        )
        out = []
        for i in range(len(pairs)):
            ids = rb.response_ids[i][rb.response_mask[i]].tolist()
            finished = bool(rb.finished[i])
            text = self.tok.decode(ids[:-1] if finished else ids)
            out.append(parse_verdict(text, finished=finished))
        return out
