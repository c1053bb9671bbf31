"""``closedloop explain``: a run's first diagnosis without a notebook.

The verdict — ``collapse`` (``analysis.collapse_onset`` found an onset), else ``stall``
(``stall.detect_stall``), ``progressing`` (it improved, or kept up with its baseline) or
``undecided`` (too few steps or evaluations) — then the suspects table (``analysis.suspects``,
the same table for collapses and stalls: the window before the onset, the whole run otherwise),
and for each suspect that moved its evidence (first step, level against the baseline's or the
healthy floor, score) and where to drill down (``drilldown``). Telemetry only: the run's config
is never read.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
import pandas as pd

from observability import analysis as A
from observability.changepoint import Onset
from observability.drilldown import drilldown
from observability.reader import open_run
from observability.stall import Stall, detect_stall

VERDICTS = ("collapse", "stall", "progressing", "undecided")


@dataclass(frozen=True)
class Explanation:
    run_id: str
    verdict: str
    """One of ``VERDICTS``."""
    onset: Onset
    stall: Stall
    suspects: pd.DataFrame
    """``analysis.suspects``: every candidate, best first."""
    baseline_run_id: str | None = None

    def moved(self) -> pd.DataFrame:
        """The suspects that moved, best first."""
        return self.suspects[self.suspects["moved"]].reset_index(drop=True)

    def evidence(self) -> list[dict]:
        """Per moved suspect: rank, suspect, score, first_step, lead_steps, level_mean,
        reference, reference_kind (``baseline`` | ``healthy floor`` | ``no baseline``), tolerance,
        description, query, notebook."""
        out = []
        for row in self.moved().to_dict("records"):
            kind = "baseline" if self.baseline_run_id else "no baseline"
            if row["floor"] > 0 and row["reference"] <= row["floor"]:
                kind = "healthy floor"
            d = drilldown(row["suspect"], self.run_id)
            keep = ("rank", "suspect", "score", "first_step", "lead_steps", "level_mean")
            rec = {k: _plain(row[k]) for k in keep}
            for k in ("first_step", "lead_steps"):  # a column with nulls comes back as float
                rec[k] = None if rec[k] is None else int(rec[k])
            rec |= {"reference": _plain(row["reference"]), "reference_kind": kind}
            rec |= {"tolerance": row["tolerance"], "description": row["description"]}
            out.append(rec | {"query": d.query, "notebook": d.notebook})
        return out

    def to_dict(self) -> dict:
        """JSON-ready: run, baseline, verdict, onset, stall, the moved suspects' evidence and the
        full table's scores."""
        table = self.suspects[["rank", "suspect", "score", "moved", "level_mean"]]
        return {
            "run_id": self.run_id,
            "baseline_run_id": self.baseline_run_id,
            "verdict": self.verdict,
            "onset": asdict(self.onset),
            "stall": self.stall.to_dict(),
            "suspects": self.evidence(),
            "table": [{k: _plain(v) for k, v in r.items()} for r in table.to_dict("records")],
        }

    def text(self) -> str:
        """The human-readable report."""
        base = f" against baseline {self.baseline_run_id}" if self.baseline_run_id else ""
        lines = [f"run {self.run_id}{base}"]
        if self.onset:
            o = self.onset
            lines.append(
                f"verdict: collapse at step {o.step} ({o.metric} {o.before:.4g} → {o.after:.4g})"
            )
        else:
            lines.append(f"verdict: {self.verdict} — {self.stall.reason}")
        window = f"before step {self.onset.step}" if self.onset else "over the whole run"
        ev = self.evidence()
        if not ev:
            lines.append(f"suspects: none moved {window} (every level within its tolerance)")
        else:
            lines.append(f"suspects that moved {window}, best first:")
        for e in ev:
            first = f"from step {e['first_step']}"
            if e["lead_steps"] is not None:
                first += f" ({e['lead_steps']} steps before the onset)"
            lines += [
                f"  {e['rank']}. {e['suspect']}  score {e['score']:.2f}  {first}",
                f"     level {e['level_mean']:.4g} (mean) vs {e['reference']:.4g} "
                f"({e['reference_kind']}), τ {e['tolerance']:g}: {e['description']}",
                f"     SQL: {e['query']}",
                f"     notebook: {e['notebook']}",
            ]
        return "\n".join(lines)


def _plain(v):
    """A JSON-safe scalar (NaN / NA → None, numpy → Python)."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    return v.item() if hasattr(v, "item") else v


def explain_con(
    con: duckdb.DuckDBPyConnection,
    run_id: str | None = None,
    *,
    baseline: duckdb.DuckDBPyConnection | None = None,
    baseline_run_id: str | None = None,
) -> Explanation:
    """The ``Explanation`` of a run on an open connection (optional baseline connection)."""
    rid = A.resolve_run_id(con, run_id)
    bid = A.resolve_run_id(baseline, baseline_run_id) if baseline is not None else None
    onset = A.collapse_onset(con, rid)
    stall = detect_stall(con, rid, baseline=baseline, baseline_rid=bid)
    table = A.suspects(con, rid, onset=onset, baseline=baseline, baseline_run_id=bid)
    if onset:
        verdict = "collapse"
    elif stall.progress is None:
        verdict = "undecided"
    else:
        verdict = "stall" if stall else "progressing"
    return Explanation(rid, verdict, onset, stall, table, bid)


def explain(run: str | Path, baseline: str | Path | None = None) -> Explanation:
    """The ``Explanation`` of the run directory ``run`` (and ``baseline``'s, when given)."""
    base = open_run(baseline) if baseline is not None else None
    return explain_con(open_run(run), baseline=base)
