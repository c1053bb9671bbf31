"""CompactionRL in the loop, read back from a real run's telemetry: every segment's advantages are
its local skip-observation GAE scaled by ``(γλ)^{N_{>s}}``, the loss denominator is the set of all
trainable tokens across segments, and every compaction event matches its segments."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from observability import open_run

pytestmark = pytest.mark.slow


def _tokens(run):
    con = open_run(run)
    return con.execute(
        """SELECT t.step, t.sample_id, coalesce(s.parent_sample_id, s.sample_id) AS trajectory,
                  s.segment, t.pos, t.role, t.loss_mask, t.value, t."return", t.advantage
           FROM tokens t JOIN samples s USING (sample_id)
           ORDER BY t.sample_id, t.pos"""
    ).fetchnumpy()


def test_advantage_is_local_gae_times_cross_segment_factor(compaction_run):
    cfg = json.loads((compaction_run / "config.json").read_text())["critic"]
    gl = cfg["gamma"] * cfg["lam"]
    t = _tokens(compaction_run)
    gen = np.isin(t["role"], ["action", "summary"])
    sid, traj, seg = t["sample_id"], t["trajectory"], t["segment"]
    n_gen = {s: int((gen & (sid == s)).sum()) for s in np.unique(sid)}
    seg_of = dict(zip(sid, seg, strict=False))
    traj_of = dict(zip(sid, traj, strict=False))
    compacted = 0
    for s in np.unique(sid):
        # N_{>s}: generated tokens of the later segments of the same trajectory
        later = sum(
            n for o, n in n_gen.items() if traj_of[o] == traj_of[s] and seg_of[o] > seg_of[s]
        )
        compacted += later > 0
        rows = gen & (sid == s)
        v = t["value"][rows].astype(np.float64)
        g = t["return"][rows].astype(np.float64)
        adv = t["advantage"][rows].astype(np.float64)
        # returns are the local targets G = Â_loc + V, so Â_loc = G − V
        np.testing.assert_allclose(adv, gl**later * (g - v), rtol=1e-4, atol=1e-6)
    assert compacted > 0  # the run has earlier segments whose factor is < 1 (γλ < 1)


def test_denominator_and_compaction_events(compaction_run):
    con = open_run(compaction_run)
    rows = con.execute(
        """SELECT s.step, s.loss_denominator, count(*) FILTER (WHERE t.loss_mask) AS in_loss
           FROM steps s JOIN tokens t USING (step) GROUP BY ALL ORDER BY step"""
    ).fetchall()
    assert rows and all(d == n for _, d, n in rows)
    # one compaction event per segment that a later segment follows; its summary is the
    # segment's summary tokens
    events = con.execute(
        """SELECT c.sample_id, c.summary_len, c.tail_pairs,
                  (SELECT count(*) FROM tokens t WHERE t.sample_id = c.sample_id
                   AND t.role = 'summary') AS summary_tokens
           FROM compactions c"""
    ).fetchall()
    assert events
    assert all(n == tokens and pairs == 1 for _, n, pairs, tokens in events)
    n_later = con.execute("SELECT count(*) FROM samples WHERE segment > 0").fetchone()[0]
    assert n_later == len(events)


def test_untrained_summaries_keep_summary_tokens_out_of_the_loss(tmp_path):
    """``compaction.train_summaries = false`` (the benchmark's baseline): the rollout still
    compacts, but no summary token is in the loss; the actions still train."""
    from tests.conftest import COMPACTION_TINY, make_run

    config = str(Path(__file__).resolve().parents[3] / "configs" / "compaction_tiny.toml")
    run = make_run(
        tmp_path, [*COMPACTION_TINY, "compaction.train_summaries=false"], "untrained", config
    )
    t = _tokens(run)
    summary = t["role"] == "summary"
    assert summary.any()  # the rollout compacted
    assert not t["loss_mask"][summary].any()
    assert t["loss_mask"][t["role"] == "action"].any()
