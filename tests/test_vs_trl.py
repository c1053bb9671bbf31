"""The peer benchmark at toy size: TRL's ``GRPOTrainer`` and closedloop train the same prompts
side by side in one process, and the script reports both sides (benchmarks/vs_trl.py; the
full-size result is recorded in benchmarks/README.md). The TRL side is recorded by closedloop's TRL
integration (``--record``) and the gate passes that run."""

import importlib.util
import json
from pathlib import Path

import pytest

from contracts import run_gate


@pytest.mark.slow
def test_vs_trl_trains_both_sides_and_reports_them(tmp_path, capsys):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "vs_trl.py"
    spec = importlib.util.spec_from_file_location("bench_vs_trl", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "vs_trl.json"
    runs = tmp_path / "runs"
    argv = ["--steps", "2", "--eval-size", "8", "--json", str(out), "--record", str(runs)]
    (r,) = bench.main(argv)["runs"]
    assert json.loads(out.read_text())["runs"][0]["steps"] == 2
    arms = ("trl", "closedloop", "closedloop_noshare")  # the last: train.shared_prefix=false
    assert all(len(r["timings"][a]) == len(r["phases"][a]) == 2 for a in arms)
    for a in arms:  # the five phases and the whole step, each side timed around its own code
        for p in r["phases"][a]:
            assert set(p) == {"rollout", "scoring", "update", "sync", "telemetry", "total"}
            assert p["rollout"][0] > 0 and p["update"][0] > 0 and p["total"][0] > 0  # wall s
            assert p["total"][1] > 0  # main-thread CPU s
    assert all(0.0 <= a <= 1.0 for a in r["accuracy"].values())
    assert r["accuracy"]["trl_start"] == r["accuracy"]["base"]  # the same exported base model
    cl, trl = r["recorded"]["closedloop"], r["recorded"]["trl"]
    assert cl["action_token_rows"] > 0
    assert cl["with_train_and_rollout_logp"] == cl["action_token_rows"]
    assert cl["token_abs_dlogp_max"] < 1e-4  # fp32 both sides: the loop is closed
    assert cl["weight_sync_rows"] > 0 and "tokens" in cl["tables"]
    assert trl["logged_steps"] == 2 and "loss" in trl["logged_keys"]
    gate = run_gate(r["trl_run_dir"], record=False)
    assert gate.passed, [(c.id, c.status, c.message) for c in gate.failed()]
    printed = capsys.readouterr().out
    assert "closedloop − TRL = " in printed and "saves against TRL" in printed
