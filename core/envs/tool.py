"""The multi-turn calculator environment: ``(a op b) op c`` problems solved with tool calls.

Problems ``(37+48)-19=``: 2-digit operands, the intermediate result 2-digit, the final result
non-negative. The policy may call the calculator (``core.envs.tool_protocol``) any number of
times within ``rollout.max_turns``; the episode ends at the first non-call turn, judged by the
arithmetic verifier. Each call has a lognormal latency (median ``latency_median_s``, shape
``latency_sigma``: p99/p50 = exp(2.326 σ), ≥ 10 from σ ≈ 0.99) that the environment really
waits for, and fails with the configured rates: a *timeout* (waits ``timeout_s``, ends the episode),
a *crash* (ends it at once) or a *malformed* result (garbage observation; the episode goes on but is
flagged). All three are the environment's failures: the sample leaves the batch with that reason.
Latencies and faults come from the episode's own seeded RNG, so a seed fixes them whatever the
executor. Held-out split: as the single-turn task, by a hash of the question (1/16).
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from dataclasses import dataclass

from core.envs.protocol import StepResult, render_text
from core.envs.tool_protocol import calculate, encode_observation, is_call, parse_call
from core.tasks.arithmetic import Problem, is_held_out, verify
from core.tokenizer.chat_template import encode_prompt
from core.tokenizer.tokenizer import Tokenizer

TOOL_FAILURES = ("env_timeout", "env_crash", "tool_malformed")
"""Failure reasons of the environment (not the policy's)."""


@dataclass(frozen=True)
class ToolConfig:
    """The calculator environment (the ``[tool]`` config section)."""

    latency_median_s: float = 0.0
    """Median latency of a calculator call in seconds (0: instant, no waiting)."""
    latency_sigma: float = 1.2
    """σ of the lognormal latency (≥ 0); p99/p50 = exp(2.326 σ) = 16 at 1.2."""
    timeout_s: float = 2.0
    """A call slower than this times out (the episode fails as ``env_timeout``); > 0."""
    timeout_rate: float = 0.0
    """Probability that a call hangs until ``timeout_s`` (injected timeout), in [0, 1]."""
    crash_rate: float = 0.0
    """Probability that a call crashes the tool (``env_crash``), in [0, 1]."""
    malformed_rate: float = 0.0
    """Probability that a call returns malformed output (``tool_malformed``), in [0, 1]."""
    seed: int = 0
    """Selects the training problem stream (mixed with each call's seed)."""

    def __post_init__(self) -> None:
        if self.latency_median_s < 0:
            raise ValueError(f"tool.latency_median_s={self.latency_median_s} must be >= 0")
        if self.latency_sigma < 0:
            raise ValueError(f"tool.latency_sigma={self.latency_sigma} must be >= 0")
        if not self.timeout_s > 0:
            raise ValueError(f"tool.timeout_s={self.timeout_s} must be > 0")
        rates = ("timeout_rate", "crash_rate", "malformed_rate")
        for name in rates:
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"tool.{name}={getattr(self, name)} must be in [0, 1]")
        if sum(getattr(self, n) for n in rates) > 1.0:
            raise ValueError("tool.timeout_rate + crash_rate + malformed_rate must be <= 1")

    @property
    def p99_over_p50(self) -> float:
        """The latency tail ratio this config gives."""
        return math.exp(2.3263 * self.latency_sigma)


@dataclass(frozen=True)
class ToolProblem:
    """One ``(a op1 b) op2 c`` problem."""

    a: int
    op1: str
    b: int
    op2: str
    c: int

    @property
    def question(self) -> str:
        return f"({self.a}{self.op1}{self.b}){self.op2}{self.c}="

    @property
    def inner(self) -> int:
        return calculate(self.a, self.op1, self.b)

    @property
    def answer(self) -> int:
        return calculate(self.inner, self.op2, self.c)

    @property
    def prompt_id(self) -> str:
        return hashlib.sha256(self.question.encode()).hexdigest()[:12]

    def outer(self) -> Problem:
        """The second operation as a single-turn problem (what a tool-less student computes)."""
        q = f"{self.inner}{self.op2}{self.c}="
        return Problem(self.prompt_id, q, str(self.answer), 2, self.op2)


def _draw(rng: random.Random, *, held_out: bool) -> ToolProblem:
    while True:
        op1, op2 = rng.choice("+-"), rng.choice("+-")
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(10, 99)
        if op1 == "-" and a < b:
            a, b = b, a
        inner = calculate(a, op1, b)
        if not 10 <= inner <= 99 or (op2 == "-" and inner < c):
            continue
        p = ToolProblem(a, op1, b, op2, c)
        if is_held_out(p.question) == held_out:
            return p


