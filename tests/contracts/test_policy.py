"""Policy files: the default release policy, modes, and errors that name the bad entry."""

import pytest

from contracts.policy import DEFAULT_POLICY, Policy, Thresholds, policy_from_dict
from contracts.policy_file import load_policy
from contracts.registry import all_check_ids, get_check

KNOWN = all_check_ids()


def test_default_release_policy_loads_and_names_only_real_checks():
    policy = load_policy()
    assert policy == load_policy(DEFAULT_POLICY)
    assert policy.name == "release" and policy.default == "required"
    assert policy.mode("action.mismatch_abs_p99") == "warn"
    assert policy.mode("action.logp_finite") == "required"
    assert set(policy.checks) <= set(KNOWN)


def test_registry_lists_every_contract_of_the_issue():
    assert {i.split(".")[0] for i in KNOWN} == {
        "schema",
        "run",
        "action",
        "sparse_version",
        "agentic",
        "teacher_quant",
        "teacher_provenance",
        "reward",
        "memory",
        "parallel",
        "long_horizon",
        "regression",
    }
    assert len(KNOWN) == len(set(KNOWN))
    assert KNOWN[0] == "schema.store_readable"  # the store first, regressions last
    assert "run.finished" in KNOWN
    assert KNOWN[-1].startswith("regression.")
    with pytest.raises(ValueError, match="unknown contract check 'action.logp_finit'.*logp_finite"):
        get_check("action.logp_finit")


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (
            {"thresholds": {"mismatch_mean": 0.1}},
            r"unknown policy keys thresholds.\['mismatch_mean'\]",
        ),
        ({"gates": {}}, r"unknown policy sections \['gates'\]"),
        ({"checks": {"action.nope": "warn"}}, r"unknown checks \['action.nope'\]"),
        ({"checks": {"action.logp_finite": "maybe"}}, r"action.logp_finite = 'maybe'"),
        ({"policy": {"default": "lenient"}}, r"policy.default = 'lenient'"),
        (
            {"thresholds": {"masked_fraction": 1.5}},
            r"thresholds.masked_fraction=1.5 not in \[0, 1\]",
        ),
        ({"thresholds": {"mismatch_abs_mean": "low"}}, r"policy \[thresholds\]: bad value type"),
        ({"thresholds": {"sync_required_phases": ["gather"]}}, r"including 'ack'"),
        ({"regression": {"masked_fraction_margin": -0.1}}, r"masked_fraction_margin=-0.1"),
    ],
)
def test_bad_entries_raise_naming_them(raw, match):
    with pytest.raises(ValueError, match=match):
        policy_from_dict(raw, KNOWN)


def test_overrides_and_modes(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(
        '[policy]\nname = "nightly"\n[thresholds]\nstaleness_limit = 1\n'
        'sync_required_phases = ["send", "ack"]\n'
        '[checks]\n"memory.create_has_free" = "off"\n"action.logp_finite" = "warn"\n'
    )
    policy = load_policy(path)
    assert policy.name == "nightly"
    assert policy.thresholds == Thresholds(staleness_limit=1, sync_required_phases=("send", "ack"))
    assert (policy.mode("memory.create_has_free"), policy.mode("action.logp_finite")) == (
        "off",
        "warn",
    )
    assert Policy().mode("memory.create_has_free") == "required"


def test_unreadable_policy_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="cannot read policy"):
        load_policy(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[thresholds\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_policy(bad)
