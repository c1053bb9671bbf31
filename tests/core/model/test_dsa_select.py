"""Top-k selection: hand-derived golden cases (ties, NaN, -0.0, short prefixes), a naive-loop
reference, the nondeterministic mode, and the telemetry hash."""

import itertools
import math

import pytest
import torch

from core.model.dsa_select import index_hash, select_topk

NAN, INF = math.nan, math.inf


def naive_select(scores, q_pos, k):
    """Loop reference: sort causal (score, pos) by score desc then pos asc, keep k, sort by pos."""
    b, tq, _ = scores.shape
    indices = torch.full((b, tq, k), -1, dtype=torch.int64)
    ties = torch.zeros((b, tq), dtype=torch.int32)
    for i in range(b):
        for t in range(tq):
            row = [
                (-INF if math.isnan(x) else x, s)
                for s, x in enumerate(scores[i, t].tolist())
                if s <= int(q_pos[t])
            ]
            ranked = sorted(row, key=lambda p: (-p[0], p[1]))
            chosen = sorted(s for _, s in ranked[:k])
            indices[i, t, : len(chosen)] = torch.tensor(chosen, dtype=torch.int64)
            if len(row) > k:
                v_k = ranked[k - 1][0]
                ties[i, t] = sum(x == v_k for x, _ in row) - 1
    return indices, indices >= 0, ties


def test_golden_ties_nan_and_short_prefix():
    scores = torch.tensor(
        [
            [
                [2.0, 5.0, 9.0, 9.0, 9.0, 9.0],
                [1.0, 4.0, 1.0, 1.0, 7.0, 7.0],
                [NAN, 0.5, -0.0, 0.0, NAN, -1.0],
                [NAN, NAN, NAN, NAN, 3.0, NAN],
                [INF, INF, INF, INF, INF, INF],
            ]
        ]
    )
    q_pos = torch.tensor([1, 3, 5, 5, 2])
    sel = select_topk(scores, q_pos, k=3)
    # row 0 (q_pos 1): only keys {0, 1} are causal (the 9.0s are future keys) -> both, one pad
    # row 1 (q_pos 3): 4.0@1 first; 1.0 ties at {0, 2, 3} -> lower positions 0, 2 win -> [0, 1, 2]
    #   v_k = 1.0, three causal keys equal it -> boundary_ties = 3 - 1 = 2
    # row 2 (q_pos 5): NaN -> -inf, -0.0 == 0.0: order 0.5@1, 0.0@2, 0.0@3, -1@5, -inf@0, -inf@4
    #   -> [1, 2, 3]; v_k = 0.0 equals keys {2, 3} -> 1
    # row 3 (q_pos 5): 3.0@4, then -inf ties at {0, 1, 2, 3, 5} -> 0, 1 -> [0, 1, 4]
    #   v_k = -inf equals five keys -> 4
    # row 4 (q_pos 2): three causal keys, k = 3 -> all of them, no boundary -> 0
    assert sel.indices.dtype == torch.int64
    assert sel.indices.tolist() == [[[0, 1, -1], [0, 1, 2], [1, 2, 3], [0, 1, 4], [0, 1, 2]]]
    assert sel.valid.tolist() == [[[True, True, False]] + [[True, True, True]] * 4]
    assert sel.boundary_ties.dtype == torch.int32
    assert sel.boundary_ties.tolist() == [[0, 2, 1, 4, 0]]


def test_k_larger_than_keys_pads_every_row():
    # Tk = 2 < k = 4: every causal key, ascending, then -1 padding
    sel = select_topk(torch.tensor([[[3.0, 1.0], [1.0, 3.0]]]), torch.tensor([0, 1]), k=4)
    assert sel.indices.tolist() == [[[0, -1, -1, -1], [0, 1, -1, -1]]]
    assert sel.valid.sum().item() == 3
    assert sel.boundary_ties.tolist() == [[0, 0]]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_matches_naive_loop_on_tie_heavy_scores(k):
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(-2, 3, (3, 12, 12), generator=g).float()  # five values: many ties
    special = torch.tensor([NAN, -INF, INF, -0.0])
    pick = torch.randint(0, 4, scores.shape, generator=g)
    scores = torch.where(torch.rand(scores.shape, generator=g) < 0.2, special[pick], scores)
    q_pos = torch.arange(12)
    sel = select_topk(scores, q_pos, k=k)
    indices, valid, ties = naive_select(scores, q_pos, k)
    assert torch.equal(sel.indices, indices)
    assert torch.equal(sel.valid, valid)
    assert torch.equal(sel.boundary_ties, ties)


def test_chunk_of_queries_with_offset_positions():
    # decoding a chunk: queries at positions 5..7 over 8 cached keys, same as rows 5..7 of full
    g = torch.Generator().manual_seed(1)
    scores = torch.randint(0, 3, (2, 8, 8), generator=g).float()
    full = select_topk(scores, torch.arange(8), k=3)
    chunk = select_topk(scores[:, 5:], torch.tensor([5, 6, 7]), k=3)
    assert all(torch.equal(a[:, 5:], b) for a, b in zip(full, chunk))


