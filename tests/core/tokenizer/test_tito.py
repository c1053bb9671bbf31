"""Tests for the TITO detector: a real decode->encode violation, counts, and prefix hashes."""

import pytest
import torch

from core.tokenizer.chat_template import encode_prompt
from core.tokenizer.tito import HASH_PARAMS, prefix_hashes, retokenize, tito_violations
from core.tokenizer.tokenizer import Tokenizer

(M1, P1), (M2, P2) = HASH_PARAMS


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


def _naive_prefix_hashes(rows):
    """Loop reference: h_t = (P * h_{t-1} + id_t + 1) mod M per modulus, combined h1 * M2 + h2."""
    out = []
    for row in rows:
        h1 = h2 = 0
        hashes = []
        for token in row:
            h1 = (P1 * h1 + token + 1) % M1
            h2 = (P2 * h2 + token + 1) % M2
            hashes.append(h1 * M2 + h2)
        out.append(hashes)
    return out


def _right_pad(rows, pad_id, width):
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.int64)


def test_retokenizing_a_sampled_merged_token_changes_ids_and_is_flagged(tok):
    # The policy answers "12+34=" with "46" sampled as the merged vocabulary token "46", then EOS.
    # Encoding splits digits one per token, so the same text re-encodes as "4", "6".
    prompt = encode_prompt("12+34=", tok=tok)
    four, six, merged = tok.token_to_id("4"), tok.token_to_id("6"), tok.token_to_id("46")
    assert merged is not None
    assert tok.encode("46") == [four, six]  # canonical: one token per digit
    rollout = prompt + [merged, tok.eos_id]
    canonical = prompt + [four, six, tok.eos_id]

    buggy_trainer = retokenize(rollout, tok)
    assert tok.decode(buggy_trainer) == tok.decode(rollout)  # same text ...
    assert buggy_trainer == canonical  # ... different actions (one token longer)
    assert retokenize(canonical, tok) == canonical  # canonical IDs survive the round trip

    width = len(canonical)
    rollout_ids = _right_pad([rollout, canonical], tok.pad_id, width)  # [2, T]
    trainer_ids = _right_pad([buggy_trainer, retokenize(canonical, tok)], tok.pad_id, width)
    mask = torch.zeros_like(rollout_ids, dtype=torch.bool)
    mask[0, len(prompt) : len(rollout)] = True
    mask[1, len(prompt) : len(canonical)] = True
    # Row 0 response: rollout [46, eos] vs trainer [4, 6] in the rollout's 2 action slots ->
    # both differ. Row 1: identical IDs -> 0.
    assert tito_violations(rollout_ids, trainer_ids, mask).tolist() == [2, 0]
    # The exact IDs (the TITO path) give no violation.
    assert tito_violations(rollout_ids, rollout_ids.clone(), mask).tolist() == [0, 0]

    # Prefix hashes agree on the prompt and diverge from the first changed token on.
    rollout_h, trainer_h = prefix_hashes(rollout_ids[:1]), prefix_hashes(trainer_ids[:1])
    same = (rollout_h == trainer_h)[0]
    assert same[: len(prompt)].all()
    assert not same[len(prompt) :].any()


def test_tito_violations_ignores_unmasked_positions():
    rollout = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8]])
    trainer = torch.tensor([[9, 6, 7, 9], [5, 9, 9, 8]])
    mask = torch.tensor([[False, True, True, True], [True, True, False, False]])
    # Row 0: position 0 differs but is unmasked; position 3 differs and counts -> 1.
    # Row 1: positions 1, 2 differ; only 1 is masked -> 1.
    counts = tito_violations(rollout, trainer, mask)
    assert counts.dtype == torch.int64
    assert counts.tolist() == [1, 1]


def test_tito_violations_checks_its_inputs():
    ids = torch.zeros(2, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match="bool"):
        tito_violations(ids, ids, torch.ones(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="shape"):
        tito_violations(
            ids, torch.zeros(2, 4, dtype=torch.int64), torch.ones(2, 3, dtype=torch.bool)
        )


def test_prefix_hashes_golden():
    # ids [0, 1]: h_0 = 0 + 1 = 1 for both moduli -> 1 * M2 + 1.
    # h_1 = P * 1 + (1 + 1): h1 = 1_000_003 + 2 = 1_000_005, h2 = 911_382_323 + 2 = 911_382_325
    # -> 1_000_005 * 2_147_483_629 + 911_382_325 = 2_147_495_277_800_470.
    hashes = prefix_hashes(torch.tensor([[0, 1]]))
    assert hashes.dtype == torch.int64
    assert hashes.tolist() == [[M2 + 1, 2_147_495_277_800_470]]


def test_prefix_hashes_match_the_loop_reference():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 320, (4, 700), generator=gen)  # 700 positions: 10 exponent bits
    ids[1, :5] = torch.tensor([2**40, 0, 319, -1, -100])  # large and negative IDs are hashed too
    vectorized = prefix_hashes(ids)
    assert vectorized.tolist() == _naive_prefix_hashes(ids.tolist())
    assert bool((vectorized >= 0).all()) and bool((vectorized < 2**62).all())
    assert torch.equal(prefix_hashes(ids.to(torch.int32)[[0, 2, 3]]), vectorized[[0, 2, 3]])


def test_prefix_hashes_depend_on_the_prefix_only():
    a = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 9, 5], [7, 2, 3, 4, 5]])
    h = prefix_hashes(a)
    assert torch.equal(h[0, :3], h[1, :3])  # shared prefix [1, 2, 3]
    assert (h[0, 3:] != h[1, 3:]).all()  # diverged at position 3, stays diverged
    assert (h[0] != h[2]).all()  # different first token: every prefix differs
    assert torch.equal(prefix_hashes(a), h)  # deterministic
    assert prefix_hashes(torch.zeros(2, 0, dtype=torch.int64)).shape == (2, 0)
    with pytest.raises(ValueError, match="integer"):
        prefix_hashes(a.float())


def test_unpadded_prefix_hashes_ignore_left_padding():
    import torch

    from core.tokenizer.tito import prefix_hashes, unpadded_prefix_hashes

    seq = torch.tensor([[7, 8, 9, 10]])
    padded = torch.tensor([[0, 0, 7, 8, 9, 10], [5, 6, 7, 8, 9, 10]])
    valid = torch.tensor([[False, False, True, True, True, True], [True] * 6])
    got = unpadded_prefix_hashes(padded, valid)
    assert torch.equal(got[0, 2:], prefix_hashes(seq)[0])
    assert torch.equal(got[0, :2], torch.zeros(2, dtype=torch.int64))
    assert torch.equal(got[1], prefix_hashes(padded[1:])[0])
