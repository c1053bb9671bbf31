"""Actor (megatron) vs rollout engine: same math, separate implementations.

With both engines in fp32, the probe after a sync and the trainer's recompute of a rollout agree
in log-prob to fp32 rounding: different kernels (SDPA vs einsum softmax) round differently, and
how much depends on the CPU's kernels. Measured on 3 rollouts with one thread, native AVX2 /
ATEN_CPU_CAPABILITY=default / =avx2 / default with MKL_CBWR=COMPATIBLE and ONEDNN_MAX_CPU_ISA=SSE41:
probe max 3.8e-6 / 5.7e-6 / 3.8e-6 / 4.8e-6; recompute max up to 4.8e-6 / 1.0e-5 / 4.8e-6 / 4.3e-6,
mean up to 2.3e-7 / 3.4e-7 / 2.3e-7 / 2.1e-7. Tolerances: max 5e-5, mean 1e-6. A bf16 rollout
disagrees measurably (mean ~1e-3) and the sync report says so.
"""

import dataclasses

import pytest
import torch

from core.config import load_config
from core.loops.session import Session
from core.model.actor import Actor
from core.model.config import ModelConfig
from core.rollout.engine import RolloutEngine
from core.rollout.sampling import SamplingParams
from core.sync.convert import actor_to_rollout
from observability.telemetry import NullTelemetry
from tests.core.rollouts import rollout, small_config


@pytest.fixture(scope="module")
def session():
    return Session(load_config(None), NullTelemetry())


@pytest.mark.float_sensitive
def test_fp32_probe_agrees_after_sync(session):
    assert session.last_sync.probe_mismatch_abs_max <= 5e-5  # the first sync is always probed
    every = session.cfg.train.probe_every
    reports = [session.sync() for _ in range(every)]
    probed = [r.probe_mismatch_abs_max is not None for r in reports]
    assert probed == [False] * (every - 1) + [True]  # then every train.probe_every-th sync
    assert reports[-1].probe_mismatch_abs_max <= 5e-5


def test_bf16_rollout_mismatch_is_nonzero_and_reported():
    cfg = load_config(None, ['rollout.precision="bf16"'])
    s = Session(cfg, NullTelemetry())
    assert s.last_sync.probe_mismatch_abs_max > 1e-4
    assert s.last_sync.probe_mismatch_abs_mean > 0


@pytest.mark.float_sensitive
def test_rollout_logprobs_match_trainer_recompute(session):
    """The trainer's log-probs on the rollout's exact IDs equal what the rollout reported."""
    from core.algorithms.policy import token_logprobs

    traj = rollout(session, 0)
    with torch.no_grad():
        logits = session.actor.logits(traj.train_ids, traj.train_valid)[:, :-1]
        lp, _ = token_logprobs(logits, traj.train_ids[:, 1:])
    diff = (lp - traj.rollout_logp[:, 1:]).abs()[traj.generated[:, 1:]]
    assert diff.numel() > 0 and float(diff.max()) <= 5e-5 and float(diff.mean()) <= 1e-6


def test_tito_trainer_uses_rollout_ids(session):
    traj = rollout(session, 1)
    assert traj.train_ids is traj.ids  # the trainer feeds the rollout's exact ids
    assert torch.equal(traj.train_valid, traj.valid)


def test_retokenize_fault_changes_ids_and_is_flagged():
    """decode→encode of sampled tokens changes IDs, and the detector flags it.

    Two hazards: a merged digit token ("46") re-encodes as "4", "6"; a lone byte that is not
    valid UTF-8 decodes to U+FFFD, which re-encodes as three other bytes. The base model never
    saw either in SFT, so at T=1 it almost never samples one; at T=2 (as in the
    ``retokenize-bug`` scenario) a few percent of responses contain one.
    """
    from core.tokenizer.tito import tito_violations

    hot = Session(load_config(None, ["rollout.temperature=2.0"]), NullTelemetry())
    flagged = 0
    for step in range(4):
        traj = rollout(hot, 100 + step, retokenize=True)
        v = tito_violations(traj.ids, traj.train_ids, traj.generated & traj.train_valid)
        flagged += int((v > 0).sum())
        for i in torch.nonzero(v > 0).flatten().tolist():
            # each flagged response holds a token that does not survive decode→encode on its
            # own: a merged digit token, or a lone non-UTF-8 byte (decoded to U+FFFD)
            ids = traj.ids[i][traj.generated[i]].tolist()
            assert any(hot.tok.encode(hot.tok.decode([t])) != [t] for t in ids)
    assert flagged > 0


