"""Framework-neutral rollouts for the importer fixtures: what an engine sampled and a trainer
recomputed, before each framework's writer lays it out (``slime_writer``, ``nemo_writer``,
``prime_writer``).

Faults (applied to the last step): ``gap`` — the trainer's log-probs sit 0.5 nats below the
rollout's on every response token (a broken weight sync); ``retokenized`` — the trainer scores
one response token as a different id (a BPE merge of a decode/encode round trip) whose log-prob,
-7.5, is far from the sampled token's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VOCAB = 1000
FAULTS = (None, "gap", "retokenized")
RETOKENIZED_POS = 2
"""Response position of the re-tokenized token (sample 0 of the faulty step)."""


@dataclass
class Episode:
    prompt: list[int]
    response: list[int]
    """The rollout's response ids."""
    rollout_logp: list[float]
    """[R] the engine's log-prob of each sampled token."""
    train_response: list[int]
    """[R] the ids the trainer scored (== response unless re-tokenized)."""
    train_logp: list[float]
    """[R] the trainer's log-prob of ``train_response``."""
    reward: float
    group: int
    index: int
    truncated: bool
    advantage: float
    entropy: list[float]


def make_steps(
    n_steps: int = 2, *, groups: int = 2, group_size: int = 2, seed: int = 0, fault=None
) -> list[list[Episode]]:
    """``n_steps`` lists of ``groups * group_size`` episodes; ``fault`` hits the last step."""
    if fault not in FAULTS:
        raise ValueError(f"fault {fault!r} not in {FAULTS}")
    rng = np.random.default_rng(seed)
    steps = []
    index = 0
    for step in range(n_steps):
        faulty = fault is not None and step == n_steps - 1
        episodes = []
        for g in range(groups):
            prompt = rng.integers(1, VOCAB, size=5).tolist()
            rewards = rng.integers(0, 2, size=group_size).astype(float)
            rewards[0] = 1.0 - rewards[1 % group_size]  # every group carries signal
            adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
            for k in range(group_size):
                n = int(rng.integers(4, 8))
                response = rng.integers(1, VOCAB, size=n).tolist()
                rollout_logp = -rng.uniform(0.05, 2.0, size=n)
                train_logp = rollout_logp + rng.normal(0.0, 0.002, size=n)
                train_response = list(response)
                if faulty and fault == "gap":
                    train_logp = rollout_logp - 0.5
                if faulty and fault == "retokenized" and not episodes:
                    train_response[RETOKENIZED_POS] = VOCAB - 1 - response[RETOKENIZED_POS]
                    train_logp[RETOKENIZED_POS] = -7.5
                episodes.append(
                    Episode(
                        prompt=prompt,
                        response=response,
                        rollout_logp=rollout_logp.astype(np.float32).tolist(),
                        train_response=train_response,
                        train_logp=np.minimum(train_logp, 0.0).astype(np.float32).tolist(),
                        reward=float(rewards[k]),
                        group=step * groups + g,
                        index=index,
                        truncated=k == 1 and g == 1,
                        advantage=float(adv[k]),
                        entropy=rng.uniform(0.1, 3.0, size=n).astype(np.float32).tolist(),
                    )
                )
                index += 1
        steps.append(episodes)
    return steps
