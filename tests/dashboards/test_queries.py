"""Dashboard queries against hand-derived values and naive-loop references."""

from __future__ import annotations

import ast
import inspect
import math
import re
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from dashboards import memory_queries as mq
from dashboards import queries as q
from observability import DuckDBTelemetry, TelemetryConfig, open_run

CFG = TelemetryConfig(compact_on_close=False)


def write(run_dir: Path, rows: dict[str, list[dict]], *, rank: int = 0, world: int = 1) -> None:
    """Write ``{table: [columns, ...]}`` through the real writer."""
    sink = DuckDBTelemetry(run_dir, rank=rank, world_size=world, config=CFG)
    for table, batches in rows.items():
        for columns in batches:
            sink.emit(table, columns)
    sink.close()


def test_steps_aggregates_ranks(tmp_path):
    run = tmp_path / "r"
    common = {"step": [0], "policy_version": [1]}
    write(
        run,
        {
            "steps": [
                {
                    **common,
                    "mismatch_abs_mean": [1e-3],
                    "mismatch_abs_p99": [2e-3],
                    "n_tokens": [10],
                    "staleness_max": [1],
                }
            ]
        },
        rank=0,
        world=2,
    )
    write(
        run,
        {
            "steps": [
                {
                    **common,
                    "mismatch_abs_mean": [3e-3],
                    "mismatch_abs_p99": [5e-3],
                    "n_tokens": [30],
                    "staleness_max": [0],
                }
            ]
        },
        rank=1,
        world=2,
    )
    row = q.steps(open_run(run)).iloc[0]
    # mean of the means (1e-3 + 3e-3) / 2; max of the p99s and staleness; sum of the tokens.
    assert row["n_ranks"] == 2
    assert row["mismatch_abs_mean"] == pytest.approx(2e-3)
    assert row["mismatch_abs_p99"] == pytest.approx(5e-3)
    assert row["n_tokens"] == 40 and row["staleness_max"] == 1


def _action_deltas(con, lo, hi) -> pd.DataFrame:
    return con.execute(
        "SELECT step, pos, ratio, trust_mask, train_logp - rollout_logp AS d FROM tokens "
        "WHERE role = 'action' AND train_logp IS NOT NULL AND step BETWEEN ? AND ?",
        [lo, hi],
    ).df()


def test_ratio_histogram_counts_every_action_token(bf16):
    con = open_run(bf16)
    hist = q.ratio_histogram(con, lo=0, hi=2, half_range=math.log(2) * 1.5, bins=41)
    ref = _action_deltas(con, 0, 2)
    assert hist["n"].sum() == len(ref) > 0
    assert hist["fraction"].sum() == pytest.approx(1.0)
    # 41 bins over [-1.5 ln 2, 1.5 ln 2]: width = 3 ln 2 / 41; bin = floor(Δ / width + 20.5),
    # clipped to [0, 40] (tokens beyond the range land in the edge bins).
    width = hist["width"].iloc[0]
    assert width == pytest.approx(3 * math.log(2) / 41)
    edges = np.clip(np.floor(ref["d"] / width + 41 / 2), 0, 40).astype(int)
    assert dict(zip(hist["bin"], hist["n"])) == edges.value_counts().to_dict()
    assert np.allclose(hist["ratio"], np.exp(hist["delta"]))


