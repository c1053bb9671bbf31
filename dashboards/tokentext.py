"""Decoded tokens of one sample as HTML: prompt and observation tokens dimmed, masked tokens
outlined, action tokens shaded by |Δlogp|. Every token text is HTML-escaped (model output is
untrusted). Tokens are decoded one by one with the tokenizer the run recorded
(``RUN_DIR/tokenizer.json``, whose sha256 must equal the run's ``tokenizer_rev``); a byte-level BPE
token can be part of a multi-byte character, it then shows as U+FFFD. A missing or different
tokenizer is reported, never silently used: the view then shows token ids.
"""

from __future__ import annotations

import hashlib
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tokenizers import Tokenizer

DIMMED_ROLES = ("prompt", "observation", "summary", "tail")
"""Roles shown dimmed (not produced by the policy in this sample)."""


@dataclass(frozen=True)
class RunTokenizer:
    """The run's tokenizer, or why there is none (``warning``)."""

    tokenizer: Tokenizer | None
    warning: str | None = None


def run_tokenizer(run_dir: str | Path, tokenizer_rev: str | None) -> RunTokenizer:
    """Load ``RUN_DIR/tokenizer.json`` and check it against the run's recorded revision."""
    path = Path(run_dir) / "tokenizer.json"
    if not path.is_file():
        return RunTokenizer(None, "the run recorded no tokenizer (tokenizer.json): ids shown")
    raw = path.read_bytes()
    rev = hashlib.sha256(raw).hexdigest()
    if tokenizer_rev and rev != tokenizer_rev:
        return RunTokenizer(
            None,
            f"tokenizer.json (sha256 {rev[:12]}) differs from the run's tokenizer_rev "
            f"{tokenizer_rev[:12]}: ids shown",
        )
    return RunTokenizer(Tokenizer.from_str(raw.decode("utf-8")))


def decode_each(tok, ids: Sequence[int]) -> list[str]:
    """One string per token id (each unique id decoded once; special tokens kept). ``tok`` is a
    ``tokenizers.Tokenizer`` (or anything with ``decode(ids, skip_special_tokens=...)``), or
    None: then each id is shown as ``⟨id⟩``."""
    unique = set(int(i) for i in ids)
    if tok is None:
        table = {i: f"⟨{i}⟩" for i in unique}
    else:
        table = {i: tok.decode([i], skip_special_tokens=False) for i in unique}
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
