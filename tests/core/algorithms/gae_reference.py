"""Naive float64 references for GAE: the textbook recursion and SAO's per-action formula.

Scalar Python loops over lists, written from the formulas (not from the vectorized code):
``standard_gae`` runs δ_t = r_t + γV_{t+1} − V_t over consecutive tokens; ``per_action_gae``
walks a trajectory as a list of actions (observations already removed) and links the last token
of action i to the first token of action i+1, as the SAO paper writes it.
"""

from __future__ import annotations


def standard_gae(rewards: list[float], values: list[float], gamma: float, lam: float):
    """Textbook GAE over one sequence (bootstrap 0 after the end): (advantages, returns)."""
    n = len(values)
    adv = [0.0] * n
    nxt_v, nxt_a = 0.0, 0.0
    for t in reversed(range(n)):
        delta = rewards[t] + gamma * nxt_v - values[t]
        adv[t] = delta + gamma * lam * nxt_a
        nxt_v, nxt_a = values[t], adv[t]
    return adv, [a + v for a, v in zip(adv, values, strict=True)]


def per_action_gae(actions: list[list[tuple[float, float]]], gamma: float, lam: float):
    """``actions[i][j] = (r, V)`` of token j of action i → advantages in the same nesting.

    δ(a_i,N) = r + γ·V(a_{i+1},0) − V(a_i,N);  Â(a_i,N) = δ + γλ·Â(a_{i+1},0).
    """
    out = [[0.0] * len(a) for a in actions]
    nxt_v, nxt_a = 0.0, 0.0  # first token of the next action (0 after the last)
    for i in reversed(range(len(actions))):
        for j in reversed(range(len(actions[i]))):
            r, v = actions[i][j]
            if j + 1 < len(actions[i]):  # inside the action: the next token of the same action
                nv, na = actions[i][j + 1][1], out[i][j + 1]
            else:  # the action's last token: the next action's first token
                nv, na = nxt_v, nxt_a
            out[i][j] = r + gamma * nv - v + gamma * lam * na
        if actions[i]:
            nxt_v, nxt_a = actions[i][0][1], out[i][0]
    return out