def test_mismatch_by_position_matches_groupby(bf16):
    con = open_run(bf16)
    out = q.mismatch_by_position(con, lo=0, hi=2, buckets=4)
    ref = _action_deltas(con, 0, 2)
    width = max(1, math.ceil((ref["pos"].max() + 1) / 4))
    ref = ref.assign(b=(ref["pos"] // width) * width, a=ref["d"].abs()).groupby("b")
    assert list(out["pos_start"]) == list(ref.groups)
    assert np.allclose(out["mean_abs"], ref["a"].mean().to_numpy(), rtol=1e-5, atol=1e-12)
    assert (out["n"].to_numpy() == ref.size().to_numpy()).all()
    assert (out["p99_abs"] <= ref["a"].max().to_numpy() * (1 + 1e-6)).all()


def test_effective_sample_fraction_naive_loop(bf16):
    con = open_run(bf16)
    out = q.effective_sample_fraction(con, lo=0, hi=2).set_index("step")
    ref = _action_deltas(con, 0, 2)
    for step, grp in ref.groupby("step"):
        w = [r if t else 0.0 for r, t in zip(grp["ratio"], grp["trust_mask"])]
        ess = sum(w) ** 2 / (len(w) * sum(x * x for x in w))
        assert out.loc[step, "ess_fraction"] == pytest.approx(ess, rel=1e-6)


def test_sampling_keeps_every_stride_th_sample(bf16):
    # 48 samples in steps [0, 2]; max_samples=10 -> stride ceil(48 / 10) = 5: sample ids 0, 5, ...
    con = open_run(bf16)
    counts = q.mask_reasons(con, lo=0, hi=2, max_samples=10)
    ref = con.execute(
        "SELECT count(*) FROM tokens WHERE role = 'action' AND sample_id % 5 = 0"
    ).fetchall()[0][0]
    assert counts["n"].sum() == ref > 0
    assert q.mask_reasons(con, lo=0, hi=2)["n"].sum() > ref  # default budget: every sample


def test_all_equal_weights_give_ess_one(tiny):
    out = q.effective_sample_fraction(open_run(tiny), lo=0, hi=2)
    assert np.allclose(out["ess_fraction"], 1.0, atol=1e-5)  # fp32 engines: ratio == 1


def _naive_agreement(rows: pd.DataFrame, col: str) -> dict:
    train = {
        (r.step, r.sample_id, r.layer, r.pos): sorted(r[col])
        for _, r in rows[rows.engine == "train"].iterrows()
    }
    out: dict = {}
    for _, r in rows[rows.engine == "rollout"].iterrows():
        key = (r.step, r.sample_id, r.layer, r.pos)
        same = train[key] == sorted(r[col])
        out.setdefault((r.step, r.layer), []).append(same)
    return {k: sum(v) / len(v) for k, v in out.items()}


def test_topk_and_route_agreement_naive_loop(bf16):
    con = open_run(bf16)
    topk = con.execute("SELECT step, sample_id, layer, pos, engine, indices FROM topk").df()
    got = q.topk_agreement(con, lo=0, hi=2)
    ref = _naive_agreement(topk, "indices")
    assert {(s, la): a for s, la, a in zip(got.step, got.layer, got.agreement)} == pytest.approx(
        ref
    )
    assert ((got["overlap"] >= got["agreement"]) & (got["overlap"] <= 1)).all()
    routes = con.execute("SELECT step, sample_id, layer, pos, engine, experts FROM moe_routes").df()
    got = q.route_agreement(con, lo=0, hi=2)
    ref = _naive_agreement(routes, "experts")
    assert {(s, la): a for s, la, a in zip(got.step, got.layer, got.agreement)} == pytest.approx(
        ref
    )


def test_qparams_equality(bf16):
    # synthetic.write_qparams: 6 tensors per version, the last one's QAT hashes differ.
    eq = q.qparams_equality(open_run(bf16))
    by_pair = eq.groupby("pair")[["n_tensors", "n_equal"]].sum()
    steps = eq["policy_version"].nunique()
    assert by_pair.loc["qat_fake vs offline_real"].tolist() == [6 * steps, 5 * steps]
    assert by_pair.loc["offline_real vs rollout_load"].tolist() == [6 * steps, 6 * steps]


def test_live_bytes_golden(tmp_path):
    # A (100 B, model_state) created on cpu, B (50 B, live_io) on cpu, A moved to cuda:0, B freed,
    # A freed on cuda:0. Expected running totals per (device, category):
    #   cpu/model_state: 100 -> 0 (transfer);  cpu/live_io: 50 -> 0;  cuda:0/model_state: 100 -> 0.
    ev = {
        "ts": [1.0, 2.0, 3.0, 4.0, 5.0],
        "step": 0,
        "rank": 0,
        "device": ["cpu", "cpu", "cuda:0", "cpu", "cuda:0"],
        "object": ["A", "B", "A", "B", "A"],
        "category": ["model_state", "live_io", "model_state", "live_io", "model_state"],
        "event": ["create", "create", "transfer", "free", "free"],
        "bytes": [100, 50, 100, 50, 100],
        "event_id": [0, 1, 2, 3, 4],
    }
    write(tmp_path / "m", {"memory_events": [ev]})
    out = mq.live_bytes(open_run(tmp_path / "m"), rank=0, points=1000)
    series = {
        k: g.sort_values("ts")["live"].tolist() for k, g in out.groupby(["device", "category"])
    }
    assert series == {
        ("cpu", "model_state"): [100, 0],
        ("cpu", "live_io"): [50, 0],
        ("cuda:0", "model_state"): [100, 0],
    }


def test_contract_latest_keeps_newest_failures_first(tmp_path):
    def gate(t, statuses):
        return {
            "checked_at": t,
            "contract": "c",
            "check": ["a", "b"],
            "status": statuses,
            "n_rows": 1,
            "n_violations": 0,
        }

    write(
        tmp_path / "c",
        {"contract_results": [gate(1.0, ["fail", "pass"]), gate(2.0, ["pass", "fail"])]},
    )
    out = q.contract_latest(open_run(tmp_path / "c"))
    assert out[["check", "status"]].values.tolist() == [["b", "fail"], ["a", "pass"]]


def test_values_are_bound_not_spliced(bf16):
    con = open_run(bf16)
    with pytest.raises(duckdb.ConversionException):
        q.samples_at(con, step="0 OR 1=1")  # a bound BIGINT parameter, never SQL text
    with pytest.raises(ValueError, match="'category' or 'owner'"):
        mq.memory_peaks(con, rank=0, by="category; DROP VIEW tokens")
    assert con.execute("SELECT count(*) FROM tokens").fetchall()[0][0] > 0


def test_sql_text_interpolates_only_module_constants():
    """Every ``{...}`` in an f-string of queries.py is a module constant or the validated ``by``."""
    allowed = {"_steps_select()", "_ACTION_DELTA", "_SAMPLED", "by"}
    tree = ast.parse(inspect.getsource(q))
    sql_fstrings = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        and re.search(r"\b(SELECT|FROM|WHERE|AS)\b", ast.unparse(node))
    ]
    spliced = {
        ast.unparse(v.value)
        for node in sql_fstrings
        for v in node.values
        if isinstance(v, ast.FormattedValue)
    }
    # fn / name: aggregate and column names of observability.schema.TABLES["steps"]
    assert spliced - {"fn", "name"} <= allowed, spliced
