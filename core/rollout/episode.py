"""Episodes and groups of the async rollout: the growing record of one session, and the
environment-failure rule that decides what happens to a finished group.

An ``EpisodeRecord`` keeps, token by token after its prompt, the exact ids, roles, behaviour
log-probs, the policy version that produced each generated token, the oldest KV version that
token was decoded against and its turn (the synchronous collector's episodes are these); an
``Episode`` adds a session's identity and per turn a ``TurnRecord`` (worker, context hash,
timings, environment latency). A ``Group`` holds the episodes of one prompt. ``group_verdict`` is the
seed's filter: env-failed samples leave the batch; a group with more than half valid samples is
refilled (new episodes of the same prompt), otherwise the whole group is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from observability.enums import ROLES

ROLE = {name: code for code, name in enumerate(ROLES)}
"""Role name -> its code (the telemetry enum's index)."""
TRAINABLE_ROLES = ("action", "summary")
"""Roles the policy generated: the only ones that may carry loss."""

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


GENERATED_ROLES = ("action", "summary")
"""Roles the policy generates (their tokens belong to the turn that produced them)."""


@dataclass
class EpisodeRecord:
    """An episode's growing record after its prompt, token by token as parallel lists: exact
    ids, roles, behaviour log-probs, the policy version that produced each generated token and
    the oldest KV version it attended (-1 elsewhere), its turn. What ``collect``
    runs and ``assemble`` lays out (both in ``core.rollout.trajectories``)."""

    env: object
    prompt: list[int]
    ids: list[int] = field(default_factory=list)
    roles: list[int] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    kv_versions: list[int] = field(default_factory=list)
    turn_of: list[int] = field(default_factory=list)
    rewards: dict = field(default_factory=dict)
    failure_reason: str | None = None
    env_failure: bool = False
    finished: bool = False
    turns: int = 0
    """Policy turns so far (incremented by the caller after a generated turn)."""
    done: bool = False

    @property
    def context(self) -> list[int]:
        """The exact ids so far: prompt + every action and observation token."""
        return self.prompt + self.ids

    def add(self, ids, role: str, logp=None, version=-1, kv_version=None) -> None:
        """Append ``ids`` in ``role``: ``logp`` per token (0 when None); ``version`` and
        ``kv_version`` per token, or one int for all (``kv_version`` None: = ``version``)."""
        n = len(ids)
        versions = _per_token(version, n)
        self.ids += list(ids)
        self.roles += [ROLE[role]] * n
        self.logp += list(logp) if logp is not None else [0.0] * n
        self.versions += versions
        self.kv_versions += versions if kv_version is None else _per_token(kv_version, n)
        turn = self.turns if role in GENERATED_ROLES else max(self.turns - 1, 0)
        self.turn_of += [turn] * n

    def finish(self, *, rewards=None, failure_reason=None, env_failure=False) -> None:
        self.done = True
        self.rewards = dict(rewards or {})
        self.failure_reason, self.env_failure = failure_reason, env_failure


def _per_token(value, n: int) -> list[int]:
    return [value] * n if isinstance(value, int) else list(value)


@dataclass(kw_only=True)
class Episode(EpisodeRecord):
    """One session of the async rollout: the record plus its identity, worker and timings."""

    sample_id: int
    group_id: int
    seed: int
    refill: bool = False
    turn_records: list[TurnRecord] = field(default_factory=list)
    worker: int | None = None
    t_start: float = 0.0
    t_end: float = 0.0

    @property
    def env_latency_s(self) -> float:
        return sum(t.env_latency_s for t in self.turn_records)

    def add_action(self, ids, logp, versions, kv_versions) -> None:
        self.add(ids, "action", logp, versions, kv_versions)
        self.turns += 1

    def add_observation(self, ids) -> None:
        self.add(ids, "observation")

    def finish(self, *, rewards=None, failure_reason=None, env_failure=False, t=0.0) -> None:
        super().finish(rewards=rewards, failure_reason=failure_reason, env_failure=env_failure)
        self.t_end = t


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
