"""A hand-made ``SparseStep`` shared by the capture and records tests (values in comments)."""

import torch

from core.model.dsa_select import TopkSelection
from core.telemetry.sparse import SparseStep


def sel(indices):
    """TopkSelection from nested lists [B, T, k] of positions (-1 = padding), no boundary ties."""
    idx = torch.tensor(indices)
    return TopkSelection(idx, idx >= 0, torch.zeros(idx.shape[:2], dtype=torch.int32))


def hand_step() -> SparseStep:
    """B=2 samples, 4 query slots, k=2; 4 action queries: (0, 1), (0, 2), (1, 2), (1, 3)."""
    mask = torch.tensor([[False, True, True, False], [False, False, True, True]])
    train = [[[0, -1], [0, 1], [1, 2], [0, 2]], [[-1, -1], [0, -1], [0, 1], [0, 2]]]
    rollout = [[[0, -1], [0, 1], [1, 2], [1, 2]], [[-1, -1], [0, -1], [0, 1], [1, 2]]]
    # layer 0: differs at (0, 3) (not an action query: ignored) and at (1, 3) (counted)
    # layer 1: identical everywhere
    topk = {0: (sel(train), sel(rollout)), 1: (sel(train), sel(train))}
    r_train = torch.tensor([[[0, 1], [0, 1], [2, 3], [0, 1]], [[0, 1], [0, 1], [2, 3], [1, 3]]])
    r_roll = r_train.clone()
    r_roll[0, 1] = torch.tensor([1, 0])  # same set, other order: agrees
    r_roll[1, 2] = torch.tensor([2, 0])  # other set: disagrees
    routes = {1: (r_train, r_roll)}
    return SparseStep(mask, torch.tensor([0, 1]), 2, topk, routes)
