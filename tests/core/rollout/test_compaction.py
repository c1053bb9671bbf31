"""The compaction rollout: trigger rule, rebuilt context (resume + last k pairs, exact ids),
roles (summary trained; rebuilt prompt, q_sum and tail not), shared reward, events, and the
no-compaction path."""

from __future__ import annotations

import pytest
import torch

from core.envs.longhorizon import LongHorizonConfig, LongHorizonSource
from core.model.config import ModelConfig
from core.pretrain.longhorizon_teacher import TeacherEngine
from core.rollout.compaction import CompactionConfig, collect_compacted, counter_ids
from core.rollout.episode import ROLE
from core.rollout.sampling import SamplingParams
from core.tokenizer.tokenizer import Tokenizer

TOK = Tokenizer.load()
MODEL = ModelConfig(vocab_size=320, max_seq_len=96)


def _run(flaw: float, *, n: int = 6, enabled: bool = True, cfg: CompactionConfig | None = None):
    cfg = cfg or CompactionConfig()
    envs = LongHorizonSource(LongHorizonConfig(), TOK).sample(n, seed=11)
    engine = TeacherEngine(MODEL, TOK, cfg.summary_prompt, flaw_rate=flaw, seed=1)
    return collect_compacted(
        engine,
        envs,
        SamplingParams(max_new_tokens=4),
        tok=TOK,
        cfg=cfg,
        new_ids=counter_ids(100),
        group_ids=torch.arange(n),
        enabled=enabled,
    )


def test_segments_roles_and_shared_reward():
    out = _run(0.0)
    tr = out.traj
    assert all(r is None for r in tr.failure_reason)  # the faithful teacher always succeeds
    assert (tr.reward == 1.0).all()
    for i in range(tr.size):
        v = tr.valid[i]
        role, lm = tr.role[i][v], tr.loss_mask[i][v]
        trained = (role == ROLE["action"]) | (role == ROLE["summary"])
        assert torch.equal(lm, trained)  # never prompt, observation or tail
        assert len(tr.ids[i][v]) <= 64  # within the budget C
        if tr.segment[i] > 0:
            # k = 1 pair: "ok<eos>" + a distractor (6 tokens) or the question (4 tokens)
            assert int((role == ROLE["tail"]).sum()) in (9, 7)
    parents = tr.parent_id.tolist()
    assert all(p in tr.sample_id.tolist() for p in parents)
    assert len(set(tr.sample_id.tolist())) == tr.size
    assert out.events and all(e.tail_pairs == 1 for e in out.events)


def test_rebuilt_context_is_resume_plus_exact_tail():
    out = _run(0.0, n=1)
    tr = out.traj
    rows = [tr.ids[i][tr.valid[i]].tolist() for i in range(tr.size)]
    roles = [tr.role[i][tr.valid[i]].tolist() for i in range(tr.size)]
    for s in range(1, tr.size):
        prev, prev_roles, cur, cur_roles = rows[s - 1], roles[s - 1], rows[s], roles[s]
        summary = [t for t, r in zip(prev, prev_roles) if r == ROLE["summary"]]
        assert summary[-1] == TOK.eos_id
        resume = [TOK.bos_id, TOK.user_id, *summary[:-1], TOK.assistant_id]
        assert cur[: len(resume)] == resume and set(cur_roles[: len(resume)]) == {ROLE["prompt"]}
        tail = [t for t, r in zip(cur, cur_roles) if r == ROLE["tail"]]
        qsum = TOK.encode("#")
        before_summary = prev[: len(prev) - len(summary) - len(qsum)]
        assert before_summary[-len(tail) :] == tail  # the last pair, exact ids
        assert prev[len(before_summary) : len(before_summary) + len(qsum)] == qsum
    e = out.events[0]
    # resume: <bos><user> a=NN,b=NN <assistant> = 2 + 9 + 1 = 12; tail: ok<eos> + 6 obs = 9
    assert e.context_after == 21 and e.summary_len == 10  # 9 summary tokens + EOS


def test_trigger_rule():
    # compaction happens exactly when C − |h_t| < T_comp: every summarised context is > C − T
    out = _run(0.0)
    assert all(e.context_before > 64 - 24 for e in out.events)
    tr = out.traj
    # and never before: every action of a segment was generated from a context ≤ C − T_comp
    for i in range(tr.size):
        v = tr.valid[i]
        role = tr.role[i][v]
        first_actions = torch.nonzero(role == ROLE["action"]).flatten()
        starts = [int(j) for j in first_actions if j == 0 or role[j - 1] != ROLE["action"]]
        assert all(j <= 64 - 24 for j in starts)


def test_flawed_summaries_lose_facts():
    out = _run(1.0, n=16)
    first = out.traj.segment == 0
    fails = [r for r, f in zip(out.traj.failure_reason, first.tolist()) if f]
    assert 0 < fails.count("wrong") < 16  # questions about the first fact still succeed


def test_without_compaction_the_full_history_runs_to_max_seq_len():
    out = _run(0.0, enabled=False)
    assert not out.events and (out.traj.segment == 0).all()
    assert all(r is None for r in out.traj.failure_reason)  # 22 + 9n ≤ 94 < 96
    assert int(out.traj.valid.sum(1).max()) > 64


def test_keep_zero_pairs_and_config_errors():
    out = _run(0.0, n=2, cfg=CompactionConfig(keep_pairs=0))
    assert out.events and all(e.tail_pairs == 0 for e in out.events)
    assert not (out.traj.role == ROLE["tail"]).any()
    with pytest.raises(ValueError, match="compaction.threshold"):
        CompactionConfig(threshold=10, summary_max_tokens=12)
    with pytest.raises(ValueError, match="compaction.keep_pairs"):
        CompactionConfig(keep_pairs=-1)
