"""A scripted two-turn environment for orchestrator tests: whatever the policy says, turn 1 gets a
fixed observation (or a scripted environment failure), turn 2 ends the episode with reward 1.
Failures follow a per-group script so the refill rule can be checked exactly."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.envs.protocol import StepResult
from core.tokenizer.chat_template import encode_prompt


@dataclass
class ScriptEnv:
    tok: object
    fail: bool = False
    observation: tuple[int, ...] = ()
    refill_fails: list = field(default_factory=list)
    """Shared by a group: whether each successive refill fails (consumed in order)."""
    on_first_step: object = None
    prompt_id: str = "script"
    domain: str = "script"

    def reset(self) -> list[int]:
        self._turn = 0
        return encode_prompt("1+1=", tok=self.tok)

    def step(self, action_ids, *, finished: bool) -> StepResult:
        self._turn += 1
        if self._turn == 1:
            if self.on_first_step is not None:
                self.on_first_step()
            if self.fail:
                return StepResult(done=True, failure_reason="env_crash", env_failure=True)
            return StepResult(observation=self.observation, event="call")
        return StepResult(done=True, rewards={"verifier": 1.0}, event="answer")

    def fork(self, seed: int) -> ScriptEnv:
        fail = self.refill_fails.pop(0) if self.refill_fails else False
        return ScriptEnv(self.tok, fail, self.observation, self.refill_fails, self.on_first_step)

    def render(self, ids) -> str:
        return self.tok.decode(list(ids))


@dataclass
class ScriptSource:
    """Group k fails on the episodes ``pattern[k]`` (indices) and its refills per ``refills[k]``."""

    tok: object
    pattern: dict = field(default_factory=dict)
    refills: dict = field(default_factory=dict)
    observation: tuple[int, ...] = ()
    on_first_step: object = None
    name: str = "script"

    def sample(self, n: int, *, seed: int, repeats: int = 1) -> list[ScriptEnv]:
        fails, shared = self.pattern.get(seed, ()), list(self.refills.get(seed, ()))
        return [
            ScriptEnv(self.tok, j in fails, self.observation, shared, self.on_first_step)
            for j in range(n * repeats)
        ]

    def eval_set(self, n: int) -> list[ScriptEnv]:
        return self.sample(n, seed=-1)
