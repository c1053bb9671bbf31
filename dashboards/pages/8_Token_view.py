"""Token view: pick a run, step and sample; per-token strips of Δlogp, trust mask, advantage and
teacher gap, and the decoded tokens with prompt and observation tokens dimmed."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards import charts, queries, ui
from dashboards.tokentext import RunTokenizer, decode_each, run_tokenizer, token_html


@st.cache_resource(show_spinner=False)
def tokenizer(run_dir: str, tokenizer_rev: str | None) -> RunTokenizer:
    return run_tokenizer(run_dir, tokenizer_rev)


def _number(value, spec: str = ".3f") -> str:
    """``value`` formatted, or "–" when the run does not record it (null / NaN: an import)."""
    return "–" if pd.isna(value) else format(float(value), spec)


def body(runs) -> None:
    names = [r.name for r in runs]
    name = st.selectbox("run", names, key="tv_run") if len(runs) > 1 else names[0]
    run_dir = str(next(r for r in runs if r.name == name).path)
    handle = ui.handle(run_dir)
    steps = handle.query(queries.token_steps)
    if not steps:
        ui.no_data("samples with per-token rows")
        return
    step = st.selectbox("step", steps, key="tv_step")
    samples = handle.query(queries.samples_at, step=step)
    if samples.empty:
        ui.no_data(f"samples at step {step}")
        return
    labels = {
        int(r.sample_id): f"sample {r.sample_id} · group {r.group_id} · reward {_number(r.reward)}"
        for r in samples.itertuples()
    }
    sample_id = st.selectbox("sample", list(labels), format_func=labels.get, key="tv_sample")
    row = samples[samples["sample_id"] == sample_id].iloc[0]
    cols = st.columns(4)
    cols[0].metric("reward", _number(row["reward"]))
    cols[1].metric("advantage", _number(row["advantage"]))
    cols[2].metric("staleness", _number(row["staleness"], ".0f"))
    cols[3].metric("status", str(row["status"]))
    tokens = handle.query(queries.sample_tokens, step=step, sample_id=sample_id)
    if tokens.empty:
        ui.no_data("token rows for this sample")
        return
    info = handle.query(queries.run_info)
    rev = None if info.empty else info["tokenizer_rev"].iloc[0]
    tok = tokenizer(run_dir, rev if isinstance(rev, str) else None)
    if tok.warning:
        st.warning(tok.warning)
    texts = decode_each(tok.tokenizer, tokens["token_id"].tolist())
    ui.chart(charts.token_strips(tokens, texts), "tv_strips")
    st.markdown(token_html(tokens, texts), unsafe_allow_html=True)
    st.caption("dimmed: prompt / observation tokens · shaded: |Δlogp| · outlined: masked")


ui.live("Token view", body)
