"""Shared pytest set-up: one torch thread per test process (the CI machine has 2 cores), and
session-scoped runs produced by the real training core with the real telemetry store."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
warnings.filterwarnings("ignore", message=".*Apex.*|.*Transformer Engine.*|.*cuda_graph.*")

TINY = [
    "train.steps=3",
    "algorithm.prompts_per_step=4",
    "algorithm.group_size=4",
    "train.eval_size=16",
    "train.eval_every=0",
    "telemetry.flush_seconds=0.5",
]


COMPACTION_TINY = [
    "train.steps=2",
    "algorithm.prompts_per_step=4",
    "train.eval_size=8",
    "train.eval_every=0",
    "telemetry.flush_seconds=0.5",
]
"""A two-step CompactionRL run on the long-horizon environment (critic, segments, summaries)."""


def make_run(
    root: Path, overrides: list[str] = (), name: str = "test", config: str | None = None
) -> Path:
    """Train a tiny run through the real core with DuckDB telemetry (GRPO unless ``config``
    names another file; ``TINY`` applies to the default config only); returns its run dir."""
    from core.config import load_config
    from core.driver import run_training

    base = [] if config else TINY
    cfg = load_config(config, [*base, *overrides])
    run_dir, _ = run_training(cfg, runs_root=root, telemetry="duckdb", name=name, progress=False)
    return run_dir


AGENTIC_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "agentic_tiny.toml"
AGENTIC = [
    "train.steps=3",
    "algorithm.prompts_per_step=2",
    "algorithm.group_size=4",
    "train.eval_size=16",
    "train.eval_every=0",
    "telemetry.flush_seconds=0.5",
    "tool.latency_median_s=0.002",
    "tool.crash_rate=0.1",
    "tool.timeout_rate=0.0",
    "tool.malformed_rate=0.05",
    "rollout.in_flight_groups=3",
]


def make_agentic_run(root: Path, overrides: list[str] = (), name: str = "agentic") -> Path:
    """A tiny async multi-turn run (configs/agentic_tiny.toml, shrunk) with DuckDB telemetry."""
    from core.config import load_config
    from core.driver import run_training

    cfg = load_config(AGENTIC_CONFIG, [*AGENTIC, *overrides])
    run_dir, _ = run_training(cfg, runs_root=root, telemetry="duckdb", name=name, progress=False)
    return run_dir


@pytest.fixture(scope="session")
def agentic_run(tmp_path_factory) -> Path:
    """A finished 3-step async agentic run (tool environment, 2 thread workers) — read-only."""
    return make_agentic_run(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A finished 3-step GRPO run (fp32 engines, IcePop) — read-only: copy it before editing."""
    return make_run(tmp_path_factory.mktemp("runs"), name="tiny")


@pytest.fixture(scope="session")
def tiny_run_bf16(tmp_path_factory) -> Path:
    """A finished 3-step run with a bf16 rollout engine (non-zero mismatch) — read-only."""
    return make_run(tmp_path_factory.mktemp("runs"), ['rollout.precision="bf16"'], name="bf16")


@pytest.fixture(scope="session")
def compaction_run(tmp_path_factory) -> Path:
    """A finished 2-step CompactionRL run (``configs/compaction_tiny.toml``) — read-only."""
    config = str(Path(__file__).resolve().parent.parent / "configs" / "compaction_tiny.toml")
    return make_run(
        tmp_path_factory.mktemp("runs"), COMPACTION_TINY, name="compaction", config=config
    )


@pytest.fixture(scope="session")
def teacher_dirs(tmp_path_factory) -> dict[str, Path]:
    """Two teachers (the SFT base; a perturbed fork of it, recorded as forked from the base: the
    same source) and, from the tiny run's verified rollouts, a barely trained ORM and judge:
    {"same": , "other": , "orm": , "judge": } directories."""
    from tests.teacher_artifacts import teacher_checkpoint

    root = tmp_path_factory.mktemp("teachers")
    return {
        "same": teacher_checkpoint(root / "same-source"),
        "other": teacher_checkpoint(
            root / "perturbed", noise=0.3, seed=1, base_model="core/assets/base_model"
        ),
    }


@pytest.fixture(scope="session")
def reward_dirs(tmp_path_factory, tiny_run: Path) -> dict[str, Path]:
    """An ORM and a judge trained for a few steps on the tiny run's verified rollouts."""
    from core.rewards.data import verified_rollouts
    from core.rewards.train import BASE_MODEL, build_judge, build_orm
    from core.tokenizer.tokenizer import Tokenizer

    root = tmp_path_factory.mktemp("reward_models")
    tok = Tokenizer.load()
    rollouts = verified_rollouts([tiny_run], tok=tok)
    quiet = lambda *_: None  # noqa: E731
    build_orm(rollouts, root / "orm", tok=tok, steps=20, log=quiet)
    build_judge(rollouts, root / "judge", tok=tok, base=BASE_MODEL, steps=8, log=quiet)
    return {"orm": root / "orm", "judge": root / "judge"}


TEACHER_RUN = [
    'algorithm.advantage="grpo+opd"',
    'algorithm.opd_loss="topk"',
    "algorithm.opd_weight=0.5",
    'teachers.payload="topk"',
    "teachers.topk=4",
]


@pytest.fixture(scope="session")
def teacher_run(tmp_path_factory, teacher_dirs, reward_dirs) -> Path:
    """A finished 3-step GRPO+OPD (Top-k) run routing addition and subtraction to two teachers,
    with mixed rewards (verifier, format, ORM, judge, length penalty) — read-only."""
    routes = f'{{addition = "{teacher_dirs["same"]}", subtraction = "{teacher_dirs["other"]}"}}'
    rewards = [
        "rewards.weights={verifier = 1.0, format = 0.1, orm = 0.2, judge = 0.3}",
        "rewards.penalties={length = 0.05}",
        "rewards.length_budget=3",
        f'rewards.orm="{reward_dirs["orm"]}"',
        f'rewards.judge="{reward_dirs["judge"]}"',
    ]
    overrides = [*TEACHER_RUN, f"teachers.routes={routes}", *rewards]
    return make_run(tmp_path_factory.mktemp("runs"), overrides, name="teacher")
