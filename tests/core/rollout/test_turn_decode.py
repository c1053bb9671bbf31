"""Turn decoding on the real engine: session-KV reuse, batch-independent sampling, weight switches
only between decode steps, per-token versions, and KV invalidation (or the kept-KV fault)."""

from __future__ import annotations

import threading

import pytest
import torch

from core.model.checkpoint import load_checkpoint
from core.rollout.engine import RolloutEngine, left_pad
from core.rollout.kv_cache import SessionKVCache
from core.rollout.sampling import SamplingParams
from core.rollout.turn_decode import TurnRequest, decode_turns
from core.rollout.weight_buffer import DoubleBufferedWeights
from core.sync.convert import actor_to_rollout
from core.tokenizer.chat_template import encode_prompt
from core.tokenizer.tokenizer import Tokenizer

TOK = Tokenizer.load()
PARAMS = SamplingParams(max_new_tokens=6)


@pytest.fixture(scope="module")
def weights():
    w, cfg, _ = load_checkpoint("core/assets/base_model")
    base = actor_to_rollout(w, cfg)
    g = torch.Generator().manual_seed(0)  # a second version: the same model, perturbed
    other = {k: v + 0.05 * v.std() * torch.randn(v.shape, generator=g) for k, v in base.items()}
    return cfg, base, other


def _engine(weights, version=0):
    cfg, base, other = weights
    e = RolloutEngine(cfg)
    e.load_weights(base if version == 0 else other, version)
    return e


def _prompts():
    return [encode_prompt(q, tok=TOK) for q in ("37+45=", "12+3=", "99-10=", "40+41=")]


def _decode(engine, contexts, *, seeds, kv=None, switch=None):
    reqs = [
        TurnRequest(i, tuple(c), seed=s)
        for i, (c, s) in enumerate(zip(contexts, seeds, strict=True))
    ]
    return decode_turns(
        engine, reqs, PARAMS, eos_id=TOK.eos_id, pad_id=TOK.pad_id, kv=kv, switch=switch
    )


def _second_turn(contexts, outs):
    obs = [TOK.user_id, *TOK.encode("=7"), TOK.assistant_id]
    return [list(c) + o.ids + obs for c, o in zip(contexts, outs, strict=True)]


def test_session_kv_reuse_matches_a_fresh_prefill(weights):
    e, kv = _engine(weights), SessionKVCache(0)
    first = _decode(e, _prompts(), seeds=[1, 2, 3, 4], kv=kv)
    ctx2 = _second_turn(_prompts(), first)
    cached = _decode(e, ctx2, seeds=[5, 6, 7, 8], kv=kv)
    fresh = _decode(e, ctx2, seeds=[5, 6, 7, 8])
    for a, b, c in zip(cached, fresh, ctx2, strict=True):
        assert a.reused == len(c) - 5  # all but the last action token and the 4 observation ids
        assert a.ids == b.ids
        assert max(abs(x - y) for x, y in zip(a.logp, b.logp, strict=True)) < 1e-5
    # and both agree with teacher-forced prefill of the whole sequence (TITO: the same ids)
    seqs = [c + o.ids for c, o in zip(ctx2, cached, strict=True)]
    ids, valid = left_pad(seqs, TOK.pad_id)
    lp = e.prefill_logprobs(ids, valid)
    for i, o in enumerate(cached):
        assert torch.allclose(lp[i, -len(o.ids) :], torch.tensor(o.logp), atol=1e-4)
    assert kv.stats["hits"] == 4


def test_a_row_samples_the_same_tokens_alone_or_in_a_batch(weights):
    e = _engine(weights)
    batch = _decode(e, _prompts(), seeds=[11, 12, 13, 14])
    alone = _decode(e, _prompts()[2:3], seeds=[13])
    assert alone[0].ids == batch[2].ids


def test_the_switch_lands_between_decode_steps_and_tokens_carry_its_version(weights):
    e = _engine(weights)
    buf = DoubleBufferedWeights(e)
    seen, calls = [], [0]
    forward = e._forward

    def recording_forward(*a, **kw):  # the weights a forward starts with are the ones it ends with
        before = e.weights
        out = forward(*a, **kw)
        seen.append((before is e.weights, e.policy_version))
        return out

    e._forward = recording_forward

    def switch():
        calls[0] += 1
        if calls[0] == 3:  # calls: before the prefill, before step 0, before step 1 ← stage v1
            buf.stage(weights[2], 1)
        return buf.switch_point()

    outs = _decode(e, _prompts(), seeds=[1, 2, 3, 4], switch=switch)
    assert all(same for same, _ in seen)
    for o in outs:
        n_old = min(1, len(o.ids))
        assert o.version == [0] * n_old + [1] * (len(o.ids) - n_old)
        assert o.kv_version == o.version  # invalidate: KV recomputed under v1 at the switch
    # tokens sampled after the switch have v1's log-probs over the whole prefix
    v1 = _engine(weights, version=1)
    seqs = [p + o.ids for p, o in zip(_prompts(), outs, strict=True)]
    ids, valid = left_pad(seqs, TOK.pad_id)
    lp = v1.prefill_logprobs(ids, valid)
    for i, o in enumerate(outs):
        if len(o.ids) > 1:
            assert torch.allclose(lp[i, -len(o.ids) + 1 :], torch.tensor(o.logp[1:]), atol=1e-4)


def test_a_switch_from_another_thread_never_lands_inside_a_forward(weights):
    e = _engine(weights)
    buf = DoubleBufferedWeights(e)
    torn = []
    forward = e._forward

    def recording_forward(*a, **kw):
        before = e.weights
        out = forward(*a, **kw)
        torn.append(before is not e.weights)
        return out

    e._forward = recording_forward
    stop = threading.Event()

    def stager():
        v = 1
        while not stop.is_set():
            buf.stage(weights[1 + v % 2], v)
            v += 1

    t = threading.Thread(target=stager)
    t.start()
    try:
        outs = [
            _decode(e, _prompts(), seeds=[i, i + 1, i + 2, i + 3], switch=buf.switch_point)
            for i in range(3)
        ]
    finally:
        stop.set()
        t.join()
    assert not any(torn)
    for batch in outs:
        for o in batch:
            assert o.version == sorted(o.version)  # versions never go back within a turn


@pytest.mark.parametrize("mode", ["invalidate", "keep"])
def test_kv_on_switch(weights, mode):
    e, kv = _engine(weights), SessionKVCache(0, on_switch=mode)
    buf = DoubleBufferedWeights(e)
    first = _decode(e, _prompts(), seeds=[1, 2, 3, 4], kv=kv)
    buf.stage(weights[2], 1)
    second = _decode(
        e, _second_turn(_prompts(), first), seeds=[5, 6, 7, 8], kv=kv, switch=buf.switch_point
    )
    for o in second:
        assert set(o.version) == {1}
        if mode == "invalidate":
            assert o.kv_version == o.version  # never decoded against v0 keys/values
        else:  # the fault: v1 tokens attended to v0 keys/values, and it is recorded
            assert o.reused > 0 and min(o.kv_version) == 0 and o.kv_version != o.version
    assert (len(kv) == 4) and (kv.stats["invalidated"] == (4 if mode == "invalidate" else 0))
