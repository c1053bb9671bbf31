"""Pure helpers of benchmarks/configs.py and benchmarks/telemetry_tiny.py (no training runs)."""

import importlib.util
import sys
from pathlib import Path

import pytest

_DIR = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", _DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


configs = _load("configs")
tiny = _load("telemetry_tiny")


def test_plan_adds_experts_first_and_keeps_config_order():
    jobs = configs.plan(["grpo_tiny", "mopd_tiny"], [0, 1])
    keys = [j.key for j in jobs]
    assert keys == [
        "expert_subtraction-s0", "expert_subtraction-s1",
        "expert_addition-s0", "expert_addition-s1",
        "grpo_tiny-s0", "grpo_tiny-s1",
        "mopd_tiny-s0", "mopd_tiny-s1",
    ]  # fmt: skip
    assert jobs[-1].needs() == ("expert_addition-s1", "expert_subtraction-s1")
    assert configs.Job("grpo_tiny@300", 2).steps == 300
    assert configs.Job("grpo_tiny@300", 2).config == "grpo_tiny"


def test_train_args_route_students_to_the_same_seeds_experts(tmp_path):
    args = configs._train_args(configs.Job("opd_tiny", 1), tmp_path)
    assert f'teachers.routes={{addition = "{tmp_path}/experts/s1/addition"}}' in args
    args = configs._train_args(configs.Job("expert_subtraction", 2), tmp_path)
    assert f'train.checkpoint_dir="{tmp_path}/experts/s2/subtraction"' in args


def test_gate_verdict():
    out = (
        "run.finished                 pass   1  1  0/1\n"
        "action.masked_fraction       fail   0.156  0.15  1/120\n"
        "gate FAILED: r under policy 'agentic' (1 fail)\n"
    )
    assert configs.gate_verdict(out) == (False, ["action.masked_fraction"])
    assert configs.gate_verdict("gate PASSED: r under policy 'release'\n") == (True, [])
    assert configs.gate_verdict("Traceback ...") == (None, [])


def test_heldout_first_and_last_eval_per_split():
    rows = [(40, "heldout", 0.7), (0, "heldout", 0.5), (20, "heldout", 0.6),
            (0, "heldout/addition", 0.4), (40, "heldout/addition", 0.9), (0, "train", 0.1)]  # fmt: skip
    assert configs.heldout(rows) == {"heldout": (0.5, 0.7), "heldout/addition": (0.4, 0.9)}


def test_step_rates_leave_the_first_step_out():
    # step ends at wall 10, 12, 13, 14 and CPU 5, 6, 6.5, 7: 3 steps after the first
    wall, cpu = tiny.step_rates([(10.0, 5.0), (12.0, 6.0), (13.0, 6.5), (14.0, 7.0)])
    assert wall == pytest.approx(4 / 3) and cpu == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        tiny.step_rates([(1.0, 1.0)])


def test_first_seen_lags_keep_the_earliest_poll():
    obs = [{"step": 1, "seen": 12.5, "wall_time": 10.0}, {"step": 1, "seen": 11.0, "wall_time": 10.0},
           {"step": 2, "seen": 13.0, "wall_time": 12.25}]  # fmt: skip
    assert tiny.first_seen_lags(obs) == {1: 1.0, 2: 0.75}


def test_rotated_and_ratios():
    arms = ("a", "b", "c")
    assert [tiny.rotated(arms, r) for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]  # fmt: skip
    assert tiny.ratios([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]


def test_glm_ratios_divide_each_clock_by_itself():
    telemetry = _load("telemetry")
    # clocks (wall, process CPU, thread CPU) a step; emit readings per step of the loop
    rnd = {"raw": (0.100, 0.120, 0.090), "ingest": (0.125, 0.150, 0.010),
           "emit": [(0.004, 0.010, 0.008), (0.006, 0.010, 0.010)]}  # fmt: skip
    r = telemetry.glm_ratios([rnd])
    assert r["emit_wall"] == [pytest.approx(0.05)]  # 0.005 / 0.100
    assert r["emit_cpu"] == [pytest.approx(0.1)]  # 0.009 / 0.090 (thread with thread)
    assert r["ingest_wall"] == [pytest.approx(0.8)]  # 0.100 / 0.125
    assert r["ingest_cpu"] == [pytest.approx(0.8)]  # 0.120 / 0.150
