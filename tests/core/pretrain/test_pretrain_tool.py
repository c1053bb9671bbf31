"""The tool-use base model: reproducible SFT (bit-identical on one machine), the shipped
checkpoint loads with its recorded hash, and its held-out accuracy leaves RL room (20%–70%)."""

from __future__ import annotations

from pathlib import Path

from core.envs.tool import ToolConfig, make_tool_problems
from core.model.checkpoint import file_sha256, load_checkpoint
from core.pretrain.tool import TOOL_MODEL, demonstration, pretrain_tool
from core.tokenizer.tokenizer import Tokenizer

TOK = Tokenizer.load()


def test_demonstrations_train_only_the_actions():
    p = make_tool_problems(1, seed=0, cfg=ToolConfig())[0]
    ids, mask = demonstration(p, flawed=False, tok=TOK)
    text = TOK.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert text == f"[{p.a}{p.op1}{p.b}]<|eos|>[{p.inner}{p.op2}{p.c}]<|eos|>{p.answer}<|eos|>"
    ids, mask = demonstration(p, flawed=True, tok=TOK)  # answers the outer operation from memory
    assert TOK.decode(ids).count("[") == 1 and sum(mask) < len(mask)


def test_two_short_sft_runs_are_bit_identical(tmp_path):
    a = pretrain_tool(
        tmp_path / "a", tok=TOK, steps=3, batch_size=8, eval_size=4, log=lambda _: None
    )
    b = pretrain_tool(
        tmp_path / "b", tok=TOK, steps=3, batch_size=8, eval_size=4, log=lambda _: None
    )
    assert a["weights_sha256"] == b["weights_sha256"]


def test_shipped_tool_model_loads_and_leaves_rl_room():
    weights, cfg, meta = load_checkpoint(TOOL_MODEL)  # raises if the sha256 differs
    assert meta["weights_sha256"] == file_sha256(Path(TOOL_MODEL) / "model.safetensors")
    assert meta["produced_by"] == "closedloop pretrain --env tool"
    assert 0.2 <= meta["greedy_eval_accuracy"] <= 0.7
    base = load_checkpoint(Path(TOOL_MODEL).parent / "base_model")[2]
    assert meta["base_weights_sha256"] == base["weights_sha256"]
