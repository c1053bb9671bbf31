"""One torchrun launch at TP = 2 and the in-process TP = 1 references, shared by the TP tests.

The TP = 2 launch trains both ``MODELS`` for ``STEPS`` steps, records each as a two-rank run
under ``runs/`` (``<model>-tp2``) and reduces the TP = 1 logits of the base model vocabulary-
parallel (``vocab_check``); the TP = 1 runs record ``runs/<model>-tp1``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from core.model.actor import Actor
from core.parallel.worker import fixed_batch, model_weights, run

MODELS = ("base", "qk-norm-tied")
STEPS, LR, TEMPERATURE = 5, 1e-4, 0.7


@pytest.fixture(scope="session")
def tp_runs(tmp_path_factory):
    """The directory holding every TP run of the session (``<model>-tp1|2``)."""
    return tmp_path_factory.mktemp("tp_runs")


@pytest.fixture(scope="session")
def tp2(tmp_path_factory, tp_runs):
    d = tmp_path_factory.mktemp("tp")
    full, cfg = model_weights("base")
    actor = Actor(cfg)
    actor.load_weights(full)
    batch = fixed_batch(16, vocab_size=cfg.vocab_size)
    with torch.no_grad():
        logits = actor.logits(batch.input_ids, batch.valid)[:, :-1]  # [B, T-1, V]
    ref = {"logits": logits, "targets": batch.input_ids[:, 1:], "temperature": TEMPERATURE}
    torch.save(ref, d / "logits.pt")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "core.parallel.worker",
        "--tp",
        "2",
        "--steps",
        str(STEPS),
        "--models",
        *MODELS,
        "--logits",
        str(d / "logits.pt"),
        "--run-dir",
        str(tp_runs),
        "--out",
        str(d / "tp2.pt"),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return torch.load(d / "tp2.pt"), ref, batch


@pytest.fixture(scope="session")
def tp1(tp_runs):
    return {m: run(m, steps=STEPS, lr=LR, run_dir=tp_runs / f"{m}-tp1") for m in MODELS}
