"""Unit tests of the change points, onset rules (``changepoint``) and suspect scores (``analysis``).

Golden values are derived by hand in the comments; the vectorized split statistic is checked
against a naive loop. No training runs here (see test_analysis_scenarios.py for those).
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd
import pytest

from observability import analysis as A
from observability import changepoint as C


def test_noise_sigma_golden():
    # x = [0, 1, 3, 6]: Δx = [1, 2, 3], median 2, |Δx − 2| = [1, 0, 1], MAD = 1
    # σ = 1.4826 · 1 / √2 = 1.048358...
    assert C.noise_sigma(np.array([0.0, 1.0, 3.0, 6.0])) == pytest.approx(1.4826 / math.sqrt(2))
    # alternating 0/1: Δx = [1, −1, 1, −1, 1], median 1, |Δx − 1| = [0, 2, 0, 2, 0] → MAD 0;
    # floors: 0.02 · |median x| = 0.02 · 0.5 = 0.01 > floor_abs 1e-3
    assert C.noise_sigma(np.array([0, 1, 0, 1, 0, 1.0])) == pytest.approx(0.01)
    assert C.noise_sigma(np.zeros(5)) == pytest.approx(1e-3)


def _naive_statistic(x, sigma, min_size):
    out = []
    for k in range(min_size, len(x) - min_size + 1):
        left, right = x[:k], x[k:]
        se = sigma * math.sqrt(1 / len(left) + 1 / len(right))
        out.append(abs(sum(left) / len(left) - sum(right) / len(right)) / se)
    return np.array(out)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shift_statistic_matches_loop(seed):
    x = np.random.default_rng(seed).normal(size=17)
    ks, z = C.shift_statistic(x, sigma=0.7, min_size=3)
    np.testing.assert_array_equal(ks, np.arange(3, 15))
    np.testing.assert_allclose(z, _naive_statistic(list(x), 0.7, 3), rtol=1e-12)


def test_change_points_golden_step():
    # six 0s then six 1s, σ = 0.1: at k = 6, z = 1 / (0.1 · sqrt(1/6 + 1/6)) = 17.32 (the max);
    # both halves are constant afterwards (z = 0), so k = 6 is the only change point.
    x = np.array([0.0] * 6 + [1.0] * 6)
    assert C.change_points(x, sigma=0.1) == [6]
    _, z = C.shift_statistic(x, sigma=0.1, min_size=2)
    assert z.max() == pytest.approx(1 / (0.1 * math.sqrt(1 / 3)))
    # two shifts are found recursively, in order
    assert C.change_points(np.array([0.0] * 5 + [1.0] * 5 + [3.0] * 5), sigma=0.1) == [5, 10]
    # pure noise of the assumed σ: nothing passes z ≥ 4
    noise = np.random.default_rng(0).normal(0, 0.1, 40)
    assert C.change_points(noise, sigma=0.1) == []


def _wiggle(n, level, amp=0.01):
    return level + amp * (np.arange(n) % 2)


def test_onset_reward_collapse():
    reward = np.concatenate([_wiggle(10, 0.5), _wiggle(10, 0.1)])
    entropy = _wiggle(20, 1.0)
    onset = C.find_onset(np.arange(20) + 100, reward, entropy)
    assert onset.step == 110 and onset.metric == "reward_mean"
    assert onset.before == pytest.approx(0.505) and onset.after == pytest.approx(0.105)


def test_onset_none_for_rising_reward_and_for_recovered_dip():
    steps = np.arange(20)
    rising = np.linspace(0.1, 0.6, 20)
    assert not C.find_onset(steps, rising, _wiggle(20, 1.0))
    # a 4-step dip that recovers: the later steps do not stay below the line → no collapse
    dip = np.concatenate([_wiggle(8, 0.5), _wiggle(4, 0.1), _wiggle(8, 0.5)])
    assert not C.find_onset(steps, dip, _wiggle(20, 1.0))


def test_onset_entropy_collapse_only_without_reward_gain():
    steps = np.arange(16)
    entropy = np.concatenate([_wiggle(8, 1.0), _wiggle(8, 0.2)])  # −80% > entropy_rel 50%
    flat = _wiggle(16, 0.3)
    onset = C.find_onset(steps, flat, entropy)
    assert onset.step == 8 and onset.metric == "entropy"
    rising = np.concatenate([_wiggle(8, 0.3), _wiggle(8, 0.7)])  # learning sharpens the policy
    assert not C.find_onset(steps, rising, entropy)


def _levels(**cols):
    n = len(next(iter(cols.values())))
    df = pd.DataFrame({"step": np.arange(n)})
    for sig in A.SIGNALS:
        df[sig.name] = cols.get(sig.name, np.zeros(n))
    return df


def test_rank_suspects_golden():
    # retokenized_tokens (τ = 1e-3) = [0, 0, 2e-3, 4e-3] → excess [0, 0, 2, 4]; strength 1.5;
    # first moved index 2 of 4 → earliness 0.5; score = log2(2.5) · (0.5 + 0.25) = 0.99144
    # staleness (τ = 0.1) = 0.05 everywhere: excess 0.5 < 1 → never moved, score 0
    levels = _levels(retokenized_tokens=np.array([0, 0, 2e-3, 4e-3]), staleness=np.full(4, 0.05))
    t = A.rank_suspects(levels)
    assert list(t["suspect"][:2]) == ["retokenized_tokens", "staleness"]  # ties: SIGNALS order
    top = t.iloc[0]
    assert top["score"] == pytest.approx(math.log2(2.5) * 0.75)
    assert top["strength"] == pytest.approx(1.5) and top["first_step"] == 2 and top["moved"]
    assert t.set_index("suspect").loc["staleness", "score"] == 0.0
    # onset at step 3: window = steps 0..2 → excess [0, 0, 2], strength 2/3, earliness 1/3,
    # score = log2(5/3) · (0.5 + 1/6); lead = 3 − 2 = 1 step
    t = A.rank_suspects(levels, onset_step=3)
    top = t.iloc[0]
    assert top["score"] == pytest.approx(math.log2(5 / 3) * (2 / 3))
    assert top["lead_steps"] == 1


def test_rank_suspects_baseline_reference_and_earliness():
    # mismatch 0.05 from step 0 (excess 50) vs staleness 1.0 from step 2 (excess 10 from there):
    # mismatch: log2(51)·1.0 = 5.67; staleness: strength 5, log2(6)·0.75 = 1.94
    levels = _levels(train_rollout_mismatch=np.full(4, 0.05), staleness=np.array([0, 0, 1.0, 1.0]))
    assert A.rank_suspects(levels).iloc[0]["suspect"] == "train_rollout_mismatch"
    # the same mismatch in the baseline: excess 0 → staleness is the only thing that moved
    t = A.rank_suspects(levels, reference={"train_rollout_mismatch": 0.05})
    assert t.iloc[0]["suspect"] == "staleness"
    assert not t.set_index("suspect").loc["train_rollout_mismatch", "moved"]


def test_resolve_run_id_needs_a_choice_with_several_runs():
    con = duckdb.connect()
    con.execute("CREATE TABLE steps AS SELECT * FROM (VALUES ('a', 0), ('b', 0)) t(run_id, step)")
    with pytest.raises(ValueError, match="pass run_id"):
        A.resolve_run_id(con, None)
    with pytest.raises(ValueError, match="has no steps"):
        A.resolve_run_id(con, "c")
    assert A.resolve_run_id(con, "b") == "b"


def _mismatch_run(path, *, quantized: bool, qat: bool = False, trust: bool | None = True):
    """A 6-step run of 4 fresh samples a step whose rollout log-probs are 0.5 nats off, with the
    rollout's int4 qparams (max error 0.02 per tensor) and optionally matching QAT codes."""
    from observability import DuckDBTelemetry, TelemetryConfig, open_run

    tel = DuckDBTelemetry(path, config=TelemetryConfig(compact_on_close=False))
    for step in range(6):
        ids = np.arange(4 * step, 4 * step + 4)
        tel.emit("steps", {"step": step, "policy_version": step, "mismatch_abs_mean": 0.5})
        tel.emit("samples", {"step": step, "sample_id": ids, "policy_version_rollout": step,
                             "staleness": 0, "status": "trained"})  # fmt: skip
        tel.emit("tokens", {"step": step, "sample_id": np.repeat(ids, 3), "pos": np.tile([0, 1, 2], 4),
                            "token_id": 7, "train_token_id": 7, "role": "action", "loss_mask": True,
                            "train_logp": -1.0, "rollout_logp": -1.5, "trust_mask": trust})  # fmt: skip
        producers = (["rollout_load"] if quantized else []) + (["qat_fake"] if qat else [])
        for producer in producers:
            tel.emit("qparams", {"policy_version": step, "tensor": ["w1", "w2"], "producer": producer,
                                 "bits": 4, "max_abs_err": 0.02, "code_hash": "c", "scale_hash": "s"})  # fmt: skip
    tel.close()
    return open_run(path)


