"""Conformance suite of ``core.rollout.protocol.RolloutEngineProtocol``, over every implementation.

``IMPLEMENTATIONS`` maps a name to a factory ``(cfg, precision) -> engine``; each clause of the
protocol is one test below, run on each of them. The policy is the shipped base model, the
prompts are task prompts of different lengths (left padding is exercised). Two engines are
listed: the embedded one, and vLLM (``core.rollout.vllm_engine``, marked ``vllm``; its tests
share one vLLM ``LLM`` per precision in the process, each handle reloading its own weights).
Tolerances: fp32 generation vs prefill scoring differ only by float reduction order (incremental
KV decode vs one prefill): measured up to 1.8e-5 in log-prob over 5 seeds at T = 0.6 (logits
scaled by 1 / T) on the embedded engine, and at most 2.4e-7 on vLLM (its sampler and its
``prompt_logprobs`` share the paged-attention kernels; at T = 0.6 its score is the
full-vocabulary ``prompt_logprobs`` rescaled), so 5e-5 is allowed; a wrong temperature or a
stale weight moves them by >1e-2. The KV clause is exact for the embedded engine (its cache is
``[B, Tp + Tr]`` per layer) and block-granular for vLLM (its paged cache is allocated once; the
live part is whole blocks, at most the blocks the requests' tokens fill).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.model.checkpoint import load_checkpoint
from core.model.hf_export import DEFAULT_CHECKPOINT
from core.quant.presets import get_preset
from core.quant.quantizer import dequantize
from core.quant.wiring import SyncQuantizer
from core.rollout.engine import RolloutEngine
from core.rollout.protocol import RolloutEngineProtocol
from core.rollout.sampling import SamplingParams
from core.rollout.vllm_engine import VllmEngine
from core.sync.convert import actor_to_rollout
from core.tasks.arithmetic import ArithmeticConfig, make_prompts
from core.tokenizer.chat_template import encode_prompt
from core.tokenizer.tokenizer import Tokenizer

IMPLEMENTATIONS = {
    "embedded": lambda cfg, precision: RolloutEngine(cfg, precision=precision),
    "vllm": lambda cfg, precision: VllmEngine(cfg, precision=precision),
}
MARKS = {"vllm": [pytest.mark.vllm]}
TOK = Tokenizer.load()


@pytest.fixture(scope="module")
def policy():
    weights, cfg, _ = load_checkpoint(DEFAULT_CHECKPOINT)
    return cfg, actor_to_rollout(weights, cfg)


@pytest.fixture(
    params=[pytest.param(name, marks=MARKS.get(name, [])) for name in sorted(IMPLEMENTATIONS)]
)
def make(request, policy):
    """``make(precision="fp32", version=0, weights=None)`` -> an engine holding the policy."""
    cfg, payload = policy

    def build(precision: str = "fp32", version: int = 0, weights: dict | None = None):
        engine = IMPLEMENTATIONS[request.param](cfg, precision)
        engine.load_weights(payload if weights is None else weights, version)
        return engine

    return build


def _prompts(n: int = 6, seed: int = 0) -> list[list[int]]:
    cfg = ArithmeticConfig(min_digits=1, max_digits=2)
    return [encode_prompt(p.question, tok=TOK) for p in make_prompts(n, seed=seed, cfg=cfg)]


def _generate(engine, prompts, *, seed=0, greedy=False, **sampling):
    params = SamplingParams(**({"max_new_tokens": 6} | sampling))
    gen = torch.Generator().manual_seed(seed)
    return engine.generate(
        prompts, params, eos_id=TOK.eos_id, pad_id=TOK.pad_id, generator=gen, greedy=greedy
    )


def test_implements_the_protocol(make):
    assert isinstance(make(), RolloutEngineProtocol)


def test_token_ids_in_token_ids_out(make):
    prompts = _prompts()
    assert len({len(p) for p in prompts}) > 1  # left padding is exercised
    b = _generate(make(version=3), prompts)
    for i, p in enumerate(prompts):
        assert b.prompt_ids[i][b.prompt_valid[i]].tolist() == p  # the exact prompt IDs
        m = b.response_mask[i]
        n = int(m.sum())
        assert m[:n].all() and not m[n:].any()  # generated tokens form a prefix
        out = b.sample(i)
        assert out["policy_version"] == 3 and len(out["token_ids"]) == n
        assert all(0 <= t < TOK.vocab_size for t in out["token_ids"])
        stopped = TOK.eos_id in out["token_ids"]
        assert out["finish_reason"] == ("stop" if stopped else "length")
        if stopped:
            assert out["token_ids"].index(TOK.eos_id) == n - 1  # nothing after EOS
        assert (b.response_ids[i][~m] == TOK.pad_id).all() and (b.logprobs[i][~m] == 0).all()


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_processed_logprobs_equal_prefill_scores(make, temperature):
    """The log-prob reported with each sampled token is the one prefill scoring gives the same
    token at the same temperature (processed mode, no truncation)."""
    engine = make()
    prompts = _prompts()
    b = _generate(engine, prompts, temperature=temperature)
    seqs = [p + b.sample(i)["token_ids"] for i, p in enumerate(prompts)]
    scores = engine.prefill_and_score(seqs, temperature=temperature)
    for i, p in enumerate(prompts):
        reported = torch.tensor(b.sample(i)["logprobs"])
        assert scores[i].shape == (len(seqs[i]) - 1,)
        torch.testing.assert_close(scores[i][len(p) - 1 :], reported, rtol=0, atol=5e-5)


def test_truncated_sampling_reports_renormalized_logprobs(make):
    """top-k: the processed log-prob is over the kept set, so >= the full-distribution one."""
    engine = make()
    prompts = _prompts()
    b = _generate(engine, prompts, top_k=2, temperature=1.5)
    seqs = [p + b.sample(i)["token_ids"] for i, p in enumerate(prompts)]
    scores = engine.prefill_and_score(seqs, temperature=1.5)
    for i, p in enumerate(prompts):
        reported = torch.tensor(b.sample(i)["logprobs"])
        assert (reported >= scores[i][len(p) - 1 :] - 1e-5).all()
        assert (reported > scores[i][len(p) - 1 :] + 1e-3).all()  # the dropped mass is > 0


def test_greedy_and_seeded_sampling_are_deterministic(make):
    engine, prompts = make(), _prompts()
    a, b = _generate(engine, prompts, seed=5), _generate(engine, prompts, seed=5)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logprobs, b.logprobs)
    g1, g2 = _generate(engine, prompts, greedy=True), _generate(make(), prompts, greedy=True)
    assert torch.equal(g1.response_ids, g2.response_ids)


def test_prefill_scores_do_not_depend_on_the_batch(make):
    engine = make()
    seqs = [p + [TOK.eos_id] for p in _prompts(5)]
    together = engine.prefill_and_score(seqs)
    for seq, score in zip(seqs, together):
        (alone,) = engine.prefill_and_score([seq])  # other GEMM shapes: fp32 rounding only
        torch.testing.assert_close(alone, score, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="temperature"):
        engine.prefill_and_score(seqs, temperature=0.0)


def test_versioned_updates_refuse_stale_versions(make, policy):
    _, payload = policy
    engine = make(version=0)
    engine.load_weights(payload, 2)
    assert engine.policy_version == 2 and _generate(engine, _prompts(2)).policy_version == 2
    before = engine.prefill_and_score(_prompts(2))
    zeroed = {k: torch.zeros_like(v) for k, v in payload.items()}
    with pytest.raises(ValueError, match="version 1 < installed policy_version 2"):
        engine.load_weights(zeroed, 1)
    assert engine.policy_version == 2
    after = engine.prefill_and_score(_prompts(2))
    assert all(torch.equal(x, y) for x, y in zip(before, after))  # the stale payload never landed


def test_a_weight_update_leaves_nothing_of_the_old_policy(make, policy):
    """After an update, outputs equal a fresh engine's with the new weights."""
    _, payload = policy
    g = torch.Generator().manual_seed(1)
    moved = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in payload.items()}
    engine, prompts = make(version=0), _prompts()
    old = _generate(engine, prompts, seed=2)
    engine.load_weights(moved, 1)
    new, fresh = _generate(engine, prompts, seed=2), _generate(make(weights=moved), prompts, seed=2)
    assert torch.equal(new.response_ids, fresh.response_ids)
    assert torch.equal(new.logprobs, fresh.logprobs)
    assert not torch.equal(new.logprobs, old.logprobs)


