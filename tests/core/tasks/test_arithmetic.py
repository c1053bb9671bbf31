"""Tests for the arithmetic task: config validation, seeded prompts, eval hold-out, verifier."""

import re

import pytest

from core.pretrain.corpus import flawed_answer, sft_corpus
from core.tasks.arithmetic import (
    FAILURE_REASONS,
    ArithmeticConfig,
    Problem,
    Verdict,
    eval_set,
    is_held_out,
    make_prompts,
    problems_digest,
    verify,
)

QUESTION_RE = re.compile(r"(\d+)([+-])(\d+)=")

# problems_digest(eval_set(ArithmeticConfig())) when the default eval set was frozen. A change here
# means every eval number before and after it is incomparable: bump it only deliberately.
DEFAULT_EVAL_DIGEST = "b9a615035b3f62f0611269545359e77567a92e9e57e733211e9b8001d640423a"


def _problem(question: str, answer: str) -> Problem:
    return Problem(prompt_id="test", question=question, answer=answer, level=2, op=question[2])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_digits": 0}, "min_digits"),
        ({"min_digits": 10, "max_digits": 10}, "min_digits"),
        ({"min_digits": 3, "max_digits": 2}, "max_digits"),
        ({"max_digits": 2.5}, "max_digits"),
        ({"ops": ()}, "ops"),
        ({"ops": ("+", "*")}, "ops"),
        ({"ops": ("+", "+")}, "ops"),
        ({"ops": "+"}, "ops"),
        ({"allow_negative": 1}, "allow_negative"),
        ({"seed": -1}, "seed"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ArithmeticConfig(**kwargs)


def test_config_accepts_list_ops_as_tuple():
    # TOML arrays arrive as lists; the frozen config stores a hashable tuple.
    cfg = ArithmeticConfig(ops=["-"])
    assert cfg.ops == ("-",)
    assert hash(cfg) == hash(ArithmeticConfig(ops=("-",)))


def test_make_prompts_is_seeded():
    cfg = ArithmeticConfig()
    assert make_prompts(64, seed=3, cfg=cfg) == make_prompts(64, seed=3, cfg=cfg)
    assert make_prompts(64, seed=3, cfg=cfg) != make_prompts(64, seed=4, cfg=cfg)
    other_stream = ArithmeticConfig(seed=1)
    assert make_prompts(64, seed=3, cfg=cfg) != make_prompts(64, seed=3, cfg=other_stream)
    # A prefix of a longer draw is the shorter draw (one rng stream per (cfg.seed, seed)).
    assert make_prompts(10, seed=3, cfg=cfg) == make_prompts(64, seed=3, cfg=cfg)[:10]


@pytest.mark.parametrize("allow_negative", [False, True])
def test_prompts_are_well_formed(allow_negative):
    cfg = ArithmeticConfig(min_digits=1, max_digits=3, allow_negative=allow_negative)
    problems = make_prompts(500, seed=0, cfg=cfg)
    for p in problems:
        a, op, b = QUESTION_RE.fullmatch(p.question).groups()
        assert op == p.op
        assert len(a) == len(b) == p.level  # level = operand digit count
        assert p.level in cfg.levels
        assert int(p.answer) == (int(a) + int(b) if op == "+" else int(a) - int(b))
        assert str(int(p.answer)) == p.answer  # canonical form
        assert len(p.answer) <= cfg.max_answer_chars
        assert re.fullmatch(r"[0-9a-f]{12}", p.prompt_id)
    negatives = sum(p.answer.startswith("-") for p in problems)
    assert (negatives > 0) == allow_negative
    assert {p.level for p in problems} == {1, 2, 3}
    assert {p.op for p in problems} == {"+", "-"}


def test_prompt_id_is_a_stable_content_id():
    cfg = ArithmeticConfig(min_digits=1, max_digits=1, ops=("+",))
    problems = make_prompts(300, seed=0, cfg=cfg)  # 100 distinct questions: repeats certain
    by_question = {}
    for p in problems:
        assert by_question.setdefault(p.question, p.prompt_id) == p.prompt_id
    assert len(set(by_question.values())) == len(by_question)


def test_eval_set_is_disjoint_from_training_prompts():
    cfg = ArithmeticConfig()
    held_out = {p.question for p in eval_set(cfg)}
    assert all(is_held_out(q) for q in held_out)
    for seed in range(5):
        for stream in (0, 7):
            train_cfg = ArithmeticConfig(seed=stream)
            train = {p.question for p in make_prompts(2000, seed=seed, cfg=train_cfg)}
            assert train.isdisjoint(held_out)
    corpus = {q for q, _ in sft_corpus(2000, 11, cfg)}
    assert corpus.isdisjoint(held_out)


def test_eval_set_is_fixed():
    cfg = ArithmeticConfig()
    problems = eval_set(cfg)
    assert len(problems) == 256
    assert len({p.question for p in problems}) == 256  # distinct
    assert problems_digest(problems) == DEFAULT_EVAL_DIGEST
    # Independent of the training stream seed.
    assert eval_set(ArithmeticConfig(seed=99)) == problems
    assert eval_set(cfg, n=16) == problems[:16]


def test_eval_set_too_small_a_space_raises():
    # 1-digit '+' has 100 questions; about 100/16 ~ 6 are held out, far fewer than 256.
    with pytest.raises(ValueError, match="min_digits"):
        eval_set(ArithmeticConfig(min_digits=1, max_digits=1, ops=("+",)), n=256)


def test_sft_corpus_matches_prompts():
    cfg = ArithmeticConfig()
    pairs = list(sft_corpus(32, 5, cfg))
    assert pairs == [(p.question, p.answer) for p in make_prompts(32, seed=5, cfg=cfg)]


@pytest.mark.parametrize(
    ("question", "answer", "flawed"),
    [
        # Hand-worked column arithmetic without carries / borrows.
        ("37+45=", "82", "72"),  # ones 7+5=12 -> 2, no carry; tens 3+4 = 7
        ("99+99=", "198", "188"),  # ones 18 -> 8; the leftmost column is written whole: 18
        ("70+61=", "131", "131"),  # no carry needed: the teacher is right
        ("53-15=", "38", "42"),  # smaller-from-larger: |3-5| = 2, 5-1 = 4
        ("21-18=", "3", "17"),  # |1-8| = 7, 2-1 = 1
        ("45-45=", "0", "0"),
        ("15-53=", "-38", "-42"),  # negative results keep their sign
        ("7+8=", "15", "15"),  # one column: written whole
    ],
)
def test_flawed_answer_golden(question, answer, flawed):
    op = "+" if "+" in question else "-"
    problem = Problem(prompt_id="t", question=question, answer=answer, level=2, op=op)
    assert flawed_answer(problem) == flawed


def test_sft_corpus_teacher_error_rate():
    cfg = ArithmeticConfig(min_digits=2, max_digits=2)
    problems = make_prompts(4000, seed=3, cfg=cfg)
    pairs = list(sft_corpus(4000, 3, cfg, teacher_error_rate=0.7))
    assert [q for q, _ in pairs] == [p.question for p in problems]  # same questions
    affected = [
        (a, p) for (_, a), p in zip(pairs, problems, strict=True) if flawed_answer(p) != p.answer
    ]
    # About 41% of 2-digit problems need a carry or borrow; 70% of those get the flawed answer.
    assert 0.37 < len(affected) / len(problems) < 0.45
    flawed = sum(a == flawed_answer(p) for a, p in affected) / len(affected)
    assert 0.66 < flawed < 0.74
    # Every demonstration is either the correct or the flawed answer; seeded and reproducible.
    assert all(a in (p.answer, flawed_answer(p)) for (_, a), p in zip(pairs, problems, strict=True))
    assert pairs == list(sft_corpus(4000, 3, cfg, teacher_error_rate=0.7))
    assert list(sft_corpus(50, 3, cfg, teacher_error_rate=0.0)) == list(sft_corpus(50, 3, cfg))
    with pytest.raises(ValueError, match=r"teacher_error_rate must be in \[0, 1\]"):
        list(sft_corpus(1, 3, cfg, teacher_error_rate=1.5))


@pytest.mark.parametrize(
    ("question", "answer", "response", "finished", "expected"),
    [
        # Correct, including a negative result and tolerated surrounding whitespace.
        ("37+45=", "82", "82", True, Verdict(1.0, None)),
        ("37-45=", "-8", "-8", True, Verdict(1.0, None)),
        ("45-45=", "0", "0", True, Verdict(1.0, None)),
        ("37+45=", "82", " 82\n", True, Verdict(1.0, None)),
        ("37+45=", "82", "082", True, Verdict(1.0, None)),  # compared by value
        # Wrong value, sign error, off by one.
        ("37+45=", "82", "81", True, Verdict(0.0, "wrong")),
        ("37-45=", "-8", "8", True, Verdict(0.0, "wrong")),
        ("45-37=", "8", "-8", True, Verdict(0.0, "wrong")),
        # Not a bare integer.
        ("37+45=", "82", "", True, Verdict(0.0, "unparseable")),
        ("37+45=", "82", "8 2", True, Verdict(0.0, "unparseable")),
        ("37+45=", "82", "82=", True, Verdict(0.0, "unparseable")),
        ("37+45=", "82", "+82", True, Verdict(0.0, "unparseable")),
        ("37+45=", "82", "--8", True, Verdict(0.0, "unparseable")),
        ("37+45=", "82", "<|user|>", True, Verdict(0.0, "unparseable")),
        ("37+45=", "82", "9" * 33, True, Verdict(0.0, "unparseable")),
        # No EOS before the token limit: truncated, even when the text is right.
        ("37+45=", "82", "82", False, Verdict(0.0, "truncated")),
        ("37+45=", "82", "8282828", False, Verdict(0.0, "truncated")),
    ],
)
def test_verify_golden_cases(question, answer, response, finished, expected):
    verdict = verify(response, _problem(question, answer), finished=finished)
    assert verdict == expected
    assert verdict.failure_reason is None or verdict.failure_reason in FAILURE_REASONS


def test_verify_accepts_every_generated_answer():
    cfg = ArithmeticConfig(allow_negative=True)
    for p in make_prompts(200, seed=1, cfg=cfg):
        assert verify(p.answer, p, finished=True) == Verdict(1.0, None)