def make_tool_problems(n: int, *, seed: int, cfg: ToolConfig) -> list[ToolProblem]:
    """``n`` training problems of the stream ``(cfg.seed, seed)`` (never a held-out one)."""
    rng = random.Random(f"tool/train/{cfg.seed}/{seed}")
    return [_draw(rng, held_out=False) for _ in range(n)]


def tool_eval_set(n: int) -> list[ToolProblem]:
    """The fixed held-out problems (distinct questions)."""
    rng = random.Random("tool/eval")
    out: dict[str, ToolProblem] = {}
    while len(out) < n:
        p = _draw(rng, held_out=True)
        out.setdefault(p.question, p)
    return list(out.values())


class ToolEnv:
    """One episode of a problem; its latencies and faults come from ``seed``."""

    def __init__(self, problem: ToolProblem, tok: Tokenizer, cfg: ToolConfig, seed: int) -> None:
        self.problem, self.tok, self.cfg, self.seed = problem, tok, cfg, seed
        self._rng = random.Random(f"tool/episode/{seed}")
        self._malformed = False

    @property
    def domain(self) -> str:
        return "tool_arithmetic"

    @property
    def prompt_id(self) -> str:
        return self.problem.prompt_id

    def reset(self) -> list[int]:
        self._rng = random.Random(f"tool/episode/{self.seed}")
        self._malformed = False
        return encode_prompt(self.problem.question, tok=self.tok)

    def fork(self, seed: int) -> ToolEnv:
        return ToolEnv(self.problem, self.tok, self.cfg, seed)

    def step(self, action_ids: list[int], *, finished: bool) -> StepResult:
        text = self.render(action_ids)
        if not finished or not is_call(text):
            verdict = verify(text, self.problem.outer(), finished=finished)
            failure = "tool_malformed" if self._malformed else verdict.failure_reason
            return StepResult(
                done=True,
                rewards={"verifier": verdict.reward},
                failure_reason=failure,
                env_failure=self._malformed,
                event="answer",
            )
        call = parse_call(text)
        if call is None:  # the policy's own mistake: the tool says so
            return StepResult(observation=tuple(self._obs("?")), event="bad_call")
        return self._call(*call)

    def _call(self, a: int, op: str, b: int) -> StepResult:
        cfg, u = self.cfg, self._rng.random()
        latency = self._latency()
        if u < cfg.timeout_rate or latency > cfg.timeout_s:
            return self._fail("env_timeout", self._wait(cfg.timeout_s))
        if u < cfg.timeout_rate + cfg.crash_rate:
            return self._fail("env_crash", self._wait(latency))
        waited = self._wait(latency)
        result = str(calculate(a, op, b))
        if u < cfg.timeout_rate + cfg.crash_rate + cfg.malformed_rate:
            self._malformed = True
            result = result[: len(result) // 2] + "#" + result[len(result) // 2 :]
            obs = tuple(self._obs(result))
            return StepResult(observation=obs, latency_s=waited, event="tool_malformed")
        return StepResult(observation=tuple(self._obs(result)), latency_s=waited, event="call")

    def _fail(self, reason: str, waited: float) -> StepResult:
        return StepResult(
            done=True,
            failure_reason=reason,
            env_failure=True,
            latency_s=waited,
            event=reason,
        )

    def _latency(self) -> float:
        if self.cfg.latency_median_s <= 0:
            return 0.0
        return self.cfg.latency_median_s * math.exp(self.cfg.latency_sigma * self._rng.gauss(0, 1))

    @staticmethod
    def _wait(seconds: float) -> float:
        if seconds > 0:
            time.sleep(seconds)
        return seconds

    def _obs(self, result: str) -> list[int]:
        return encode_observation(result, tok=self.tok)

    def render(self, ids: list[int]) -> str:
        return render_text(self.tok, ids)


@dataclass
class ToolSource:
    """Seeded tool episodes (``[tool]`` config)."""

    cfg: ToolConfig
    tok: Tokenizer
    name: str = "tool"

    def sample(self, n: int, *, seed: int, repeats: int = 1) -> list[ToolEnv]:
        problems = make_tool_problems(n, seed=seed, cfg=self.cfg)
        return [
            ToolEnv(p, self.tok, self.cfg, seed=_episode_seed(seed, i, r))
            for i, p in enumerate(problems)
            for r in range(repeats)
        ]

    def eval_set(self, n: int) -> list[ToolEnv]:
        """Held-out episodes; evaluation measures the policy, so the tool never fails there."""
        clean = ToolConfig(seed=self.cfg.seed)
        return [ToolEnv(p, self.tok, clean, seed=i) for i, p in enumerate(tool_eval_set(n))]


def _episode_seed(seed: int, prompt: int, repeat: int) -> int:
    digest = hashlib.sha256(f"{seed}/{prompt}/{repeat}".encode()).digest()
    return int.from_bytes(digest[:7], "big")
