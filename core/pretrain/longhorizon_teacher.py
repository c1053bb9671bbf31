"""The flawed teacher of the long-horizon environment, as a scripted token-in/token-out engine.

It answers ``generate`` like a rollout engine, so demonstrations go through the very rollout code
RL uses (``core.rollout.compaction``): same segments, roles and ids. Its policy reads the context's
first user message (the opening facts, or the resumed summary):
- asked for a summary (the context ends with ``q_sum``): it writes the facts it sees — except
  that with probability ``flaw_rate`` it writes only the first one (the flaw RL must fix: the
  dropped fact is lost for good once the context is rebuilt);
- asked a question (``<user>x?<assistant>``): the value of x if its facts hold x, else a guess
  (the first fact's value);
- otherwise: ``ok``.
Simplification: log-probs are reported as 0 (demonstrations are not scored).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import torch

from core.envs.longhorizon import ACK
from core.model.config import ModelConfig
from core.rollout.engine import left_pad
from core.rollout.protocol import RolloutBatch
from core.tokenizer.tokenizer import Tokenizer

_FACT = re.compile(r"([a-z])=(\d+)")
_QUESTION = re.compile(r"([a-z])\?$")


@dataclass
class TeacherEngine:
    """Scripted stand-in for ``RolloutEngine.generate`` (see the module docstring)."""

    cfg: ModelConfig
    tok: Tokenizer
    summary_prompt: str
    flaw_rate: float
    seed: int = 0
    policy_version: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.flaw_rate <= 1.0:
            raise ValueError(f"flaw_rate={self.flaw_rate} must be in [0, 1]")
        self._rng = random.Random(f"longhorizon-teacher/{self.seed}")
        self._q_sum = self.tok.encode(self.summary_prompt)

    def respond(self, context: list[int]) -> str:
        """The teacher's text for one context."""
        facts = _FACT.findall(self._first_user_message(context))
        if context[-len(self._q_sum) :] == self._q_sum:
            keep = facts[:1] if self._rng.random() < self.flaw_rate else facts
            return ",".join(f"{k}={v}" for k, v in keep)
        last = self._last_user_message(context)
        q = _QUESTION.search(last)
        if q is not None:
            known = dict(facts)
            return known.get(q.group(1), facts[0][1] if facts else "0")
        return ACK

    def generate(self, prompts, params, *, eos_id, pad_id, generator=None, greedy=False):
        outs = [
            self.tok.encode(self.respond(p))[: params.max_new_tokens - 1] + [eos_id]
            for p in prompts
        ]
        prompt_ids, prompt_valid = left_pad([list(p) for p in prompts], pad_id)
        width = max(len(o) for o in outs)
        ids = torch.full((len(outs), width), pad_id, dtype=torch.int64)
        mask = torch.zeros((len(outs), width), dtype=torch.bool)
        for i, o in enumerate(outs):
            ids[i, : len(o)] = torch.tensor(o)
            mask[i, : len(o)] = True
        return RolloutBatch(
            prompt_ids=prompt_ids,
            prompt_valid=prompt_valid,
            response_ids=ids,
            response_mask=mask,
            logprobs=torch.zeros(ids.shape),
            finished=torch.ones(len(outs), dtype=torch.bool),
            policy_version=self.policy_version,
        )

    def _first_user_message(self, context: list[int]) -> str:
        start = context.index(self.tok.user_id) + 1
        end = context.index(self.tok.assistant_id, start)
        return self.tok.decode(context[start:end])

    def _last_user_message(self, context: list[int]) -> str:
        start = len(context) - 1 - context[::-1].index(self.tok.user_id)
        end = context.index(self.tok.assistant_id, start)
        return self.tok.decode(context[start + 1 : end])
