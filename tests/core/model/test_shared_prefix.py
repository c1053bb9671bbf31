"""Shared-prefix packing: a GRPO batch (G copies of each prompt) forwarded with each distinct
prompt once gives every row the logits, log-probs and gradients of the row-by-row forward, up to
float rounding (fp32: ~1e-5 on logits of magnitude ~10)."""

import pytest
import torch

from core.model.actor import Actor
from core.model.rope import positions_from_padding
from core.model.shared_prefix import pack_shared_prefix
from tests.core.rollouts import small_config

CFG = small_config()


def grpo_batch(prompt_lens=(5, 3, 4), group=3, tail=6, seed=0):
    """[left pad | prompt | tail | right pad] rows: each prompt ``group`` times, tails of
    different lengths (some rows stop early, one generates nothing)."""
    g = torch.Generator().manual_seed(seed)
    tp = max(prompt_lens)
    b = len(prompt_lens) * group
    ids = torch.zeros((b, tp + tail), dtype=torch.int64)
    valid = torch.zeros_like(ids, dtype=torch.bool)
    for i in range(b):
        n = prompt_lens[i // group]
        torch.manual_seed(100 + i // group)  # the same prompt within a group
        ids[i, tp - n : tp] = torch.randint(3, 64, (n,))
        valid[i, tp - n : tp] = True
        m = int(torch.randint(0, tail + 1, (1,), generator=g)) if i != 1 else 0
        ids[i, tp : tp + m] = torch.randint(3, 64, (m,), generator=g)
        valid[i, tp : tp + m] = True
    return ids, valid, tp


def test_pack_lays_each_prompt_once_and_gathers_rows_back():
    ids, valid, tp = grpo_batch()
    pack = pack_shared_prefix(ids, valid, tp)
    assert pack.ids.shape == (1, 3 * tp + 9 * (ids.shape[1] - tp))
    assert torch.equal(pack.ids[0][pack.gather], ids)
    assert torch.equal(pack.row_valid, valid)
    rows = positions_from_padding(valid)
    assert torch.equal(pack.positions[0][pack.gather][valid], rows[valid])
    one_each = [0, 3, 6]  # no two rows share a prompt: nothing to pack
    assert pack_shared_prefix(ids[one_each], valid[one_each], tp) is None
    assert pack_shared_prefix(ids[:, :tp], valid[:, :tp], tp) is None  # no tails: nothing to gain
    with pytest.raises(ValueError, match="n_prompt=0"):
        pack_shared_prefix(ids, valid, 0)


def test_packed_forward_matches_rows_in_logits_logprobs_and_gradients():
    ids, valid, tp = grpo_batch()
    actor = Actor(CFG, seed=1)
    targets = valid[:, 1:] & valid[:, :-1]

    def run(n_prompt):
        actor.zero_grad(set_to_none=True)
        logits = actor.logits(ids, valid, n_prompt=n_prompt)
        lp = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
        lp[targets].sum().backward()
        grads = [p.grad.clone() for p in actor.parameters()]
        return logits.detach(), lp.detach(), grads

    rows, packed = run(0), run(tp)
    torch.testing.assert_close(packed[0][valid], rows[0][valid], rtol=0, atol=1e-5)
    torch.testing.assert_close(packed[1][targets], rows[1][targets], rtol=0, atol=1e-5)
    for gp, gr in zip(packed[2], rows[2], strict=True):
        torch.testing.assert_close(gp, gr, rtol=1e-4, atol=1e-6)
    assert all(a.pack is None for a in actor.core_attentions())  # cleared after the forward


def test_moe_actor_forwards_rows_even_when_asked_to_pack():
    moe = Actor(small_config(moe_layers=(1,)), seed=1)
    ids, valid, tp = grpo_batch()
    with torch.no_grad():
        torch.testing.assert_close(moe.logits(ids, valid, n_prompt=tp), moe.logits(ids, valid))
