"""``closedloop gate`` through the CLI: exit codes 0/1/2, JUnit XML, Markdown, recorded results,
fail-closed behaviour (corrupt part, missing table, erroring check), a killed run
(``run.finished``, ``--allow-running``) and ``--baseline``."""

import dataclasses
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import polars as pl
import pytest

from closedloop.cli import main
from contracts import run_gate
from contracts import spec as check_spec
from contracts.report import format_table
from observability.parts import list_parts
from tests.contracts.store_edit import copy_run, edit_rows, query

pytestmark = pytest.mark.slow


@pytest.fixture
def run(tiny_run, tmp_path):
    return copy_run(tiny_run, tmp_path)


@pytest.fixture
def stale_run(run):
    """A copy with its first trained sample made stale beyond τ."""
    (row,) = query(run, "SELECT min(sample_id) AS s FROM samples WHERE status = 'trained'")
    edit_rows(run, "samples", pl.col("sample_id") == row["s"], {"staleness": 99})
    return run


def junit_cases(path) -> dict[str, ET.Element]:
    suite = ET.parse(path).getroot().find("testsuite")
    return {f"{c.get('classname')}.{c.get('name')}": c for c in suite.iter("testcase")}


def test_clean_run_exits_0_with_junit_markdown_and_recorded_results(run, tmp_path, capsys):
    junit, md = tmp_path / "out" / "gate.xml", tmp_path / "out" / "gate.md"
    assert main(["gate", str(run), "--junit", str(junit), "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["check", "status", "observed", "threshold", "violations"]
    assert "gate PASSED" in out
    (state,) = [line for line in out.splitlines() if line.startswith("run ")]
    assert "status finished, 3 steps recorded (last step 2), last write 20" in state
    cases = junit_cases(junit)
    recorded = query(run, 'SELECT contract, "check", status FROM contract_results')
    assert len(cases) == len(recorded) > 20  # one testcase and one stored row per check
    assert {f"closedloop.{r['contract']}.{r['check']}" for r in recorded} == set(cases)
    assert not [c for c in cases.values() if c.find("failure") is not None]
    skipped = {k for k, c in cases.items() if c.find("skipped") is not None}
    assert skipped == {
        f"closedloop.{r['contract']}.{r['check']}"
        for r in recorded
        if r["status"] == "not_applicable"
    }
    assert md.read_text().startswith("## gate PASSED")


def test_violation_exits_1_through_the_installed_cli(stale_run, tmp_path):
    junit = tmp_path / "gate.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "closedloop.cli", "gate", str(stale_run), "--junit", str(junit)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL sparse_version.staleness_within_limit" in proc.stdout
    cases = junit_cases(junit)
    failed = {k for k, c in cases.items() if c.find("failure") is not None}
    assert failed == {"closedloop.sparse_version.staleness_within_limit"}
    text = cases["closedloop.sparse_version.staleness_within_limit"].find("failure").text
    (row,) = query(stale_run, "SELECT sample_id FROM samples WHERE staleness = 99")
    assert f'"sample_id": {row["sample_id"]}' in text and '"staleness": 99' in text


@pytest.fixture
def killed_run(run):
    """A copy whose writer never closed: only the ``running`` status row, as ``kill -9`` leaves."""
    assert edit_rows(run, "runs", pl.col("status") != "running", drop=True) == 1
    return run


def test_killed_run_fails_run_finished_unless_allow_running(killed_run, tmp_path, capsys):
    md = tmp_path / "gate.md"
    assert main(["gate", str(killed_run), "--markdown", str(md)]) == 1
    out = capsys.readouterr().out
    assert "FAIL run.finished: run status is 'running' (killed or still training)" in out
    assert "status running, 3 steps recorded" in out and "status running" in md.read_text()
    gate = run_gate(killed_run, record=False)
    assert [r.id for r in gate.failed()] == ["run.finished"]
    assert gate.result("run.finished").examples[0]["status"] == "running"
    assert main(["gate", str(killed_run), "--allow-running"]) == 0
    live = run_gate(killed_run, record=False, allow_running=True)
    assert live.passed and "--allow-running" in live.result("run.finished").message


def test_a_failed_run_fails_even_with_allow_running(run):
    edit_rows(run, "runs", pl.col("status") == "finished", {"status": "failed"})
    gate = run_gate(run, record=False, allow_running=True)
    assert [r.id for r in gate.failed()] == ["run.finished"]
    assert gate.state.status == "failed"


def test_usage_errors_exit_2(run, tmp_path, capsys):
    assert main(["gate", str(tmp_path / "nope")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["gate", str(tmp_path / "empty")]) == 2
    bad = tmp_path / "bad.toml"
    bad.write_text('[checks]\n"action.nope" = "warn"\n')
    assert main(["gate", str(run), "--policy", str(bad)]) == 2
    assert main(["gate", str(run), "--baseline", str(tmp_path / "nope")]) == 2
    assert "unknown checks ['action.nope']" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # argparse: missing RUN
        main(["gate"])
    assert e.value.code == 2


def test_warn_and_off_modes(stale_run, tmp_path):
    policy = tmp_path / "p.toml"
    policy.write_text(
        '[checks]\n"sparse_version.staleness_within_limit" = "warn"\n'
        '"memory.create_has_free" = "off"\n'
    )
    assert main(["gate", str(stale_run), "--policy", str(policy)]) == 0
    gate = run_gate(stale_run, policy=policy, record=False)
    assert gate.result("sparse_version.staleness_within_limit").status == "warn"
    assert "memory.create_has_free" not in {r.id for r in gate.results}


def test_fail_closed_on_corrupt_part_missing_table_and_erroring_check(run, monkeypatch):
    part = list_parts(run, "tokens")[0]
    part.write_bytes(part.read_bytes()[:100])  # truncated by a disk-full crash
    shutil.rmtree(run / "telemetry" / "qparams")
    spec = check_spec.DECLARED["action.masked_fraction"]

    def boom(ctx):
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(check_spec.DECLARED, spec.id, dataclasses.replace(spec, fn=boom))
    gate = run_gate(run, record=False)
    assert gate.exit_code == 1
    store = gate.result("schema.store_readable")
    problems = {e["problem"] for e in store.examples}
    assert store.status == "fail" and problems == {"corrupt part", "missing table directory"}
    r = gate.result("action.masked_fraction")
    assert (r.status, r.message) == ("error", "RuntimeError: disk on fire")


def test_baseline_regression_catches_the_bf16_engine(tiny_run, tiny_run_bf16, tmp_path):
    bf16 = copy_run(tiny_run_bf16, tmp_path)
    alone = run_gate(bf16, record=False)
    assert alone.passed, format_table(alone)  # within the absolute thresholds
    gate = run_gate(bf16, baseline=tiny_run, record=False)
    assert {r.id for r in gate.failed()} == {"regression.mismatch_abs_mean"}
    r = gate.result("regression.mismatch_abs_mean")
    assert r.observed > r.threshold > 0 and r.examples[0]["baseline"] == str(tiny_run)
    assert gate.result("regression.masked_fraction").status == "pass"
    same = run_gate(tiny_run, baseline=tiny_run, record=False)
    assert same.passed and same.result("regression.mismatch_abs_mean").status == "pass"
