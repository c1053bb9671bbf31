"""Config loading: unknown keys, wrong types and out-of-range values are errors naming the key."""

import pytest

from core.config import ConfigError, load_config


def test_default_config_loads():
    cfg = load_config(None)
    assert cfg.algorithm.group_size >= 2 and cfg.algorithm.icepop_beta == 2.0
    assert cfg.rollout.precision == "fp32"


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("algorithm.icepop_beta=1.0", "algorithm.icepop_beta"),
        ("algorithm.icepop_beta=0.5", "must be > 1"),
        ("algorithm.eps_low=-0.1", "algorithm.eps_low"),
        ("algorithm.eps_high=-1", "algorithm.eps_high"),
        ("algorithm.group_size=1", "algorithm.group_size"),
        ("rollout.temperature=0", "rollout.temperature"),
        ("rollout.top_p=1.5", "rollout.top_p"),
        ('rollout.precision="int3"', "rollout.precision"),
        ('algorithm.trust_rule="icepo"', "icepop"),
        ('algorithm.policy_loss="ppo"', "algorithm.policy_loss='ppo' not in"),
        ('algorithm.old_logp="old"', "algorithm.old_logp='old' not in"),
        ("rollout.topk_noise=-0.1", "rollout.topk_noise=-0.1 must be a finite float >= 0"),
        ('train.topk_mode="random"', "train.topk_mode='random' not in"),
        ("train.topk_noise=-0.1", "train.topk_noise=-0.1 must be a finite float >= 0"),
        ("optim.lr=0", "optim.lr"),
        ("algorithm.icepop_bta=3", "unknown config key algorithm.icepop_bta"),
        ("algorithmm.x=3", "unknown config section"),
        ('algorithm.group_size="eight"', "expected an integer"),
        ("telemetry.token_sample_rate=2", "token_sample_rate"),
        ("train.probe_every=0", "train.probe_every=0 must be an int >= 1"),
    ],
)
def test_bad_values_name_the_key(override, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("(", r"\(")):
        load_config(None, [override])


def test_override_syntax_error():
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config(None, ["lr=3"])


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_cli_config_typo_exits_2(capsys):
    from core.cli import main

    rc = main(["train", "--telemetry", "none", "--set", "algorithm.icepop_beta=1", "--steps", "1"])
    assert rc == 2
    assert "algorithm.icepop_beta" in capsys.readouterr().err


def test_async_staleness_limit_below_the_sync_period_is_rejected():
    # workers hold version v until the sync at v + 8; with τ = 4 every sample is stale from
    # v + 5 on, no update lands and that sync never comes
    with pytest.raises(
        ConfigError, match=r"staleness_limit=4 must be >= rollout.sync_every - 1 = 7"
    ):
        load_config(
            None, ['rollout.mode="async"', "rollout.sync_every=8", "algorithm.staleness_limit=4"]
        )
    load_config(
        None, ['rollout.mode="async"', "rollout.sync_every=8", "algorithm.staleness_limit=7"]
    )
    # the synchronous loop skips such steps (tests/core/loops/test_stale_skip.py)
    load_config(None, ["rollout.sync_every=2", "algorithm.staleness_limit=0"])
