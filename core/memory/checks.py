"""Lifecycle checks and a naive peak replay over ``memory_events`` rows, in plain Python.

Input is the columnar form the ledger emits (column -> equal-length sequence, see
``EVENT_COLUMNS``), also what a DuckDB query returns column-wise. The ledger enforces the same
rules as events happen; these functions re-check recorded runs (contracts, tests) and the replay
is the loop reference for the ledger's incremental peak. No pandas, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.memory.categories import CATEGORIES, EVENTS


def _rows(columns: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Rows ordered by (rank, event_id)."""
    keys = list(columns)
    n = len(columns[keys[0]]) if keys else 0
    rows = [{k: columns[k][i] for k in keys} for i in range(n)]
    return sorted(rows, key=lambda r: (r["rank"], r["event_id"]))


def lifecycle_violations(
    columns: Mapping[str, Sequence[Any]], *, require_freed: bool = True
) -> list[str]:
    """Every broken lifecycle rule in the events, as readable messages (empty = clean).

    Rules, per (rank, object): the first event is ``create``; no ``create`` of a live object;
    no ``transfer``/``reuse``/``free`` of an object that is not live (double free included);
    ``reuse`` and ``transfer`` keep the object's bytes; timestamps never decrease with
    ``event_id``; and, with ``require_freed``, every non-persistent object is freed by the end.
    """
    problems: list[str] = []
    live: dict[tuple[int, str], dict[str, Any]] = {}
    freed: set[tuple[int, str]] = set()
    last_ts: dict[int, int] = {}
    for row in _rows(columns):
        rank, event = row["rank"], row["event"]
        key = (rank, row["object"])
        where = f"rank {rank} event {row['event_id']} ({event} {row['object']!r})"
        if event not in EVENTS:
            problems.append(f"{where}: unknown event, allowed {EVENTS}")
            continue
        if row["category"] not in CATEGORIES:
            problems.append(f"{where}: unknown category {row['category']!r}")
        if row["bytes"] is None or row["bytes"] < 0:
            problems.append(f"{where}: bytes must be >= 0, got {row['bytes']}")
        if row["ts"] < last_ts.get(rank, row["ts"]):
            problems.append(f"{where}: timestamp {row['ts']} before the previous {last_ts[rank]}")
        last_ts[rank] = max(row["ts"], last_ts.get(rank, row["ts"]))
        if event == "create":
            if key in live:
                problems.append(f"{where}: created while already live")
            live[key] = row
            freed.discard(key)
            continue
        if key not in live:
            if key in freed:
                problems.append(
                    f"{where}: {'double free' if event == 'free' else event + ' after free'}"
                )
            else:
                problems.append(f"{where}: object never created")
            continue
        if row["bytes"] != live[key]["bytes"]:
            problems.append(f"{where}: bytes changed from {live[key]['bytes']} to {row['bytes']}")
        if event == "free":
            del live[key]
            freed.add(key)
        else:
            live[key] = row
    if require_freed:
        for (rank, obj), row in live.items():
            if not row["persistent"]:
                problems.append(
                    f"rank {rank}: non-persistent object {obj!r} (owner {row['owner']!r}) never freed"
                )
    return problems


def replay_peaks(
    columns: Mapping[str, Sequence[Any]], *, device: str, rank: int = 0
) -> dict[int, tuple[int, dict[tuple[str, str], int]]]:
    """Per step, the largest tracked live total on ``device`` and its (category, owner) bytes.

    Naive loop over the events of one rank (each row carries the object's state after the
    event); a step's window opens with what is live when its first event happens. Steps with
    no events are absent.
    """
    live: dict[str, dict[str, Any]] = {}
    peaks: dict[int, tuple[int, dict[tuple[str, str], int]]] = {}

    def snapshot() -> tuple[int, dict[tuple[str, str], int]]:
        pairs: dict[tuple[str, str], int] = {}
        for row in live.values():
            if row["device"] == device and row["bytes"]:
                pair = (row["category"], row["owner"])
                pairs[pair] = pairs.get(pair, 0) + row["bytes"]
        return sum(pairs.values()), pairs

    for row in _rows(columns):
        if row["rank"] != rank:
            continue
        step = row["step"]
        if step not in peaks:
            peaks[step] = snapshot()
        if row["event"] == "free":
            live.pop(row["object"], None)
        else:
            live[row["object"]] = row
        current = snapshot()
        if current[0] > peaks[step][0]:
            peaks[step] = current
    return peaks
