"""Rollout worker engine replicas in the memory ledger: one owner per worker replica, objects that
follow the workers' reports (switch, staged buffer, KV growth), freed when the workers stop."""

from __future__ import annotations

import pytest

from core.memory.ledger import LedgerError, MemoryLedger
from core.memory.replicas import ReplicaMemory, replica_owner
from observability import open_run


def _report(worker: int, **objects: tuple[str, int]) -> dict:
    return {"worker": worker, "memory": {k.replace("__", "/"): v for k, v in objects.items()}}


def test_ledger_follows_the_workers_reports():
    ledger = MemoryLedger(0, "cpu")
    replicas = ReplicaMemory(ledger)
    local = {0: True, 1: False}  # worker 0 a thread here, worker 1 another process
    replicas.update(
        [
            _report(
                0,
                weights__v0=("model_state", 1000),
                staged__v1=("communication_buffers", 1000),
                kv_cache=("saved_activations", 64),
            ),
            _report(1, weights__v0=("model_state", 1000)),
        ],
        local=local,
    )
    assert replica_owner(0) == "rollout_worker_0"
    # only the in-process replica counts towards this process's device total: 1000 + 1000 + 64
    assert ledger.live_by_owner() == {"rollout_worker_0": 2064}
    remote = ledger.get("rollout_worker_1/weights/v0")
    assert remote.owner == "rollout_worker_1" and remote.device == "cpu/rollout_worker_1"
    assert ledger.get("rollout_worker_0/staged/v1").category == "communication_buffers"
    # worker 0 switched to v1 (its staged buffer became live) and its KV cache grew
    replicas.update(
        [
            _report(0, weights__v1=("model_state", 1000), kv_cache=("saved_activations", 128)),
            _report(1, weights__v0=("model_state", 1000)),
        ],
        local=local,
    )
    assert "rollout_worker_0/weights/v0" not in ledger
    assert "rollout_worker_0/staged/v1" not in ledger
    assert ledger.get("rollout_worker_0/kv_cache").bytes == 128
    assert ledger.live_by_owner() == {"rollout_worker_0": 1128}
    with pytest.raises(LedgerError, match="kv_cache"):  # a live KV cache is not persistent
        ledger.close()
    replicas.release()
    assert not [o for o in ledger.live_objects() if o.owner.startswith("rollout_worker_")]
    ledger.close()


@pytest.mark.slow
def test_agentic_run_records_one_owner_per_worker_replica(agentic_run):
    con = open_run(agentic_run)
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    owners = {
        r[0]
        for r in q("SELECT DISTINCT owner FROM memory_events WHERE owner LIKE 'rollout_worker_%'")
    }
    assert owners == {"rollout_worker_0", "rollout_worker_1"}  # the run's two workers
    # each replica's version-0 weights are as large as the session's own rollout engine's
    (engine,) = q(
        "SELECT sum(bytes) FROM memory_events WHERE event = 'create' AND object LIKE 'rollout/weights/v0/%'"
    )[0]
    for w in (0, 1):
        (replica,) = q(
            "SELECT bytes FROM memory_events WHERE event = 'create' "
            f"AND object = 'rollout_worker_{w}/weights/v0'"
        )[0]
        assert replica == engine > 0
    # every replica object is freed (a switch replaces it, the workers' stop releases the rest)
    (unfreed,) = q(
        "SELECT count(*) FROM (SELECT object, count(*) FILTER (WHERE event = 'create') AS c, "
        "count(*) FILTER (WHERE event = 'free') AS f FROM memory_events "
        "WHERE owner LIKE 'rollout_worker_%' GROUP BY object) WHERE c <> f"
    )[0]
    assert unfreed == 0
