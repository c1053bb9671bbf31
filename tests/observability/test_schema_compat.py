"""A run written before schema version 2 (no critic columns, no ``compactions`` table) still
opens: the missing columns and table read as null / empty."""

from __future__ import annotations

import shutil

import pytest

from observability import open_run
from observability.parts import telemetry_dir
from tests.contracts.store_edit import copy_run, edit_rows

pytestmark = pytest.mark.slow


def test_version_1_run_opens(tiny_run, tmp_path):
    import polars as pl

    run = copy_run(tiny_run, tmp_path)
    n = edit_rows(run, "tokens", pl.lit(True), drop_columns=("value", "return", "segment"))
    assert n > 0
    edit_rows(
        run,
        "steps",
        pl.lit(True),
        drop_columns=(
            "value_loss",
            "value_explained_variance",
            "critic_grad_norm",
            "critic_updates",
            "critic_frozen_checksum",
            "loss_denominator",
            "n_trajectories",
        ),
    )
    shutil.rmtree(telemetry_dir(run) / "compactions", ignore_errors=True)
    con = open_run(run)
    n_tokens, n_values, n_segments = con.execute(
        "SELECT count(*), count(value), count(segment) FROM tokens"
    ).fetchone()
    assert n_tokens > 0 and n_values == 0 and n_segments == 0
    assert con.execute("SELECT count(*) FROM compactions").fetchone() == (0,)
    assert con.execute("SELECT count(value_loss) FROM steps").fetchone() == (0,)
