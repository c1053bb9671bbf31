"""Where rollout workers run: ``threads`` (default) | ``processes`` | ``ray`` (``rollout.executor``).

Every executor hands back ``WorkerHandle``s with one interface — ``submit``, ``stage``, ``drain``,
``stats``, ``stop`` — over a ``core.rollout.worker.RolloutWorker``: in this process on its own
thread; in a spawned child process behind a pipe (one RPC at a time); or as a Ray actor
(``pip install closedloop[ray]``; ``ray.init`` starts a local cluster of ``rollout.ray_num_cpus``
CPUs unless one is already connected) — the scale path across machines. Messages are plain data
(requests, outputs, weight payloads as CPU tensors), so the orchestrator cannot tell them apart.
"""

from __future__ import annotations

import threading
from typing import Protocol

from core.rollout.worker import RolloutWorker, WorkerSpec

EXECUTORS = ("threads", "processes", "ray")


class WorkerHandle(Protocol):
    worker_id: int
    notifies: bool
    """Whether the worker wakes the orchestrator itself (else the orchestrator polls)."""

    def submit(self, requests: list, release: list[int] = ()) -> None: ...

    def stage(self, payload: dict, version: int, checksum: str | None = None) -> float: ...

    def drain(self) -> list: ...

    def stats(self) -> dict: ...

    def stop(self) -> None: ...


class ThreadHandle:
    """A worker on a thread of this process."""

    notifies = True

    def __init__(self, spec: WorkerSpec, notify=None) -> None:
        self.worker_id = spec.worker_id
        self.worker = RolloutWorker(spec, notify=notify)
        self.worker.start()

    def submit(self, requests, release=()):
        self.worker.submit(requests, release)

    def stage(self, payload, version, checksum=None):
        return self.worker.stage(payload, version, checksum)

    def drain(self):
        return self.worker.drain()

    def stats(self):
        return self.worker.stats()

    def stop(self):
        self.worker.stop()


def _serve(spec: WorkerSpec, conn) -> None:
    """Child-process main: a worker answering one command at a time over ``conn``."""
    worker = RolloutWorker(spec)
    worker.start()
    while True:
        cmd, args = conn.recv()
        if cmd == "stop":
            worker.stop()
            conn.send(None)
            return
        conn.send(getattr(worker, cmd)(*args))


class ProcessHandle:
    """A worker in a spawned child process."""

    notifies = False

    def __init__(self, spec: WorkerSpec, notify=None) -> None:
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.worker_id = spec.worker_id
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(spec, child), daemon=True)
        self._proc.start()
        self._lock = threading.Lock()

    def _call(self, cmd: str, *args):
        with self._lock:
            self._conn.send((cmd, args))
            return self._conn.recv()

    def submit(self, requests, release=()):
        self._call("submit", list(requests), list(release))

    def stage(self, payload, version, checksum=None):
        return self._call("stage", payload, version, checksum)

    def drain(self):
        return self._call("drain")

    def stats(self):
        return self._call("stats")

    def stop(self):
        if self._proc.is_alive():
            self._call("stop")
        self._proc.join(timeout=30)


class RayHandle:
    """A worker as a Ray actor."""

    notifies = False

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
        self._actor = ray.remote(_RayWorker).remote(spec)

    def submit(self, requests, release=()):
        self._actor.submit.remote(list(requests), list(release))  # fire and forget, in order

    def stage(self, payload, version, checksum=None):
        return self._ray.get(self._actor.stage.remote(payload, version, checksum))

    def drain(self):
        return self._ray.get(self._actor.drain.remote())

    def stats(self):
        return self._ray.get(self._actor.stats.remote())

    def stop(self):
        try:
            self._ray.get(self._actor.stop.remote())
        finally:
            self._ray.kill(self._actor)


class _RayWorker:
    """The Ray actor body: a ``RolloutWorker`` whose loop runs on a thread of the actor."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.worker = RolloutWorker(spec)
        self.worker.start()

    def submit(self, requests, release):
        self.worker.submit(requests, release)

    def stage(self, payload, version, checksum):
        return self.worker.stage(payload, version, checksum)

    def drain(self):
        return self.worker.drain()

    def stats(self):
        return self.worker.stats()

    def stop(self):
        self.worker.stop()


def start_workers(
    kind: str, specs: list[WorkerSpec], *, notify=None, ray_num_cpus: int = 2
) -> list[WorkerHandle]:
    """Start one worker per spec on executor ``kind``."""
    if kind == "threads":
        return [ThreadHandle(s, notify) for s in specs]
    if kind == "processes":
        return [ProcessHandle(s) for s in specs]
    if kind == "ray":
        try:
            import ray  # noqa: F401
        except ImportError as e:
            raise RuntimeError(
                "rollout.executor='ray' needs Ray: pip install 'closedloop[ray]'"
            ) from e
        return [RayHandle(s, num_cpus=ray_num_cpus) for s in specs]
    raise ValueError(f"rollout.executor={kind!r} not in {list(EXECUTORS)}")
