"""Saved-activation bytes of a forward, measured with ``torch.autograd.graph.saved_tensors_hooks``.

Every tensor autograd saves for backward passes through the pack hook; we count the bytes of its
*storage* once (views and tensors sharing a storage are deduplicated by (device, data pointer))
and skip storages of ``exclude`` (parameters: already model state). Simplifications: one
context per forward (while the graph lives no saved storage can be freed, so pointers are
unique); the bytes are reported as one ledger object created at the end of the forward, so the
ledger sees the activations' maximum, not their growth inside the forward or release in backward.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

import torch

from core.memory.ledger import MemoryLedger


def _storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    return str(tensor.device), tensor.untyped_storage().data_ptr()


class SavedActivations:
    """Context manager around a forward: ``bytes`` = distinct storage bytes autograd saved.

    With a ``ledger``, exiting creates the object ``name`` (category ``saved_activations``)
    owned by ``owner``; call :meth:`free` once backward has consumed the graph.
    """

    def __init__(
        self,
        ledger: MemoryLedger | None = None,
        *,
        name: str = "actor/saved_activations",
        owner: str = "actor",
        producer: str = "actor.forward",
        consumer: str = "actor.backward",
        exclude: Iterable[torch.Tensor] = (),
    ) -> None:
        self.ledger = ledger
        self.name = name
        self.owner = owner
        self.producer = producer
        self.consumer = consumer
        self._excluded = {_storage_key(t) for t in exclude}
        self._seen: set[tuple[str, int]] = set()
        self._dtypes: set[str] = set()
        self._hooks: torch.autograd.graph.saved_tensors_hooks | None = None
        self.bytes = 0
        """Distinct saved storage bytes, excluding ``exclude``."""
        self.excluded_bytes = 0
        """Distinct saved storage bytes that belong to ``exclude`` (not counted in ``bytes``)."""
        self.num_saved = 0
        """Pack-hook calls (saved tensor references, before deduplication)."""
        self.num_storages = 0
        """Distinct storages counted in ``bytes``."""

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self.num_saved += 1
        key = _storage_key(tensor)
        if key not in self._seen:
            self._seen.add(key)
            nbytes = tensor.untyped_storage().nbytes()
            if key in self._excluded:
                self.excluded_bytes += nbytes
            else:
                self.bytes += nbytes
                self.num_storages += 1
                self._dtypes.add(str(tensor.dtype).removeprefix("torch."))
        return tensor

    @property
    def seen_storages(self) -> frozenset[tuple[str, int]]:
        """(device, data pointer) of every storage the forward saved, excluded ones included."""
        return frozenset(self._seen)

    @staticmethod
    def _unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def __enter__(self) -> SavedActivations:
        if self._hooks is not None:
            raise RuntimeError("SavedActivations is not re-entrant; use one per forward")
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._hooks is not None
        self._hooks.__exit__(exc_type, exc, tb)
        if exc_type is None and self.ledger is not None:
            self.ledger.create(
                self.name,
                "saved_activations",
                self.bytes,
                logical_shape=(self.num_storages,),
                dtype="/".join(sorted(self._dtypes)) or "none",
                layout="autograd_saved",
                producer=self.producer,
                consumer=self.consumer,
                owner=self.owner,
            )

    def free(self) -> None:
        """Free the ledger object after backward (no-op without a ledger)."""
        if self.ledger is not None:
            self.ledger.free(self.name)
