"""Verifiable tasks for RL post-training (currently ``arithmetic``)."""
