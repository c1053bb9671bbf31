"""The SQL of the Memory page (the ledger's peaks by category and owner, live bytes over time,
per-rank step time and peak), as functions ``(con, *, params) -> DataFrame``. Same rules as
``dashboards.queries``; kept apart so each file stays one concept.
"""

from __future__ import annotations

import pandas as pd

from dashboards.queries import Con, df


def rank_steps(con: Con) -> pd.DataFrame:
    """Per rank and step (``steps``, not aggregated): step time and the ledger's peak bytes."""
    sql = "SELECT step, rank, step_time_s, peak_memory_bytes FROM steps ORDER BY step, rank"
    return df(con, sql)


def memory_ranks(con: Con) -> list[int]:
    rows = con.execute(
        "SELECT DISTINCT rank FROM memory_peaks UNION SELECT DISTINCT rank FROM memory_events "
        "ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def memory_peaks(con: Con, *, rank: int, by: str) -> pd.DataFrame:
    """Peak bytes per step, broken down ``by`` ``category`` or ``owner`` (nulls: not measured)."""
    if by not in ("category", "owner"):
        raise ValueError(f"memory breakdown 'by' must be 'category' or 'owner', got {by!r}")
    sql = f"""
        SELECT step, coalesce({by}, 'unknown') AS part, sum(bytes) AS bytes
        FROM memory_peaks WHERE rank = ? GROUP BY ALL ORDER BY step, part"""
    return df(con, sql, [rank])


def live_bytes(con: Con, *, rank: int, points: int = 400) -> pd.DataFrame:
    """Live ledger bytes per device and category over time, from ``memory_events``.

    create +bytes, free −bytes, transfer −bytes on the previous device and +bytes on the new one,
    reuse 0. Downsampled to ``points`` time buckets (the last value in each bucket).
    """
    sql = """
        WITH e AS (SELECT ts, event_id, device, category, event, bytes,
                          lag(device) OVER (PARTITION BY object ORDER BY ts, event_id) AS prev
                   FROM memory_events WHERE rank = ?),
        d AS (SELECT ts, event_id, device, category,
                     CASE event WHEN 'create' THEN bytes WHEN 'free' THEN -bytes ELSE 0 END
                     AS delta FROM e WHERE event <> 'transfer'
              UNION ALL SELECT ts, event_id, device, category, bytes FROM e
                  WHERE event = 'transfer'
              UNION ALL SELECT ts, event_id, prev, category, -bytes FROM e
                  WHERE event = 'transfer' AND prev IS NOT NULL),
        c AS (SELECT ts, event_id, device, category,
                     sum(delta) OVER (PARTITION BY device, category ORDER BY ts, event_id
                                      ROWS UNBOUNDED PRECEDING) AS live FROM d),
        b AS (SELECT *, epoch_us(ts) AS us, min(epoch_us(ts)) OVER () AS t0,
                     max(epoch_us(ts)) OVER () AS t1 FROM c)
        SELECT device, category,
               floor((us - t0) / greatest((t1 - t0) / ?, 1))::BIGINT AS bucket,
               max(ts) AS ts, arg_max(live, (us, event_id)) AS live
        FROM b GROUP BY ALL ORDER BY device, bucket, category"""
    return df(con, sql, [rank, points])
