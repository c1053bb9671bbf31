"""prime-rl token-export import: fixtures written as ``TokenExporter`` writes them
(``prime_writer``), the gate on the imported runs, and unfinished or truncated exports refused
with file and line named and no run directory left behind."""

from __future__ import annotations

import json

import numpy as np
import pytest

from observability import open_run
from observability.importers import DumpError, import_dump
from tests.observability.importers.episodes import make_steps
from tests.observability.importers.gating import assert_clean, import_and_gate, statuses
from tests.observability.importers.prime_writer import write_export


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("prime")
    return {
        f: write_export(root / str(f), make_steps(fault=f)) for f in (None, "gap", "retokenized")
    }


def test_clean_export_passes_with_the_dppo_mask_as_trust_mask(exports, tmp_path):
    gate = import_and_gate("prime-rl", exports[None], tmp_path, "clean")
    assert_clean(
        gate,
        applicable={
            "action.logp_finite",
            "action.loss_mask_on_actions",
            "action.mismatch_abs_mean",
            "action.masked_fraction",
        },
        not_applicable={"action.tito_exact_ids"},
    )
    steps = make_steps()
    con = open_run(tmp_path / "clean")
    # rank 0 exports episodes 0 and 2 of a step, rank 1 episodes 1 and 3
    order = [e for s in steps for e in (s[0], s[2], s[1], s[3])]
    tokens = con.execute(
        "SELECT sample_id, list(token_id ORDER BY pos), list(train_logp ORDER BY pos), "
        "list(entropy ORDER BY pos), list(role ORDER BY pos) FROM tokens "
        "GROUP BY sample_id ORDER BY sample_id"
    ).fetchall()
    assert [t[1] for t in tokens] == [e.prompt + e.response for e in order]  # padding trimmed
    for (_, _, train, entropy, roles), e in zip(tokens, order):
        assert roles == ["prompt"] * 5 + ["action"] * len(e.response)
        np.testing.assert_array_equal(train[5:], np.float32(e.train_logp))
        np.testing.assert_array_equal(entropy[5:], np.float32(e.entropy))
    rows = con.execute(
        "SELECT step, policy_version, masked_fraction, n_trusted_tokens, n_loss_tokens "
        "FROM steps ORDER BY step"
    ).fetchall()
    assert [r[:3] for r in rows] == [(1, 1, 0.0), (2, 2, 0.0)]
    assert all(r[3] == r[4] for r in rows)
    (domains,) = con.execute("SELECT list(DISTINCT domain) FROM samples").fetchone()
    assert domains == ["arith"]


def test_faults_fail_the_gate(exports, tmp_path):
    for fault in ("gap", "retokenized"):
        gate = import_and_gate("prime-rl", exports[fault], tmp_path, fault)
        failed = {r.id for r in gate.failed()}
        assert "action.mismatch_abs_mean" in failed, fault
        assert failed <= {"action.mismatch_abs_mean", "action.masked_fraction"}
        assert statuses(gate)["action.tito_exact_ids"] == "not_applicable"


def test_step_without_stable_marker_is_refused(tmp_path):
    src = write_export(tmp_path / "out", make_steps())
    (src / "token_exports" / "step_2" / "STABLE").unlink()
    runs = tmp_path / "runs"
    with pytest.raises(DumpError, match=r"step_2: no STABLE marker"):
        import_dump("prime-rl", src / "token_exports", runs)
    assert list(runs.iterdir()) == []


def test_truncated_and_bad_records_name_file_and_line(tmp_path):
    src = write_export(tmp_path / "out", make_steps())
    path = src / "token_exports" / "step_1" / "rank_1.jsonl"
    text = path.read_text()
    path.write_text(text[: len(text) // 2 + 7])
    with pytest.raises(DumpError, match=r"step_1/rank_1\.jsonl:\d: truncated"):
        import_dump("prime-rl", src, tmp_path / "runs")
    lines = text.splitlines()
    record = json.loads(lines[1])
    record["trainer_logprobs"] = record["trainer_logprobs"][:-1]
    path.write_text("\n".join([lines[0], json.dumps(record)]) + "\n")
    with pytest.raises(DumpError, match=r"rank_1\.jsonl:2: field 'trainer_logprobs' is not a list"):
        import_dump("prime-rl", src, tmp_path / "runs")
    record = json.loads(lines[1])
    record["schema_version"] = 2
    path.write_text("\n".join([lines[0], json.dumps(record)]) + "\n")
    with pytest.raises(DumpError, match=r"rank_1\.jsonl:2: schema_version 2"):
        import_dump("prime-rl", src, tmp_path / "runs")
    record = json.loads(lines[1])
    record["rl_weights"] = [0.0 if m else 1.0 for m in record["loss_mask"]]
    path.write_text("\n".join([lines[0], json.dumps(record)]) + "\n")
    with pytest.raises(DumpError, match=r"rank_1\.jsonl:2: loss token at position 5 was not"):
        import_dump("prime-rl", src, tmp_path / "runs")
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_batch_the_sink_rejects_is_an_error_naming_the_step(tmp_path):
    src = write_export(tmp_path / "out", make_steps())
    path = src / "token_exports" / "step_2" / "rank_0.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[0])
    record["entropy"][6] = -1.0  # entropy is >= 0: the importer passes it on, the sink refuses
    path.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    runs = tmp_path / "runs"
    with pytest.raises(DumpError, match=r"step_2: step 2: .*entropy"):
        import_dump("prime-rl", src, runs)
    assert list(runs.iterdir()) == []
