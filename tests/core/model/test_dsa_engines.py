"""DSA in both engines on left-padded batches: the shared selection rule (golden + per-sample loop
reference), and on real rollouts of the shipped base model: decode == full-sequence selection,
train == rollout selection (deterministic), disagreement in the nondeterministic mode, and dense
attention recovered when k covers the sequence."""

import pytest
import torch

from core.model.dsa_engines import (
    INDEXER_PARAMS,
    allowed_keys,
    indexer_weight_name,
    select_padded,
)
from core.model.dsa_select import select_topk
from core.rollout.sampling import SamplingParams
from core.telemetry.sparse import capture_sparse, stack_selections
from core.tokenizer.chat_template import encode_prompt
from tests.core.rollouts import rollout, session

# --- the shared rule ---------------------------------------------------------------------------


def test_allowed_keys_golden():
    # slot 0 is left padding, slot 3 belongs to a finished sample: both are invalid keys, but every
    # query may pick its own slot (so padded / finished rows are never empty).
    key_valid = torch.tensor([[False, True, True, False]])
    got = allowed_keys(torch.arange(4), key_valid)
    want = torch.tensor(
        [
            [True, True, True, False],  # q0: own slot 0 + real keys 1, 2
            [False, True, True, False],
            [False, True, True, False],
            [False, True, True, True],  # q3: real keys 1, 2 + own slot 3
        ]
    )
    assert torch.equal(got, want[None])


def test_select_padded_golden_excludes_padding():
    # 2 pad slots with the highest scores (9), then real keys 2, 3, 4 scored 1, NaN, 1 for query 4.
    # Pads are excluded, NaN -> -inf: with k=2 the keys scoring 1 (slots 2 and 4) win; the k-th
    # score 1 is shared by 2 causal keys -> boundary_ties = 2 - 1 = 1.
    scores = torch.tensor([[[9.0, 9.0, 1.0, float("nan"), 1.0]]])
    key_valid = torch.tensor([[False, False, True, True, True]])
    q_idx = torch.tensor([4])
    sel = select_padded(scores, q_idx, key_valid, k=2)
    assert sel.indices.tolist() == [[[2, 4]]] and sel.boundary_ties.tolist() == [[1]]
    # k=4 > 3 allowed keys: all of them (the NaN key too), then -1 padding; no boundary
    sel = select_padded(scores, q_idx, key_valid, k=4)
    assert sel.indices.tolist() == [[[2, 3, 4, -1]]]
    assert sel.valid.tolist() == [[[True, True, True, False]]]
    assert sel.boundary_ties.tolist() == [[0]]


@pytest.mark.parametrize("k", [1, 3, 5, 40])
def test_select_padded_equals_unpadded_selection_per_sample(k):
    """Vectorized padded selection minus each pad offset == select_topk of the unpadded sample."""
    g = torch.Generator().manual_seed(k)
    t, pads = 12, [0, 3, 7]
    scores = torch.randn(len(pads), t, t, generator=g).round(decimals=1)  # rounding makes ties
    key_valid = torch.arange(t)[None, :] >= torch.tensor(pads)[:, None]  # [B, T] left padded
    sel = select_padded(scores, torch.arange(t), key_valid, k=k)
    for b, off in enumerate(pads):  # naive reference: one sample at a time, no padding
        n = t - off
        ref = select_topk(scores[b : b + 1, off:, off:], torch.arange(n), k=k)
        idx = sel.indices[b, off:]
        assert torch.equal(torch.where(idx >= 0, idx - off, -1), ref.indices[0])
        assert torch.equal(sel.boundary_ties[b, off:], ref.boundary_ties[0])
        pad_rows = sel.indices[b, :off]  # a padding query selects only itself
        assert torch.equal(pad_rows[:, 0], torch.arange(off)) and (pad_rows[:, 1:] == -1).all()


# --- both engines on real rollouts -------------------------------------------------------------


@pytest.fixture(scope="module")
def det():
    s = session("model.dsa_topk=6")
    return s, rollout(s)


def test_indexer_params_live_in_the_actor_and_reach_the_engine(det):
    s, *_ = det
    weights = s.actor.named_weights()
    for layer in range(s.model_cfg.num_layers):
        for p in INDEXER_PARAMS:
            name = indexer_weight_name(layer, p)
            assert not dict(s.actor.named_parameters())["gpt." + name].requires_grad  # frozen
            assert torch.equal(s.engine.weights["dsa." + name], weights[name])
    layer0 = weights[indexer_weight_name(0, "wq")]
    assert not torch.equal(layer0, weights[indexer_weight_name(1, "wq")])  # seeded per layer


class _Record:
    """Wraps an engine DSA hook and keeps every selection it returns."""

    def __init__(self, hook, out):
        self.hook, self.out = hook, out

    def __call__(self, *args, **kwargs):
        result = self.hook(*args, **kwargs)
        self.out.append(result[1])
        return result