@pytest.mark.parametrize(
    "quantized, qat, expected",
    [
        (False, False, "train_rollout_mismatch"),  # nothing upstream explains the mismatch
        (True, False, "quantization_error"),  # weights the trainer never saw explain it
        (True, True, "train_rollout_mismatch"),  # QAT saw the same codes: no upstream cause
    ],
)
def test_uncorrected_quantization_explains_the_mismatch_it_causes(
    tmp_path, quantized, qat, expected
):
    con = _mismatch_run(tmp_path / "run", quantized=quantized, qat=qat)
    levels = A.suspect_levels(con)
    assert A.rank_suspects(levels).iloc[0]["suspect"] == expected
    mismatch = levels["train_rollout_mismatch"]
    if quantized and not qat:  # the quantized samples are not clean: no engine mismatch left
        assert mismatch.isna().all() and levels["quantization_error"].eq(0.02).all()
    else:
        assert mismatch.eq(0.5).all()


def test_a_run_without_trust_masks_has_no_masked_fraction(tmp_path):
    """A trainer that records no trust mask (TRL without vLLM) masked nothing we know of: the
    suspect is absent (NULL), not 100 % masked."""
    con = _mismatch_run(tmp_path / "run", quantized=False, trust=None)
    levels = A.suspect_levels(con)
    assert levels["masked_fraction"].isna().all()
    assert A.rank_suspects(levels).iloc[0]["suspect"] != "masked_fraction"
    con = _mismatch_run(tmp_path / "masked", quantized=False, trust=False)
    assert A.suspect_levels(con)["masked_fraction"].eq(1.0).all()
