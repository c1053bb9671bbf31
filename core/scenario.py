"""Fault-injection scenarios: named configs in ``configs/scenarios/`` run through the real core.

A scenario file is the run-config TOML format plus an optional ``[scenario]`` section (metadata:
``description``, ``fault``, ``expect_suspect``, ``control``, ``base``, ``needs``); its other
sections are applied key by key on top of ``configs/<base>.toml`` (default ``grpo_tiny``), then
``--set`` overrides on top. Every fault is a config switch of a real code path (log-prob mode,
re-tokenization, sync interval, engine precision, trust rule, quantized rollout, Top-k kernel,
teacher, judge); nothing edits telemetry after the fact. ``needs`` maps the trained artifacts a
scenario reads (a teacher, a judge) to the command that makes each; a run whose config still names
a missing one is refused with those commands. ``expect_suspect`` and ``control`` are read only by
tests and benchmarks, never by the analysis. A control is one setting: the fault's run with one
``section.key=value`` changed (``load_scenario`` refuses more; the tests check that the resolved
configs differ in exactly that key).
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from core.config import DEFAULT_CONFIG, ConfigError, RunConfig, config_from_dict

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "configs" / "scenarios"
META_KEYS = ("description", "fault", "expect_suspect", "control", "base", "needs")
REPO_ROOT = SCENARIO_DIR.parent.parent


@dataclass(frozen=True)
class Scenario:
    """One scenario file, parsed."""

    name: str
    """File stem, e.g. ``retokenize-bug``."""
    description: str
    """One line: what the run is."""
    fault: str
    """The injected cause in words ("" for the baseline)."""
    expect_suspect: str | None
    """Suspect name the analysis should rank first (None: no fault)."""
    control: tuple[str, ...] = ()
    """The one ``section.key=value`` override that turns the fault off and keeps everything else
    (the control run of ``benchmarks/scenarios.py``); empty for the baseline."""
    sections: dict = field(default_factory=dict)
    """Config sections this scenario sets on top of its base config."""
    base: str = "grpo_tiny"
    """The config (``configs/<base>.toml``) the scenario builds on: ``grpo_tiny`` (the default
    sync loop) or ``agentic_tiny`` (async multi-turn)."""
    needs: dict = field(default_factory=dict)
    """Artifact path (relative to the repo root) -> the command that makes it."""

    def missing(self, cfg: RunConfig) -> dict[str, str]:
        """The ``needs`` that ``cfg`` still names and that do not exist (path -> command)."""
        text = cfg.to_json()
        return {
            p: cmd for p, cmd in self.needs.items() if p in text and not (REPO_ROOT / p).exists()
        }


def list_scenarios(directory: Path = SCENARIO_DIR) -> list[str]:
    """Names of every scenario file, sorted (``healthy`` first)."""
    names = sorted(p.stem for p in directory.glob("*.toml"))
    return sorted(names, key=lambda n: n != "healthy")


def load_scenario(name: str, directory: Path = SCENARIO_DIR) -> Scenario:
    """Parse ``configs/scenarios/NAME.toml``; ConfigError naming the valid scenarios on a typo."""
    path = directory / f"{name}.toml"
    if not path.is_file():
        raise ConfigError(
            f"unknown scenario {name!r}; scenarios: {', '.join(list_scenarios(directory))}"
        )
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    meta = raw.pop("scenario", {})
    unknown = sorted(set(meta) - set(META_KEYS))
    if unknown:
        raise ConfigError(
            f"{path.name}: unknown [scenario] keys {unknown}; allowed: {', '.join(META_KEYS)}"
        )
    if len(meta.get("control", ())) > 1:
        raise ConfigError(
            f"{path.name}: [scenario] control must be one setting, not {meta['control']}"
        )
    return Scenario(
        name=name,
        description=meta.get("description", ""),
        fault=meta.get("fault", ""),
        expect_suspect=meta.get("expect_suspect"),
        control=tuple(meta.get("control", ())),
        sections=raw,
        base=meta.get("base", "grpo_tiny"),
        needs=dict(meta.get("needs", {})),
    )


def scenario_config(
    name: str,
    overrides: list[str] | tuple = (),
    *,
    steps: int | None = None,
    directory: Path = SCENARIO_DIR,
) -> RunConfig:
    """Base config ← the scenario's sections ← ``overrides`` (``section.key=value``) ← ``steps``."""
    scenario = load_scenario(name, directory)
    base = DEFAULT_CONFIG.parent / f"{scenario.base}.toml"
    if not base.is_file():
        raise ConfigError(f"{name}.toml: [scenario] base {scenario.base!r}: no {base}")
    with open(base, "rb") as f:
        raw = tomllib.load(f)
    for section, values in scenario.sections.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{name}.toml: {section!r} must be a [section] table")
        raw.setdefault(section, {}).update(values)
    extra = [*overrides, *([f"train.steps={steps}"] if steps is not None else [])]
    return config_from_dict(raw, extra)


def run_scenario(
    name: str,
    *,
    runs_root: str | Path = "runs",
    steps: int | None = None,
    overrides: list[str] | tuple = (),
    progress: bool = False,
    directory: Path = SCENARIO_DIR,
) -> tuple[Path, dict]:
    """Train scenario ``name`` with DuckDB telemetry into ``runs_root``; returns (run_dir, summary)."""
    from core.driver import run_training

    cfg = scenario_config(name, overrides, steps=steps, directory=directory)
    check_needs(load_scenario(name, directory), cfg)
    return run_training(cfg, runs_root=runs_root, telemetry="duckdb", name=name, progress=progress)


def check_needs(scenario: Scenario, cfg: RunConfig) -> None:
    """ConfigError listing the commands that make the artifacts ``cfg`` names but lacks."""
    missing = scenario.missing(cfg)
    if missing:
        steps = "\n".join(f"  {cmd}" for cmd in missing.values())
        raise ConfigError(
            f"scenario {scenario.name!r} needs {sorted(missing)}; make them first:\n{steps}"
        )


def _cmd_scenario(args) -> int:
    if args.list:
        for n in list_scenarios():
            print(f"{n:24s} {load_scenario(n).description}")
        return 0
    if not args.name:
        print("closedloop scenario: NAME required (or --list)", file=sys.stderr)
        return 2
    try:
        cfg = scenario_config(args.name, args.set, steps=args.steps)
        check_needs(load_scenario(args.name), cfg)
    except (ConfigError, ValueError) as e:
        print(f"closedloop scenario: {e}", file=sys.stderr)
        return 2
    from core.driver import print_summary, run_training

    run_dir, summary = run_training(
        cfg, runs_root=args.run_dir, telemetry="duckdb", name=args.name, progress=True
    )
    print_summary(run_dir, summary)
    print(f"investigate: notebooks/investigate_collapse.ipynb with run = {str(run_dir)!r}")
    return 0


def register(subparsers) -> None:
    """Add ``closedloop scenario NAME [--steps N] [--run-dir runs] [--set K=V] [--list]``."""
    p = subparsers.add_parser(
        "scenario", help="run a fault-injection scenario from configs/scenarios/"
    )
    p.add_argument("name", nargs="?", default=None, help="scenario name (file stem)")
    p.add_argument("--steps", type=int, default=None, help="override train.steps")
    p.add_argument("--run-dir", default="runs", help="runs root: the run gets RUNS/<run_id>/")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key on top of the scenario",
    )
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.set_defaults(func=_cmd_scenario)
