"""Teacher prefill scoring: the three payload modes, their bytes, and agreement with the engine."""

from __future__ import annotations

import pytest
import torch

from core.rollout.engine import left_pad
from core.teachers.engine import TeacherEngine, payload_bytes_per_position
from core.tokenizer.chat_template import CHAT_TEMPLATE_REV
from core.tokenizer.tito import unpadded_prefix_hashes
from core.tokenizer.tokenizer import Tokenizer
from tests.teacher_artifacts import BASE

V = 320


@pytest.fixture(scope="module")
def teacher():
    tok = Tokenizer.load()
    return TeacherEngine.from_checkpoint(
        BASE,
        tokenizer_rev=tok.revision,
        vocab_hash=tok.vocab_hash,
        chat_template_rev=CHAT_TEMPLATE_REV,
        vocab_size=V,
    )


@pytest.fixture(scope="module")
def batch():
    # three sequences of different lengths, left-padded; score the last 3 / 2 / 4 positions
    seqs = [[1, 3, 20, 21, 22, 4, 30, 31, 2], [1, 3, 25, 4, 33, 2], [1, 3, 20, 4, 40, 41, 42, 2]]
    ids, valid = left_pad(seqs, 0)
    t = ids.shape[1]
    positions = torch.zeros(3, t - 1, dtype=torch.bool)
    for i, k in enumerate((3, 2, 4)):
        positions[i, t - 1 - k :] = True
    return ids, valid, positions


def test_payload_bytes_per_mode(teacher, batch):
    # 3 + 2 + 4 = 9 scored positions; per position: sampled 4 B (one fp32 log-prob); topk with
    # K = 5: 5 × (4 B id + 4 B log-prob) + 4 B sampled = 44 B; full: 320 × 4 B = 1280 B
    ids, valid, positions = batch
    got = {
        mode: teacher.prefill_and_score(ids, valid, positions, mode=mode, k=5).nbytes
        for mode in ("sampled", "topk", "full")
    }
    assert got == {"sampled": 9 * 4, "topk": 9 * 44, "full": 9 * 1280}
    assert payload_bytes_per_position("topk", k=5, vocab_size=V) == 44
    with pytest.raises(ValueError, match="teachers.payload"):
        payload_bytes_per_position("logits", k=5, vocab_size=V)


def test_modes_agree_with_the_engine_prefill(teacher, batch):
    ids, valid, positions = batch
    ref = teacher.engine.prefill_logprobs(ids, valid, 0.7)  # [B, T-1] sampled-token log-probs
    s = teacher.prefill_and_score(ids, valid, positions, mode="sampled", temperature=0.7)
    torch.testing.assert_close(s.logp[positions], ref[positions], rtol=0, atol=1e-6)
    assert s.logp[~positions].eq(0).all() and s.topk_ids is None and s.full_logp is None
    full = teacher.prefill_and_score(ids, valid, positions, mode="full", temperature=0.7)
    probs = full.full_logp[positions].double().exp().sum(-1)  # a distribution per position
    torch.testing.assert_close(probs, torch.ones_like(probs), rtol=0, atol=1e-5)
    got = full.full_logp.gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(got[positions], ref[positions], rtol=0, atol=1e-6)
    topk = teacher.prefill_and_score(ids, valid, positions, mode="topk", k=4, temperature=0.7)
    best = full.full_logp.topk(4, dim=-1)
    torch.testing.assert_close(topk.topk_logp[positions], best.values[positions])
    assert torch.equal(topk.topk_ids[positions], best.indices[positions])
    torch.testing.assert_close(topk.logp, s.logp)  # the topk payload carries the sampled log-prob
    mass = topk.topk_logp[positions].double().exp().sum(-1)  # not renormalized over K
    assert float(mass.max()) <= 1.0 + 1e-6 and float(mass.min()) > 0.0


def test_prefix_hash_is_the_teachers_view_of_the_ids(teacher, batch):
    ids, valid, positions = batch
    s = teacher.prefill_and_score(ids, valid, positions, mode="sampled")
    assert torch.equal(s.prefix_hash, unpadded_prefix_hashes(ids, valid))


def test_a_sequence_scores_the_same_alone_and_in_a_batch(teacher, batch):
    ids, valid, positions = batch
    both = teacher.prefill_and_score(ids, valid, positions, mode="sampled")
    seq = ids[1][valid[1]]  # the short one, without padding
    alone = teacher.prefill_and_score(
        seq[None],
        torch.ones(1, len(seq), dtype=torch.bool),
        positions[1:2, -len(seq) + 1 :],
        mode="sampled",
    )
    torch.testing.assert_close(alone.logp[0], both.logp[1, -len(seq) + 1 :], rtol=0, atol=1e-5)


def test_bad_positions_and_modes_are_refused(teacher, batch):
    ids, valid, positions = batch
    with pytest.raises(ValueError, match="payload"):
        teacher.prefill_and_score(ids, valid, positions, mode="logits")
    bad = positions.clone()
    bad[1, 0] = True  # a position whose next token is padding
    with pytest.raises(ValueError, match="positions"):
        teacher.prefill_and_score(ids, valid, bad, mode="sampled")
    with pytest.raises(ValueError, match="teachers.topk"):
        teacher.prefill_and_score(ids, valid, positions, mode="topk", k=V + 1)


@pytest.mark.vllm
@pytest.mark.parametrize("mode", ["sampled", "topk", "full"])
def test_a_vllm_teacher_sends_the_embedded_teachers_payload(teacher, batch, mode):
    """The same checkpoint served by vLLM (``teachers.engine = "vllm"``, scores from its
    ``prompt_logprobs``) sends the same payload: the Top-k ids exactly, log-probs to fp32
    kernel rounding (measured ≤ 1.4e-5 at T = 0.7; 5e-5 allowed)."""
    tok = Tokenizer.load()
    served = TeacherEngine.from_checkpoint(
        BASE,
        tokenizer_rev=tok.revision,
        vocab_hash=tok.vocab_hash,
        chat_template_rev=CHAT_TEMPLATE_REV,
        vocab_size=V,
        engine="vllm",
    )
    ids, valid, positions = batch
    got = served.prefill_and_score(ids, valid, positions, mode=mode, k=5, temperature=0.7)
    ref = teacher.prefill_and_score(ids, valid, positions, mode=mode, k=5, temperature=0.7)
    assert got.nbytes == ref.nbytes and torch.equal(got.scored, ref.scored)
    torch.testing.assert_close(got.logp, ref.logp, rtol=0, atol=5e-5)
    if mode == "topk":
        assert torch.equal(got.topk_ids[positions], ref.topk_ids[positions])
        torch.testing.assert_close(got.topk_logp, ref.topk_logp, rtol=0, atol=5e-5)
    if mode == "full":
        torch.testing.assert_close(got.full_logp, ref.full_logp, rtol=0, atol=5e-5)
