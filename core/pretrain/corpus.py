"""The flawed-teacher corpus of the arithmetic base model: demonstrations with a systematic error.

``sft_corpus`` yields the supervised pretraining pairs of ``closedloop pretrain`` (and the tokenizer's
training text); a fraction of them come from ``flawed_answer``, a student who forgets carries and
borrows, so the base model is imperfect in a way a verifier reward can correct.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from core.tasks.arithmetic import ArithmeticConfig, Problem, make_prompts


def sft_corpus(
    n: int, seed: int, cfg: ArithmeticConfig, *, teacher_error_rate: float = 0.0
) -> Iterator[tuple[str, str]]:
    """Yield ``n`` (prompt_text, response_text) pairs for supervised pretraining.

    ``prompt_text`` is the raw question (render it with the chat template) and ``response_text``
    the demonstrated answer (append EOS when tokenizing). Held-out questions never appear.
    With ``teacher_error_rate`` q in [0, 1], each demonstration comes from a flawed teacher
    with probability q (``flawed_answer``: the classic forgot-to-carry / smaller-from-larger
    column bugs) and is otherwise correct — imitation data with a systematic error, which a
    verifier reward can correct and imitation alone cannot.
    """
    if not isinstance(teacher_error_rate, int | float) or not 0.0 <= teacher_error_rate <= 1.0:
        raise ValueError(f"teacher_error_rate must be in [0, 1], got {teacher_error_rate!r}")
    rng = random.Random(f"teacher:{seed}")
    for problem in make_prompts(n, seed=seed, cfg=cfg):
        flawed = teacher_error_rate > 0 and rng.random() < teacher_error_rate
        yield problem.question, flawed_answer(problem) if flawed else problem.answer


def flawed_answer(problem: Problem) -> str:
    """The answer of a student who does column arithmetic without carries or borrows.

    Addition writes each column's digit sum mod 10, except the leftmost column, which is written
    whole (``37+45`` → ``72``, ``99+99`` → ``188``); subtraction writes each column's absolute
    digit difference (``53-15`` → ``42``). Problems that need no carry/borrow get the correct
    answer (``12+13`` → ``25``), so the flaw is systematic, not noise.
    """
    a, b = problem.question[:-1].split(problem.op)
    if a.startswith("-") or b.startswith("-"):
        return problem.answer
    width = max(len(a), len(b))
    a, b = a.zfill(width), b.zfill(width)
    if problem.op == "+":
        cols = [int(x) + int(y) for x, y in zip(a, b, strict=True)]
        digits = str(cols[0]) + "".join(str(c % 10) for c in cols[1:])
    else:
        digits = "".join(str(abs(int(x) - int(y))) for x, y in zip(a, b, strict=True))
    value = int(digits)
    if problem.op == "-" and int(problem.answer) < 0:
        value = -value
    return str(value)
