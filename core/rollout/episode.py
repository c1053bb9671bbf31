"""Episodes and groups of the async rollout: the growing record of one session, and the
environment-failure rule that decides what happens to a finished group.

An ``Episode`` keeps, token by token after its prompt, the exact ids, roles, behaviour
log-probs, the policy version that produced each generated token, the oldest KV version that
token was decoded against and its turn; per turn a ``TurnRecord`` (worker, context hash, timings,
environment latency). A ``Group`` holds the episodes of one prompt. ``group_verdict`` is the
seed's filter: env-failed samples leave the batch; a group with more than half valid samples is
refilled (new episodes of the same prompt), otherwise the whole group is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.rollout.trajectories import ROLE

GROUP_VERDICTS = ("ready", "refill", "drop")


@dataclass
class TurnRecord:
    """One policy turn of an episode."""

    turn: int
    worker: int
    start_pos: int
    """Length of the exact trajectory (prompt included) when the turn was requested: the
    position its first action token takes."""
    context_len: int
    """Length of the context the engine received."""
    context_hash: int
    """Prefix hash of the ids the engine received (``core.tokenizer.tito.prefix_hashes``)."""
    t_request: float
    t_gen_start: float = 0.0
    t_gen_end: float = 0.0
    t_env_end: float = 0.0
    n_action: int = 0
    n_observation: int = 0
    version_first: int = -1
    version_last: int = -1
    kv_version_min: int = -1
    reused: int = 0
    env_latency_s: float = 0.0
    env_event: str | None = None


@dataclass
class Episode:
    """One session: an environment episode as it runs (duck-compatible with ``collect``'s
    episodes, so ``core.rollout.collect.assemble`` lays it out)."""

    sample_id: int
    group_id: int
    env: object
    seed: int
    prompt: list[int]
    refill: bool = False
    ids: list[int] = field(default_factory=list)
    roles: list[int] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    kv_versions: list[int] = field(default_factory=list)
    turn_of: list[int] = field(default_factory=list)
    turn_records: list[TurnRecord] = field(default_factory=list)
    worker: int | None = None
    rewards: dict = field(default_factory=dict)
    failure_reason: str | None = None
    env_failure: bool = False
    finished: bool = False
    turns: int = 0
    done: bool = False
    t_start: float = 0.0
    t_end: float = 0.0

    @property
    def context(self) -> list[int]:
        """The exact ids so far: prompt + every action and observation token."""
        return self.prompt + self.ids

    @property
    def env_latency_s(self) -> float:
        return sum(t.env_latency_s for t in self.turn_records)

    def add_action(self, ids, logp, versions, kv_versions) -> None:
        n = len(ids)
        self.ids += list(ids)
        self.roles += [ROLE["action"]] * n
        self.logp += list(logp)
        self.versions += list(versions)
        self.kv_versions += list(kv_versions)
        self.turn_of += [self.turns] * n
        self.turns += 1

    def add_observation(self, ids) -> None:
        n = len(ids)
        self.ids += list(ids)
        self.roles += [ROLE["observation"]] * n
        self.logp += [0.0] * n
        self.versions += [-1] * n
        self.kv_versions += [-1] * n
        self.turn_of += [self.turns - 1] * n

    def finish(self, *, rewards=None, failure_reason=None, env_failure=False, t=0.0) -> None:
        self.done, self.t_end = True, t
        self.rewards = dict(rewards or {})
        self.failure_reason, self.env_failure = failure_reason, env_failure


@dataclass
class Group:
    """The episodes of one prompt (refills appended)."""

    group_id: int
    size: int
    episodes: list[Episode]
    seed: int
    refills: int = 0
    dropped: bool = False
    t_ready: float = 0.0

    @property
    def done(self) -> bool:
        return all(e.done for e in self.episodes)

    @property
    def valid(self) -> list[Episode]:
        return [e for e in self.episodes if not e.env_failure]

    @property
    def failed(self) -> list[Episode]:
        return [e for e in self.episodes if e.env_failure]


def group_verdict(n_valid: int, size: int, *, refills: int, max_refills: int) -> str:
    """What a finished group becomes: ``ready`` (``size`` valid samples), ``refill`` (more than
    half valid and refill rounds left) or ``drop``."""
    if n_valid >= size:
        return "ready"
    if 2 * n_valid > size and refills < max_refills:
        return "refill"
    return "drop"
