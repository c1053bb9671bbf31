"""The memory-owner ledger: every object's producer, consumer, owner, lifetime and category.

Components report ``create / transfer / reuse / free`` events; the ledger enforces the lifecycle
(no double free, no unknown object, non-persistent objects must be freed before ``close``), keeps
each object's owner history, and tracks per step the instant of the largest live total on its
device with the breakdown by category and owner (see :mod:`core.memory.peak`).

Design:
- An object is a *name* (str), unique among live objects; a freed name may be created again.
- ``bytes`` are physical bytes on ``device``; only objects on the ledger's device count towards
  its live total and peak (an object transferred to another device leaves the total).
- ``reuse`` re-purposes a live allocation: an event, never extra bytes.
- Timestamps are ``time.monotonic_ns()`` (an injectable clock); ``event_id`` is strictly
  increasing per ledger and orders events that share a timestamp.
- Events are buffered until :meth:`MemoryLedger.flush_to`; the ledger keeps no event history.
- The sink gets ``memory_events`` as plain columns (:mod:`core.memory.columns`): ``ts`` as epoch
  datetime64[us] (the monotonic clock anchored to the wall clock once, at ledger creation, so event
  order is kept), integers as numpy arrays, shapes and strings as lists;
  :meth:`pending_columns` keeps the raw ns / string form.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from core.device import Device, process_rss_bytes
from core.memory.categories import CATEGORIES
from core.memory.columns import telemetry_columns, transposed
from core.memory.events import MemoryEvent
from core.memory.peak import Peak, PeakTracker


class LedgerError(RuntimeError):
    """A lifecycle rule was broken (double free, unknown object, duplicate live name, leak)."""


@dataclass
class MemoryObject:
    """A live object's current state; ``owner_history`` lists every owner, first to current."""

    name: str
    category: str
    bytes: int
    logical_shape: tuple[int, ...]
    dtype: str
    layout: str
    producer: str
    consumer: str
    owner: str
    device: str
    persistent: bool
    created_ts: int
    owner_history: list[str] = field(default_factory=list)
    reuse_count: int = 0


def tensor_layout(tensor: torch.Tensor) -> str:
    """``contiguous``, ``strided`` (non-contiguous view) or the sparse layout's name."""
    if tensor.layout != torch.strided:
        return str(tensor.layout).removeprefix("torch.")
    return "contiguous" if tensor.is_contiguous() else "strided"


def _dtype_name(dtype: torch.dtype | str) -> str:
    return str(dtype).removeprefix("torch.")


