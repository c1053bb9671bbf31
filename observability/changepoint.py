"""Change points and collapse onset of per-step training curves (pure numpy).

Binary segmentation with the two-sample mean-shift statistic (the Gaussian likelihood ratio for
one shift in mean) of a series x over a segment [a, b):
    z(k) = |mean(x[a:k]) − mean(x[k:b])| / (σ · sqrt(1/(k − a) + 1/(b − k))),
σ the series' noise: 1.4826·MAD(Δx)/√2 (first differences make it robust to the shift itself),
floored at 2% of |median x| and at 1e-3 (and at ``reward_noise`` for the reward). A segment's
best split is kept when z ≥ ``z_min`` (4) with ≥ ``min_size`` (2) steps per side; both halves
recurse. Collapse onset = first step of the first segment whose reward mean falls ≥
max(``drop_abs``, ``drop_rel``·best) below the best earlier segment, or whose entropy leaves
(1 ± ``entropy_rel``) × the first segment's while the reward has not improved — in both cases
with the rest of the run past that line on average (a dip that recovers is no collapse).
Layout: series are float64 arrays [N] over consecutive logged steps; ``steps`` [N] holds the step
numbers. Left out: multiple-testing corrections beyond the fixed z_min, trend models (a slow
drift splits like a step), online (streaming) detection.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def noise_sigma(x: np.ndarray, *, floor_rel: float = 0.02, floor_abs: float = 1e-3) -> float:
    """Robust noise of a series [N]: 1.4826·MAD(Δx)/√2, at least ``floor_rel``·|median x| and
    ``floor_abs`` (a series that is constant for long stretches has MAD 0)."""
    x = np.asarray(x, dtype=np.float64)
    d = np.diff(x)
    mad = float(np.median(np.abs(d - np.median(d)))) if d.size else 0.0
    rel = floor_rel * abs(float(np.median(x))) if x.size else 0.0
    return max(1.4826 * mad / np.sqrt(2.0), rel, floor_abs)


def shift_statistic(
    x: np.ndarray, *, sigma: float, min_size: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """z(k) for every split of ``x`` [N] with ≥ ``min_size`` points per side: (ks [K], z [K]),
    k = first index of the right side (see the module docstring)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    ks = np.arange(min_size, n - min_size + 1)
    csum = np.concatenate([[0.0], np.cumsum(x)])  # [N+1]
    n_left, n_right = ks, n - ks
    diff = csum[ks] / n_left - (csum[n] - csum[ks]) / n_right
    return ks, np.abs(diff) / (sigma * np.sqrt(1.0 / n_left + 1.0 / n_right))


def change_points(
    x: np.ndarray, *, z_min: float = 4.0, min_size: int = 2, sigma: float | None = None
) -> list[int]:
    """Indices k (sorted) where a new mean segment of ``x`` [N] starts, by binary segmentation."""
    x = np.asarray(x, dtype=np.float64)
    sigma = noise_sigma(x) if sigma is None else sigma
    found: list[int] = []
    stack = [(0, len(x))]
    while stack:
        a, b = stack.pop()
        if b - a < 2 * min_size:
            continue
        ks, z = shift_statistic(x[a:b], sigma=sigma, min_size=min_size)
        best = int(np.argmax(z))
        if z[best] >= z_min:
            k = a + int(ks[best])
            found.append(k)
            stack += [(a, k), (k, b)]
    return sorted(found)


@dataclass(frozen=True)
class Onset:
    """Where a run collapsed (``step`` None: it did not)."""

    step: int | None
    """First step of the collapsed segment."""
    metric: str | None
    """``reward_mean`` or ``entropy``: which series collapsed first."""
    before: float | None
    """Reference mean before the onset (best earlier reward segment / first entropy segment)."""
    after: float | None
    """Mean of the collapsed segment."""

    def __bool__(self) -> bool:
        return self.step is not None


NO_ONSET = Onset(None, None, None, None)


def _first_collapse(x: np.ndarray, cuts: list[int], outside) -> int | None:
    """Index of the first segment j ≥ 1 whose mean and the mean of all later steps are both
    ``outside(mean, j)``; ``cuts`` = [0, change points..., N]."""
    for j in range(1, len(cuts) - 1):
        if outside(x[cuts[j] : cuts[j + 1]].mean(), j) and outside(x[cuts[j] :].mean(), j):
            return j
    return None


def find_onset(
    steps: np.ndarray,
    reward: np.ndarray,
    entropy: np.ndarray,
    *,
    reward_noise: float = 0.0,
    z_min: float = 4.0,
    min_size: int = 2,
    drop_abs: float = 0.05,
    drop_rel: float = 0.3,
    entropy_rel: float = 0.5,
) -> Onset:
    """Collapse onset from the per-step series ``steps``, ``reward``, ``entropy`` (each [N]).

    ``reward_noise``: lower bound on the reward's σ (the sampling error of a step's mean).
    """
    steps, reward = np.asarray(steps), np.asarray(reward, dtype=np.float64)
    entropy = np.asarray(entropy, dtype=np.float64)
    entropy = np.nan_to_num(
        entropy, nan=float(np.nanmean(entropy)) if np.isfinite(entropy).any() else 0.0
    )
    found = []
    sigma = max(noise_sigma(reward), reward_noise)
    cuts = [0, *change_points(reward, z_min=z_min, min_size=min_size, sigma=sigma), len(reward)]
    means = [reward[a:b].mean() for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    best = np.maximum.accumulate(means)  # best[j - 1]: the best segment before segment j
    j = _first_collapse(
        reward, cuts, lambda m, j: m <= best[j - 1] - max(drop_abs, drop_rel * abs(best[j - 1]))
    )
    if j is not None:
        seg = reward[cuts[j] : cuts[j + 1]].mean()
        found.append(Onset(int(steps[cuts[j]]), "reward_mean", float(best[j - 1]), float(seg)))
    cuts = [0, *change_points(entropy, z_min=z_min, min_size=min_size), len(entropy)]
    first = entropy[: cuts[1]].mean()

    def entropy_out(m: float, j: int) -> bool:
        improved = reward[cuts[j] :].mean() > reward[: cuts[j]].mean()
        return abs(m - first) >= entropy_rel * abs(first) and not improved

    j = _first_collapse(entropy, cuts, entropy_out)
    if j is not None:
        seg = entropy[cuts[j] : cuts[j + 1]].mean()
        found.append(Onset(int(steps[cuts[j]]), "entropy", float(first), float(seg)))
    return min(found, key=lambda o: o.step) if found else NO_ONSET
