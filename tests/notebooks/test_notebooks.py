"""Every notebook executed with nbclient against short scenario runs made in this session.

Parameters are injected by appending assignments to the ``parameters``-tagged cell; a cell appended at the end
prints the notebook's own ``summary`` dict as JSON, and the tests assert on those computed values
(the top suspect, the gap ordering by precision, the peak breakdown), cross-checked with SQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from core.scenario import load_scenario
from observability import analysis as A
from observability import open_run
from tests.notebooks.scenario_runs import scenario_run

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
MARK = "SUMMARY="


def execute(name: str, **params) -> dict:
    """Run ``notebooks/NAME.ipynb`` with ``params`` appended to its parameters cell; its summary."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    cell.source += "\n# injected by the test\n" + "\n".join(
        f"{k} = {v!r}" for k, v in params.items()
    )
    nb.cells.append(
        nbformat.v4.new_code_cell(
            f"import json\nprint({MARK!r} + json.dumps(summary, default=str))"
        )
    )
    client = NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute()
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    return json.loads(text.split(MARK, 1)[1])


def test_notebooks_are_committed_without_outputs():
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    assert {p.stem for p in paths} >= {
        "investigate_collapse",
        "train_infer_gap",
        "memory",
        "opd_vs_mixrl",
    }
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: one parameters cell"
        for c in nb.cells:
            if c.cell_type == "code":
                assert c.outputs == [] and c.execution_count is None, f"{path.name} has outputs"


def test_investigate_collapse_names_the_injected_cause(tmp_path_factory):
    run = scenario_run("policy-lag", tmp_path_factory)
    base = scenario_run("healthy", tmp_path_factory)
    s = execute("investigate_collapse", run=str(run), baseline=str(base), window=2, top_tokens=7)
    assert s["top_suspect"] == load_scenario("policy-lag").expect_suspect == "staleness"
    con = open_run(run)
    expected = A.suspects(con, baseline=open_run(base))
    assert s["top_score"] == pytest.approx(float(expected.loc[0, "score"]))
    assert s["moved"] == expected.loc[expected["moved"], "suspect"].tolist()
    assert s["onset_step"] == A.collapse_onset(con).step
    assert s["drilldown_rows"] == 7
    ((largest,),) = con.execute(
        "SELECT max(abs(train_logp - rollout_logp)) FROM tokens WHERE role = 'action'"
    ).fetchall()
    assert s["max_abs_delta"] == pytest.approx(largest, rel=1e-6)


def test_train_infer_gap_orders_engines_by_precision(tmp_path_factory, tmp_path):
    runs = {  # fp32 engines, a bf16 rollout engine, int4 rollout weights
        "healthy": scenario_run("healthy", tmp_path_factory),
        "bf16": scenario_run("healthy", tmp_path_factory, ('rollout.precision="bf16"',)),
        "int4-rollout-no-qat": scenario_run("int4-rollout-no-qat", tmp_path_factory),
    }
    for run in runs.values():  # a runs root holding just these three
        (tmp_path / run.name).symlink_to(run, target_is_directory=True)
    s = execute("train_infer_gap", runs=str(tmp_path), run=None, min_count=3)
    gap = s["gap_by_precision"]
    assert set(gap) == {"fp32", "bf16", "w4a16"} and s["runs"] == 3
    assert gap["fp32"] < 1e-5 < gap["bf16"] < gap["w4a16"]  # exact engines, bf16, int4 weights
    assert s["run"] == runs["int4-rollout-no-qat"].name and s["positions"] >= 1


def test_memory_notebook_breaks_down_the_peak(tmp_path_factory):
    run = scenario_run("healthy", tmp_path_factory)
    s = execute("memory", run=str(run), step=None)
    con = open_run(run)
    ((step, total),) = con.execute(
        "SELECT step, sum(bytes) FROM memory_peaks WHERE rank = 0 GROUP BY step "
        "ORDER BY sum(bytes) DESC, step LIMIT 1"
    ).fetchall()
    assert s["peak_step"] == step and s["peak_bytes"] == total > 0
    ((category, owner),) = con.execute(
        "SELECT category, owner FROM memory_peaks WHERE rank = 0 AND step = ? "
        "ORDER BY bytes DESC NULLS LAST LIMIT 1",
        [step],
    ).fetchall()
    assert (s["top_category"], s["top_owner"]) == (category, owner)


@pytest.mark.slow
def test_opd_vs_mixrl_reproduces_the_benchmark_table(tmp_path):
    """The MOPD benchmark at toy size (a few steps per run, one lr, one seed), then the notebook
    over one cell of its runs: the notebook's table and initial KLs are the benchmark's own (both
    read the telemetry)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "mopd.py"
    spec = importlib.util.spec_from_file_location("bench_mopd", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    root = tmp_path / "mopd"
    args = ["--expert-steps", "2", "--student-steps", "2", "--pretrain-steps", "20"]
    args += ["--eval-per-domain", "8", "--prompts", "16", "--topk", "4", "--run-dir", str(root)]
    assert bench.main([*args, "--lrs", "1e-4", "--seeds", "0"]) == 0
    cell = bench.cell_dir(root, 1e-4, 0)
    table, kl = bench.tables(cell)
    s = execute("opd_vs_mixrl", runs=str(cell))
    assert s["mean"] == pytest.approx(dict(zip(table["arm"], table["mean"])))
    assert list(s["mean"]) == ["sft-base", "mopd-sampled", "mopd-topk", "mixrl"]
    assert s["initial_kl"] == pytest.approx(kl)
    # a teacher pretrained 20 steps from another initialisation is far from the SFT base
    assert s["initial_kl"]["kl-off-source"] > 10 * s["initial_kl"]["kl-same-source"]
    assert s["kl_steps"] == 2
