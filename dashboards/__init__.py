"""The live dashboard: Streamlit + Plotly over the telemetry store (``closedloop dashboard``).

Entry file ``Overview.py`` plus one file per page under ``pages/``; SQL in ``queries``, figures in
``charts``, the live connection per run in ``store``, shared Streamlit glue in ``ui``.
"""

PAGES = (
    ("Overview", None),
    ("Mismatch", "pages/1_Mismatch.py"),
    ("Masked tokens", "pages/2_Masked_tokens.py"),
    ("Versions", "pages/3_Versions.py"),
    ("Sparse attention", "pages/4_Sparse_attention.py"),
    ("Quantization", "pages/5_Quantization.py"),
    ("Memory", "pages/6_Memory.py"),
    ("Contracts", "pages/7_Contracts.py"),
    ("Token view", "pages/8_Token_view.py"),
    ("Agents", "pages/9_Agents.py"),
    ("Long horizon", "pages/10_Long_horizon.py"),
    ("Teachers", "pages/11_Teachers.py"),
    ("Rewards", "pages/12_Rewards.py"),
)
"""(title, page file relative to ``Overview.py``; None for the entry page itself), in menu order."""


def url_path(page_file: str | None) -> str:
    """The page's URL path as Streamlit derives it (``pages/2_Masked_tokens.py`` -> ``Masked_tokens``)."""
    if page_file is None:
        return ""
    return page_file.rsplit("/", 1)[-1].removesuffix(".py").split("_", 1)[1]
