"""Lifecycle checks over recorded memory_events columns: clean runs pass, broken ones are named."""

from core.memory.checks import lifecycle_violations
from core.memory.events import EVENT_COLUMNS


def columns(*events):
    """events: (event_id, event, object, bytes, persistent) rows with defaults for the rest."""
    rows = [
        dict(
            ts=10 * eid,
            step=0,
            rank=0,
            device="cpu",
            device_kind="cpu",
            object=obj,
            category="live_io",
            event=ev,
            bytes=nb,
            logical_shape="[]",
            dtype="float32",
            layout="contiguous",
            producer="",
            consumer="",
            owner="rollout",
            event_id=eid,
            persistent=pers,
        )
        for eid, ev, obj, nb, pers in events
    ]
    return {c: [r[c] for r in rows] for c in EVENT_COLUMNS}


def test_clean_sequence_passes():
    cols = columns(
        (0, "create", "a", 8, False), (1, "reuse", "a", 8, False), (2, "free", "a", 8, False)
    )
    assert lifecycle_violations(cols) == []


def test_leak_is_reported_unless_persistent():
    cols = columns((0, "create", "a", 8, False), (1, "create", "w", 8, True))
    assert lifecycle_violations(cols) == [
        "rank 0: non-persistent object 'a' (owner 'rollout') never freed"
    ]
    assert lifecycle_violations(cols, require_freed=False) == []


def test_double_free_unknown_and_bytes_change_are_reported():
    cols = columns(
        (0, "create", "a", 8, False),
        (1, "reuse", "a", 16, False),
        (2, "free", "a", 16, False),
        (3, "free", "a", 16, False),
        (4, "transfer", "ghost", 4, False),
    )
    problems = lifecycle_violations(cols)
    assert len(problems) == 3
    assert "bytes changed from 8 to 16" in problems[0]
    assert "double free" in problems[1]
    assert "never created" in problems[2]
