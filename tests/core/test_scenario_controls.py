"""Every scenario's control is its fault with exactly one setting changed (no training here).

A control separates what the fault does from what its strengthening does only when nothing else
differs: the resolved configs of fault and control (base config ← scenario ← control override)
must differ in exactly the one ``section.key`` the control names. Whether each control stays
healthy over the scenario's length is measured by ``benchmarks/scenarios.py --controls``; here
only the controls that *are* the healthy run are checked, which is exact and free.
"""

from __future__ import annotations

import json

import pytest

from core.config import ConfigError, parse_override
from core.scenario import list_scenarios, load_scenario, scenario_config

WITH_CONTROL = [n for n in list_scenarios() if load_scenario(n).control]


def _flat(cfg) -> dict[str, object]:
    """``section.key`` -> value of a resolved config (dict-valued keys compared whole)."""
    return {f"{s}.{k}": v for s, keys in json.loads(cfg.to_json()).items() for k, v in keys.items()}


def test_every_fault_has_a_control():
    faults = [n for n in list_scenarios() if load_scenario(n).expect_suspect]
    assert faults and set(faults) <= set(WITH_CONTROL)


@pytest.mark.parametrize("name", WITH_CONTROL)
def test_control_differs_from_its_fault_in_exactly_one_setting(name):
    sc = load_scenario(name)
    (override,) = sc.control
    section, key, _ = parse_override(override)
    fault, control = _flat(scenario_config(name)), _flat(scenario_config(name, sc.control))
    differ = sorted(k for k in fault if fault[k] != control[k])
    assert differ == [f"{section}.{key}"], (name, differ)


@pytest.mark.parametrize("name", ["lr-too-high", "saturated-reward"])
def test_controls_that_are_the_healthy_run(name):
    """Their one setting restores the default, so the control is the ``healthy`` scenario itself
    (whose short run the analysis tests keep quiet and free of an onset)."""
    assert scenario_config(name, load_scenario(name).control) == scenario_config("healthy")


def test_a_control_of_two_settings_is_refused(tmp_path):
    (tmp_path / "two.toml").write_text(
        '[scenario]\ncontrol = ["optim.lr=3e-5", "rollout.sync_every=1"]\n'
    )
    with pytest.raises(ConfigError, match="one setting"):
        load_scenario("two", tmp_path)
