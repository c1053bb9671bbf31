"""Per-step memory peak: the instant of the largest tracked live total and its breakdown.

Simplifications: the peak is over *tracked* bytes on one device (the first instant that reaches
the maximum wins ties); allocator and untracked bytes are sampled at that instant only.

Lines that are not tracked objects (how they appear in ``memory_peaks``):
- ``allocator``/``allocator``: reserved - allocated from the CUDA/NPU caching allocator;
  on the CPU there is no allocator statistic, so the row carries ``bytes = None`` (not measured).
- ``runtime_margin``/``untracked``: measured - tracked, where measured is the allocator's
  ``allocated`` (CUDA/NPU) or the process RSS (CPU). It is never hidden; it sits in the
  ``runtime_margin`` category because it is memory the ledger does not attribute to any
  component (framework, libraries, autograd temporaries). Negative means tracked bytes that are
  not resident (untouched or memory-mapped pages).
- ``operator_workspace``/``not_measured`` with ``bytes = None``: no backend reports operator
  workspace to us, so unless a component tracks ``operator_workspace`` objects it is stated as
  not measured, never invented (on CUDA/NPU it is inside the untracked line).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core.memory.categories import CATEGORIES

ALLOCATOR_LINE = ("allocator", "allocator")
UNTRACKED_LINE = ("runtime_margin", "untracked")
NOT_MEASURED_OWNER = "not_measured"

Sampler = Callable[[], tuple[int | None, int | None]]
"""Returns (allocator bytes or None, measured bytes or None) at the current instant."""


@dataclass(frozen=True)
class Peak:
    """One step's peak instant on one device; all byte counts are tracked bytes unless named."""

    step: int
    total: int
    """Tracked live bytes at the peak instant (``steps.peak_memory_bytes``)."""
    ts: int
    """Monotonic timestamp (ns) of the peak instant."""
    by_category_owner: Mapping[tuple[str, str], int]
    """Tracked bytes per (category, owner) pair with nonzero bytes."""
    allocator_bytes: int | None
    """Reserved - allocated at the peak (CUDA/NPU); None = not measured (CPU)."""
    measured_bytes: int | None
    """Allocated (CUDA/NPU) or process RSS (CPU) at the peak; None if not sampled."""
    workspace_measured: bool = False
    """Whether any ``operator_workspace`` object was ever tracked by this ledger."""

    @property
    def by_category(self) -> dict[str, int]:
        """Tracked bytes per category, all seven keys."""
        out = dict.fromkeys(CATEGORIES, 0)
        for (category, _), nbytes in self.by_category_owner.items():
            out[category] += nbytes
        return out

    @property
    def by_owner(self) -> dict[str, int]:
        """Tracked bytes per owner (owners with bytes only)."""
        out: dict[str, int] = {}
        for (_, owner), nbytes in self.by_category_owner.items():
            out[owner] = out.get(owner, 0) + nbytes
        return out

    @property
    def untracked_bytes(self) -> int | None:
        """Measured - tracked at the peak; None when nothing was measured."""
        return None if self.measured_bytes is None else self.measured_bytes - self.total

    def rows(self) -> dict[tuple[str, str], int | None]:
        """Every line of the breakdown: tracked pairs, allocator, untracked, not-measured ones."""
        rows: dict[tuple[str, str], int | None] = dict(self.by_category_owner)
        rows[ALLOCATOR_LINE] = self.allocator_bytes
        rows[UNTRACKED_LINE] = self.untracked_bytes
        if not self.workspace_measured:
            rows[("operator_workspace", NOT_MEASURED_OWNER)] = None
        return rows

    def columns(self, *, rank: int) -> dict[str, list[Any]]:
        """``memory_peaks`` columns (step, rank, category, owner, bytes), one row per line."""
        rows = self.rows()
        return {
            "step": [self.step] * len(rows),
            "rank": [rank] * len(rows),
            "category": [c for c, _ in rows],
            "owner": [o for _, o in rows],
            "bytes": list(rows.values()),
        }


class PeakTracker:
    """Keeps, per step, the first instant of the largest tracked live total."""

    def __init__(self, *, sampler: Sampler | None = None) -> None:
        self._sampler = sampler
        self._peaks: dict[int, Peak] = {}
        self._step: int | None = None
        self.workspace_measured = False

    def start_step(
        self, step: int, ts: int, total: int, by_pair: Mapping[tuple[str, str], int]
    ) -> None:
        """Open ``step``'s window with the live state now (a repeated step keeps its peak)."""
        self._step = step
        if step not in self._peaks:
            self._snapshot(ts, total, by_pair)

    def observe(self, ts: int, total: int, by_pair: Mapping[tuple[str, str], int]) -> None:
        """Called after every change of the live total; snapshots a new maximum."""
        if total > self._peaks[self._step].total:
            self._snapshot(ts, total, by_pair)

    def peak(self, step: int) -> Peak:
        """The peak of ``step`` (KeyError naming the known steps if never opened)."""
        if step not in self._peaks:
            raise KeyError(f"no memory peak for step {step}; known steps: {sorted(self._peaks)}")
        return self._peaks[step]

    def _snapshot(self, ts: int, total: int, by_pair: Mapping[tuple[str, str], int]) -> None:
        allocator, measured = self._sampler() if self._sampler is not None else (None, None)
        self._peaks[self._step] = Peak(
            step=self._step,
            total=total,
            ts=ts,
            by_category_owner={k: v for k, v in by_pair.items() if v},
            allocator_bytes=allocator,
            measured_bytes=measured,
            workspace_measured=self.workspace_measured,
        )
