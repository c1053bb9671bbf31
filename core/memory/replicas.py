"""Rollout worker engine replicas in the trainer's memory ledger: one owner per worker replica.

Each async rollout worker (``core.rollout.worker``) holds an engine replica: its live weights, a
staged back buffer while a sync is in flight, and its sessions' KV cache. The worker reports them
as plain data (``RolloutWorker.memory``, inside ``stats``); ``ReplicaMemory.update`` makes the
ledger match each report: owner ``rollout_worker_<i>``, objects ``rollout_worker_<i>/weights/v<k>``
(``model_state``), ``.../staged/v<k>`` (``communication_buffers``) and ``.../kv_cache``
(``saved_activations``). An object that is gone is freed; one whose size changed (the KV cache) is
freed and created again. A thread worker's replica lives in this process, on the ledger's device,
and counts towards its peak; a process or Ray worker's lives elsewhere: its objects carry the
device ``<device>/rollout_worker_<i>`` and stay out of this process's totals. ``release`` frees
everything when the workers stop. Simplification: the ledger sees a replica as of the last report
(once per training step), not every switch or KV allocation in between.
"""

from __future__ import annotations

from core.memory.ledger import MemoryLedger

_FLOW = {
    "model_state": ("weight_sync.switch", "rollout.generate"),
    "communication_buffers": ("weight_sync.send", "weight_sync.switch"),
    "saved_activations": ("rollout.generate", "rollout.generate"),
}
"""(producer, consumer) of a replica object by its category."""


def replica_owner(worker: int) -> str:
    """The ledger owner of worker ``worker``'s engine replica."""
    return f"rollout_worker_{worker}"


class ReplicaMemory:
    """The ledger's view of the rollout workers' replicas, updated from their reports."""

    def __init__(self, ledger: MemoryLedger) -> None:
        self.ledger = ledger
        self._bytes: dict[str, int] = {}
        """Ledger names of replica objects live now -> their bytes."""

    def update(self, stats: list[dict], *, local: dict[int, bool]) -> None:
        """Match the ledger to the workers' ``stats()`` reports (each with ``worker`` and
        ``memory``: ``name -> (category, bytes)``); ``local[w]``: worker ``w`` runs in this
        process."""
        reported: dict[str, tuple[str, int, int]] = {}
        for st in stats:
            w = int(st["worker"])
            for name, (category, nbytes) in st.get("memory", {}).items():
                reported[f"{replica_owner(w)}/{name}"] = (category, int(nbytes), w)
        for name, nbytes in list(self._bytes.items()):
            if name not in reported or reported[name][1] != nbytes:
                self.ledger.free(name)
                del self._bytes[name]
        for name, (category, nbytes, w) in reported.items():
            if name in self._bytes:
                continue
            owner = replica_owner(w)
            producer, consumer = _FLOW[category]
            self.ledger.create(
                name,
                category,
                nbytes,
                producer=producer,
                consumer=consumer,
                owner=owner,
                device=None if local.get(w, False) else f"{self.ledger.device.name}/{owner}",
                persistent=category == "model_state",
            )
            self._bytes[name] = nbytes

    def release(self) -> None:
        """The workers stopped: every replica object is freed."""
        for name in self._bytes:
            self.ledger.free(name)
        self._bytes.clear()
