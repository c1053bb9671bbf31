"""Task ``arithmetic``: seeded multi-digit addition/subtraction prompts and a binary verifier.

A question reads ``"37+45="`` and the expected response is the bare integer (``"82"``) followed by
EOS; the difficulty level is the operands' digit count. Simplifications: both operands of a problem
have the same number of digits; a fixed 1/16 of the problem space (chosen by a hash of the
question) is held out for evaluation, so no training seed can ever draw an eval problem.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

OPS: tuple[str, ...] = ("+", "-")
"""Every operator the task knows."""

FAILURE_REASONS: tuple[str, ...] = ("wrong", "unparseable", "truncated")
"""Every ``Verdict.failure_reason`` besides ``None`` (correct)."""

EVAL_SEED = 271_828
"""Seed of the held-out eval set; independent of every training seed."""

HOLDOUT_MOD = 16
"""A question is held out for evaluation iff ``sha256(question) mod HOLDOUT_MOD == 0``."""

MAX_DIGITS_LIMIT = 9
"""Upper bound on ``max_digits`` (answers stay short; the model is tiny)."""

_ANSWER_RE = re.compile(r"-?[0-9]{1,32}")


@dataclass(frozen=True)
class ArithmeticConfig:
    """Which problems the task draws."""

    min_digits: int = 2
    """Smallest operand digit count (the easiest level), in [1, MAX_DIGITS_LIMIT]."""
    max_digits: int = 3
    """Largest operand digit count (the hardest level), in [min_digits, MAX_DIGITS_LIMIT]."""
    ops: tuple[str, ...] = ("+", "-")
    """Operators to draw from, uniformly; a non-empty subset of ``OPS`` without repeats."""
    allow_negative: bool = False
    """If False, subtraction operands are ordered so that the result is >= 0."""
    seed: int = 0
    """Selects the training prompt stream; mixed with each call's ``seed``, in [0, 2**63)."""
    eval_per_op: bool = False
    """Draw the held-out eval set per operator (``n // len(ops)`` problems each, from that
    operator's own fixed draw): a domain is then evaluated on the same problems in every run,
    whatever other operators it trains on (how per-domain experts and students compare)."""

    def __post_init__(self) -> None:
        if isinstance(self.ops, str) or not isinstance(self.ops, Sequence):
            raise ValueError(f"ops must be a sequence of operators from {OPS}, got {self.ops!r}")
        object.__setattr__(self, "ops", tuple(self.ops))
        if not _is_int(self.min_digits) or not 1 <= self.min_digits <= MAX_DIGITS_LIMIT:
            raise ValueError(
                f"min_digits must be an int in [1, {MAX_DIGITS_LIMIT}], got {self.min_digits!r}"
            )
        if (
            not _is_int(self.max_digits)
            or not self.min_digits <= self.max_digits <= MAX_DIGITS_LIMIT
        ):
            raise ValueError(
                f"max_digits must be an int in [min_digits={self.min_digits}, "
                f"{MAX_DIGITS_LIMIT}], got {self.max_digits!r}"
            )
        if not self.ops or len(set(self.ops)) != len(self.ops) or not set(self.ops) <= set(OPS):
            raise ValueError(
                f"ops must be a non-empty subset of {OPS} without repeats, got {self.ops!r}"
            )
        if not isinstance(self.allow_negative, bool):
            raise ValueError(f"allow_negative must be a bool, got {self.allow_negative!r}")
        if not isinstance(self.eval_per_op, bool):
            raise ValueError(f"eval_per_op must be a bool, got {self.eval_per_op!r}")
        if not _is_int(self.seed) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be an int in [0, 2**63), got {self.seed!r}")

    @property
    def levels(self) -> tuple[int, ...]:
        """The difficulty levels (operand digit counts) this config draws."""
        return tuple(range(self.min_digits, self.max_digits + 1))

    @property
    def max_answer_chars(self) -> int:
        """Longest correct answer in characters: a carry digit plus a sign (EOS not counted)."""
        return self.max_digits + 1 + int(self.allow_negative)


@dataclass(frozen=True)
class Problem:
    """One prompt of the task."""

    prompt_id: str
    """Stable id: the first 12 hex digits of sha256(question); equal questions share it."""
    question: str
    """The user turn, e.g. ``"37+45="``."""
    answer: str
    """The canonical expected response (without EOS), e.g. ``"82"`` or ``"-8"``."""
    level: int
    """Difficulty: the operands' digit count."""
    op: str
    """The operator, one of ``OPS``."""


