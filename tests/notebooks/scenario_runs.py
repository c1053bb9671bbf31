"""Short scenario runs shared by the analysis and notebook tests: each trained once per session.

Short = ``SHORT_STEPS`` steps of 4 prompts × 4 responses (the slower DSA and int4 engines get
``SLOW_STEPS``); every injected fault is visible in telemetry from the first steps.
"""

from __future__ import annotations

from pathlib import Path

SHORT = (
    "algorithm.prompts_per_step=4",
    "algorithm.group_size=4",
    "train.eval_size=16",
    "train.eval_every=0",
    "telemetry.flush_seconds=0.5",
)
SHORT_STEPS = 6
SLOW_STEPS = 3
SLOW = ("int4-rollout-no-qat", "nondeterministic-topk")

_RUNS: dict[tuple[str, tuple[str, ...]], Path] = {}


def scenario_run(name: str, tmp_path_factory, extra: tuple[str, ...] = ()) -> Path:
    """The run directory of scenario ``name`` (plus ``extra`` overrides) trained short (cached
    for the test session)."""
    if (name, extra) not in _RUNS:
        from core.scenario import run_scenario

        root = tmp_path_factory.getbasetemp() / "scenario_runs"
        steps = SLOW_STEPS if name in SLOW else SHORT_STEPS
        _RUNS[name, extra], _ = run_scenario(
            name, runs_root=root, steps=steps, overrides=(*SHORT, *extra)
        )
    return _RUNS[name, extra]
