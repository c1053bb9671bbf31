"""The rollout orchestrator: sessions, session routing, the central queue of finished groups.

One pump thread runs every session's agent loop: it routes a session's turn requests to rollout
workers (DP-aware: the first turn to the least-loaded worker, every later turn to the same one, so
its KV cache is reused), hands each generated turn to the session's environment on a thread pool
(environment latency overlaps everything else), appends the exact action and observation ids
(TITO: the next context is the previous one plus them, never re-tokenized — unless the
``rollout.history = "retokenize"`` fault is on), and applies the environment-failure rule
(``core.rollout.episode.group_verdict``) when a group finishes. Finished groups enter the central
queue in completion order; the trainer takes them as they come (complete-and-consume), never
waiting for a fixed batch of tasks. ``in_flight_groups`` bounds how far rollout runs ahead.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from core.envs.protocol import StepResult
from core.rollout.episode import Episode, Group, TurnRecord, group_verdict
from core.rollout.turn_decode import TurnOutput, TurnRequest
from core.rollout.weight_buffer import SwitchEvent
from core.tokenizer.tito import prefix_hashes, retokenize

HISTORY_MODES = ("exact", "retokenize")


@dataclass
class Taken:
    """What the trainer took from the queue for one step."""

    groups: list[Group]
    """Trainable groups, in completion order."""
    dropped: list[Group]
    """Groups dropped by the failure rule since the last take (telemetry only)."""
    wait_s: float
    queue_depth: int
    """Finished samples waiting in the queue when the take began."""
    in_flight: int
    """Sessions running when the take ended."""


def _seed(*parts) -> int:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:7], "big")


class Orchestrator:
    """Runs sessions on worker handles (``core.rollout.executor``) until stopped."""

    def __init__(
        self,
        handles,
        source,
        *,
        tok,
        ids,
        group_size: int,
        max_turns: int,
        max_new_tokens: int,
        max_seq_len: int,
        in_flight_groups: int = 8,
        env_threads: int = 32,
        max_refills: int = 2,
        history: str = "exact",
        seed: int = 0,
        wake: threading.Event | None = None,
    ) -> None:
        if history not in HISTORY_MODES:
            raise ValueError(f"rollout.history={history!r} not in {list(HISTORY_MODES)}")
        self.handles, self.source, self.tok, self.ids = handles, source, tok, ids
        self.group_size, self.max_turns = group_size, max_turns
        self.max_new_tokens, self.max_seq_len = max_new_tokens, max_seq_len
        self.in_flight_groups, self.max_refills = in_flight_groups, max_refills
        self.history, self.seed = history, seed
        self._env_pool = ThreadPoolExecutor(max_workers=env_threads, thread_name_prefix="env")
        self._env_done: queue.Queue = queue.Queue()
        self._wake = wake if wake is not None else threading.Event()
        self._cv = threading.Condition()
        self._ready: deque[Group] = deque()
        self._dropped: list[Group] = []
        self._active: dict[int, Group] = {}
        self._sessions: dict[int, Episode] = {}
        self._load = [0] * len(handles)
        self._outgoing: dict[int, list[TurnRequest]] = {}
        self._release: dict[int, list[int]] = {}
        self._switches: list[SwitchEvent] = []
        self._n_groups = 0
        self._running = 0
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    # ---- trainer-facing API ----------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._pump_guarded, name="orchestrator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._env_pool.shutdown(wait=False, cancel_futures=True)
        for h in self.handles:
            h.stop()

    def take_groups(self, n: int, timeout: float | None = 600.0) -> Taken:
        """Block until ``n`` trainable groups are finished; take them (completion order)."""
        t0 = time.perf_counter()
        with self._cv:
            depth = sum(len(g.episodes) for g in self._ready)
            while len(self._ready) < n:
                if self._error is not None:
                    raise RuntimeError("rollout orchestrator failed") from self._error
                if timeout is not None and time.perf_counter() - t0 > timeout:
                    raise TimeoutError(f"no {n} finished groups within {timeout}s")
                self._cv.wait(0.5)
            groups = [self._ready.popleft() for _ in range(n)]
            dropped, self._dropped = self._dropped, []
            in_flight = self._running
        self._wake.set()
        return Taken(groups, dropped, time.perf_counter() - t0, depth, in_flight)

    def publish(self, payload: dict, version: int, checksum: str | None = None) -> list[float]:
        """Stage ``payload`` as ``version`` on every worker (*send*); returns the send times.
        Workers switch at their next decode-step boundary and report it (``switch_events``)."""
        return [h.stage(payload, version, checksum) for h in self.handles]

    def switch_events(self) -> list[SwitchEvent]:
        with self._cv:
            out, self._switches = self._switches, []
        return out

    def worker_stats(self) -> list[dict]:
        return [h.stats() for h in self.handles]

    # ---- the pump --------------------------------------------------------------------------
    def _pump_guarded(self) -> None:
        try:
            self._pump()
        except BaseException as e:
            with self._cv:
                self._error = e
                self._cv.notify_all()

    def _pump(self) -> None:
        polls = not all(getattr(h, "notifies", False) for h in self.handles)
        while not self._stop.is_set():
            self._fill()
            progressed = False
            for h in self.handles:
                for msg in h.drain():
                    progressed = True
                    self._on_message(msg)
            while True:
                try:
                    ep, result, t_end = self._env_done.get_nowait()
                except queue.Empty:
                    break
                progressed = True
                self._after_env(ep, result, t_end)
            self._flush()
            if not progressed:
                self._wake.wait(0.002 if polls else 0.05)
                self._wake.clear()

    def _fill(self) -> None:
        with self._cv:
            ready = len(self._ready)
        while len(self._active) < self.in_flight_groups and ready < self.in_flight_groups:
            k = self._n_groups
            self._n_groups += 1
            seed = self.seed * 1_000_003 + k
            envs = self.source.sample(1, seed=seed, repeats=self.group_size)
            gid = int(self.ids.groups(1)[0])
            group = Group(gid, self.group_size, [], seed)
            self._active[gid] = group
            for env in envs:
                self._start_episode(group, env, refill=False)

    def _start_episode(self, group: Group, env, *, refill: bool) -> None:
        sid = int(self.ids.samples(1)[0])
        ep = Episode(
            env,
            list(env.reset()),
            sample_id=sid,
            group_id=group.group_id,
            seed=_seed(self.seed, sid),
        )
        ep.refill, ep.t_start = refill, time.time()
        group.episodes.append(ep)
        self._sessions[sid] = ep
        self._running += 1
        self._request(ep)

    def _request(self, ep: Episode) -> None:
        if ep.turns >= self.max_turns:
            return self._finish(ep, failure_reason="max_turns")
        if len(ep.context) + self.max_new_tokens > self.max_seq_len:
            return self._finish(ep, failure_reason="context_exhausted")
        if ep.worker is None:  # DP-aware routing: pick once, then stick
            ep.worker = min(range(len(self.handles)), key=lambda w: (self._load[w], w))
            self._load[ep.worker] += 1
        ctx = ep.context
        if self.history == "retokenize" and ep.turns > 0:  # the fault: text round trip
            ctx = retokenize(ctx, self.tok)
        h = int(prefix_hashes(torch.tensor([ctx]))[0, -1])
        rec = TurnRecord(ep.turns, ep.worker, len(ep.context), len(ctx), h, time.time())
        ep.turn_records.append(rec)
        req = TurnRequest(ep.sample_id, tuple(ctx), _seed(ep.seed, ep.turns), ep.turns)
        self._outgoing.setdefault(ep.worker, []).append(req)

    def _flush(self) -> None:
        for w in set(self._outgoing) | set(self._release):
            reqs, rel = self._outgoing.pop(w, []), self._release.pop(w, [])
            if reqs or rel:
                self.handles[w].submit(reqs, rel)

    def _on_message(self, msg) -> None:
        if isinstance(msg, BaseException):
            raise msg
        if isinstance(msg, SwitchEvent):
            with self._cv:
                self._switches.append(msg)
            return
        assert isinstance(msg, TurnOutput)
        ep = self._sessions[msg.session_id]
        rec = ep.turn_records[-1]
        rec.t_gen_start, rec.t_gen_end, rec.reused = msg.t_start, msg.t_end, msg.reused
        rec.n_action = len(msg.ids)
        rec.version_first, rec.version_last = msg.version[0], msg.version[-1]
        rec.kv_version_min = min(msg.kv_version)
        ep.add_action(msg.ids, msg.logp, msg.version, msg.kv_version)
        ep.finished = msg.finished
        fut = self._env_pool.submit(ep.env.step, list(msg.ids), finished=msg.finished)
        fut.add_done_callback(lambda f, ep=ep: self._env_callback(ep, f))

    def _env_callback(self, ep: Episode, fut) -> None:
        try:
            result = fut.result()
        except Exception as e:  # a crashing environment is the environment's failure
            result = StepResult(
                done=True, failure_reason="env_crash", env_failure=True, event=repr(e)
            )
        self._env_done.put((ep, result, time.time()))
        self._wake.set()

    def _after_env(self, ep: Episode, res: StepResult, t_end: float) -> None:
        rec = ep.turn_records[-1]
        rec.t_env_end, rec.env_latency_s, rec.env_event = t_end, res.latency_s, res.event
        if res.done:
            return self._finish(
                ep,
                rewards=res.rewards,
                failure_reason=res.failure_reason,
                env_failure=res.env_failure,
            )
        ep.add_observation(res.observation)
        rec.n_observation = len(res.observation)
        self._request(ep)

    def _finish(self, ep: Episode, **kw) -> None:
        ep.finish(t=time.time(), **kw)
        self._running -= 1
        if ep.worker is not None:
            self._load[ep.worker] -= 1
            self._release.setdefault(ep.worker, []).append(ep.sample_id)
        group = self._active[ep.group_id]
        if group.done:
            self._group_done(group)

    def _group_done(self, group: Group) -> None:
        verdict = group_verdict(
            len(group.valid), group.size, refills=group.refills, max_refills=self.max_refills
        )
        template = group.failed[0].env if group.failed else None
        if verdict == "refill" and callable(getattr(template, "fork", None)):
            group.refills += 1
            for j in range(group.size - len(group.valid)):
                env = template.fork(_seed(group.seed, "refill", group.refills, j))
                self._start_episode(group, env, refill=True)
            return
        group.dropped = verdict != "ready"
        group.t_ready = time.time()
        del self._active[group.group_id]
        for e in group.episodes:
            self._sessions.pop(e.sample_id, None)
        with self._cv:
            (self._dropped if group.dropped else self._ready).append(group)
            self._cv.notify_all()