class MemoryLedger:
    """Lifecycle events and per-step peaks for one rank on one device.

    ``sample_at_peaks`` reads the allocator (CUDA/NPU) or the process RSS (CPU) each time a
    step's peak rises, so the untracked remainder is measured at the peak instant itself.
    """

    def __init__(
        self,
        rank: int = 0,
        device: Device | str | torch.device = "cpu",
        *,
        sample_at_peaks: bool = True,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if rank < 0:
            raise ValueError(f"MemoryLedger.rank must be >= 0, got {rank}")
        self.rank = rank
        self.device = device if isinstance(device, Device) else Device.from_string(str(device))
        self._clock = clock
        self._epoch_offset_ns = time.time_ns() - time.monotonic_ns()  # for the default clock
        self._last_ts = -1
        self._next_event_id = 0
        self._step = 0
        self._live: dict[str, MemoryObject] = {}
        self._freed: set[str] = set()
        self._pending: list[MemoryEvent] = []
        self._by_category: Counter[str] = Counter()
        self._by_owner: Counter[str] = Counter()
        self._by_pair: Counter[tuple[str, str]] = Counter()
        self._total = 0
        sampler = self._sample if sample_at_peaks else None
        self._peaks = PeakTracker(sampler=sampler)
        self._peaks.start_step(self._step, self._now(), self._total, self._by_pair)

    # ------------------------------------------------------------------ steps and time
    @property
    def step(self) -> int:
        """The current step (stamped on every event)."""
        return self._step

    def set_step(self, step: int) -> None:
        """Start ``step``: its peak window opens with the objects live now."""
        if step < self._step:
            raise ValueError(f"step must not go backwards: {step} < {self._step}")
        self._step = step
        self._peaks.start_step(step, self._now(), self._total, self._by_pair)

    def _now(self) -> int:
        ts = max(int(self._clock()), self._last_ts)  # non-decreasing even with a coarse clock
        self._last_ts = ts
        return ts

    # ------------------------------------------------------------------ lifecycle
    def create(
        self,
        obj: str,
        category: str,
        bytes: int,
        *,
        logical_shape: Iterable[int] = (),
        dtype: torch.dtype | str = "",
        layout: str = "contiguous",
        producer: str = "",
        consumer: str = "",
        owner: str,
        device: str | None = None,
        persistent: bool = False,
    ) -> MemoryObject:
        """Record a new live object of ``bytes`` physical bytes (on the ledger's device by default)."""
        if category not in CATEGORIES:
            raise ValueError(f"category must be one of {CATEGORIES}, got {category!r}")
        if bytes < 0:
            raise ValueError(f"bytes must be >= 0, got {bytes} for {obj!r}")
        if not owner:
            raise ValueError(f"owner must be a non-empty string for {obj!r}")
        if obj in self._live:
            raise LedgerError(
                f"create of {obj!r}, which is already live (owner {self._live[obj].owner!r})"
            )
        ts = self._now()
        if category == "operator_workspace":
            self._peaks.workspace_measured = True
        record = MemoryObject(
            name=obj,
            category=category,
            bytes=int(bytes),
            logical_shape=tuple(int(d) for d in logical_shape),
            dtype=_dtype_name(dtype),
            layout=layout,
            producer=producer,
            consumer=consumer,
            owner=owner,
            device=device or self.device.name,
            persistent=persistent,
            created_ts=ts,
            owner_history=[owner],
        )
        self._live[obj] = record
        self._freed.discard(obj)
        self._add(record, +1)
        self._record(ts, record, "create")
        return record

    def transfer(
        self,
        obj: str,
        *,
        owner: str | None = None,
        consumer: str | None = None,
        device: str | None = None,
    ) -> MemoryObject:
        """Hand a live object to a new owner, consumer and/or device; the owner history grows."""
        record = self._get_live(obj, "transfer")
        if owner is None and consumer is None and device is None:
            raise ValueError(f"transfer of {obj!r} needs at least one of owner, consumer, device")
        ts = self._now()
        self._add(record, -1)
        if owner is not None and owner != record.owner:
            record.owner = owner
            record.owner_history.append(owner)
        if consumer is not None:
            record.consumer = consumer
        if device is not None:
            record.device = device
        self._add(record, +1)
        self._record(ts, record, "transfer")
        return record

    def reuse(
        self,
        obj: str,
        *,
        producer: str | None = None,
        consumer: str | None = None,
        logical_shape: Iterable[int] | None = None,
    ) -> MemoryObject:
        """Re-purpose a live allocation (e.g. a KV block for a new request): no new bytes."""
        record = self._get_live(obj, "reuse")
        if producer is not None:
            record.producer = producer
        if consumer is not None:
            record.consumer = consumer
        if logical_shape is not None:
            record.logical_shape = tuple(int(d) for d in logical_shape)
        record.reuse_count += 1
        self._record(self._now(), record, "reuse")
        return record

    def free(self, obj: str) -> None:
        """Release a live object; freeing it twice, or an unknown name, raises LedgerError."""
        record = self._get_live(obj, "free")
        ts = self._now()
        del self._live[obj]
        self._freed.add(obj)
        self._add(record, -1)
        self._record(ts, record, "free")

    def track_tensor(
        self,
        name: str,
        tensor: torch.Tensor,
        *,
        category: str,
        owner: str,
        producer: str = "",
        consumer: str = "",
        persistent: bool = False,
        bytes: int | None = None,
        logical_shape: Iterable[int] | None = None,
        layout: str | None = None,
    ) -> MemoryObject:
        """``create`` with bytes, shape, dtype, layout and device read off ``tensor``.

        ``bytes`` defaults to ``numel * element_size`` (views sharing one storage would each
        count: track the storage's owner once). For packed formats (int4 in uint8, ...) pass
        ``layout="packed"`` and the unpacked ``logical_shape``.
        """
        return self.create(
            name,
            category,
            tensor.numel() * tensor.element_size() if bytes is None else bytes,
            logical_shape=tensor.shape if logical_shape is None else logical_shape,
            dtype=tensor.dtype,
            layout=tensor_layout(tensor) if layout is None else layout,
            producer=producer,
            consumer=consumer,
            owner=owner,
            device=str(tensor.device),
            persistent=persistent,
        )

    def _get_live(self, obj: str, event: str) -> MemoryObject:
        record = self._live.get(obj)
        if record is not None:
            return record
        if obj in self._freed:
            what = "double free" if event == "free" else f"{event} after free"
            raise LedgerError(f"{what} of {obj!r} (step {self._step}, rank {self.rank})")
        raise LedgerError(f"{event} of unknown object {obj!r} (never created on rank {self.rank})")

    def _add(self, record: MemoryObject, sign: int) -> None:
        if record.device != self.device.name:
            return
        delta = sign * record.bytes
        self._total += delta
        self._by_category[record.category] += delta
        self._by_owner[record.owner] += delta
        self._by_pair[(record.category, record.owner)] += delta

    def _record(self, ts: int, record: MemoryObject, event: str) -> None:
        self._pending.append(
            MemoryEvent(
                ts=ts,
                step=self._step,
                rank=self.rank,
                device=record.device,
                device_kind=self.device.kind,
                object=record.name,
                category=record.category,
                event=event,
                bytes=record.bytes,
                logical_shape=record.logical_shape,
                dtype=record.dtype,
                layout=record.layout,
                producer=record.producer,
                consumer=record.consumer,
                owner=record.owner,
                event_id=self._next_event_id,
                persistent=record.persistent,
            )
        )
        self._next_event_id += 1
        if event != "reuse":
            self._peaks.observe(ts, self._total, self._by_pair)

    def _sample(self) -> tuple[int | None, int | None]:
        """(allocator bytes, measured bytes) now: reserved-allocated and allocated, or (None, RSS)."""
        stats = self.device.allocator_stats()
        if stats is None:
            return None, process_rss_bytes()
        return stats.cached_free, stats.allocated

    # ------------------------------------------------------------------ queries
    @property
    def live_bytes(self) -> int:
        """Tracked live bytes on the ledger's device now."""
        return self._total

    def live_by_category(self) -> dict[str, int]:
        """Tracked live bytes on the ledger's device per category (all seven keys)."""
        return {c: self._by_category.get(c, 0) for c in CATEGORIES}

    def live_by_owner(self) -> dict[str, int]:
        """Tracked live bytes on the ledger's device per owner (owners with bytes only)."""
        return {o: b for o, b in self._by_owner.items() if b}

    def __contains__(self, obj: object) -> bool:
        """Whether ``obj`` is a live object name."""
        return obj in self._live

    def get(self, obj: str) -> MemoryObject:
        """The live object ``obj`` (LedgerError if not live)."""
        return self._get_live(obj, "get")

    def live_objects(self) -> list[MemoryObject]:
        """Every live object, on any device, in creation order."""
        return list(self._live.values())

    def leaked_objects(self) -> list[MemoryObject]:
        """Live non-persistent objects: they break the free rule if still live at ``close``."""
        return [r for r in self._live.values() if not r.persistent]

    def step_peak(self, step: int) -> Peak:
        """The instant of ``step``'s largest live total and its breakdown (KeyError if unseen)."""
        return self._peaks.peak(step)

    def pending_columns(self) -> dict[str, list[Any]]:
        """Buffered (unflushed) events as columns of ``memory_events``, raw: ``ts`` in monotonic
        ns, ``logical_shape`` as a string (``"[3, 5]"``)."""
        cols = transposed(self._pending)
        cols["logical_shape"] = [str(list(shape)) for shape in cols["logical_shape"]]
        return cols

    def telemetry_columns(self) -> dict[str, Any]:
        """Buffered events as ``memory_events`` columns for the sink (numpy integers, epoch
        ``ts``: :func:`core.memory.columns.telemetry_columns`)."""
        return telemetry_columns(self._pending, epoch_offset_ns=self._epoch_offset_ns)

    # ------------------------------------------------------------------ output
    def flush_events_to(self, telemetry: Any) -> int:
        """Emit buffered events to ``memory_events`` and clear the buffer; returns the row count."""
        n = len(self._pending)
        if n:
            telemetry.emit("memory_events", self.telemetry_columns())
            self._pending.clear()
        return n

    def flush_to(self, telemetry: Any, step: int) -> Peak:
        """Emit buffered events to ``memory_events`` and ``step``'s peak to ``memory_peaks``."""
        self.flush_events_to(telemetry)
        peak = self._peaks.peak(step)
        telemetry.emit("memory_peaks", peak.columns(rank=self.rank))
        return peak

    def close(self) -> None:
        """End of run: raise LedgerError if any non-persistent object is still live."""
        leaked = self.leaked_objects()
        if leaked:
            names = ", ".join(f"{r.name!r} (owner {r.owner!r})" for r in leaked[:10])
            raise LedgerError(f"{len(leaked)} non-persistent object(s) never freed: {names}")