def assert_valid_causal(sel, q_pos, k):
    idx, valid = sel.indices, sel.valid
    n = valid.sum(-1)
    assert torch.equal(n, torch.clamp(q_pos + 1, max=k).expand_as(n))  # min(k, #causal)
    assert torch.all(torch.where(valid, idx, 0) <= q_pos[None, :, None])
    assert torch.all(torch.where(valid, idx, -1) >= torch.where(valid, 0, -1))
    assert torch.equal(idx < 0, ~valid)
    inner = valid[..., 1:]  # ascending and hence distinct among valid slots
    assert torch.all(torch.where(inner, idx[..., 1:] > idx[..., :-1], True))


def test_nondeterministic_is_valid_seeded_and_differs_on_ties():
    g = torch.Generator().manual_seed(2)
    scores = torch.randint(0, 2, (2, 32, 32), generator=g).float()  # 0/1 scores: ties everywhere
    q_pos = torch.arange(32)
    det = select_topk(scores, q_pos, k=4)
    runs = [
        select_topk(
            scores,
            q_pos,
            k=4,
            mode="nondeterministic",
            noise_scale=ns,
            generator=torch.Generator().manual_seed(seed),
        )
        for ns, seed in [(0.0, 7), (0.0, 7), (1e-3, 7), (0.0, 8)]
    ]
    for sel in runs:
        assert_valid_causal(sel, q_pos, 4)
        assert not torch.equal(sel.indices, det.indices)
        assert torch.equal(sel.boundary_ties, det.boundary_ties)  # a property of the scores
    assert torch.equal(runs[0].indices, runs[1].indices)  # same seed, same result
    assert not torch.equal(runs[0].indices, runs[3].indices)  # other seed, other tie order


def test_nondeterministic_keeps_clear_winners():
    # distinct scores 1 apart: noise of 1e-3 cannot reorder them -> same as deterministic
    g = torch.Generator().manual_seed(3)
    scores = torch.stack([torch.randperm(16, generator=g).float() for _ in range(16)])[None]
    q_pos = torch.arange(16)
    det = select_topk(scores, q_pos, k=5)
    nd = select_topk(scores, q_pos, k=5, mode="nondeterministic", noise_scale=1e-3, generator=g)
    assert torch.equal(det.indices, nd.indices)


def test_deterministic_repeatable():
    g = torch.Generator().manual_seed(4)
    scores = torch.randn(2, 16, 16, generator=g).relu()  # exact zeros tie, as ReLU scores do
    a = select_topk(scores, torch.arange(16), k=6)
    b = select_topk(scores.clone(), torch.arange(16), k=6)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_bad_arguments_name_the_field():
    s, p = torch.zeros(1, 2, 2), torch.arange(2)
    with pytest.raises(ValueError, match="mode must be one of"):
        select_topk(s, p, k=1, mode="fast")
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        select_topk(s, p, k=0)
    with pytest.raises(ValueError, match=r"q_pos \[Tq\]"):
        select_topk(s, torch.arange(3), k=1)


# --- index_hash -------------------------------------------------------------------------------

P = 2**31 - 1
LANES = ((1_103_515_245, 12_345, 2_654_435_761 % P), (69_069, 1_013_904_223, 40_503))


def naive_hash(positions):
    """Python-int reference of index_hash for one set of positions."""
    lanes = []
    for a, c, d in LANES:
        total = 0
        for x in positions:
            u = (x * a + c) % P
            u = (u * u + d) % P
            total += (u * u + c) % P
        lanes.append(total % P)
    return lanes[0] * 2**31 + lanes[1]


def test_index_hash_matches_naive_and_ignores_order_and_padding():
    idx = torch.tensor([[0, 1, 2], [2, 0, 1], [5, -1, -1], [5, 9, 9], [-1, -1, -1]])
    valid = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 0, 0], [0, 0, 0]]).bool()
    h = index_hash(idx, valid)
    assert h.dtype == torch.int64
    assert h.tolist() == [naive_hash(s) for s in ([0, 1, 2], [0, 1, 2], [5], [5], [])]
    # pinned: the hash is part of the telemetry schema, changing it breaks cross-run comparison
    assert h.tolist() == [3124120619644969050] * 2 + [535309426561461635] * 2 + [0]


def test_index_hash_distinguishes_all_small_sets():
    sets = torch.tensor(list(itertools.combinations(range(40), 3)))  # 9880 sets
    h = index_hash(sets, torch.ones_like(sets, dtype=torch.bool))
    assert h.unique().numel() == sets.shape[0]
    assert torch.all((h >= 0) & (h < 2**62))
