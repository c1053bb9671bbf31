"""``closedloop train --set model.hf_path=DIR`` trains from a Hugging Face directory.

The shipped base model exported to HF loads back bit-identically, so a fixed-seed run from the
export must follow the default run's trajectory exactly (same losses, rewards, log-probs).
"""

from __future__ import annotations

from core.config import load_config
from core.driver import run_training
from core.model.hf_export import export_hf
from tests.conftest import TINY


def _steps(tmp_path, extra: list[str]) -> list[dict]:
    cfg = load_config(None, [*TINY, "train.steps=2", "train.save_checkpoint=false", *extra])
    _, summary = run_training(cfg, runs_root=tmp_path, telemetry="none", progress=False)
    return [
        {k: v for k, v in s.items() if k in ("loss", "reward_mean", "mismatch_abs_mean")}
        for s in summary["steps"]
    ]


def test_training_from_the_exported_base_reproduces_the_default_run(tmp_path):
    hf = export_hf(tmp_path / "hf")
    base = _steps(tmp_path / "base", [])
    from_hf = _steps(tmp_path / "from_hf", [f'model.hf_path="{hf}"'])
    assert len(base) == 2 and all(len(s) == 3 for s in base)
    assert from_hf == base
