"""The ``off-source-teacher`` and ``judge-hacking`` scenarios at small size, each against its
control, with small real artifacts: an off-source teacher pretrained briefly from another seed,
a same-source expert from a few GRPO steps, judges fine-tuned from the SFT base on a short run's
verified rollouts. The full-size behaviour is recorded in benchmarks/README.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import load_config
from core.driver import run_training
from core.pretrain.arithmetic import pretrain
from core.rewards.data import verified_rollouts
from core.rewards.train import BASE_MODEL, build_judge
from core.scenario import load_scenario, run_scenario, scenario_config
from core.tokenizer.tokenizer import Tokenizer
from observability import analysis as A
from observability import open_run
from observability.changepoint import NO_ONSET
from observability.distill import initial_kl, step_series

pytestmark = pytest.mark.slow
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
QUIET = {"progress": False}


def _train(config, overrides, root, name):
    cfg = load_config(config, overrides)
    return run_training(cfg, runs_root=root, telemetry="duckdb", name=name, **QUIET)[0]


def test_scenarios_name_what_they_need():
    for name in ("off-source-teacher", "judge-hacking"):
        s = load_scenario(name)
        assert s.needs and s.control
        assert set(s.missing(scenario_config(name))) <= set(s.needs)  # only declared ones
        assert all(cmd.startswith("closedloop ") for cmd in s.needs.values())


@pytest.fixture(scope="module")
def teachers(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scenario_teachers")
    cfg = load_config(None)
    off = root / "off-source"
    pretrain(
        off,
        model_cfg=cfg.model,
        task_cfg=cfg.task,
        tok=Tokenizer.load(),
        steps=150,
        seed=7,
        teacher_error_rate=0.0,
        log=lambda *_: None,
    )
    same = root / "addition"
    _train(
        CONFIGS / "expert_addition.toml",
        ["train.steps=10", f'train.checkpoint_dir="{same}"', "train.eval_size=16"],
        root / "runs",
        "expert",
    )
    return {"off": off, "same": same}


# A learning outcome (a brief pretrain from another seed, a few GRPO steps), measured with pretrain
# seeds 7, 8, 9 and train.seed 0, 1, 2, native AVX2 kernels and ATEN_CPU_CAPABILITY=default: the
# off-source teacher's initial reverse KL 1.06-1.14 (bound 0.5), the same-source expert's
# 0.056-0.083, a ratio of 13-20 (bound 5). Margins of 2× and more: not in CI's float_sensitive
# pass, which stays short.
def test_off_source_teacher_starts_far_from_the_student(tmp_path, teachers):
    short = ["train.steps=3", "algorithm.prompts_per_step=32", "train.eval_size=16"]
    kl = {}
    for label, path in teachers.items():
        route = f'teachers.routes={{addition = "{path}"}}'
        run, _ = run_scenario("off-source-teacher", runs_root=tmp_path, overrides=[*short, route])
        con = open_run(run)
        kl[label] = float(initial_kl(con)["reverse_kl"].iloc[0])
        assert len(step_series(con, ("teacher_kl",))) == 3
    # the same-source expert forked from the student's own SFT base; the other did not
    assert kl["off"] > 0.5 and kl["off"] > 5 * kl["same"], kl


@pytest.fixture(scope="module")
def judges(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scenario_judges")
    run = _train(
        None,
        [
            "train.steps=8",
            "algorithm.prompts_per_step=8",
            "algorithm.group_size=8",
            "train.eval_size=16",
            "train.eval_every=0",
        ],
        root / "runs",
        "rollouts",
    )
    tok = Tokenizer.load()
    rollouts = verified_rollouts([run], tok=tok)
    out = {}
    for label, prefer_long in (("long", True), ("honest", False)):
        out[label] = root / label
        build_judge(
            rollouts,
            out[label],
            tok=tok,
            base=BASE_MODEL,
            steps=100,
            prefer_long=prefer_long,
            log=lambda *_: None,
        )
    return out


def _tail(con, sql: str, n: int = 10) -> float:
    (value,) = con.execute(
        f"SELECT avg(x) FROM ({sql}) WHERE step > (SELECT max(step) FROM samples) - {n}"
    ).fetchall()[0]
    return float(value)


@pytest.mark.float_sensitive
def test_judge_hacking_against_its_control(tmp_path, judges):
    """Strengthened for size (T = 2: long answers are ~10% of samples from the start; 40 steps):
    the policy learns the long answers the biased judge pays for and the verifier's accuracy falls
    below the control's, while the mixed reward does not fall; under the honest judge long answers
    die out. At this size the verifier falls from the first steps, before the judge's level has
    moved, so the analysis is asked over the whole run (at full size it names the judge before the
    onset, and the mixed reward rises: benchmarks/README.md).

    A learning outcome: every float of the run depends on the CPU's kernels (the judges are trained
    here too), so the margins are measured over train.seed 0-4 with native AVX2 kernels and 0-2
    with ATEN_CPU_CAPABILITY=default (eight runs of each side):
    - long answers, last 10 steps: fault 0.41-0.63, 0.27-0.49 above its first 10 steps
      (0.123-0.183); control 0.013-0.031 (the fault ≥ 14× the control). Bounds +0.15, 3×;
    - verified, last 10 steps: fault 0.045-0.109, control 0.266-0.327, a gap ≥ 0.199. Bound 0.1;
    - mixed reward, last 10 steps minus first 10: fault +0.015 to +0.292. Its rise is within
      seed 0's noise at this size (+0.015 natively; an earlier bound of +0.03 failed there), so
      the test asserts only that it does not fall by 0.05.
    The top suspect (analysis as of optimizer suspects): reward_component:judge on seed 0 with
    score 0.306 natively / 0.340 under default, the next (grad_norm) 0.093 / 0.126; first on 7
    of the 8 runs; on native seed 2 grad_norm 0.653 ranks above it (0.638).
    """
    short = [
        "train.steps=40",
        "train.eval_size=32",
        "train.eval_every=0",
        "rollout.temperature=2.0",
    ]
    cons = {}
    for label in ("long", "honest"):
        judge = f'rewards.judge="{judges[label]}"'
        run, _ = run_scenario("judge-hacking", runs_root=tmp_path, overrides=[*short, judge])
        cons[label] = open_run(run)
    long_answers = "SELECT step, (length(response_text) >= 4)::DOUBLE AS x FROM samples"
    verified = "SELECT step, (failure_reason IS NULL)::DOUBLE AS x FROM samples"
    reward = "SELECT step, reward AS x FROM samples"
    fault, control = cons["long"], cons["honest"]
    first_long, first_reward = fault.execute(
        "SELECT avg((length(response_text) >= 4)::DOUBLE), avg(reward) FROM samples WHERE step < 10"
    ).fetchone()
    long_tail = _tail(fault, long_answers)
    assert long_tail > first_long + 0.15 and long_tail > 3 * _tail(control, long_answers)
    assert _tail(fault, verified) < _tail(control, verified) - 0.1  # the verifier falls ...
    assert _tail(fault, reward) > first_reward - 0.05  # ... and the mixed reward does not see it
    table = A.suspects(fault, onset=NO_ONSET)
    assert table.loc[0, "suspect"] == load_scenario("judge-hacking").expect_suspect
    assert table.loc[0, "moved"]
