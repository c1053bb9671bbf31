"""Without ``--policy`` the gate takes the policy that fits the run's loop and says which and why:
``agentic.toml`` for an async run, ``release.toml`` for a synchronous one."""

import pytest

from closedloop.cli import main
from contracts import run_gate
from contracts.policy import AGENTIC_POLICY, DEFAULT_POLICY, policy_for_run
from contracts.policy_file import load_policy
from tests.conftest import make_agentic_run
from tests.contracts.store_edit import copy_run


def test_policy_for_run_reads_the_loop_from_the_config():
    chosen = policy_for_run({"rollout": {"mode": "async", "executor": "threads"}})
    assert chosen.path == AGENTIC_POLICY and "rollout.mode = 'async'" in chosen.reason
    assert policy_for_run({"rollout": {"mode": "sync"}}).path == DEFAULT_POLICY
    # an imported run without a config (or a rollout section) gets the release policy
    assert policy_for_run({}).path == DEFAULT_POLICY
    assert "records no rollout.mode" in policy_for_run({"algorithm": {}}).reason
    # the agentic policy relaxes only what the lag moves (mismatch, masked fraction) and caps τ
    release, agentic = load_policy(DEFAULT_POLICY), load_policy(AGENTIC_POLICY)
    assert agentic.name == "agentic" and agentic.checks == release.checks
    differs = {
        k
        for k in vars(release.thresholds)
        if getattr(release.thresholds, k) != getattr(agentic.thresholds, k)
    }
    assert differs == {
        "mismatch_abs_mean",
        "mismatch_abs_p99",
        "masked_fraction",
        "staleness_limit",
    }


@pytest.mark.slow
def test_sync_run_is_gated_under_the_release_policy(tiny_run, tmp_path, capsys):
    run = copy_run(tiny_run, tmp_path)  # the gate records its results: not into the shared run
    assert main(["gate", str(run)]) == 0
    out = capsys.readouterr().out
    line = (
        "policy 'release': release.toml, chosen because the run's config has rollout.mode = 'sync'"
    )
    assert line in out.splitlines()
    assert run_gate(run, record=False).policy.name == "release"


@pytest.mark.slow
def test_async_run_passes_the_gate_with_no_flags(tmp_path, capsys):
    # an agentic_tiny run as a user starts it (its own, rare environment failures switched off so
    # the verdict does not depend on which sample a crash hits)
    run = make_agentic_run(tmp_path, ["tool.crash_rate=0.0", "tool.malformed_rate=0.0"])
    assert main(["gate", str(run)]) == 0
    out = capsys.readouterr().out
    assert "policy 'agentic': agentic.toml, chosen because the run's config has " in out
    assert "gate PASSED" in out and "under policy 'agentic'" in out
    # --policy still wins
    assert "under policy 'release'" in _gate_out(run, ["--policy", str(DEFAULT_POLICY)], capsys)


def _gate_out(run, flags, capsys) -> str:
    main(["gate", str(run), *flags])
    return capsys.readouterr().out


def test_agentic_policy_caps_the_declared_staleness_limit(agentic_run, tmp_path):
    """A run that raised τ to train its stale tail (the ``stale-async-no-dis`` fault) passes
    against its own τ and fails under the agentic policy's cap of 16."""
    import polars as pl

    from tests.contracts.store_edit import edit_rows, query

    run = copy_run(agentic_run, tmp_path)
    (row,) = query(run, "SELECT min(sample_id) AS s FROM samples WHERE status = 'trained'")
    v = query(run, "SELECT max(policy_version_train) AS v FROM samples")[0]["v"] + 17
    edit_rows(run, "runs", pl.lit(True), {"staleness_limit": 1000})
    stale = {"policy_version_train": v, "staleness": v, "policy_version_rollout": 0}
    edit_rows(run, "samples", pl.col("sample_id") == row["s"], stale)
    name = "sparse_version.staleness_within_limit"
    agentic = run_gate(run, policy=load_policy(AGENTIC_POLICY), record=False).result(name)
    assert (agentic.status, agentic.threshold, agentic.observed) == ("fail", 16, v)
    release = run_gate(run, policy=load_policy(DEFAULT_POLICY), record=False).result(name)
    assert (release.status, release.threshold) == ("pass", 1000)
