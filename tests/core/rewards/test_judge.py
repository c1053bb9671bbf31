"""The generative judge: verdict grammar, and parse failures recorded as failures (not zeros)."""

from __future__ import annotations

import pytest

from core.rewards.judge import judge_question, parse_verdict
from observability import open_run


@pytest.mark.parametrize(
    ("text", "finished", "value", "reason"),
    [
        ("yes", True, 1.0, None),
        (" no ", True, 0.0, None),
        ("yes no", True, None, "judge_unparseable"),
        ("82", True, None, "judge_unparseable"),
        ("", True, None, "judge_unparseable"),
        ("yes", False, None, "judge_truncated"),
    ],
)
def test_parse_verdict(text, finished, value, reason):
    v = parse_verdict(text, finished=finished)
    assert (v.value, v.failure_reason, v.text) == (value, reason, text)


def test_judge_question_drops_special_tokens():
    assert judge_question("37+45=", "82<|eos|>") == "37+45=82?"


def test_unparseable_verdicts_are_recorded_as_failures(teacher_run):
    """The barely trained judge of the teacher run writes text that is no verdict: those
    samples carry a null judge value and ``judge_unparseable``/``judge_truncated``, and their
    total reward leaves the judge out (it still recomputes from the recorded components)."""
    con = open_run(teacher_run)
    rows = con.execute(
        "SELECT value, failure_reason, weight FROM reward_components WHERE component = 'judge'"
    ).fetchall()
    failed = [r for r in rows if r[0] is None]
    assert failed, "expected some unparseable verdicts from an 8-step judge"
    assert {r[1] for r in failed} <= {"judge_unparseable", "judge_truncated"}
    assert all(r[1] is None and r[0] in (0.0, 1.0) for r in rows if r[0] is not None)
    assert {r[2] for r in rows} == {0.3}
    ((bad,),) = con.execute(
        """SELECT count(*) FROM samples s JOIN (
               SELECT sample_id, sum(weight * value) FILTER (WHERE value IS NOT NULL) AS t
               FROM reward_components GROUP BY sample_id) c USING (sample_id)
           WHERE abs(s.reward - c.t) > 1e-5"""
    ).fetchall()
    assert bad == 0
