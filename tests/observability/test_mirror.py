"""``--telemetry duckdb,tensorboard,wandb``: the step rows of a real short run, read back from the
TensorBoard event file with tensorboard's own event reader and from the offline W&B run's records,
equal the DuckDB store's; the tee (``observability.mirror``) alone; a failing mirror never stops
the store; a mirror whose package is missing is an error naming the option, before the run."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from observability import DuckDBTelemetry, open_run
from observability.mirror import Mirrored, TensorBoardMirror, open_mirror, step_scalars
from tests.conftest import TINY
from tests.observability.wandb_records import offline_history


def read_scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_step_scalars_keeps_finite_numbers_per_row():
    rows = step_scalars(
        {
            "step": [3, 4],
            "rank": 0,
            "loss": np.array([0.5, np.nan]),
            "lr": 1e-3,
            "skip_reason": [None, "nothing trusted"],
            "n_tokens": np.ma.masked_array([10, 12], mask=[0, 1]),
        }
    )
    assert rows == [(3, {"loss": 0.5, "lr": 1e-3, "n_tokens": 10.0}), (4, {"lr": 1e-3})]


def test_tee_writes_the_store_and_the_event_file(tmp_path):
    sink = Mirrored(DuckDBTelemetry(tmp_path / "run"), [TensorBoardMirror(tmp_path / "run")])
    for step in range(3):
        sink.emit("steps", {"step": step, "policy_version": step + 1, "loss": 0.25 * step})
        sink.step_end(step)
    sink.close()
    got = read_scalars(tmp_path / "run" / "tensorboard")
    assert got["steps/loss"] == [(0, 0.0), (1, 0.25), (2, 0.5)]
    assert got["steps/policy_version"] == [(0, 1.0), (1, 2.0), (2, 3.0)]
    con = open_run(tmp_path / "run")
    assert con.execute("SELECT list(loss ORDER BY step) FROM steps").fetchone() == ([0, 0.25, 0.5],)
    with pytest.raises(
        ValueError, match=r"telemetry mirror 'mlflow' not in \['tensorboard', 'wandb'\]"
    ):
        open_mirror("mlflow", tmp_path)


def test_a_failing_mirror_is_reported_and_never_stops_the_store(tmp_path):
    class Broken:
        def scalars(self, step, values):
            raise OSError("disk full")

        def flush(self):
            pass

        def close(self):
            pass

    sink = Mirrored(DuckDBTelemetry(tmp_path / "run"), [Broken()])
    sink.emit("steps", {"step": 0, "policy_version": 1, "loss": 1.0})
    sink.step_end(0)
    with pytest.warns(UserWarning, match="disk full"):
        sink.close()
    assert open_run(tmp_path / "run").execute("SELECT count(*) FROM steps").fetchone() == (1,)


@pytest.mark.slow
def test_a_short_run_mirrors_its_step_rollups(tmp_path):
    from core.config import load_config
    from core.driver import run_training

    cfg = load_config(None, [*TINY, "train.steps=2"])
    kind = "duckdb,tensorboard,wandb"
    run, _ = run_training(cfg, runs_root=tmp_path, telemetry=kind, progress=False)
    tb = read_scalars(run / "tensorboard")
    (wandb_file,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    wb = offline_history(wandb_file)
    con = open_run(run)
    rows = con.execute(
        "SELECT step, loss, mismatch_abs_mean, reward_mean, masked_fraction FROM steps ORDER BY step"
    ).fetchall()
    assert len(rows) == 2 and [h["_step"] for h in wb] == [0, 1]
    for name, i in (
        ("loss", 1),
        ("mismatch_abs_mean", 2),
        ("reward_mean", 3),
        ("masked_fraction", 4),
    ):
        want = [(r[0], r[i]) for r in rows]
        assert [s for s, _ in tb[f"steps/{name}"]] == [s for s, _ in want]
        np.testing.assert_allclose(
            [v for _, v in tb[f"steps/{name}"]], [v for _, v in want], rtol=1e-6
        )
        np.testing.assert_allclose([h[f"steps/{name}"] for h in wb], [v for _, v in want])


def test_open_telemetry_refuses_unknown_kinds(tmp_path):
    from core.config import load_config
    from core.run import open_telemetry

    cfg = load_config(None, list(TINY))
    valid = (
        r"\['duckdb', 'none', 'duckdb,tensorboard', 'duckdb,wandb', 'duckdb,tensorboard,wandb'\]"
    )
    for kind in ("duckdb,mlflow", "tensorboard", "duckdb,", "duckdb,wandb,wandb"):
        with pytest.raises(ValueError, match=rf"--telemetry '{kind}' not in {valid}"):
            open_telemetry(
                kind, tmp_path, cfg, tokenizer_rev="r", chat_template_rev="c", vocab_size=9
            )
    assert not (tmp_path / "telemetry").exists()  # refused before the store was opened


def test_a_missing_mirror_package_names_the_option_before_the_run(tmp_path, monkeypatch, capsys):
    from core.cli import main

    monkeypatch.setitem(sys.modules, "wandb", None)  # as if wandb were not installed
    argv = ["train", "--telemetry", "duckdb,wandb", "--run-dir", str(tmp_path / "runs")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--telemetry duckdb,wandb needs the wandb package" in err
    assert "pip install 'closedloop[wandb]'" in err
    assert not (tmp_path / "runs").exists()  # nothing of the run was written
    with pytest.raises(ValueError, match="--telemetry duckdb,wandb needs the wandb package"):
        open_mirror("wandb", tmp_path)
