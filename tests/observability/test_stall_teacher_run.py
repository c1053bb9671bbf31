"""Teacher-route stall suspects on the real teacher run (``tests/conftest.py::teacher_run``):
addition is routed to a copy of the student's own SFT base — a teacher that teaches nothing —
and subtraction to a perturbed fork that disagrees with the student."""

from __future__ import annotations

import pytest

from observability import analysis as A
from observability import open_run

pytestmark = pytest.mark.slow


def test_a_teacher_equal_to_the_student_is_named(teacher_run):
    con = open_run(teacher_run)
    routes = dict(con.execute("SELECT DISTINCT domain, teacher_id FROM teacher_routes").fetchall())
    table = A.suspects(con).set_index("suspect")
    same = table.loc[f"opd_signal:addition->{routes['addition']}"]
    other = table.loc[f"opd_signal:subtraction->{routes['subtraction']}"]
    # the copy of the SFT base starts at KL 0 and stays below 0.005 nats over 3 steps
    assert same["moved"] and same["first_step"] == 0 and same["level_mean"] > 0.5
    assert not other["moved"] and other["level_mean"] == 0.0  # KL ≥ 0.01 every step
