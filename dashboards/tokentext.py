"""Decoded tokens of one sample as HTML: prompt and observation tokens dimmed, masked tokens
outlined, action tokens shaded by |Δlogp|. Every token text is HTML-escaped (model output is
untrusted). Tokens are decoded one by one with ``core.tokenizer.Tokenizer`` (a byte-level BPE
token can be part of a multi-byte character; it then shows as U+FFFD).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import pandas as pd

from core.tokenizer.tokenizer import Tokenizer

DIMMED_ROLES = ("prompt", "observation", "summary")
"""Roles shown dimmed (not produced by the policy in this sample)."""


def decode_each(tok: Tokenizer, ids: Sequence[int]) -> list[str]:
    """One string per token id (each unique id decoded once)."""
    table = {i: tok.decode([i]) for i in set(int(i) for i in ids)}
    return [table[int(i)] for i in ids]


def token_html(tokens: pd.DataFrame, texts: Sequence[str]) -> str:
    """An HTML block for one sample (``queries.sample_tokens`` rows + ``decode_each`` texts)."""
    deltas = pd.to_numeric(tokens["delta_logp"], errors="coerce").abs()
    scale = float(deltas.max()) if deltas.notna().any() else 0.0
    spans = []
    for (_, row), text, d in zip(tokens.iterrows(), texts, deltas):
        role = row["role"]
        if role == "padding":
            continue
        style = ["white-space:pre-wrap", "padding:1px 1px", "border-radius:3px"]
        if role in DIMMED_ROLES:
            style.append("opacity:0.45")
        elif scale > 0 and not math.isnan(d):
            style.append(f"background:rgba(220,60,40,{0.08 + 0.6 * d / scale:.2f})")
        trusted = row["trust_mask"]
        if role == "action" and pd.notna(trusted) and not bool(trusted):
            style.append("outline:2px solid #c0392b")
        title = f"pos {row['pos']} · {role} · {row['mask_reason']} · Δlogp {row['delta_logp']}"
        spans.append(
            f'<span title="{html.escape(title)}" style="{";".join(style)}">'
            f"{html.escape(text)}</span>"
        )
    return (
        '<div style="font-family:monospace;font-size:15px;line-height:1.9">'
        + "".join(spans)
        + "</div>"
    )
