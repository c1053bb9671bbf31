"""Where rollout workers run: ``threads`` (default) | ``processes`` | ``ray`` (``rollout.executor``).

Every executor hands back ``WorkerHandle``s with one interface — ``submit``, ``stage``, ``drain``,
``stats``, ``stop`` — over a ``core.rollout.worker.RolloutWorker``: in this process on its own
thread; in a spawned child process behind a pipe; or as a Ray actor (``pip install
closedloop[ray]``; ``ray.init`` starts a local cluster of ``rollout.ray_num_cpus`` CPUs unless one
is already connected) — the scale path across machines. Messages are plain data (requests,
outputs, weight payloads as CPU tensors), so the orchestrator cannot tell them apart.

Outputs of a worker in another process come back by a long poll, never by the orchestrator polling
across the process boundary: a thread of this process per worker waits on the worker's own
blocking ``drain(timeout)`` (the child pushes its outputs on a second pipe; a Ray actor answers one
outstanding ``drain`` call from its own concurrency group, so submits and weight stages are never
queued behind it), queues what arrives and wakes the orchestrator. ``drain`` on the handle reads
that local queue.
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from typing import Protocol

from core.rollout.worker import RolloutWorker, WorkerSpec, drain_queue

EXECUTORS = ("threads", "processes", "ray")
LONG_POLL_S = 0.5
"""How long one remote ``drain`` waits for a first output before it returns empty (bounds how
long stopping a worker waits for its poll)."""


class WorkerHandle(Protocol):
    worker_id: int
    notifies: bool
    """Whether the worker wakes the orchestrator itself (else the orchestrator polls)."""

    def submit(self, requests: list, release: list[int] = ()) -> None: ...

    def stage(self, payload: dict, version: int, checksum: str | None = None) -> float: ...

    def drain(self) -> list: ...

    def stats(self) -> dict: ...

    def stop(self) -> None: ...


class ThreadHandle(RolloutWorker):
    """A worker on a thread of this process: the worker is its own handle."""

    notifies = True
    in_process = True
    """Its engine replica lives in this process (the memory ledger counts it here)."""

    def __init__(self, spec: WorkerSpec, notify=None) -> None:
        super().__init__(spec, notify=notify)
        self.worker_id = spec.worker_id
        self.start()


class _RemoteHandle(ABC):
    """A worker in another process. Subclasses send commands (``_call`` waits for the answer,
    ``_send`` need not) and wait for outputs (``_poll``); a thread here long-polls."""

    notifies = True
    in_process = False
    worker_id: int

    def _start_polling(self, notify) -> None:
        self._outputs: queue.Queue = queue.Queue()
        self._notify = notify
        self._closing = threading.Event()
        self._poller = threading.Thread(
            target=self._poll_loop, name=f"rollout-poll-{self.worker_id}", daemon=True
        )
        self._poller.start()

    def _poll_loop(self) -> None:
        while not self._closing.is_set():
            try:
                items = self._poll(LONG_POLL_S)
            except Exception as e:  # the worker is gone: surfaced unless we stopped it
                if self._closing.is_set():
                    return
                items = [RuntimeError(f"rollout worker {self.worker_id}: {e!r}")]
                self._closing.set()
            for item in items:
                self._outputs.put(item)
            if items and self._notify is not None:
                self._notify()

    @abstractmethod
    def _call(self, cmd: str, *args):
        """Run ``cmd`` on the worker and return its answer."""

    def _send(self, cmd: str, *args) -> None:
        self._call(cmd, *args)

    @abstractmethod
    def _poll(self, timeout: float) -> list:
        """The worker's outputs, waiting up to ``timeout`` s for the first (may be empty)."""

    def submit(self, requests, release=()):
        self._send("submit", list(requests), list(release))

    def stage(self, payload, version, checksum=None):
        return self._call("stage", payload, version, checksum)

    def stats(self):
        return self._call("stats")

    def drain(self):
        return drain_queue(self._outputs)

    def _join_poller(self) -> None:
        self._poller.join(timeout=2 * LONG_POLL_S + 30)


def _serve(spec: WorkerSpec, conn, out) -> None:
    """Child-process main: a worker answering one command at a time over ``conn``, its outputs
    pushed on ``out`` by a second thread as they are produced."""
    worker = RolloutWorker(spec)
    worker.start()
    done = threading.Event()

    def push() -> None:
        while not done.is_set():
            items = worker.drain(LONG_POLL_S)
            if items:
                out.send(items)

    pusher = threading.Thread(target=push, daemon=True)
    pusher.start()
    while True:
        cmd, args = conn.recv()
        if cmd == "stop":
            worker.stop()
            done.set()
            pusher.join()
            conn.send(None)
            return
        conn.send(getattr(worker, cmd)(*args))


class ProcessHandle(_RemoteHandle):
    """A worker in a spawned child process."""

    def __init__(self, spec: WorkerSpec, notify=None) -> None:
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.worker_id = spec.worker_id
        self._conn, child = ctx.Pipe()
        self._out, child_out = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_serve, args=(spec, child, child_out), daemon=True)
        self._proc.start()
        self._lock = threading.Lock()
        self._start_polling(notify)

    def _call(self, cmd: str, *args):
        with self._lock:
            self._conn.send((cmd, args))
            return self._conn.recv()

    def _poll(self, timeout: float) -> list:
        return self._out.recv() if self._out.poll(timeout) else []

    def stop(self):
        self._closing.set()
        if self._proc.is_alive():
            self._call("stop")
        self._join_poller()
        self._proc.join(timeout=30)


class RayHandle(_RemoteHandle):
    """A worker as a Ray actor (threaded: its ``drain`` long poll has a concurrency group of its
    own; every other call runs in the default group, one at a time, in order)."""

    def __init__(self, spec: WorkerSpec, notify=None, *, num_cpus: int = 2) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(
                num_cpus=num_cpus,
                include_dashboard=False,
                log_to_driver=False,
                ignore_reinit_error=True,
            )
        self._ray = ray
        self.worker_id = spec.worker_id
        actor_cls = ray.remote(concurrency_groups={"poll": 1})(RolloutWorker)
        self._actor = actor_cls.remote(spec)
        ray.get(self._actor.start.remote())
        self._start_polling(notify)

    def _call(self, cmd: str, *args):
        return self._ray.get(getattr(self._actor, cmd).remote(*args))

    def _send(self, cmd: str, *args) -> None:
        getattr(self._actor, cmd).remote(*args)  # fire and forget, in order

    def _poll(self, timeout: float) -> list:
        drain = self._actor.drain.options(concurrency_group="poll")
        return self._ray.get(drain.remote(timeout))

    def stop(self):
        self._closing.set()
        try:
            self._call("stop")
        finally:
            self._ray.kill(self._actor)
            self._join_poller()


def start_workers(
    kind: str, specs: list[WorkerSpec], *, notify=None, ray_num_cpus: int = 2
) -> list[WorkerHandle]:
    """Start one worker per spec on executor ``kind``."""
    if kind == "threads":
        return [ThreadHandle(s, notify) for s in specs]
    if kind == "processes":
        return [ProcessHandle(s, notify) for s in specs]
    if kind == "ray":
        try:
            import ray  # noqa: F401
        except ImportError as e:
            raise RuntimeError(
                "rollout.executor='ray' needs Ray: pip install 'closedloop[ray]'"
            ) from e
        return [RayHandle(s, notify, num_cpus=ray_num_cpus) for s in specs]
    raise ValueError(f"rollout.executor={kind!r} not in {list(EXECUTORS)}")
