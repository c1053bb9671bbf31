"""A rollout worker: one engine replica serving turn requests from its own loop thread.

The worker owns its engine, the engine's double-buffered weights and its sessions' KV cache (the
memory-ledger owners of a rollout DP rank). Its loop takes up to ``max_batch`` queued turn
requests, decodes them as one batch (``core.rollout.turn_decode``) and queues the outputs; between
batches and between decode steps it offers the staged weights a switch point. Every switch is
reported (``SwitchEvent``): the orchestrator learns a worker's live version only from it. The
public methods are thread-safe and plain-data in/out, so the same class runs in a thread, a
child process or a Ray actor (``core.rollout.executor``).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

import torch

from core.model.config import ModelConfig
from core.rollout.engines import build_engine
from core.rollout.kv_cache import SessionKVCache
from core.rollout.sampling import SamplingParams
from core.rollout.turn_decode import TurnRequest, decode_turns
from core.rollout.vllm_turns import decode_turns_vllm
from core.rollout.weight_buffer import DoubleBufferedWeights, SwitchEvent


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to start (picklable)."""

    worker_id: int
    model: dict
    """``ModelConfig`` fields."""
    precision: str
    params: SamplingParams
    eos_id: int
    pad_id: int
    kv_on_switch: str = "invalidate"
    max_batch: int = 64
    kv_capacity: int = 512
    torch_threads: int = 1
    """Intra-op threads of the worker's engine (1: workers run side by side)."""
    engine: str = "embedded"
    """``rollout.engine``: ``embedded`` | ``vllm`` (each worker its own vLLM engine)."""


def drain_queue(q: queue.Queue, timeout: float = 0.0) -> list:
    """Everything in ``q`` now, waiting up to ``timeout`` s for a first item (0: no wait)."""
    out = []
    try:
        out.append(q.get(timeout=timeout) if timeout > 0 else q.get_nowait())
    except queue.Empty:
        return out
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out


class RolloutWorker:
    """An engine replica with a request queue, an output queue and a decode loop."""

    def __init__(self, spec: WorkerSpec, notify=None) -> None:
        self.spec = spec
        self.engine = build_engine(
            spec.engine,
            ModelConfig(**spec.model),
            precision=spec.precision,
            logprob_mode=spec.params.logprob_mode,
            instance=f"worker/{spec.worker_id}",
        )
        self._vllm_kv: dict[int, int] = {}  # vLLM: session -> oldest version of its cached KV
        self.weights = DoubleBufferedWeights(self.engine, spec.worker_id)
        self.kv = SessionKVCache(
            spec.worker_id, on_switch=spec.kv_on_switch, capacity=spec.kv_capacity
        )
        self._inbox: queue.Queue = queue.Queue()
        self._outbox: queue.Queue = queue.Queue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._notify = notify
        self._pending: list[TurnRequest] = []
        self.busy_s = 0.0
        self.error: str | None = None

    # ---- API (any thread) ------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, name=f"rollout-worker-{self.spec.worker_id}", daemon=True
        )
        self._thread.start()

    def submit(self, requests: list[TurnRequest], release: list[int] = ()) -> None:
        """Queue turn requests; ``release``: sessions that ended (their KV can go)."""
        self._inbox.put((list(requests), list(release)))
        self._wake.set()

    def stage(self, payload: dict, version: int, checksum: str | None = None) -> float:
        """Stage weights (the *send* phase); returns the time they were staged."""
        self.weights.stage(payload, version, checksum)
        self._wake.set()
        return time.time()

    def drain(self, timeout: float = 0.0) -> list:
        """Outputs and switch events produced since the last call (waits up to ``timeout`` for
        the first one)."""
        return drain_queue(self._outbox, timeout)

    def stats(self) -> dict:
        return {
            "worker": self.spec.worker_id,
            "busy_s": self.busy_s,
            "live_version": self.engine.policy_version,
            "kv": dict(self.kv.stats),
            "error": self.error,
            "memory": self.memory(),
        }

    def memory(self) -> dict[str, tuple[str, int]]:
        """The replica's memory now, ``name -> (ledger category, bytes)``: the live weights
        (``weights/v<version>``), a staged back buffer (``staged/v<version>``) and the session KV
        cache (``kv_cache``) — what the trainer's memory ledger records under this worker."""
        out = {}
        live = self.weights.live
        if live is not None:
            out[f"weights/v{live[0]}"] = ("model_state", live[1])
        staged = self.weights.staged
        if staged is not None:
            out[f"staged/v{staged[0]}"] = ("communication_buffers", staged[1])
        if self.kv.nbytes:
            out["kv_cache"] = ("saved_activations", self.kv.nbytes)
        pool = getattr(self.engine, "kv_cache_capacity_bytes", None)
        if pool is not None and pool():  # vLLM: its paged cache, allocated once
            out["kv_cache"] = ("saved_activations", pool())
        return out

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # ---- the loop (its own thread) -------------------------------------------------------
    def _switch(self) -> SwitchEvent | None:
        event = self.weights.switch_point()
        if event is not None:
            self.kv.switched(event.version)
            if self.spec.engine == "vllm" and self.engine.prefix_cache_dropped:
                self._vllm_kv.clear()  # no session keeps keys/values of the old version
            self._emit(event)
        return event

    def _emit(self, item) -> None:
        self._outbox.put(item)
        if self._notify is not None:
            self._notify()

    def _take(self) -> list[TurnRequest]:
        """Up to ``max_batch`` requests, oldest first."""
        while True:
            try:
                requests, release = self._inbox.get_nowait()
            except queue.Empty:
                break
            self.kv.release(release)
            for sid in release:
                self._vllm_kv.pop(sid, None)
            self._pending += requests
        batch = self._pending[: self.spec.max_batch]
        self._pending = self._pending[self.spec.max_batch :]
        return batch

    def _loop(self) -> None:
        torch.set_num_threads(self.spec.torch_threads)
        try:
            while not self._stop.is_set():
                self._switch()
                batch = self._take() if self.engine.weights else []
                if not batch:
                    self._wake.wait(0.05)
                    self._wake.clear()
                    continue
                t0 = time.perf_counter()
                outs = self._decode(batch)
                self.busy_s += time.perf_counter() - t0
                for o in outs:
                    self._emit(o)
        except Exception as e:  # surfaced to the orchestrator through stats()/drain()
            self.error = f"{type(e).__name__}: {e}"
            self._emit(RuntimeError(f"rollout worker {self.spec.worker_id}: {self.error}"))

    def _decode(self, batch: list[TurnRequest]) -> list:
        if self.spec.engine == "vllm":
            return decode_turns_vllm(
                self.engine,
                batch,
                self.spec.params,
                eos_id=self.spec.eos_id,
                kv_on_switch=self.spec.kv_on_switch,
                kv_versions=self._vllm_kv,
                switch=self._switch,
                worker=self.spec.worker_id,
            )
        return decode_turns(
            self.engine,
            batch,
            self.spec.params,
            eos_id=self.spec.eos_id,
            pad_id=self.spec.pad_id,
            kv=self.kv,
            switch=self._switch,
            worker=self.spec.worker_id,
        )
