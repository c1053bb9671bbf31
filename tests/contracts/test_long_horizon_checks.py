"""The long_horizon contract on a real CompactionRL run: a clean run passes every check (none
skipped), and each injected violation fails its check with the injected row as the example."""

import polars as pl
import pytest

from contracts import run_gate
from contracts.report import format_table
from tests.contracts.store_edit import copy_run, edit_rows, query

pytestmark = pytest.mark.slow

LONG_HORIZON = [
    "long_horizon.untrained_roles_not_in_loss",
    "long_horizon.segments_share_reward",
    "long_horizon.loss_denominator",
    "long_horizon.values_finite",
    "long_horizon.critic_attention_frozen",
]


def failing(gate) -> set[str]:
    return {r.id for r in gate.results if r.failed}


@pytest.fixture
def run(compaction_run, tmp_path):
    return copy_run(compaction_run, tmp_path)


def test_clean_compaction_run_passes(run):
    gate = run_gate(run)
    assert not failing(gate), format_table(gate)
    status = {r.id: r.status for r in gate.results}
    assert {c: status[c] for c in LONG_HORIZON} == dict.fromkeys(LONG_HORIZON, "pass")
    # summaries are generated tokens: in the loss, with log-probs and a recomputed trust mask
    for c in ("action.loss_mask_on_actions", "action.logp_finite", "action.trust_mask_recomputed"):
        assert status[c] == "pass", c


def test_grpo_run_is_not_applicable(tiny_run, tmp_path):
    gate = run_gate(copy_run(tiny_run, tmp_path))
    status = {r.id: r.status for r in gate.results}
    assert status["long_horizon.untrained_roles_not_in_loss"] == "pass"
    for c in LONG_HORIZON[1:]:
        assert status[c] == "not_applicable", c


def _one(run, sql: str) -> dict:
    rows = query(run, sql)
    assert rows, sql
    return rows[0]


def test_tail_token_in_the_loss_fails(run):
    t = _one(run, "SELECT sample_id, pos FROM tokens WHERE role = 'tail' ORDER BY 1, 2")
    where = (pl.col("sample_id") == t["sample_id"]) & (pl.col("pos") == t["pos"])
    assert edit_rows(run, "tokens", where, {"loss_mask": True}) == 1
    gate = run_gate(run)
    bad = failing(gate)
    assert {"long_horizon.untrained_roles_not_in_loss", "action.loss_mask_on_actions"} <= bad
    (ex,) = gate.result("long_horizon.untrained_roles_not_in_loss").examples
    assert (ex["sample_id"], ex["pos"], ex["role"]) == (t["sample_id"], t["pos"], "tail")


def test_segment_with_another_reward_fails(run):
    s = _one(run, "SELECT sample_id, reward FROM samples WHERE segment = 1 ORDER BY 1")
    edit_rows(run, "samples", pl.col("sample_id") == s["sample_id"], {"reward": 1 - s["reward"]})
    gate = run_gate(run)
    assert "long_horizon.segments_share_reward" in failing(gate), format_table(gate)
    (ex,) = gate.result("long_horizon.segments_share_reward").examples
    assert ex["rewards"] == 2


def test_segment_mean_denominator_fails(run):
    # a mean of segment means has no token-count denominator: record the number of segments
    n = _one(run, "SELECT count(*) AS n FROM samples WHERE step = 0")["n"]
    edit_rows(run, "steps", pl.col("step") == 0, {"loss_denominator": n})
    gate = run_gate(run)
    assert failing(gate) == {"long_horizon.loss_denominator"}, format_table(gate)
    (ex,) = gate.result("long_horizon.loss_denominator").examples
    assert ex["step"] == 0 and ex["loss_denominator"] == n


def test_changed_frozen_checksum_fails(run):
    edit_rows(run, "steps", pl.col("step") == 1, {"critic_frozen_checksum": "0" * 16})
    gate = run_gate(run)
    assert failing(gate) == {"long_horizon.critic_attention_frozen"}, format_table(gate)
    (ex,) = gate.result("long_horizon.critic_attention_frozen").examples
    assert ex["step"] == 1


def test_null_value_fails_values_finite(run):
    t = _one(run, "SELECT sample_id, pos FROM tokens WHERE role = 'summary' ORDER BY 1, 2")
    where = (pl.col("sample_id") == t["sample_id"]) & (pl.col("pos") == t["pos"])
    assert edit_rows(run, "tokens", where, {"value": None}) == 1
    gate = run_gate(run)
    assert failing(gate) == {"long_horizon.values_finite"}, format_table(gate)
