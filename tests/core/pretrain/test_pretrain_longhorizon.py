"""The long-horizon base policy: demonstrations go through the compaction rollout (summaries
trained, observations and tails not), SFT is bit-identical on one machine, and the shipped
checkpoint loads with its recorded hash and leaves RL room (the flawed summaries)."""

from __future__ import annotations

from pathlib import Path

from core.envs.longhorizon import LongHorizonConfig
from core.model.checkpoint import file_sha256, load_checkpoint
from core.pretrain.longhorizon import (
    LONGHORIZON_MODEL,
    MODEL,
    demonstrations,
    pretrain_longhorizon,
)
from core.rollout.compaction import CompactionConfig
from core.rollout.episode import ROLE
from core.tokenizer.tokenizer import Tokenizer

TOK = Tokenizer.load()


def test_demonstrations_train_actions_and_summaries_only():
    rows = demonstrations(8, seed=0, tok=TOK, env_cfg=LongHorizonConfig(), comp=CompactionConfig())
    assert len(rows) > 8  # compacted episodes are several rows
    texts = []
    for ids, mask in rows:
        trained = TOK.decode(ids[mask].tolist())
        texts.append(trained)
        assert "<|user|>" not in trained and "#" not in trained  # no observation, no q_sum
    assert any("a=" in t for t in texts)  # summaries are trained
    assert max(len(ids) for ids, _ in rows) <= MODEL.max_seq_len


def test_two_short_sft_runs_are_bit_identical(tmp_path):
    kw = {"tok": TOK, "steps": 3, "batch_size": 8, "eval_size": 4, "log": lambda _: None}
    a = pretrain_longhorizon(tmp_path / "a", **kw)
    b = pretrain_longhorizon(tmp_path / "b", **kw)
    assert a["weights_sha256"] == b["weights_sha256"]


def test_shipped_model_loads_and_leaves_rl_room():
    weights, cfg, meta = load_checkpoint(LONGHORIZON_MODEL)  # raises if the sha256 differs
    assert meta["weights_sha256"] == file_sha256(Path(LONGHORIZON_MODEL) / "model.safetensors")
    assert meta["produced_by"] == "closedloop pretrain --env longhorizon"
    assert cfg.max_seq_len == MODEL.max_seq_len == 96
    assert 0.3 <= meta["greedy_eval_accuracy"] <= 0.7  # the flawed summaries' ~50%
    assert ROLE["summary"] != ROLE["action"]
