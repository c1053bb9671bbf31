"""DSA dense warm-up: the indexers learn the main attention, nothing else moves, RL sees them."""

import pytest
import torch

from core.loops.evaluate import greedy_accuracy
from core.model.dsa_warmup import actor_indexers, warmup_indexers
from tests.core.rollouts import session


def _topk_overlap(s, ids, valid, k: int) -> float:
    """Mean fraction of each real query's indexer Top-k that is in its attention Top-k (layer 0)."""
    captured = {}
    layer = actor_indexers(s.actor)[0]
    real_forward = layer.forward

    def capture(q, k_, v, pos, key_valid):
        captured["q"], captured["k"], captured["valid"] = q.detach(), k_.detach(), key_valid
        return real_forward(q, k_, v, pos, key_valid)

    layer.forward = capture
    try:
        with torch.no_grad():
            s.actor.logits(ids, valid)
    finally:
        layer.forward = real_forward
    q, kk, key_valid = captured["q"], captured["k"], captured["valid"]
    t = q.shape[1]
    allowed = torch.ones(t, t).tril().bool()[None] & key_valid[:, None, :]
    with torch.no_grad():
        scores = layer.indexer.scores(q, kk).masked_fill(~allowed, float("-inf"))
        rep = q.shape[2] // kk.shape[2]
        att = torch.einsum("bthd,bshd->bts", q, kk.repeat_interleave(rep, dim=2))
        att = att.masked_fill(~allowed, float("-inf"))
    rows = key_valid & (allowed.sum(-1) > k)  # queries where Top-k drops keys
    a = scores.topk(k, dim=-1).indices[rows]
    b = att.topk(k, dim=-1).indices[rows]
    hits = (a[:, :, None] == b[:, None, :]).any(-1).float()
    return float(hits.mean())


# Learning outcomes, measured over train.seed 0, 1, 2 (the indexers' init), each with native AVX2
# kernels and with ATEN_CPU_CAPABILITY=default (equal to ~1e-7): KL(attention || indexer) after 40
# steps / before 0.120-0.130 (bound 0.5); Top-8 overlap with the attention's Top-8 0.766-0.802 ->
# 0.871-0.887, a gain of 0.085-0.105 (bound 0.05; an earlier bound of 0.1 failed on seeds 1 and
# 2); greedy accuracy after 30 warm-up steps 0.484-0.609 against 0.047-0.203 cold, a gain of
# 0.297-0.547 (bound 0.15).
@pytest.mark.float_sensitive
def test_warmup_trains_only_the_indexers_and_restores_flags():
    s = session("model.dsa_topk=8")
    before = {n: p.detach().clone() for n, p in s.actor.named_parameters()}
    flags = {n: p.requires_grad for n, p in s.actor.named_parameters()}
    ids, valid = s.probe_batch
    overlap_before = _topk_overlap(s, ids, valid, k=8)
    kl = warmup_indexers(s.actor, [s.probe_batch] * 40, lr=3e-3)
    assert len(kl) == 40 and kl[-1] < 0.5 * kl[0]  # KL(attention || indexer) falls
    assert _topk_overlap(s, ids, valid, k=8) > overlap_before + 0.05
    for n, p in s.actor.named_parameters():
        assert p.requires_grad == flags[n], n
        if ".indexer." in n:
            assert not torch.equal(p, before[n]), n
        else:
            assert torch.equal(p, before[n]), n
    assert all(not m.warmup and m.warmup_loss is None for m in actor_indexers(s.actor))


@pytest.mark.float_sensitive
def test_warmup_in_the_session_reaches_the_rollout_engine_and_is_deterministic():
    cold = session("model.dsa_topk=8")
    warm = session("model.dsa_topk=8", "train.dsa_warmup_steps=30")
    again = session("model.dsa_topk=8", "train.dsa_warmup_steps=30")
    assert (
        warm.dsa_warmup_kl == again.dsa_warmup_kl and warm.dsa_warmup_kl[-1] < warm.dsa_warmup_kl[0]
    )
    name = "dsa.decoder.layers.0.self_attention.core_attention.dsa.indexer.wq"
    assert torch.equal(warm.engine.weights[name], again.engine.weights[name])
    assert not torch.equal(warm.engine.weights[name], cold.engine.weights[name])
    acc = {
        k: greedy_accuracy(s.engine, s.envs.eval_set(64), tok=s.tok, max_new_tokens=8)["accuracy"]
        for k, s in (("cold", cold), ("warm", warm))
    }
    assert acc["warm"] > acc["cold"] + 0.15, acc  # the Top-8 keys are now the ones that matter


def test_warmup_needs_dsa_and_a_valid_config():
    with pytest.raises(ValueError, match="train.dsa_warmup_steps > 0 needs DSA"):
        session("train.dsa_warmup_steps=5")
    with pytest.raises(ValueError, match="train.dsa_warmup_steps=-1"):
        session("model.dsa_topk=8", "train.dsa_warmup_steps=-1")
    with pytest.raises(ValueError, match="train.dsa_warmup_lr=0"):
        session("model.dsa_topk=8", "train.dsa_warmup_lr=0")
