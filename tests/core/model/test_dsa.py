"""DSA core attention: config validation, indexer formula, incremental == full-sequence selection,
dense recovery at k >= T, sparse attention against a loop, gradients, and the indexer loss."""

import math

import pytest
import torch
import torch.nn.functional as F

from core.model.dsa import DSAConfig, Indexer, dsa_attend, indexer_kl_loss, sparse_attention
from core.model.dsa_select import select_topk

B, T, HQ, HKV, D = 2, 24, 4, 2, 8


def make_qkv(seed, b=B, t=T, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, t, HQ, D, generator=g, dtype=dtype)
    k = torch.randn(b, t, HKV, D, generator=g, dtype=dtype)
    v = torch.randn(b, t, HKV, D, generator=g, dtype=dtype)
    return q, k, v


def make_indexer(cfg, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Indexer(cfg, n_heads=HQ, n_kv_heads=HKV, head_dim=D, generator=g)


# --- config --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"topk": 0}, "topk must be an int >= 1"),
        ({"n_index_heads": 1.5}, "n_index_heads must be an int >= 1"),
        ({"index_dim": True}, "index_dim must be an int >= 1"),
        ({"trainable": 1}, "trainable must be a bool"),
        ({"topk_mode": "fast"}, "topk_mode must be one of"),
        ({"noise_scale": -1.0}, "noise_scale must be a finite float >= 0"),
        ({"noise_scale": math.inf}, "noise_scale must be a finite float >= 0"),
    ],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DSAConfig(**kwargs)


def test_config_from_mapping_rejects_unknown_keys():
    assert DSAConfig.from_mapping({"topk": 8}).topk == 8
    with pytest.raises(ValueError, match=r"unknown DSAConfig keys \['top_k'\]"):
        DSAConfig.from_mapping({"top_k": 8})


# --- indexer -------------------------------------------------------------------------------


def test_indexer_seeded_frozen_and_matches_formula():
    cfg = DSAConfig(n_index_heads=3, index_dim=4)
    ix, same = make_indexer(cfg, seed=5), make_indexer(cfg, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(ix.parameters(), same.parameters()))
    assert not any(p.requires_grad for p in ix.parameters())
    assert all(p.requires_grad for p in make_indexer(DSAConfig(trainable=True)).parameters())
    q, k, _ = make_qkv(0, b=1, t=5)
    s = ix.scores(q, k)
    assert s.shape == (1, 5, 5) and s.dtype == torch.float32
    # loop reference of score(t, s) = sum_h w_h relu(qI_h(t) . kI(s))
    wq, wk, w = ix.wq.double(), ix.wk.double(), ix.head_weights.double()
    for t in range(5):
        q_i = (q[0, t].reshape(-1).double() @ wq).view(3, 4)  # [H, dI]
        for j in range(5):
            k_i = k[0, j].reshape(-1).double() @ wk  # [dI]
            ref = sum(w[h] * torch.relu(q_i[h] @ k_i) for h in range(3))
            assert s[0, t, j].item() == pytest.approx(ref.item(), rel=1e-6, abs=1e-7)


def test_indexer_scores_bit_identical_one_query_at_a_time():
    ix = make_indexer(DSAConfig())
    q, k, _ = make_qkv(1)
    full = ix.scores(q, k)
    for t in range(T):
        step = ix.scores(q[:, t : t + 1], k[:, : t + 1])  # [B, 1, t+1]
        assert torch.equal(step[:, 0], full[:, t, : t + 1])


# --- full sequence vs incremental decoding -------------------------------------------------


def test_incremental_selection_equals_full_sequence_at_every_position():
    cfg = DSAConfig(topk=5)
    ix = make_indexer(cfg)
    q, k, v = make_qkv(2)
    out, sel = dsa_attend(q, k, v, torch.arange(T), indexer=ix, cfg=cfg)
    for t in range(T):  # decode: one query, keys 0..t from the cache
        o_t, s_t = dsa_attend(
            q[:, t : t + 1], k[:, : t + 1], v[:, : t + 1], torch.tensor([t]), indexer=ix, cfg=cfg
        )
        assert all(torch.equal(a[:, t : t + 1], b) for a, b in zip(sel, s_t)), t
        torch.testing.assert_close(o_t, out[:, t : t + 1], atol=1e-6, rtol=1e-5)
    # prefill 10 then chunks of 3 queries (the last chunk shorter)
    for start in range(10, T, 3):
        end = min(start + 3, T)
        _, s_c = dsa_attend(
            q[:, start:end], k[:, :end], v[:, :end], torch.arange(start, end), indexer=ix, cfg=cfg
        )
        assert all(torch.equal(a[:, start:end], b) for a, b in zip(sel, s_c)), start
    assert (sel.boundary_ties > 0).any()  # ReLU zeros make ties: the tie rule was exercised


# --- attention numerics ----------------------------------------------------------------------


def dense_causal_sdpa(q, k, v):
    rep = q.shape[2] // k.shape[2]
    qh, kh, vh = (
        x.transpose(1, 2) for x in (q, k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2))
    )
    return F.scaled_dot_product_attention(qh, kh, vh, is_causal=True).transpose(1, 2)


