"""NeMo-RL ``train_data_step{N}.jsonl`` import: fixtures written as NeMo-RL's logger writes them
(``nemo_writer``), the gate on the imported runs, and bad or truncated logs refused with file
and line named and no run directory left behind."""

from __future__ import annotations

import json

import numpy as np
import pytest

from observability import open_run
from observability.importers import DumpError, import_dump
from tests.observability.importers.episodes import make_steps
from tests.observability.importers.gating import assert_clean, import_and_gate, statuses
from tests.observability.importers.nemo_writer import write_log


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("nemo")
    return {f: write_log(root / str(f), make_steps(fault=f)) for f in (None, "gap", "retokenized")}


def test_clean_log_passes_and_what_the_format_lacks_is_not_applicable(logs, tmp_path):
    gate = import_and_gate("nemo-rl", logs[None], tmp_path, "clean")
    assert_clean(
        gate,
        applicable={
            "action.logp_finite",
            "action.loss_mask_on_actions",
            "action.mismatch_abs_mean",
        },
        not_applicable={"action.tito_exact_ids", "action.masked_fraction"},
    )
    steps = make_steps()
    con = open_run(tmp_path / "clean")
    (n,) = con.execute("SELECT count(*) FROM tokens").fetchone()
    assert n == sum(len(e.prompt) + len(e.response) for s in steps for e in s)  # padding dropped
    e = steps[1][0]  # line 1 of train_data_step2.jsonl
    rows = con.execute(
        "SELECT role, loss_mask, rollout_logp, train_logp, advantage FROM tokens "
        "WHERE sample_id = 4 ORDER BY pos"
    ).fetchall()
    assert [r[0] for r in rows] == ["prompt"] * 5 + ["action"] * len(e.response)
    np.testing.assert_array_equal([r[2] for r in rows[5:]], np.float32(e.rollout_logp))
    np.testing.assert_array_equal([r[3] for r in rows[5:]], np.float32(e.train_logp))
    samples = con.execute("SELECT step, status, reward FROM samples ORDER BY sample_id").fetchall()
    assert samples[4] == (2, "trained", e.reward)
    assert samples[3][1] == "masked"  # sample_loss_mask 0 (overlong filtering of a truncation)
    (masked_loss,) = con.execute(
        "SELECT count(*) FILTER (WHERE loss_mask) FROM tokens WHERE sample_id = 3"
    ).fetchone()
    assert masked_loss == 0
    steps_rows = con.execute("SELECT step, policy_version FROM steps ORDER BY step").fetchall()
    assert steps_rows == [(1, 1), (2, 2)]
    (unrecorded,) = con.execute("SELECT unrecorded FROM runs").fetchone()
    assert {"tokens.train_token_id", "samples.group_id", "tokens.entropy"} <= set(unrecorded)


def test_faults_fail_the_gate_through_the_logprob_gap(logs, tmp_path):
    for fault in ("gap", "retokenized"):
        gate = import_and_gate("nemo-rl", logs[fault], tmp_path, fault)
        assert {r.id for r in gate.failed()} == {"action.mismatch_abs_mean"}, fault
        assert statuses(gate)["action.tito_exact_ids"] == "not_applicable"  # no rollout ids


def test_placeholder_prev_logprobs_are_unrecorded_not_zero(tmp_path):
    src = write_log(tmp_path / "log", make_steps(), placeholder=True)
    gate = import_and_gate("nemo-rl", src, tmp_path / "runs", "placeholder")
    got = statuses(gate)
    assert gate.passed
    assert got["action.logp_finite"] == got["action.mismatch_abs_mean"] == "not_applicable"


def test_truncated_last_line_is_an_error_naming_file_and_line(tmp_path):
    src = write_log(tmp_path / "log", make_steps())
    path = src / "train_data_step2.jsonl"
    path.write_text(path.read_text()[:-40])
    runs = tmp_path / "runs"
    with pytest.raises(DumpError, match=r"train_data_step2\.jsonl:4: truncated"):
        import_dump("nemo-rl", src, runs)
    assert list(runs.iterdir()) == []


def test_bad_records_name_file_and_line(tmp_path):
    src = write_log(tmp_path / "log", make_steps(n_steps=1))
    path = src / "train_data_step1.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[2])
    del record["prev_logprobs"]
    path.write_text("\n".join([*lines[:2], json.dumps(record), *lines[3:]]) + "\n")
    with pytest.raises(DumpError, match=r"step1\.jsonl:3: missing field 'prev_logprobs'"):
        import_dump("nemo-rl", src, tmp_path / "runs")
    record = json.loads(lines[1])
    record["generation_logprobs"] = [record["generation_logprobs"][0][:3]]
    path.write_text("\n".join([lines[0], json.dumps(record), *lines[2:]]) + "\n")
    with pytest.raises(DumpError, match=r"step1\.jsonl:2: field 'generation_logprobs' has 3"):
        import_dump("nemo-rl", src, tmp_path / "runs")
    path.write_text("\n".join([lines[0], "{not json", *lines[2:]]) + "\n")
    with pytest.raises(DumpError, match=r"step1\.jsonl:2: not a complete JSON record"):
        import_dump("nemo-rl", src, tmp_path / "runs")
    with pytest.raises(DumpError, match="no train_data_step"):
        import_dump("nemo-rl", tmp_path / "runs", tmp_path / "runs2")