@dataclass(frozen=True)
class Verdict:
    """The verifier's judgement of one response."""

    reward: float
    """1.0 if correct, else 0.0."""
    failure_reason: str | None
    """None if correct, else one of ``FAILURE_REASONS``."""


def is_held_out(question: str) -> bool:
    """Whether ``question`` belongs to the eval partition (never drawn for training)."""
    digest = hashlib.sha256(question.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % HOLDOUT_MOD == 0


def make_prompts(n: int, *, seed: int, cfg: ArithmeticConfig) -> list[Problem]:
    """Draw ``n`` training problems (repeats possible) from the stream ``(cfg.seed, seed)``.

    The level is uniform over ``cfg.levels``, the operator uniform over ``cfg.ops``, each operand
    uniform over the level's digit range; held-out questions are rejected and redrawn.
    """
    rng = random.Random(f"arithmetic/train/{cfg.seed}/{_check_seed(seed)}")
    return [_draw(rng, cfg, held_out=False) for _ in range(_check_n(n))]


def eval_set(cfg: ArithmeticConfig, n: int = 256) -> list[Problem]:
    """The fixed held-out eval set: ``n`` distinct held-out problems drawn with ``EVAL_SEED``.

    Independent of ``cfg.seed``; it depends only on the digit range, ops and ``allow_negative``.
    Raises ValueError if the held-out part of the problem space is too small for ``n``.
    """
    rng = random.Random(f"arithmetic/eval/{EVAL_SEED}")
    problems: dict[str, Problem] = {}
    attempts, max_attempts = 0, 50 * _check_n(n) + 1000
    while len(problems) < n:
        attempts += 1
        if attempts > max_attempts:
            raise ValueError(
                f"eval_set: found only {len(problems)} distinct held-out problems for n={n}; "
                f"raise min_digits (now {cfg.min_digits}) or lower n"
            )
        problem = _draw(rng, cfg, held_out=True)
        problems.setdefault(problem.question, problem)
    return list(problems.values())


def verify(response_text: str, problem: Problem, *, finished: bool) -> Verdict:
    """Judge one decoded response (EOS and padding stripped).

    ``finished`` is True iff the rollout stopped on EOS; a response cut off by the max-token
    limit is ``truncated`` whatever its text. Otherwise the stripped text must be an optional
    minus sign followed by 1..32 digits (else ``unparseable``); it is compared by integer value
    (``"082"`` counts as 82), so a correct value scores 1.0 and any other scores ``wrong``.
    """
    if not finished:
        return Verdict(reward=0.0, failure_reason="truncated")
    text = response_text.strip()
    if _ANSWER_RE.fullmatch(text) is None:
        return Verdict(reward=0.0, failure_reason="unparseable")
    if int(text) != int(problem.answer):
        return Verdict(reward=0.0, failure_reason="wrong")
    return Verdict(reward=1.0, failure_reason=None)


def problems_digest(problems: Sequence[Problem]) -> str:
    """sha256 over the problems' fields in order: the revision of an eval set."""
    lines = (f"{p.prompt_id}\t{p.question}\t{p.answer}\t{p.level}\t{p.op}" for p in problems)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def _draw(rng: random.Random, cfg: ArithmeticConfig, *, held_out: bool) -> Problem:
    """Draw problems until one lands in the requested partition (train or held-out)."""
    while True:
        level = rng.randint(cfg.min_digits, cfg.max_digits)
        op = cfg.ops[rng.randrange(len(cfg.ops))]
        low = 0 if level == 1 else 10 ** (level - 1)
        a, b = rng.randint(low, 10**level - 1), rng.randint(low, 10**level - 1)
        if op == "-" and not cfg.allow_negative and a < b:
            a, b = b, a
        question = f"{a}{op}{b}="
        if is_held_out(question) == held_out:
            answer = str(a + b if op == "+" else a - b)
            return Problem(
                prompt_id=hashlib.sha256(question.encode("utf-8")).hexdigest()[:12],
                question=question,
                answer=answer,
                level=level,
                op=op,
            )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_n(n: int) -> int:
    if not _is_int(n) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    return n


def _check_seed(seed: int) -> int:
    if not _is_int(seed):
        raise ValueError(f"seed must be an int, got {seed!r}")
    return seed
