"""The collapse notebook over imported dumps: a prime-rl export with a broken weight sync (a
0.5-nat log-prob gap) against a clean slime import names train/rollout mismatch, with token ids
shown as ids (the dumps' tokenizer is not closedloop's) and no trainer ids recorded."""

from __future__ import annotations

import pytest

from observability.importers import import_dump
from tests.notebooks.test_notebooks import execute
from tests.observability.importers.episodes import make_steps
from tests.observability.importers.prime_writer import write_export
from tests.observability.importers.slime_writer import write_dump

pytestmark = pytest.mark.slow


def test_investigate_collapse_on_imported_runs(tmp_path):
    runs = tmp_path / "runs"
    gap = write_export(tmp_path / "prime", make_steps(n_steps=4, fault="gap"))
    clean = write_dump(tmp_path / "slime", make_steps(n_steps=4))
    run = import_dump("prime-rl", gap, runs, run_id="prime-gap").run_dir
    base = import_dump("slime", clean, runs, run_id="slime-clean").run_dir
    s = execute(
        "investigate_collapse", run=str(run), baseline=str(base), window=1, top_tokens=5,
        tokenizer=None,
    )  # fmt: skip
    assert s["top_suspect"] == "train_rollout_mismatch"
    assert s["max_abs_delta"] == pytest.approx(0.5, abs=1e-4)