@pytest.mark.parametrize("topk", [T, 4 * T])
def test_dense_attention_recovered_when_k_covers_the_sequence(topk):
    cfg = DSAConfig(topk=topk)
    q, k, v = make_qkv(3)
    out, sel = dsa_attend(q, k, v, torch.arange(T), indexer=make_indexer(cfg), cfg=cfg)
    assert torch.equal(sel.valid.sum(-1), (torch.arange(T) + 1).expand(B, T))  # every causal key
    # same math, only the float32 reduction order differs: errors ~1e-7 for unit-scale inputs
    torch.testing.assert_close(out, dense_causal_sdpa(q, k, v), atol=2e-6, rtol=0)


def test_sparse_attention_matches_loop_reference():
    q, k, v = make_qkv(4, b=1, t=10)
    g = torch.Generator().manual_seed(4)
    sel = select_topk(torch.randn(1, 10, 10, generator=g), torch.arange(10), k=3)
    out = sparse_attention(q, k, v, sel, scale=0.5)
    for t in range(10):
        keys = sel.indices[0, t][sel.valid[0, t]]  # selected positions
        for h in range(HQ):
            g_kv = h // (HQ // HKV)  # GQA: query head h reads kv head h // n_rep
            logits = (k[0, keys, g_kv] @ q[0, t, h]) * 0.5  # [n]
            ref = logits.softmax(-1) @ v[0, keys, g_kv]  # [D]
            torch.testing.assert_close(out[0, t, h], ref, atol=1e-6, rtol=1e-5)
    chunked = sparse_attention(q, k, v, sel, scale=0.5, q_chunk=4)
    torch.testing.assert_close(chunked, out, atol=1e-6, rtol=0)


def test_bf16_inputs_keep_dtype_and_selection():
    cfg = DSAConfig(topk=6)
    ix = make_indexer(cfg)
    q, k, v = make_qkv(5)
    out, sel = dsa_attend(
        q.bfloat16(), k.bfloat16(), v.bfloat16(), torch.arange(T), indexer=ix, cfg=cfg
    )
    assert out.dtype == torch.bfloat16
    _, sel32 = dsa_attend(
        q.bfloat16().float(), k.bfloat16().float(), v, torch.arange(T), indexer=ix, cfg=cfg
    )
    assert torch.equal(sel.indices, sel32.indices)  # indexer casts exactly, so same selection


def test_nondeterministic_mode_seeded():
    cfg = DSAConfig(topk=3, topk_mode="nondeterministic", noise_scale=0.5)
    ix = make_indexer(cfg)
    q, k, v = make_qkv(6)
    runs = [
        dsa_attend(
            q,
            k,
            v,
            torch.arange(T),
            indexer=ix,
            cfg=cfg,
            generator=torch.Generator().manual_seed(s),
        )[1].indices
        for s in (1, 1, 2)
    ]
    det_cfg = DSAConfig(topk=3)
    det = dsa_attend(q, k, v, torch.arange(T), indexer=ix, cfg=det_cfg)[1].indices
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])
    assert not torch.equal(runs[0], det)


# --- gradients and the indexer loss ----------------------------------------------------------


@pytest.mark.parametrize("trainable", [False, True])
def test_gradients_reach_qkv_and_the_indexer_only_when_trainable(trainable):
    cfg = DSAConfig(topk=4, trainable=trainable)
    ix = make_indexer(cfg)
    q, k, v = (x.requires_grad_() for x in make_qkv(7))
    out, sel = dsa_attend(q, k, v, torch.arange(T), indexer=ix, cfg=cfg)
    aux, metrics = indexer_kl_loss(
        ix.scores(q.detach(), k.detach()), q, k, torch.arange(T), scale=D**-0.5, sel=sel
    )
    assert aux.requires_grad == trainable and not metrics["indexer_kl"].requires_grad
    (out.square().sum() + aux).backward()
    for x in (q, k, v):
        assert x.grad is not None and x.grad.abs().sum() > 0
    for p in ix.parameters():
        assert (p.grad is not None and p.grad.abs().sum() > 0) == trainable


def test_indexer_kl_loss_golden():
    # one query at position 1 over two identical keys: the main attention is p = [1/2, 1/2]
    q = torch.randn(1, 1, HQ, D, generator=torch.Generator().manual_seed(8))
    k = torch.ones(1, 2, HKV, D)
    # index scores [0, ln 3] -> softmax = [1/4, 3/4]
    # KL = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3) = 0.1438410362
    scores = torch.tensor([[[0.0, math.log(3.0)]]], requires_grad=True)
    loss, _ = indexer_kl_loss(scores, q, k, torch.tensor([1]), scale=1.0)
    assert loss.item() == pytest.approx(0.5 * math.log(4 / 3), rel=1e-6)
    # scores equal to log p (up to a constant) give zero loss
    loss0, _ = indexer_kl_loss(torch.full((1, 1, 2), 7.0), q, k, torch.tensor([1]), scale=1.0)
    assert loss0.item() == pytest.approx(0.0, abs=1e-7)
