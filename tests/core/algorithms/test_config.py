"""``run_label``: what a run records as its algorithm names the advantage it actually used."""

from __future__ import annotations

import pytest

from core.algorithms.config import run_label
from core.config import load_config
from core.run import open_telemetry
from observability import open_run


@pytest.mark.parametrize(
    "name, advantage, n_teachers, label",
    [
        ("grpo", "grpo", 0, "grpo"),
        ("grpo", "opd", 1, "opd"),  # configs/opd_tiny.toml
        ("grpo", "opd", 2, "mopd"),  # configs/mopd_tiny.toml: one expert per domain
        ("grpo", "grpo+opd", 1, "grpo+opd"),
        ("grpo", "grpo+opd", 2, "grpo+mopd"),
        ("sao", "grpo", 0, "sao"),  # GAE advantages from the critic
        ("compaction", "grpo", 0, "compaction"),
    ],
)
def test_run_label(name, advantage, n_teachers, label):
    assert run_label(name, advantage, n_teachers) == label


def test_mopd_run_records_mopd(tmp_path):
    cfg = load_config("configs/mopd_tiny.toml")  # its experts need not exist to open the store
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tel = open_telemetry(
        "duckdb", run_dir, cfg, tokenizer_rev="t", chat_template_rev="c", vocab_size=320
    )
    tel.close()
    assert open_run(run_dir).execute("SELECT algorithm FROM runs").fetchone() == ("mopd",)
