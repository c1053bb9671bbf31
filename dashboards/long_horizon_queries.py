"""Queries of the Long horizon page: compaction events, segments, summaries (``compactions``,
``samples``); the critic's curves come from the ``steps`` rollup. Same rules as
``dashboards.queries``: ``(con, **params) -> DataFrame``, values bound, results fully fetched."""

from __future__ import annotations

import pandas as pd

from dashboards.queries import Con, df


def compactions_by_step(con: Con) -> pd.DataFrame:
    """Per step: compaction events, mean summary length, mean context before / after."""
    return df(
        con,
        "SELECT step, count(*) AS compactions, avg(summary_len) AS summary_len_mean, "
        "avg(context_len_before) AS context_before, avg(context_len_after) AS context_after "
        "FROM compactions GROUP BY step ORDER BY step",
    )


def segments_per_trajectory(con: Con) -> pd.DataFrame:
    """Histogram: trajectories by their number of segments (1 = never compacted)."""
    return df(
        con,
        "SELECT segments, count(*) AS trajectories FROM (SELECT coalesce(parent_sample_id, "
        "sample_id) AS trajectory, count(*) AS segments FROM samples GROUP BY 1) "
        "GROUP BY segments ORDER BY segments",
    )


def summary_lengths(con: Con) -> pd.DataFrame:
    """Histogram of summary lengths (tokens, EOS included)."""
    return df(
        con,
        "SELECT summary_len, count(*) AS summaries FROM compactions GROUP BY 1 ORDER BY 1",
    )