def test_generation_is_deterministic(session):
    params = SamplingParams(max_new_tokens=6)
    prompts = [[1, 3, 20, 21, 4], [1, 3, 40, 4]] * 4
    outs = []
    for _ in range(2):
        g = torch.Generator().manual_seed(7)
        rb = session.engine.generate(prompts, params, eos_id=2, pad_id=0, generator=g)
        outs.append((rb.response_ids.clone(), rb.logprobs.clone()))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_conversion_is_exact_and_moe_engines_agree():
    cfg = small_config(moe_layers=(1,))
    actor = Actor(cfg, seed=3)
    eng = RolloutEngine(cfg)
    w = actor.named_weights()
    eng.load_weights(actor_to_rollout(w, cfg), version=0)
    qkv = w["decoder.layers.0.self_attention.linear_qkv.weight"]
    # group 0 rows: 2 query heads (16 rows) then k (8) then v (8)
    assert torch.equal(eng.weights["layers.0.wq"][:16], qkv[:16])
    assert torch.equal(eng.weights["layers.0.wk"][:8], qkv[16:24])
    ids = torch.randint(5, 64, (3, 10))
    valid = torch.ones(3, 10, dtype=torch.bool)
    valid[0, :4] = False
    with torch.no_grad():
        ref = actor.logits(ids, valid)[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
    got = eng.prefill_logprobs(ids, valid)
    m = valid[:, 1:] & valid[:, :-1]
    assert float((ref - got).abs()[m].max()) <= 1e-5


def test_engine_refuses_generation_without_weights():
    eng = RolloutEngine(dataclasses.replace(ModelConfig(), vocab_size=64))
    with pytest.raises(RuntimeError, match="weight sync"):
        eng.generate([[1, 2]], SamplingParams(), eos_id=2, pad_id=0)


@pytest.mark.parametrize("moe_layers", [(), (1,)])
def test_prefix_sharing_prefills_each_distinct_prompt_once(moe_layers, monkeypatch):
    """A GRPO batch repeats each prompt G times: the prefill runs on the distinct rows and copies
    their KV cache, last-slot logits and MoE routes to every copy — equal to prefilling all."""
    from core.rollout.engine import left_pad

    cfg = small_config(moe_layers=moe_layers)
    eng = RolloutEngine(cfg)
    eng.load_weights(actor_to_rollout(Actor(cfg, seed=5).named_weights(), cfg), version=0)
    ids, valid = left_pad([[5, 6, 7, 8], [9, 10], [5, 6, 7, 8], [5, 6, 7, 8], [9, 10]], 0)
    rows = []
    real = eng._forward
    monkeypatch.setattr(eng, "_forward", lambda x, *a, **k: rows.append(len(x)) or real(x, *a, **k))
    shared, full = eng._new_cache(5, 4), eng._new_cache(5, 4)
    routes_s, routes_f = {}, {}
    with torch.no_grad():
        got = eng._prefill(ids, valid, cache=shared, routes=routes_s, topk={})
        want = real(ids, valid, start=0, cache=full, routes=routes_f, topk={}, last=True)[:, -1]
    assert rows == [2]  # two distinct prompts prefilled
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    for (ks, vs), (kf, vf) in zip(shared, full, strict=True):
        torch.testing.assert_close(ks, kf, rtol=0, atol=1e-5)
        torch.testing.assert_close(vs, vf, rtol=0, atol=1e-5)
    assert routes_s.keys() == routes_f.keys() == set(moe_layers)
    for l in moe_layers:
        assert torch.equal(routes_s[l][0], routes_f[l][0])  # [5, T, k] per row
