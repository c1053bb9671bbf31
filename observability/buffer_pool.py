"""Reused memory for the sink's snapshots of emitted columns (``records.snapshot``).

``emit`` copies every array so the caller may reuse its buffers; on a 1 M-token step the page
faults of fresh buffers cost 4x the copy, so the writer hands written buffers back for reuse.
"""

from __future__ import annotations

import collections

import numpy as np


class BufferPool:
    """Memory for ``snapshot``'s copies: large arrays go into buffers the writer has released
    (pages already mapped) instead of fresh ones, whose page faults cost 4x the copy on a 1 M-token
    step. Buckets of power-of-two sizes; at most ``max_bytes`` wait in the pool."""

    MIN_BYTES = 1 << 16

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.free_bytes = max_bytes, 0
        self._free: dict[int, collections.deque] = {}

    def copy(self, a: np.ndarray, used: list[np.ndarray]) -> np.ndarray:
        """A copy of ``a`` (C order); the buffer it lives in is appended to ``used``."""
        if a.nbytes < self.MIN_BYTES:
            return np.array(a, copy=True)
        size = 1 << (a.nbytes - 1).bit_length()
        try:
            buf = self._free[size].pop()
            self.free_bytes -= size
        except (KeyError, IndexError):
            buf = np.empty(size, dtype=np.uint8)
        used.append(buf)
        out = buf[: a.nbytes].view(a.dtype).reshape(a.shape)
        np.copyto(out, a)
        return out

    def release(self, used: list[np.ndarray]) -> None:
        """Give back buffers once nothing reads them (the writer wrote their part)."""
        for buf in used:
            if self.free_bytes + buf.nbytes <= self.max_bytes:
                self._free.setdefault(buf.nbytes, collections.deque()).append(buf)
                self.free_bytes += buf.nbytes
