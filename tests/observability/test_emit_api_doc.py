"""``docs/emit_api.md`` runs as written: its Python blocks, executed in order in a scratch
directory, record a three-step run that reads back and passes the gate."""

from __future__ import annotations

import re
from pathlib import Path

from contracts import run_gate
from observability import open_run

DOC = Path(__file__).resolve().parents[2] / "docs" / "emit_api.md"


def test_the_documented_loop_records_a_run_that_passes_the_gate(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 3
    monkeypatch.chdir(tmp_path)
    scope: dict = {"__name__": "emit_api_doc"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), scope)
    assert "0.0" in capsys.readouterr().out  # the query printed the steps
    run = tmp_path / "runs" / "my-trainer"
    con = open_run(run)
    assert con.execute("SELECT count(*) FROM tokens").fetchone() == (3 * 8 * 32,)
    assert con.execute("SELECT max(step), any_value(status) FROM runs, evals").fetchone() == (
        3,
        "finished",
    )
    gate = run_gate(run, record=False)
    assert gate.passed, [(r.id, r.message) for r in gate.failed()]
    statuses = {r.id: r.status for r in gate.results}
    assert statuses["action.mismatch_abs_mean"] == statuses["action.logp_finite"] == "pass"
    assert statuses["action.trust_mask_recomputed"] == "not_applicable"
