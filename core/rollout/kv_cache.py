"""Session KV cache of one rollout worker: the keys/values of a multi-turn session kept between turns.

An entry belongs to one session and one worker (its ``owner``) and remembers the exact token ids
it was computed over and, per slot, the policy version of the weights that computed it. A turn
reuses the longest cached prefix of its context only if the cached ids *are* that prefix (TITO:
anything re-tokenized is a miss) and the entry is this worker's. On a weight switch the entries are
dropped (``kv_on_switch = "invalidate"``, the default) or kept (``"keep"``: the fault — later tokens
are then decoded against keys/values of an older version, which the decoder records per token as
``kv_version``). Simplifications: whole entries (no paging), LRU eviction by session count.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

KV_ON_SWITCH = ("invalidate", "keep")


@dataclass
class KVEntry:
    """Keys/values of one session's first ``len(ids)`` tokens on one worker."""

    session_id: int
    owner: int
    """Worker id that computed and holds the entry."""
    ids: list[int]
    """The exact token ids the keys/values were computed over."""
    keys: list[torch.Tensor]
    """Per layer [n, Hkv, D] (engine dtype), RoPE applied at positions 0..n-1."""
    values: list[torch.Tensor]
    """Per layer [n, Hkv, D]."""
    slot_version: torch.Tensor
    """[n] int64: policy version of the weights that computed each slot."""

    @property
    def version(self) -> int:
        """Oldest version among the entry's slots."""
        return int(self.slot_version.min()) if len(self.ids) else -1


class SessionKVCache:
    """The session entries of one worker."""

    def __init__(self, owner: int, *, on_switch: str = "invalidate", capacity: int = 512) -> None:
        if on_switch not in KV_ON_SWITCH:
            raise ValueError(f"rollout.kv_on_switch={on_switch!r} not in {list(KV_ON_SWITCH)}")
        if capacity < 1:
            raise ValueError(f"KV cache capacity={capacity} must be >= 1")
        self.owner, self.on_switch, self.capacity = owner, on_switch, capacity
        self._entries: OrderedDict[int, KVEntry] = OrderedDict()
        self.stats = {"hits": 0, "misses": 0, "reused_tokens": 0, "invalidated": 0, "evicted": 0}
        self.nbytes = 0
        """Bytes of the keys/values held now (what the worker reports to the memory ledger)."""

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, session_id: int, context: list[int]) -> tuple[KVEntry | None, int]:
        """(entry, reusable length): the cached prefix of ``context`` (at most all but its last
        token, whose logits the turn needs), or (None, 0) on a miss."""
        entry = self._entries.get(session_id)
        if entry is None or entry.owner != self.owner:
            self.stats["misses"] += 1
            return None, 0
        n = min(len(entry.ids), len(context) - 1)
        if n <= 0 or entry.ids[:n] != context[:n] or len(entry.ids) > len(context):
            self.stats["misses"] += 1
            return None, 0
        self._entries.move_to_end(session_id)
        self.stats["hits"] += 1
        self.stats["reused_tokens"] += n
        return entry, n

    def store(self, entry: KVEntry) -> None:
        if entry.owner != self.owner:
            raise ValueError(f"worker {self.owner} cannot hold a KV entry owned by {entry.owner}")
        self._drop(entry.session_id)
        self._entries[entry.session_id] = entry
        self.nbytes += _entry_bytes(entry)
        while len(self._entries) > self.capacity:
            self._drop(next(iter(self._entries)))
            self.stats["evicted"] += 1

    def release(self, session_ids) -> None:
        """Forget finished sessions."""
        for sid in session_ids:
            self._drop(sid)

    def switched(self, version: int) -> int:
        """A weight switch to ``version`` went live: invalidate (or keep) the entries; returns how
        many were dropped."""
        if self.on_switch == "keep":
            return 0
        n = len(self._entries)
        self._entries.clear()
        self.nbytes = 0
        self.stats["invalidated"] += n
        return n

    def _drop(self, session_id: int) -> None:
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            self.nbytes -= _entry_bytes(entry)


def _entry_bytes(entry: KVEntry) -> int:
    return sum(t.nbytes for t in (*entry.keys, *entry.values)) + entry.slot_version.nbytes
