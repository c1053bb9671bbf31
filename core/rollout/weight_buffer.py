"""Double-buffered engine weights: stage a new version anywhere, switch only between decode steps.

The *front* buffer is the engine's live ``weights`` dict; ``stage`` (any thread: the trainer's
sync, a worker's RPC) prepares the *back* buffer — the payload cast to the engine's precision —
without touching the front. ``switch_point`` is called only by the thread that decodes, between
two forwards; it swaps the back buffer in (one reference assignment, with the version) and reports
the switch. So a forward never mixes versions and a token's logits come from one version; "sent"
(staged) is never taken for "live": only a switch the worker reports counts.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SwitchEvent:
    """A version went live on a worker (what the worker acknowledges)."""

    worker: int
    version: int
    staged_at: float
    """time.time() when the payload was staged (sent)."""
    switched_at: float
    """time.time() of the switch (between two decode steps)."""
    checksum: str | None
    """Checksum of the payload as staged (the sender's), echoed back."""


class DoubleBufferedWeights:
    """Front/back weight buffers of one engine."""

    def __init__(self, engine, worker: int = 0) -> None:
        self.engine, self.worker = engine, worker
        self._lock = threading.Lock()
        self._back: tuple[dict, int, float, str | None] | None = None

    def stage(self, payload: dict, version: int, checksum: str | None = None) -> None:
        """Prepare ``payload`` (engine layout) as ``version`` in the back buffer; an older or
        equal version than what is live or staged is ignored."""
        dtype = self.engine.dtype
        back = {
            k: (v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
            for k, v in payload.items()
        }
        with self._lock:
            newest = max(self.engine.policy_version, self._back[1] if self._back else -1)
            if version <= newest:
                return
            self._back = (back, version, time.time(), checksum)

    @property
    def pending(self) -> int | None:
        """The staged version not yet live, if any."""
        with self._lock:
            return None if self._back is None else self._back[1]

    @property
    def live(self) -> tuple[int, int] | None:
        """(version, bytes) of the live front buffer (the engine's weights), if any."""
        with self._lock:
            weights, version = self.engine.weights, self.engine.policy_version
        return (version, weight_bytes(weights)) if weights else None

    @property
    def staged(self) -> tuple[int, int] | None:
        """(version, bytes) of the staged back buffer, if any."""
        with self._lock:
            return None if self._back is None else (self._back[1], weight_bytes(self._back[0]))

    def switch_point(self) -> SwitchEvent | None:
        """Called by the decoding thread between forwards: make the staged version live."""
        with self._lock:
            if self._back is None:
                return None
            weights, version, staged_at, checksum = self._back
            self._back = None
            if hasattr(self.engine, "switch_to"):  # vLLM: reload_weights in place
                self.engine.switch_to(weights, version)
            else:
                self.engine.weights = weights
                self.engine.policy_version = version
        return SwitchEvent(self.worker, version, staged_at, time.time(), checksum)


def weight_bytes(weights: dict) -> int:
    """Bytes of the distinct tensor storages among ``weights``' values (a shared one counts once)."""
    seen: dict[int, int] = {}
    for v in weights.values():
        if isinstance(v, torch.Tensor):
            storage = v.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())
