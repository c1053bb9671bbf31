"""The shipped base model is reproducible: `closedloop pretrain` rewrites it bit for bit."""

import json
from pathlib import Path

import pytest

SHIPPED = Path(__file__).resolve().parents[3] / "core" / "assets" / "base_model"


@pytest.mark.slow
def test_pretrain_reproduces_the_shipped_checkpoint(tmp_path):
    from core.cli import main

    assert main(["pretrain", "--out", str(tmp_path / "base")]) == 0
    got = json.loads((tmp_path / "base" / "config.json").read_text())
    want = json.loads((SHIPPED / "config.json").read_text())
    assert got["weights_sha256"] == want["weights_sha256"]
    assert 0.2 <= got["greedy_eval_accuracy"] <= 0.8  # imperfect: RL has room
