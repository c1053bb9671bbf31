"""The long-horizon recall environment: early facts matter at the end, the history outgrows the
context.

An episode opens with key facts (``<bos><user>a=37,b=52<assistant>``); then ``n`` filler turns,
each an observation with a distractor fact (``<user>f=18<assistant>``) that the policy
acknowledges (``ok``); finally the question about one key fact (``<user>b?<assistant>``), whose
answer (``52``) is verified. The full history (12 + 9·n + 7 tokens for two facts) exceeds a
context budget of 64 after a few turns: an agent without compaction runs out of context, an agent
whose summaries keep the key facts answers from its summary, one whose summaries drop them
guesses. The environment only sees the policy's actions; compaction is the rollout's business
(``core.rollout.compaction``). Simplifications: filler actions are not checked (any action
continues the episode); facts are two-digit values; letters ``a``.. name the key facts, the
distractors use later letters. Held out: fact sets whose sha256 is 0 mod ``HOLDOUT_MOD``.
"""

from __future__ import annotations

import hashlib
import random
import string
from dataclasses import dataclass

from core.envs.protocol import StepResult, render_text
from core.tokenizer.tokenizer import ASSISTANT, BOS, USER, Tokenizer

HOLDOUT_MOD = 8
"""A fact set is held out for evaluation iff ``sha256(facts) mod HOLDOUT_MOD == 0``."""
EVAL_SEED = 314_159
SUMMARY_PROMPT = "#"
"""q_sum: the text that asks the policy for a summary (appended after the generation cue)."""
ACK = "ok"
"""The filler turns' expected action."""


@dataclass(frozen=True)
class LongHorizonConfig:
    """Episode shape (the ``[longhorizon]`` config section)."""

    n_facts: int = 2
    """Key facts in the opening prompt, in [1, 4]; the question asks about one of them."""
    min_turns: int = 5
    """Fewest filler turns before the question (>= 1; from 5 on, a two-fact episode's full
    history, 22 + 9·n tokens, exceeds a 64-token budget)."""
    max_turns: int = 8
    """Most filler turns before the question (in [min_turns, 20])."""
    seed: int = 0
    """Selects the training episode stream; mixed with each call's seed."""

    def __post_init__(self) -> None:
        if not 1 <= self.n_facts <= 4:
            raise ValueError(f"longhorizon.n_facts={self.n_facts} must be in [1, 4]")
        if self.min_turns < 1:
            raise ValueError(f"longhorizon.min_turns={self.min_turns} must be >= 1")
        if not self.min_turns <= self.max_turns <= 20:
            raise ValueError(
                f"longhorizon.max_turns={self.max_turns} must be in [min_turns={self.min_turns}, 20]"
            )


@dataclass(frozen=True)
class Episode:
    """One episode's content."""

    facts: tuple[tuple[str, int], ...]
    """Key facts (letter, value) in prompt order."""
    distractors: tuple[tuple[str, int], ...]
    """One (letter, value) per filler turn."""
    question: str
    """The key letter asked at the end."""

    @property
    def facts_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.facts)

    @property
    def answer(self) -> str:
        return str(dict(self.facts)[self.question])

    @property
    def prompt_id(self) -> str:
        text = f"{self.facts_text}|{len(self.distractors)}|{self.question}"
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def is_held_out(facts_text: str) -> bool:
    digest = hashlib.sha256(facts_text.encode()).digest()
    return int.from_bytes(digest[:8], "big") % HOLDOUT_MOD == 0


def draw_episode(rng: random.Random, cfg: LongHorizonConfig, *, held_out: bool) -> Episode:
    """One episode from ``rng`` in the requested partition (redraws until the facts land in it)."""
    keys = string.ascii_lowercase[: cfg.n_facts]
    pool = string.ascii_lowercase[cfg.n_facts :]
    while True:
        facts = tuple((k, rng.randint(10, 99)) for k in keys)
        if is_held_out(",".join(f"{k}={v}" for k, v in facts)) == held_out:
            break
    n = rng.randint(cfg.min_turns, cfg.max_turns)
    letters = rng.sample(pool, n)
    distractors = tuple((k, rng.randint(10, 99)) for k in letters)
    return Episode(facts, distractors, keys[rng.randrange(len(keys))])


@dataclass
class LongHorizonEnv:
    """One episode: filler turns, then the question; reward 1 for the right value."""

    episode: Episode
    tok: Tokenizer
    domain: str = "recall"
    turn: int = 0

    @property
    def prompt_id(self) -> str:
        return self.episode.prompt_id

    def reset(self) -> list[int]:
        self.turn = 0
        return self.tok.encode(BOS + USER + self.episode.facts_text + ASSISTANT)

    def step(self, action_ids: list[int], *, finished: bool) -> StepResult:
        ep = self.episode
        self.turn += 1
        if self.turn <= len(ep.distractors):
            k, v = ep.distractors[self.turn - 1]
            return StepResult(observation=tuple(self.tok.encode(f"{USER}{k}={v}{ASSISTANT}")))
        if self.turn == len(ep.distractors) + 1:
            return StepResult(
                observation=tuple(self.tok.encode(f"{USER}{ep.question}?{ASSISTANT}"))
            )
        text = self.render(action_ids).strip()
        if not finished:
            return StepResult(done=True, rewards={"verifier": 0.0}, failure_reason="truncated")
        ok = text == ep.answer
        return StepResult(
            done=True, rewards={"verifier": float(ok)}, failure_reason=None if ok else "wrong"
        )

    def render(self, ids: list[int]) -> str:
        return render_text(self.tok, ids)


@dataclass
class LongHorizonSource:
    """Seeded long-horizon episodes (``[longhorizon]`` config)."""

    cfg: LongHorizonConfig
    tok: Tokenizer
    name: str = "longhorizon"

    def sample(self, n: int, *, seed: int, repeats: int = 1) -> list[LongHorizonEnv]:
        rng = random.Random(f"longhorizon/train/{self.cfg.seed}/{seed}")
        eps = [draw_episode(rng, self.cfg, held_out=False) for _ in range(n)]
        return [LongHorizonEnv(e, self.tok) for e in eps for _ in range(repeats)]

    def eval_set(self, n: int) -> list[LongHorizonEnv]:
        rng = random.Random(f"longhorizon/eval/{EVAL_SEED}")
        return [
            LongHorizonEnv(draw_episode(rng, self.cfg, held_out=True), self.tok) for _ in range(n)
        ]