def test_decode_selection_equals_full_sequence_selection(det):
    """Incremental (prefill chunk + one token at a time, KV cache) == one full-sequence pass."""
    s, traj = det
    hooks, full = s.engine.dsa, {}
    s.engine.dsa = {layer: _Record(h, full.setdefault(layer, [])) for layer, h in hooks.items()}
    try:
        s.engine.prefill_logprobs(traj.train_ids, traj.train_valid)
    finally:
        s.engine.dsa = hooks
    for layer in hooks:
        inc = stack_selections(
            traj.engine_records["topk"][layer]
        )  # [B, W, k], W = slots the rollout ran
        ref = stack_selections(full[layer])  # [B, T, k]
        w = inc.indices.shape[1]
        assert w > traj.n_prompt  # decode steps are included
        assert torch.equal(inc.indices, ref.indices[:, :w])
        assert torch.equal(inc.boundary_ties, ref.boundary_ties[:, :w])


def test_train_and_rollout_select_the_same_keys_deterministic(det):
    s, traj = det
    with torch.no_grad():
        s.actor.logits(traj.train_ids, traj.train_valid)
    sparse = capture_sparse(s.actor, traj)
    assert sparse.metrics() == {"topk_agreement": 1.0}
    train, rollout = sparse.topk[0]
    rows = sparse.query_mask
    # not vacuous: some action queries see more than k keys, so Top-k drops keys there
    n_causal = torch.arange(rows.shape[1])[None, :] - sparse.offset[:, None] + 1  # [B, T-1]
    assert (rows & (n_causal > sparse.k)).any()
    assert torch.equal(train.boundary_ties[rows], rollout.boundary_ties[rows])


def test_nondeterministic_rollout_topk_disagrees():
    s = session("model.dsa_topk=6", 'rollout.topk_mode="nondeterministic"')
    traj = rollout(s)
    with torch.no_grad():
        s.actor.logits(traj.train_ids, traj.train_valid)
    agreement = capture_sparse(s.actor, traj).metrics()["topk_agreement"]
    assert 0.0 < agreement < 1.0  # measured 0.54-0.79 (k=6, noise 1e-3 + random tie order)


def _actor_selection(s, traj) -> torch.Tensor:
    with torch.no_grad():
        s.actor.logits(traj.train_ids, traj.train_valid)
    return s.actor.core_attentions()[0].last_selection.indices.clone()


def test_actor_kernel_is_deterministic_by_default():
    s = session("model.dsa_topk=6")
    traj = rollout(s)
    assert torch.equal(_actor_selection(s, traj), _actor_selection(s, traj))


def test_nondeterministic_actor_topk_differs_between_forwards_and_is_seeded():
    """``train.topk_mode``: the trainer's own kernel; two forwards of one batch (π_old and π_θ)
    pick different key sets, and a run is reproducible from its seed."""
    overrides = ("model.dsa_topk=6", 'train.topk_mode="nondeterministic"', "train.topk_noise=1.0")
    a, b = session(*overrides), session(*overrides)
    traj = rollout(a)
    first, second = _actor_selection(a, traj), _actor_selection(a, traj)
    assert not torch.equal(first, second)
    assert torch.equal(first, _actor_selection(b, traj))  # same seed: same noise


def test_dense_attention_recovered_when_k_covers_the_sequence():
    """k=64 >= max_seq_len: every allowed key is selected, both engines equal the dense ones.

    Tolerance 1e-5 in sampled-token log-prob: the sparse kernel gathers keys and reduces in
    another order than the dense kernels (fp32 rounding only; the fp32 actor-vs-engine probe
    bound is the same). Over the whole vocabulary, log-probs reach -20, so the bound there is
    relative: 16 fp32 ulps of the largest magnitude (measured: 8)."""
    dense, sparse = session(), session("model.dsa_topk=64")
    prompts = [encode_prompt(q, tok=dense.tok) for q in ("12+34=", "7-5=", "99+1=")]
    params = SamplingParams(max_new_tokens=6)
    outs = [
        x.engine.generate(prompts, params, eos_id=x.tok.eos_id, pad_id=x.tok.pad_id, greedy=True)
        for x in (dense, sparse)
    ]
    assert torch.equal(outs[0].response_ids, outs[1].response_ids)
    assert torch.allclose(outs[0].logprobs, outs[1].logprobs, atol=1e-5, rtol=0)
    ids = torch.cat([outs[1].prompt_ids, outs[1].response_ids], dim=1)
    real = torch.cat([outs[1].prompt_valid, outs[1].response_mask], dim=1)
    with torch.no_grad():
        lp = [x.actor.logits(ids, real).log_softmax(-1) for x in (dense, sparse)]
    ulp = torch.finfo(torch.float32).eps * lp[0][real].abs().max()
    assert float((lp[0][real] - lp[1][real]).abs().max()) <= 16 * ulp
    sel = sparse.actor.core_attentions()[0].last_selection
    n_allowed = real.long().cumsum(1) + (~real).long()  # real keys up to the query (+ itself)
    assert torch.equal(sel.valid.sum(-1), n_allowed)


def test_dense_default_config_has_no_dsa_hooks():
    s = session()
    assert s.engine.dsa == {} and all(a.dsa is None for a in s.actor.core_attentions())
    traj = rollout(s)
    assert capture_sparse(s.actor, traj) is None
