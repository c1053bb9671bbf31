"""End to end: `closedloop train` trains 3 steps through the CLI with DuckDB telemetry."""

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_train_three_steps_through_cli(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "core.cli",
        "train",
        "--steps",
        "3",
        "--run-dir",
        str(tmp_path),
        "--set",
        "algorithm.prompts_per_step=4",
        "--set",
        "algorithm.group_size=4",
        "--set",
        "train.eval_size=16",
        "--set",
        "train.eval_every=0",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    runs = list(tmp_path.iterdir())
    assert len(runs) == 1 and (runs[0] / "config.json").exists()
    from observability import open_run

    con = open_run(runs[0])
    assert con.execute("SELECT count(*) FROM steps").fetchall()[0][0] == 3
    assert con.execute("SELECT status FROM runs").fetchall()[0][0] == "finished"
    n_action = con.execute("SELECT count(*) FROM tokens WHERE role = 'action'").fetchall()[0][0]
    assert n_action > 0
    phases = [
        r[0]
        for r in con.execute(
            "SELECT phase FROM weight_syncs WHERE sync_id = 0 ORDER BY ts"
        ).fetchall()
    ]
    assert phases == ["gather", "reshard", "send", "switch", "ack"]


def test_same_seed_same_trajectory(tmp_path):
    """Determinism: two runs with the same seed produce identical rewards and log-probs."""
    from observability import open_run
    from tests.conftest import make_run

    sums = []
    for name in ("a", "b"):
        run = make_run(tmp_path / name, ["train.steps=2"], name=name)
        con = open_run(run)
        sums.append(
            con.execute(
                "SELECT step, sum(rollout_logp), sum(train_logp), sum(token_id) FROM tokens "
                "WHERE role = 'action' GROUP BY step ORDER BY step"
            ).fetchall()
        )
    assert sums[0] == sums[1]


def test_run_name_defaults_to_the_config_stem():
    from types import SimpleNamespace

    from core.driver import _run_name

    assert _run_name(SimpleNamespace(name=None, config="configs/opd_tiny.toml")) == "opd_tiny"
    assert _run_name(SimpleNamespace(name=None, config=None)) == "grpo"
    assert _run_name(SimpleNamespace(name="mine", config="configs/opd_tiny.toml")) == "mine"
