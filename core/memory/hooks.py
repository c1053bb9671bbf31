"""The training loop's memory-ledger glue: what each loop point creates, hands over and frees.

One :class:`TrainingMemory` per session owns the :class:`MemoryLedger` (on the actor's device) and
is called at fixed points of ``core.loops.grpo``, by the rollout engine (each KV-cache allocation)
and by the weight sync (its buffers and the weight switch); categories and owners are listed in
``core.memory.categories``. Simplifications: payload, record and cache bytes are *distinct storage*
bytes (views count once); a KV cache is freed when its tensors die (``weakref.finalize``); the
sync's buffers that the engine installs as they are (fp32 ``.to`` is a no-op) move to the
engine's weights at the switch instead of being counted twice.
"""

from __future__ import annotations

import dataclasses
import itertools
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from core.memory.activations import SavedActivations
from core.memory.footprint import Key, distinct_bytes, iter_leaves, leaf_key
from core.memory.ledger import MemoryLedger, tensor_layout
from core.memory.model_state import free_gradients, track_model_state
from core.memory.peak import Peak
from core.memory.sync_hooks import WeightSyncMemory


class TrainingMemory(WeightSyncMemory):
    """The session's ledger and the calls the loop, the rollout engine and the weight sync make.

    ``engine``/``weight_sync`` (optional) get ``memory_hooks = self`` so they report KV caches and
    sync buffers. Loop order per step: :meth:`begin_step`, :meth:`rollout_done`,
    :meth:`forward_begin`, :meth:`forward_end`, :meth:`backward_done`, :meth:`optimizer_stepped`,
    :meth:`end_step`; :meth:`finish` once at the end of the run.
    """

    def __init__(
        self,
        actor: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        telemetry: Any,
        engine: Any = None,
        weight_sync: Any = None,
        rank: int = 0,
    ) -> None:
        self.actor = actor
        self.optimizer = optimizer
        # trainable models by ledger owner: (module, optimizer, optimizer states seen)
        self._models: dict[str, list] = {"actor": [actor, optimizer, 0]}
        self.telemetry = telemetry
        self.ledger = MemoryLedger(rank, str(next(actor.parameters()).device))
        self._acts: SavedActivations | None = None
        # the step's live IO, freed at end_step: name -> (tensors, storage keys); the tensors are
        # excluded from saved activations and the keys from later live-IO objects
        self._step_io: dict[str, tuple[list[torch.Tensor], set[Key]]] = {}
        self._init_sync_state()
        self._kv_ids = itertools.count()
        track_model_state(self.ledger, actor, optimizer, owner="actor")
        if engine is not None:
            engine.memory_hooks = self
        if weight_sync is not None:
            weight_sync.memory_hooks = self

    # ------------------------------------------------------------------ training loop points
    def begin_step(self, step: int) -> None:
        """Open ``step``'s peak window (also before an evaluation at ``step``)."""
        self.ledger.set_step(step)

    def rollout_done(self, traj: Any) -> None:
        """The rollout's trajectories exist (live IO): created by the rollout, handed to the
        trainer. DSA Top-k buffers among its engine records are their own object."""
        engine = dict(getattr(traj, "engine_records", None) or {})
        topk = engine.pop("topk", None) or {}
        records = {
            f.name: getattr(traj, f.name)
            for f in dataclasses.fields(traj)
            if f.name != "engine_records"
        } | engine
        self._live_io("rollout/records", records, producer="rollout.generate")
        if topk:  # DSA Top-k index buffers, for the train/rollout Top-k agreement
            self._live_io("rollout/dsa_topk", topk, producer="rollout.dsa_select")

    def forward_begin(self, batch: Any) -> None:
        """The trainer's batch exists (live IO); start measuring the actor's saved activations."""
        self._live_io("trainer/train_batch", batch, producer="trainer.build_batch", owner="trainer")
        self._acts = SavedActivations(
            self.ledger,
            owner="actor",
            producer="actor.forward",
            consumer="actor.backward",
            exclude=[
                *(p for module, _, _ in self._models.values() for p in module.parameters()),
                *(t for ts, _ in self._step_io.values() for t in ts),
            ],
        )
        self._acts.__enter__()

    def forward_end(self, *outputs: torch.Tensor, sparse: Any = None) -> None:
        """Forward and loss are built: the saved activations become one ledger object.

        ``outputs`` (e.g. the logits [B, T, V]) are forward results the loop keeps alive for the
        rest of the step; their storages that autograd did not save become ``actor/outputs``
        (live IO, actor -> trainer). ``sparse`` (the step's train/rollout DSA Top-k and MoE
        records, or None) becomes ``trainer/sparse_records``. Both are freed at :meth:`end_step`.
        """
        assert self._acts is not None, "forward_end without forward_begin"
        self._acts.__exit__(None, None, None)
        if sparse is not None:
            self._live_io(
                "trainer/sparse_records", sparse, producer="trainer.capture_sparse", owner="trainer"
            )
        if outputs:
            seen = set(self._acts.seen_storages).union(*(k for _, k in self._step_io.values()))
            nbytes, tensors, dtypes = distinct_bytes(outputs, seen)
            if tensors:
                self._drop_stale("actor/outputs")
                self.ledger.create(
                    "actor/outputs",
                    "live_io",
                    nbytes,
                    logical_shape=tensors[0].shape,
                    dtype="/".join(sorted(dtypes)),
                    layout=tensor_layout(tensors[0]),
                    producer="actor.forward",
                    consumer="trainer.loss",
                    owner="trainer",
                )
                self._step_io["actor/outputs"] = ([], set())

    def backward_done(self) -> None:
        """Last step's gradients went at ``zero_grad``, backward freed the activations and made
        this step's gradients: recorded in that order, so no instant counts both."""
        for owner, (module, _, _) in self._models.items():
            free_gradients(self.ledger, module, owner=owner)
        if self._acts is not None:
            self._acts.free()
            self._acts = None
        for owner, (module, optimizer, _) in self._models.items():
            track_model_state(self.ledger, module, optimizer, owner=owner)

    def optimizer_stepped(self) -> None:
        """Track optimizer states created by the step (AdamW creates them on the first step)."""
        for owner, entry in self._models.items():
            module, optimizer, seen = entry
            n_states = sum(len(state) for state in optimizer.state.values())
            if n_states != seen:  # skip the walk over every parameter once nothing is new
                track_model_state(self.ledger, module, optimizer, owner=owner)
                entry[2] = n_states

    def add_model(self, owner: str, module: torch.nn.Module, optimizer) -> None:
        """Track another trainable model (a critic, ...) as its own ledger owner: its weights,
        gradients and optimizer states are never counted as the actor's."""
        if owner in self._models:
            raise ValueError(f"memory ledger already tracks a model owned by {owner!r}")
        self._models[owner] = [module, optimizer, 0]
        track_model_state(self.ledger, module, optimizer, owner=owner)

    def end_step(self, step: int) -> Peak:
        """Free the step's live IO, write events and ``step``'s peak to telemetry; return the peak."""
        for name in self._step_io:
            self.ledger.free(name)
        self._step_io.clear()
        return self.ledger.flush_to(self.telemetry, step)

    def live_owner_bytes(self) -> dict[str, int]:
        """Live tracked bytes by owner (model owners, rollout, trainer, weight sync)."""
        return {k: v for k, v in self.ledger.live_by_owner().items() if v}

    def peak_bytes(self, step: int) -> int | None:
        """Tracked bytes at ``step``'s peak instant (``steps.peak_memory_bytes``); None if unseen."""
        try:
            return self.ledger.step_peak(step).total
        except KeyError:
            return None

    def finish(self) -> None:
        """End of run: write the remaining events, then enforce the free rule (LedgerError)."""
        self.ledger.flush_events_to(self.telemetry)
        self.ledger.close()

    def _drop_stale(self, name: str) -> None:
        """Free ``name`` if a previous one is still live: its step never ended (e.g. a rollout
        sampled outside a training step); the new object replaces it."""
        if name in self._step_io:
            self.ledger.free(name)
            del self._step_io[name]

    def _live_io(self, name: str, obj: Any, *, producer: str, owner: str = "rollout") -> None:
        self._drop_stale(name)
        seen = set().union(*(k for _, k in self._step_io.values()))
        nbytes, tensors, dtypes = distinct_bytes(obj, seen)
        self.ledger.create(
            name,
            "live_io",
            nbytes,
            logical_shape=(len(tensors),),
            dtype="/".join(sorted(dtypes)) or "none",
            layout="record",
            producer=producer,
            consumer="trainer.step",
            owner=owner,
        )
        if owner != "trainer":
            self.ledger.transfer(name, owner="trainer")
        self._step_io[name] = (tensors, {leaf_key(t) for t in tensors})

    # ------------------------------------------------------------------ teachers
    def teachers_loaded(self, teachers: Mapping[str, Any]) -> None:
        """Each teacher's weights are its own persistent ``model_state`` (owner ``teacher/<id>``);
        its engine reports its KV caches under the same owner."""
        for tid, teacher in teachers.items():
            owner = f"teacher/{tid}"
            for name, obj in teacher.weights.items():
                for sub, leaf, packed in iter_leaves(obj, name):
                    self._create_leaf(
                        f"{owner}/weights/{sub}",
                        leaf,
                        packed,
                        category="model_state",
                        owner=owner,
                        producer="teacher.load",
                        consumer="teacher.prefill",
                        persistent=True,
                    )
            teacher.engine.memory_hooks = _OwnedCaches(self, owner)
            self.kv_pool_allocated(getattr(teacher.engine, "kv_pool", []), owner=owner)

    def teacher_payload(self, teacher_id: str, scores: Any) -> None:
        """A teacher's payload for the step (live IO, teacher -> trainer, freed at step end)."""
        self._live_io(
            f"teacher/{teacher_id}/payload",
            scores,
            producer="teacher.prefill_and_score",
            owner=f"teacher/{teacher_id}",
        )

    # ------------------------------------------------------------------ rollout engine
    def kv_cache_allocated(self, cache: Any, *, owner: str = "rollout") -> None:
        """A KV cache was allocated; its ledger object is freed when its tensors die."""
        nbytes, tensors, dtypes = distinct_bytes(cache, set())
        if not tensors:
            return
        name = f"{owner}/kv_cache/{next(self._kv_ids)}"
        self.ledger.create(
            name,
            "saved_activations",
            nbytes,
            logical_shape=(len(tensors), *tensors[0].shape),
            dtype="/".join(sorted(dtypes)),
            layout=tensor_layout(tensors[0]),
            producer=f"{owner.split('/')[0]}.forward",
            consumer=f"{owner.split('/')[0]}.attention",
            owner=owner,
            device=str(tensors[0].device),
        )
        weakref.finalize(tensors[0], self._release, name)

    def kv_pool_allocated(self, tensors: list, *, owner: str = "rollout") -> None:
        """An engine's paged KV cache, allocated once for its lifetime (vLLM's ``kv_caches``):
        one persistent ``saved_activations`` object of the bytes the engine reports."""
        if not tensors:
            return
        self.ledger.create(
            f"{owner}/kv_cache/pool",
            "saved_activations",
            sum(t.untyped_storage().nbytes() for t in tensors),
            logical_shape=(len(tensors), *tensors[0].shape),
            dtype=str(tensors[0].dtype),
            layout="paged",
            producer="vllm.allocate_kv_cache",
            consumer=f"{owner}.attention",
            owner=owner,
            device=str(tensors[0].device),
            persistent=True,
        )

    def _release(self, name: str) -> None:
        if name in self.ledger:
            self.ledger.free(name)


class _OwnedCaches:
    """An engine's ``memory_hooks`` that books its KV caches under ``owner`` (a teacher's)."""

    def __init__(self, memory: TrainingMemory, owner: str) -> None:
        self.memory, self.owner = memory, owner

    def kv_cache_allocated(self, cache: Any) -> None:
        self.memory.kv_cache_allocated(cache, owner=self.owner)
