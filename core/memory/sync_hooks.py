"""The weight sync's buffers in the memory ledger: what a sync gathers, stages and installs.

A mixin of ``core.memory.hooks.TrainingMemory`` (which owns ``self.ledger``); the weight sync
calls these hooks in its phase order: :meth:`sync_gathered`, :meth:`sync_buffers` (per stage),
:meth:`weights_switched`, :meth:`sync_done`. Buffers the engine installs as they are move to the
engine's weights at the switch instead of being counted twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import torch

from core.memory.footprint import Key, distinct_bytes, iter_leaves, leaf_bytes, leaf_key
from core.memory.ledger import MemoryLedger


class WeightSyncMemory:
    """Ledger objects of the weight sync (owner ``weight_sync``) and the engine's weights."""

    ledger: MemoryLedger

    def _init_sync_state(self) -> None:
        self._sync_buffers: dict[Key, str] = {}  # per-tensor payload buffers of the running sync
        self._sync_objects: list[str] = []  # its aggregate buffers (the gathered weights)
        self._sync_seen: set[Key] = set()  # storages inside those aggregates
        self._engine_weights: dict[Key, str] = {}
        self._resyncs = itertools.count(1)

    def sync_gathered(self, gathered: Mapping[str, Any]) -> None:
        """The actor's weights were gathered (copied) by name: one buffer object for the sync."""
        nbytes, tensors, dtypes = distinct_bytes(gathered, self._sync_seen)
        self.ledger.create(
            "weight_sync/gather",
            "communication_buffers",
            nbytes,
            logical_shape=(len(tensors),),
            dtype="/".join(sorted(dtypes)) or "none",
            layout="record",
            producer="actor",
            consumer="weight_sync.reshard",
            owner="weight_sync",
            device=str(tensors[0].device) if tensors else None,
        )
        self._sync_objects.append("weight_sync/gather")

    def sync_buffers(
        self, stage: str, payload: Mapping[str, Any], *, replaces: str | None = None
    ) -> None:
        """A sync stage's payload (``reshard``, ``quantize``) exists: one object per stored tensor.

        Leaves already tracked (passed through from an earlier stage, or current engine weights)
        are not counted again; ``replaces`` names the stage whose payload this one replaced: its
        buffers not passed through are freed. Per tensor, so the switch can see what the engine
        installs as it is.
        """
        producer, consumer = f"weight_sync.{stage}", "rollout.load_weights"
        keep: set[Key] = set()
        for name, obj in payload.items():
            for sub, leaf, packed in iter_leaves(obj, name):
                key = leaf_key(leaf)
                keep.add(key)
                if (
                    key in self._sync_buffers
                    or key in self._sync_seen
                    or key in self._engine_weights
                ):
                    continue
                obj_name = f"weight_sync/{stage}/{sub}"
                if self._create_leaf(
                    obj_name,
                    leaf,
                    packed,
                    category="communication_buffers",
                    owner="weight_sync",
                    producer=producer,
                    consumer=consumer,
                ):
                    self._sync_buffers[key] = obj_name
        if replaces is not None:
            prefix = f"weight_sync/{replaces}/"
            for key, obj_name in list(self._sync_buffers.items()):
                if obj_name.startswith(prefix) and key not in keep:
                    self.ledger.free(self._sync_buffers.pop(key))

    def weights_switched(self, weights: Mapping[str, Any], version: int) -> None:
        """The engine installed ``weights`` (version ``version``); the previous ones are gone."""
        new: dict[Key, str] = {}
        tag = f"v{version}"
        if any(n.startswith(f"rollout/weights/{tag}/") for n in self._engine_weights.values()):
            tag = f"{tag}.{next(self._resyncs)}"  # the same version synced again
        for name, obj in weights.items():
            for sub, leaf, packed in iter_leaves(obj, name):
                key = leaf_key(leaf)
                if key in new:
                    continue
                if key in self._engine_weights:  # kept from the previous version
                    new[key] = self._engine_weights.pop(key)
                    continue
                adopted = self._sync_buffers.pop(key, None)
                if adopted is not None:  # the sync's buffer is now the engine's weight
                    self.ledger.free(adopted)
                obj_name = f"rollout/weights/{tag}/{sub}"
                if self._create_leaf(
                    obj_name,
                    leaf,
                    packed,
                    category="model_state",
                    owner="rollout",
                    producer="weight_sync.switch",
                    consumer="rollout.generate",
                    persistent=True,
                ):
                    new[key] = obj_name
        for obj_name in self._engine_weights.values():
            self.ledger.free(obj_name)
        self._engine_weights = new

    def sync_done(self) -> None:
        """The sync returned: its remaining buffers (gather, unadopted payload) are released."""
        for obj_name in [*self._sync_objects, *self._sync_buffers.values()]:
            self.ledger.free(obj_name)
        self._sync_objects.clear()
        self._sync_buffers.clear()
        self._sync_seen.clear()

    def _create_leaf(
        self,
        name: str,
        leaf: Any,
        packed: bool,
        *,
        category: str,
        owner: str,
        producer: str,
        consumer: str,
        persistent: bool = False,
    ) -> bool:
        nbytes = leaf_bytes(leaf)
        if nbytes == 0:
            return False
        if isinstance(leaf, torch.Tensor):
            self.ledger.track_tensor(
                name,
                leaf,
                category=category,
                owner=owner,
                producer=producer,
                consumer=consumer,
                persistent=persistent,
                bytes=nbytes,
                layout="packed" if packed else None,
            )
        else:
            self.ledger.create(
                name,
                category,
                nbytes,
                logical_shape=getattr(leaf, "shape", ()),
                dtype=type(leaf).__name__,
                layout="packed",
                producer=producer,
                consumer=consumer,
                owner=owner,
                persistent=persistent,
            )
        return True
