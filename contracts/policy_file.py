"""Read a policy TOML (default ``contracts/release.toml``) into a ``Policy`` whose ``[checks]``
ids are validated against the registered checks.

It sits above both ``contracts.policy`` (the dataclasses, which the checks read through their
context) and ``contracts.registry`` (which imports the checks), so neither imports the other.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from contracts.policy import DEFAULT_POLICY, Policy, policy_from_dict
from contracts.registry import all_check_ids


def load_policy(path: str | Path | None = None) -> Policy:
    """Read a policy TOML (default ``contracts/release.toml``); ValueError on any bad entry."""
    path = Path(path) if path is not None else DEFAULT_POLICY
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise ValueError(f"cannot read policy {path}: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"policy {path} is not valid TOML: {e}") from e
    return policy_from_dict(raw, all_check_ids())