def test_quantized_update_serves_the_dequantized_weights(make, policy):
    """A W4A16 payload (packed int4 linears) serves exactly what the dense bf16 engine serves
    with the dequantized weights, and carries its version."""
    cfg, payload = policy
    quantizer = SyncQuantizer(get_preset("int4-g32-sym"), cfg)
    packed = quantizer(payload, 4)
    engine = make(precision="bf16", version=4, weights=packed)
    dense = {
        k: (dequantize(quantizer.last[k][0], dtype=torch.bfloat16) if k in quantizer.last else v)
        for k, v in payload.items()
    }
    reference = make(precision="bf16", version=4, weights=dense)
    seqs = [p + [TOK.eos_id] for p in _prompts()]
    for x, y in zip(engine.prefill_and_score(seqs), reference.prefill_and_score(seqs)):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-6)
    assert _generate(engine, _prompts(2)).policy_version == 4


def test_kv_cache_lives_only_while_a_request_runs(make, policy):
    cfg, _ = policy
    engine, prompts = make(), _prompts(4)
    assert engine.kv_cache_bytes() == 0
    engine.reset_kv_cache()
    _generate(engine, prompts, max_new_tokens=5)
    tp = max(len(p) for p in prompts)
    per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4  # K and V, fp32
    if isinstance(engine, VllmEngine):  # paged: whole blocks of the one cache vLLM allocated
        block = engine._res.block_size * per_token
        most = sum(-(-(len(p) + 5) // engine._res.block_size) for p in prompts) * block
        peak = engine.kv_cache_peak_bytes()
        assert engine.kv_cache_bytes() == 0 and peak % block == 0 and block <= peak <= most
    else:  # every layer: [B, Tp + Tr, Hkv, D] fp32
        expected = 4 * (tp + 5) * per_token
        assert engine.kv_cache_bytes() == 0 and engine.kv_cache_peak_bytes() == expected
    engine.reset_kv_cache()
    assert engine.kv_cache_peak_bytes() == 0
    too_long = dataclasses.replace(SamplingParams(), max_new_tokens=cfg.max_seq_len)
    with pytest.raises(ValueError, match="max_seq_len"):
        engine.generate(prompts, too_long, eos_id=TOK.eos_id, pad_id=TOK.pad_id)
    with pytest.raises(ValueError, match="max_seq_len"):
        engine.prefill_and_score([[1] * (cfg.max_seq_len + 1)])
    assert engine.kv_cache_bytes() == 0
    engine.prefill_and_score([[1, 2, 3]])
    assert engine.kv_cache_bytes() == 0 and 0 < engine.kv_cache_peak_bytes()


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=MARKS.get(n, [])) for n in sorted(IMPLEMENTATIONS)]
)
def test_an_engine_without_weights_refuses_requests(policy, name):
    cfg, _ = policy
    for factory in (IMPLEMENTATIONS[name],):
        engine = factory(cfg, "fp32")
        with pytest.raises(RuntimeError, match="no weights"):
            _generate(engine, _prompts(1))
        with pytest.raises(RuntimeError, match="no weights"):
            engine.prefill_and_score([[1, 2]])
        assert engine.kv_cache_bytes() == 0, name
