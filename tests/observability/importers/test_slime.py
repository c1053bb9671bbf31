"""slime ``--dump-details`` import: fixtures written as slime writes them (``slime_writer``),
the gate on the imported runs (clean passes; a re-tokenized id or a log-prob gap fails), and
bad or truncated dumps refused with the file named and no run directory left behind."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from closedloop.cli import main
from observability import open_run
from observability.importers import DumpError, import_dump
from tests.observability.importers.episodes import RETOKENIZED_POS, VOCAB, make_steps
from tests.observability.importers.gating import assert_clean, import_and_gate, statuses
from tests.observability.importers.slime_writer import write_dump


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("slime")
    return {
        fault: write_dump(root / str(fault), make_steps(fault=fault))
        for fault in (None, "gap", "retokenized")
    }


def test_clean_dump_imports_every_token_and_passes_the_gate(dumps, tmp_path):
    gate = import_and_gate("slime", dumps[None], tmp_path, "clean")
    assert_clean(
        gate,
        applicable={
            "action.logp_finite",
            "action.loss_mask_on_actions",
            "action.tito_exact_ids",
            "action.mismatch_abs_mean",
        },
        not_applicable={"action.masked_fraction"},
    )
    steps = make_steps()
    con = open_run(tmp_path / "clean")
    n_tokens = sum(len(e.prompt) + len(e.response) for s in steps for e in s)
    assert con.execute("SELECT count(*) FROM tokens").fetchone()[0] == n_tokens
    # sample 1 of rollout 0 (dp rank 1 in the dump) lands in rollout order with its values
    e = steps[0][1]
    rows = con.execute(
        "SELECT pos, token_id, train_token_id, role, loss_mask, rollout_logp, train_logp, "
        "advantage, entropy FROM tokens WHERE sample_id = 1 ORDER BY pos"
    ).fetchall()
    assert [r[1] for r in rows] == e.prompt + e.response
    assert [r[3] for r in rows] == ["prompt"] * 5 + ["action"] * len(e.response)
    action = rows[5:]
    np.testing.assert_allclose([r[5] for r in action], e.rollout_logp, rtol=0, atol=0)
    np.testing.assert_allclose([r[6] for r in action], e.train_logp, rtol=0, atol=0)
    np.testing.assert_allclose([r[8] for r in action], e.entropy, rtol=0, atol=0)
    assert [r[7] for r in action] == pytest.approx([e.advantage] * len(e.response), abs=1e-6)
    assert all(r[5] is None and r[6] is None for r in rows[:5])  # prompt: no log-probs
    s = con.execute(
        "SELECT step, reward, group_id, status, finish_reason, response_text, n_prompt_tokens "
        "FROM samples ORDER BY sample_id"
    ).fetchall()
    assert s[1] == (0, e.reward, e.group, "trained", "stop", "answer 1", 5)
    assert s[3][3:5] == ("truncated", "length")  # slime's status of the truncated sample
    st = con.execute(
        "SELECT step, policy_version, n_tokens, retokenized_fraction FROM steps ORDER BY step"
    )
    assert st.fetchall() == [
        (0, 1, sum(len(x.prompt) + len(x.response) for x in steps[0]), 0.0),
        (1, 2, sum(len(x.prompt) + len(x.response) for x in steps[1]), 0.0),
    ]
    info = con.execute("SELECT config, vocab_size, unrecorded FROM runs").fetchone()
    assert "624b824a898ab0ec1fcb4d373004c7f3852bf515" in info[0] and info[1] == VOCAB
    assert {"tokens.trust_mask", "weight_syncs", "runs.icepop_beta"} <= set(info[2])
    assert "tokens.train_token_id" not in info[2]


def test_retokenized_id_fails_tito_and_mismatch(dumps, tmp_path):
    gate = import_and_gate("slime", dumps["retokenized"], tmp_path, "retok")
    got = statuses(gate)
    assert not gate.passed
    assert got["action.tito_exact_ids"] == "fail" and got["action.mismatch_abs_mean"] == "fail"
    tito = gate.result("action.tito_exact_ids")
    assert tito.n_violations == 1
    (example,) = tito.examples
    assert example["pos"] == 5 + RETOKENIZED_POS and example["step"] == 1


def test_logprob_gap_fails_mismatch_only(dumps, tmp_path):
    gate = import_and_gate("slime", dumps["gap"], tmp_path, "gap")
    failed = {r.id for r in gate.failed()}
    assert failed == {"action.mismatch_abs_mean"}
    assert gate.result("action.mismatch_abs_mean").observed == pytest.approx(0.5, abs=1e-4)


def test_without_rollout_dump_tito_is_not_applicable(tmp_path):
    src = write_dump(tmp_path / "dump", make_steps(), rollout_data=False)
    gate = import_and_gate("slime", src, tmp_path / "runs", "train-only")
    assert gate.passed
    assert statuses(gate)["action.tito_exact_ids"] == "not_applicable"


def test_truncated_train_file_is_an_error_naming_it_and_leaves_no_run(dumps, tmp_path):
    src = tmp_path / "dump"
    write_dump(src, make_steps())
    path = src / "train_data" / "1.pt"
    path.write_bytes(path.read_bytes()[:-200])
    runs = tmp_path / "runs"
    with pytest.raises(DumpError, match=r"train_data/1\.pt: not a readable torch file"):
        import_dump("slime", src, runs, run_id="broken")
    assert list(runs.iterdir()) == []  # the first step's rows were written, then removed
    assert main(["import", "slime", str(src), "--run-dir", str(runs)]) == 2
    assert list(runs.iterdir()) == []


def test_bad_sample_names_file_and_sample(tmp_path):
    src = write_dump(tmp_path / "dump", make_steps())
    path = src / "train_data" / "0.pt"
    payload = torch.load(path, weights_only=True)
    log_probs = payload["samples"][2]["log_probs"]
    payload["samples"][2]["log_probs"] = log_probs[:-1]
    torch.save(payload, path)
    with pytest.raises(DumpError, match=r"train_data/0\.pt: sample 2: field 'log_probs' has"):
        import_dump("slime", src, tmp_path / "runs")
    payload["samples"][2]["log_probs"] = torch.full_like(log_probs, 0.25)  # not a log-prob
    torch.save(payload, path)
    with pytest.raises(DumpError, match=r"0\.pt: sample 2: train_logp 0\.25 > 0 at position 5"):
        import_dump("slime", src, tmp_path / "runs")
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


def test_cli_imports_then_gate_exit_codes(dumps, tmp_path, capsys):
    runs = tmp_path / "runs"
    args = ["--run-dir", str(runs), "--vocab-size", str(VOCAB)]
    assert main(["import", "slime", str(dumps[None]), "--run-id", "ok", *args]) == 0
    assert "imported 2 steps, 8 samples" in capsys.readouterr().out
    assert main(["gate", str(runs / "ok")]) == 0
    assert main(["import", "slime", str(dumps["retokenized"]), "--run-id", "bad", *args]) == 0
    assert main(["gate", str(runs / "bad")]) == 1
    assert main(["import", "slime", str(dumps[None]), "--run-id", "ok", *args]) == 2  # exists
