"""Plotly builders: run comparison (one colour per run), trust band, per-token strips, HTML."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from core.tokenizer.tokenizer import Tokenizer
from dashboards import charts
from dashboards.tokentext import decode_each, run_tokenizer, token_html


def two_runs() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": ["a"] * 3 + ["b"] * 3,
            "step": [0, 1, 2] * 2,
            "m": [1, 2, 3, 4, 5, 6],
            "p": [2, 3, 4, 5, 6, 7],
        }
    )


def test_run_lines_colour_per_run_dash_per_metric():
    fig = charts.run_lines(two_runs(), x="step", ys={"m": "mean", "p": "p99"}, title="t")
    assert [t.name for t in fig.data] == ["mean · a", "p99 · a", "mean · b", "p99 · b"]
    assert fig.data[0].line.color == fig.data[1].line.color != fig.data[2].line.color
    assert fig.data[0].line.dash != fig.data[1].line.dash
    single = charts.run_lines(
        two_runs().query("run_id == 'a'"), x="step", ys={"m": "mean"}, title="t"
    )
    assert [t.name for t in single.data] == ["mean"]


def test_stacked_areas_row_per_run():
    frame = pd.DataFrame(
        {
            "run_id": ["a", "a", "b"],
            "step": [0, 0, 0],
            "part": ["x", "y", "x"],
            "v": [1.0, 2.0, 3.0],
        }
    )
    fig = charts.stacked_areas(frame, x="step", part="part", value="v", title="t", order=["y"])
    assert [(t.name, t.xaxis) for t in fig.data] == [("y", "x"), ("x", "x"), ("x", "x2")]
    assert {t.stackgroup for t in fig.data} == {"s1", "s2"}


@pytest.mark.parametrize(
    "info,band",
    [
        ({"icepop_beta": 2.0}, (0.5, 2.0)),
        ({"icepop_beta": None, "dis_eps_low": 0.2, "dis_eps_high": 0.28}, (0.8, 1.28)),
        ({"icepop_beta": None}, None),
    ],
)
def test_trust_band(info, band):
    got = charts.trust_band(pd.Series(info))
    assert got == (pytest.approx(band) if band else None)


def test_ratio_distribution_draws_band_in_log_space():
    hist = pd.DataFrame(
        {
            "run_id": ["a"],
            "delta": [0.0],
            "ratio": [1.0],
            "n": [5],
            "fraction": [1.0],
            "width": [0.1],
        }
    )
    fig = charts.ratio_distribution(hist, {"a": (0.5, 2.0)})
    rect = fig.layout.shapes[0]
    assert rect.x0 == pytest.approx(math.log(0.5)) and rect.x1 == pytest.approx(math.log(2.0))
    assert "trust band [0.5, 2]" in fig.layout.annotations[0].text


def test_token_strips_and_html_escape():
    tokens = pd.DataFrame(
        {
            "pos": [0, 1, 2],
            "token_id": [3, 60, 61],
            "role": ["prompt", "action", "action"],
            "trust_mask": [True, True, False],
            "mask_reason": ["not_action", "kept", "icepop"],
            "delta_logp": [None, 0.01, -0.9],
            "advantage": [None, 1.0, 1.0],
            "teacher_gap": [None] * 3,
        }
    )
    texts = ["<|user|>", "<script>", "&"]
    fig = charts.token_strips(tokens, texts)
    assert len(fig.data) == 4 and all(t.type == "heatmap" for t in fig.data)
    assert list(fig.data[1].z[0][1:]) == [1.0, 0.0]  # trust strip: kept, masked
    html = token_html(tokens, texts)
    assert "<script>" not in html and "&lt;script&gt;" in html and "&amp;" in html
    assert html.count("opacity:0.45") == 1  # the prompt token is dimmed
    assert html.count("outline:2px") == 1  # the masked action token is outlined


def test_decode_each_round_trips_with_the_runs_tokenizer(tmp_path):
    tok = Tokenizer.load()
    (tmp_path / "tokenizer.json").write_bytes(tok.path.read_bytes())
    run_tok = run_tokenizer(tmp_path, tok.revision)
    assert run_tok.warning is None
    ids = tok.encode("<|user|>12+7=19")
    assert "".join(decode_each(run_tok.tokenizer, ids)) == tok.decode(ids)


def test_missing_or_different_tokenizer_is_a_warning_and_ids_are_shown(tmp_path):
    missing = run_tokenizer(tmp_path, "ab" * 32)
    assert missing.tokenizer is None and "no tokenizer" in missing.warning
    (tmp_path / "tokenizer.json").write_bytes(Tokenizer.load().path.read_bytes())
    other = run_tokenizer(tmp_path, "ab" * 32)
    assert other.tokenizer is None and "differs from the run's tokenizer_rev" in other.warning
    assert decode_each(None, [7, 3, 7]) == ["⟨7⟩", "⟨3⟩", "⟨7⟩"]
