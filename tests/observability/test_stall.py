"""Stall verdicts (``observability.stall``) on small hand-built stores; expected values derived by
hand in the comments."""

from __future__ import annotations

import math

import duckdb
import pytest

from observability.stall import detect_stall, progress


def _store(*, evals=(), rewards=()) -> duckdb.DuckDBPyConnection:
    """Run 'r' with ``evals`` = [(step, n, accuracy)] on split 'heldout' and ``rewards`` =
    [(step, [sample rewards])]; no reward components (the plain verifier reward)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE evals (run_id VARCHAR, step BIGINT, split VARCHAR, n BIGINT, accuracy DOUBLE)")  # fmt: skip
    con.execute("CREATE TABLE samples (run_id VARCHAR, step BIGINT, reward DOUBLE)")
    con.execute("CREATE TABLE steps (run_id VARCHAR, step BIGINT)")
    con.execute("CREATE TABLE reward_components (run_id VARCHAR, step BIGINT, sample_id BIGINT, component VARCHAR, value DOUBLE, weight DOUBLE)")  # fmt: skip
    for step, n, acc in evals:
        con.execute("INSERT INTO evals VALUES ('r', ?, 'heldout', ?, ?)", [step, n, acc])
        con.execute("INSERT INTO evals VALUES ('r', ?, 'heldout/addition', ?, 1.0)", [step, n])
    for step, values in rewards:
        con.execute("INSERT INTO steps VALUES ('r', ?)", [step])
        for v in values:
            con.execute("INSERT INTO samples VALUES ('r', ?, ?)", [step, v])
    return con


def test_heldout_gain_against_its_binomial_noise():
    # 0.5 → 0.6 on 100 prompts: σ² = 0.25/100 + 0.24/100 = 0.0049, σ = 0.07;
    # gain 0.1 < 1.64 · 0.07 = 0.1148 → not improving: a stall
    con = _store(evals=[(0, 100, 0.5), (5, 100, 0.55), (10, 100, 0.6)])
    p = progress(con, "r")
    assert p.metric == "heldout_accuracy" and (p.first_step, p.last_step) == (0, 10)
    assert p.gain == pytest.approx(0.1) and p.noise == pytest.approx(0.07)
    stall = detect_stall(con, "r")
    assert stall and "not improving" in stall.reason
    # 0.5 → 0.7: σ² = (0.25 + 0.21)/100, σ = 0.067823; gain 0.2 ≥ 0.1112 → improving
    con = _store(evals=[(0, 100, 0.5), (10, 100, 0.7)])
    assert progress(con, "r").noise == pytest.approx(math.sqrt(0.0046))
    assert not detect_stall(con, "r")
    # p = 1 at both ends: the 1/n floor keeps σ at √(2 · 0.01/100) = 0.01414, not 0
    con = _store(evals=[(0, 100, 1.0), (10, 100, 1.0)])
    assert progress(con, "r").noise == pytest.approx(math.sqrt(2e-4))


def test_reward_series_without_evaluations():
    # 8 steps of rewards [0, 0, 1, 1] (mean 0.5, var_pop 0.25, n 4): σ_step = √(0.25/4) = 0.25;
    # w = max(2, 8 // 4) = 2 → σ_gain = 0.25 · √(2/2) = 0.25
    flat = [(s, [0, 0, 1, 1]) for s in range(8)]
    p = progress(_store(rewards=flat), "r")
    assert p.metric == "task_reward" and p.gain == 0.0 and p.noise == pytest.approx(0.25)
    assert detect_stall(_store(rewards=flat), "r")
    # the last two steps all 1: end 1.0, gain +0.5 ≥ 1.64 · σ (σ_step² = mean(0.25/4 ×6, 0 ×2)
    # = 0.046875 → σ_gain = 0.2165; 1.64 · 0.2165 = 0.355) → improving
    rising = flat[:6] + [(6, [1, 1, 1, 1]), (7, [1, 1, 1, 1])]
    p = progress(_store(rewards=rising), "r")
    assert p.gain == pytest.approx(0.5) and p.noise == pytest.approx(math.sqrt(0.046875))
    assert not detect_stall(_store(rewards=rising), "r")
    # three steps are too few to tell
    stall = detect_stall(_store(rewards=flat[:3]), "r")
    assert not stall and stall.progress is None
    with pytest.raises(ValueError, match="metric 'loss'"):
        progress(_store(rewards=flat), "r", "loss")


def test_against_a_baseline():
    # run 0.5 → 0.5 (σ √(0.005) = 0.0707); baseline 0.5 → 0.8: σ_b² = (0.25 + 0.16)/100;
    # margin = 1.64 · √(0.005 + 0.0041) = 0.1564; 0 < 0.3 − 0.1564 → behind: a stall
    run = _store(evals=[(0, 100, 0.5), (10, 100, 0.5)])
    base = _store(evals=[(0, 100, 0.5), (10, 100, 0.8)])
    stall = detect_stall(run, "r", baseline=base, baseline_rid="r")
    assert stall and stall.baseline.gain == pytest.approx(0.3) and "behind" in stall.reason
    # a baseline 0.5 → 0.6 leaves nothing to fall behind: 0 ≥ 0.1 − 0.156
    base = _store(evals=[(0, 100, 0.5), (10, 100, 0.6)])
    stall = detect_stall(run, "r", baseline=base, baseline_rid="r")
    assert not stall and "keeps up" in stall.reason
    # a baseline without evaluations: both sides compared on the task reward
    base = _store(rewards=[(s, [0, 0, 1, 1]) for s in range(8)])
    run = _store(
        evals=[(0, 100, 0.5), (10, 100, 0.5)], rewards=[(s, [1, 1, 1, 1]) for s in range(8)]
    )
    stall = detect_stall(run, "r", baseline=base, baseline_rid="r")
    assert stall.progress.metric == stall.baseline.metric == "task_reward"
    assert stall.to_dict()["progress"]["gain"] == 0.0
