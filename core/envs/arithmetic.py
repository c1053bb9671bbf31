"""The single-turn arithmetic environment: one question, one answer, a binary verifier.

Wraps ``core.tasks.arithmetic`` (problems, held-out split, verifier): ``reset`` renders the
question with the chat template; ``step`` decodes the answer (EOS stripped) and ends the episode
with the verifier's reward. The domain is the operator's (``addition`` / ``subtraction``), so
per-domain teachers can be routed on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.envs.protocol import StepResult, render_text
from core.tasks.arithmetic import ArithmeticConfig, Problem, eval_set, make_prompts, verify
from core.tokenizer.chat_template import encode_prompt
from core.tokenizer.tokenizer import Tokenizer

DOMAINS = {"+": "addition", "-": "subtraction"}
"""Operator -> task domain."""


@dataclass
class ArithmeticEnv:
    """One problem; done after the first turn."""

    problem: Problem
    tok: Tokenizer

    @property
    def domain(self) -> str:
        return DOMAINS[self.problem.op]

    @property
    def prompt_id(self) -> str:
        return self.problem.prompt_id

    def reset(self) -> list[int]:
        return encode_prompt(self.problem.question, tok=self.tok)

    def step(self, action_ids: list[int], *, finished: bool) -> StepResult:
        verdict = verify(self.render(action_ids), self.problem, finished=finished)
        return StepResult(
            done=True, rewards={"verifier": verdict.reward}, failure_reason=verdict.failure_reason
        )

    def fork(self, seed: int) -> ArithmeticEnv:
        """A fresh episode of the same problem (this environment has no randomness of its own)."""
        return ArithmeticEnv(self.problem, self.tok)

    def render(self, ids: list[int]) -> str:
        return render_text(self.tok, ids)


@dataclass
class ArithmeticSource:
    """Seeded arithmetic episodes (``[task]`` config)."""

    cfg: ArithmeticConfig
    tok: Tokenizer
    name: str = "arithmetic"

    def sample(self, n: int, *, seed: int, repeats: int = 1) -> list[ArithmeticEnv]:
        problems = make_prompts(n, seed=seed, cfg=self.cfg)
        return [ArithmeticEnv(p, self.tok) for p in problems for _ in range(repeats)]

    def eval_set(self, n: int) -> list[ArithmeticEnv]:
        if self.cfg.eval_per_op and len(self.cfg.ops) > 1:  # each operator's own fixed draw
            k = n // len(self.cfg.ops)
            problems = [p for op in self.cfg.ops for p in eval_set(replace(self.cfg, ops=(op,)), k)]
        else:
            problems = eval_set(self.cfg, n)
        return [ArithmeticEnv(p, self.tok) for p in problems]
