"""``closedloop pretrain`` is reproducible where reproducibility holds, and checked by what matters
across machines.

Bitwise equality of a CPU training run holds on one machine (same BLAS kernels, one thread), not
across CPU models: the shipped checkpoint was trained on one x86 CPU and another CPU's kernels
round differently. So: two pretrain runs on this machine are bit-identical (few steps); the shipped
checkpoint loads and its weights hash equals the hash its own config records; and a fresh full
pretrain learns the task and stays imperfect (RL has room).
"""

import json
from pathlib import Path

import pytest

from core.model.checkpoint import file_sha256, load_checkpoint

SHIPPED = Path(__file__).resolve().parents[3] / "core" / "assets" / "base_model"


def _pretrain(out: Path, *steps: str) -> dict:
    from core.cli import main

    assert main(["pretrain", "--out", str(out), *steps]) == 0
    return json.loads((out / "config.json").read_text())


def test_two_pretrain_runs_on_one_machine_are_bit_identical(tmp_path):
    a = _pretrain(tmp_path / "a", "--steps", "12")
    b = _pretrain(tmp_path / "b", "--steps", "12")
    assert a["weights_sha256"] == b["weights_sha256"]
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (
        tmp_path / "b" / "model.safetensors"
    ).read_bytes()


def test_shipped_checkpoint_loads_and_matches_its_recorded_hash():
    weights, cfg, meta = load_checkpoint(SHIPPED)  # raises if the sha256 differs from config.json
    assert meta["weights_sha256"] == file_sha256(SHIPPED / "model.safetensors")
    assert weights and cfg.vocab_size >= 1
    assert 0.2 <= meta["greedy_eval_accuracy"] <= 0.8


# A learning outcome (SFT from scratch) and a long run: another CPU's kernels fork it like another
# seed. Greedy accuracy measured: seed 1234 (the default) 0.602 native AVX2, 0.598 under
# ATEN_CPU_CAPABILITY=default, 0.543 on the CPU that trained the shipped checkpoint; seed 1 0.207,
# seed 2 0.379. The shipped checkpoint keeps the 0.2-0.8 band (above: one file, the same on every
# CPU); a fresh run is asked to learn (≥ 0.1, an earlier 0.2 held by 0.007 on seed 1) and to
# leave RL room (≤ 0.8).
# Not float_sensitive-marked: 3.5 min, too long for CI's second pass.
@pytest.mark.slow
def test_fresh_pretrain_lands_in_the_accuracy_band(tmp_path):
    got = _pretrain(tmp_path / "base")
    assert 0.1 <= got["greedy_eval_accuracy"] <= 0.8  # imperfect: RL has room
