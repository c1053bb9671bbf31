"""Environments: where trajectories come from (``reset`` → prompt ids, ``step`` → observation or done)."""
