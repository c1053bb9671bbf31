"""Test helper: a scripted two-turn environment (the policy acts, the environment answers with
fixed observation ids, the policy acts again, the episode ends with a reward)."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.envs.protocol import StepResult
from core.tokenizer.chat_template import encode_prompt
from core.tokenizer.tokenizer import Tokenizer


@dataclass
class ScriptedEnv:
    """Turn 1 -> ``observation`` ids; turn 2 -> done with reward 1 iff the answer is non-empty."""

    tok: Tokenizer
    question: str = "12+34="
    observation: tuple[int, ...] = ()
    domain: str = "scripted"
    prompt_id: str = "scripted-0"
    actions: list[list[int]] = field(default_factory=list)

    def reset(self) -> list[int]:
        return encode_prompt(self.question, tok=self.tok)

    def step(self, action_ids: list[int], *, finished: bool) -> StepResult:
        self.actions.append(list(action_ids))
        if len(self.actions) == 1:
            return StepResult(observation=self.observation)
        return StepResult(done=True, rewards={"verifier": float(len(action_ids) > 1)})

    def render(self, ids: list[int]) -> str:
        return self.tok.decode(list(ids))


@dataclass
class ScriptedSource:
    """An ``EnvSource`` of scripted two-turn episodes."""

    tok: Tokenizer
    observation: tuple[int, ...]
    name: str = "scripted"

    def sample(self, n: int, *, seed: int, repeats: int = 1) -> list[ScriptedEnv]:
        return [
            ScriptedEnv(self.tok, observation=self.observation, prompt_id=f"scripted-{seed}-{i}")
            for i in range(n)
            for _ in range(repeats)
        ]

    def eval_set(self, n: int) -> list[ScriptedEnv]:
        return self.sample(n, seed=-1)
