"""The memory ledger inside the real training loop (``core.memory.hooks``).

Unit cases drive ``TrainingMemory`` by hand on tensors whose bytes are derived in comments; the
integration cases train a real 2-step GRPO run (DuckDB telemetry) once per module and check the
model-state bytes, the free rule per step, and the telemetry rows against the ledger.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field

import pytest
import torch
from torch import nn

from core.memory.categories import CATEGORIES
from core.memory.checks import lifecycle_violations, replay_peaks
from core.memory.footprint import distinct_bytes
from core.memory.hooks import TrainingMemory
from core.memory.peak import ALLOCATOR_LINE, NOT_MEASURED_OWNER, UNTRACKED_LINE
from observability.telemetry import NullTelemetry

# --------------------------------------------------------------------------- unit: the hooks


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Packed:
    """A quantized-weight stand-in: stored tensors behind ``.tensors()``."""

    def __init__(self) -> None:
        self.entries = {"codes": torch.zeros(2, 4, dtype=torch.int32), "scale": torch.ones(2)}

    def tensors(self) -> dict[str, torch.Tensor]:
        return dict(self.entries)


class OnlyBytes:
    """An object that reports nothing but ``.nbytes``."""

    nbytes = 100


def small_memory() -> tuple[TrainingMemory, nn.Linear]:
    torch.manual_seed(0)
    actor = nn.Linear(4, 2, bias=False)  # one float32 [2, 4] weight: 32 bytes
    opt = torch.optim.AdamW(actor.parameters(), lr=1e-3)
    mem = TrainingMemory(actor, opt, telemetry=NullTelemetry())
    mem.ledger.set_step(0)
    return mem, actor


def test_distinct_bytes_counts_storages_once_and_reads_packed_objects():
    base = torch.zeros(4, 8)  # 128 bytes
    obj = {
        "a": base,
        "view": base[1:],  # same storage: not counted again
        "q": Packed(),  # int32 [2, 4] = 32 bytes + float32 [2] = 8 bytes
        "raw": OnlyBytes(),  # 100 bytes
        "meta": 3,  # holds no tracked memory
        "pair": (torch.zeros(3, dtype=torch.int64), None),  # 24 bytes
    }
    seen: set = set()
    total, tensors, dtypes = distinct_bytes(obj, seen)
    assert total == 128 + 32 + 8 + 100 + 24
    assert len(tensors) == 4 and dtypes == {"float32", "int32", "int64", "OnlyBytes"}
    assert distinct_bytes(obj, seen)[0] == 0  # everything already seen


def test_model_state_tracked_at_construction_and_after_the_first_step():
    mem, actor = small_memory()
    assert mem.ledger.live_by_owner() == {"actor": 32}  # the weight only
    actor(torch.randn(3, 4)).sum().backward()
    mem.backward_done()
    mem.optimizer.step()
    mem.optimizer_stepped()
    # weight 32 + grad 32 + exp_avg 32 + exp_avg_sq 32 + float32 `step` 4 = 132
    assert mem.ledger.live_by_category()["model_state"] == 132


def test_fp32_switch_adopts_the_payload_instead_of_counting_it_twice():
    mem, actor = small_memory()
    led = mem.ledger
    gathered = {"w": actor.weight.detach().clone()}  # 32
    mem.sync_gathered(gathered)
    payload = {"w": gathered["w"].clone(), "q": Packed()}  # 32 + 40
    mem.sync_buffers("reshard", payload)
    assert led.live_by_category()["communication_buffers"] == 32 + 32 + 40
    mem.weights_switched(payload, version=0)  # fp32 engine: installs the payload as it is
    assert led.live_by_category()["communication_buffers"] == 32  # only the gather is left
    assert led.live_by_owner()["rollout"] == 72
    mem.sync_done()
    assert led.live_by_category()["communication_buffers"] == 0
    # peak: weight 32 + gather 32 + payload 72 = 136, never 136 + 72 (no double count)
    assert led.step_peak(0).total == 136
    assert led.leaked_objects() == []


def test_bf16_switch_counts_new_weights_and_frees_the_previous_version():
    mem, actor = small_memory()
    led = mem.ledger
    v0 = {"w": torch.zeros(2, 4)}  # 32 bytes; kept alive as the engine would
    mem.weights_switched(v0, version=0)
    led.set_step(1)
    gathered = {"w": actor.weight.detach().clone()}
    mem.sync_gathered(gathered)
    payload = {"w": gathered["w"].clone()}
    mem.sync_buffers("reshard", payload)
    installed = {"w": payload["w"].to(torch.bfloat16)}  # a cast: 16 new bytes
    mem.weights_switched(installed, version=1)
    mem.sync_done()
    assert led.live_by_owner() == {"actor": 32, "rollout": 16}
    # step 1 peak: actor 32 + v0 32 + gather 32 + payload 32 + v1 16 = 144 (v0 goes after v1)
    assert led.step_peak(1).total == 144
    assert [o.name for o in led.live_objects() if o.owner == "rollout"] == ["rollout/weights/v1/w"]


def test_quantize_stage_frees_what_it_replaced_and_keeps_pass_through():
    mem, _ = small_memory()
    led = mem.ledger
    norm, linear = torch.ones(4), torch.zeros(2, 4)  # 16 + 32 bytes
    mem.sync_buffers("reshard", {"norm": norm, "lin": linear})
    mem.sync_buffers("quantize", {"norm": norm, "lin": Packed()}, replaces="reshard")
    names = sorted(o.name for o in led.live_objects() if o.owner == "weight_sync")
    assert names == [
        "weight_sync/quantize/lin.codes",
        "weight_sync/quantize/lin.scale",
        "weight_sync/reshard/norm",  # passed through: tracked once, under its first stage
    ]
    assert led.live_by_category()["communication_buffers"] == 16 + 40
    mem.sync_done()
    assert led.leaked_objects() == []


def test_kv_cache_is_freed_when_its_tensors_die():
    mem, _ = small_memory()
    led = mem.ledger
    cache = [(torch.zeros(2, 3, 1, 4), torch.zeros(2, 3, 1, 4)) for _ in range(2)]  # 4 x 96 bytes
    mem.kv_cache_allocated(cache)
    (obj,) = [o for o in led.live_objects() if o.owner == "rollout"]
    assert (obj.category, obj.bytes, obj.logical_shape) == (
        "saved_activations",
        384,
        (4, 2, 3, 1, 4),
    )
    del cache
    gc.collect()
    assert obj.name not in led and led.leaked_objects() == []


def test_step_objects_are_freed_at_end_step():
    mem, actor = small_memory()
    mem.rollout_done(Batch(torch.zeros(4, 3, dtype=torch.int64)))  # 96 bytes of records
    assert mem.ledger.get("rollout/records").owner_history == ["rollout", "trainer"]
    mem.forward_begin(Batch(torch.zeros(4, 2)))  # 32 bytes of train batch
    h = actor(torch.randn(3, 4))  # linear saves x [3, 4]: 48 bytes (W is a parameter)
    y = (h**2).sum()  # pow saves h [3, 2]: 24 bytes
    kept = torch.zeros(5)  # an output the loop keeps but autograd does not save: 20 bytes
    mem.forward_end(h, kept)  # h is saved already: only `kept` becomes actor/outputs
    assert mem.ledger.get("actor/saved_activations").bytes == 48 + 24
    assert mem.ledger.get("actor/outputs").bytes == 20
    y.backward()
    mem.backward_done()
    peak = mem.end_step(0)
    assert mem.ledger.leaked_objects() == []
    # at forward_end: weight 32 + records 96 + batch 32 + activations 72 + outputs 20 = 252;
    # after backward the activations go before the new grad (32) comes: 180 + 32 = 212 < 252
    assert peak.total == 252 and peak.by_category["live_io"] == 96 + 32 + 20
    assert mem.ledger.live_bytes == 32 + 32  # weight + grad


def test_a_rollout_outside_a_step_is_replaced_not_leaked():
    mem, _ = small_memory()
    first, second = Batch(torch.zeros(8)), Batch(torch.zeros(2))  # 32 and 8 bytes
    mem.rollout_done(first)
    mem.rollout_done(second)  # no end_step in between (e.g. collect_step called on its own)
    assert mem.ledger.get("rollout/records").bytes == 8
    mem.end_step(0)
    assert mem.ledger.leaked_objects() == []


@dataclass
class Batch:
    """A rollout/train batch stand-in: one tensor and no DSA Top-k records."""

    ids: torch.Tensor
    topk: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- a real 2-step run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real 2-step GRPO run with DuckDB telemetry; returns (session, run_dir)."""
    from core.config import load_config
    from core.loops.grpo import run_grpo
    from core.loops.session import Session
    from core.run import new_run_dir, open_telemetry
    from core.tokenizer.chat_template import CHAT_TEMPLATE_REV
    from core.tokenizer.tokenizer import Tokenizer
    from tests.conftest import TINY

    cfg = load_config(None, [*TINY, "train.steps=2"])
    tok = Tokenizer.load()
    run_dir = new_run_dir(tmp_path_factory.mktemp("runs"), "memory")
    sink = open_telemetry(
        "duckdb",
        run_dir,
        cfg,
        tokenizer_rev=tok.revision,
        chat_template_rev=CHAT_TEMPLATE_REV,
        vocab_size=tok.vocab_size,
    )
    session = Session(cfg, sink, tok=tok)
    run_grpo(session, steps=2)  # ends with memory.finish(): raises on a leaked object
    sink.close("finished")
    return session, run_dir


def query(run_dir, sql: str) -> dict[str, list]:
    from observability import open_run

    con = open_run(run_dir)
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()
    return {n: [r[i] for r in rows] for i, n in enumerate(names)}


@pytest.mark.slow
def test_real_step_model_state_bytes_equal_tensor_sizes(trained):
    s, _ = trained
    params = sum(nbytes(p) for p in s.actor.parameters())
    grads = sum(nbytes(p.grad) for p in s.actor.parameters() if p.grad is not None)
    optim = sum(
        nbytes(v) for st in s.optimizer.state.values() for v in st.values() if torch.is_tensor(v)
    )
    buffers = sum(nbytes(b) for b in s.actor.buffers())
    assert grads > 0 and optim > 2 * grads  # after real steps: grads and AdamW moments exist
    tracked = sum(
        o.bytes
        for o in s.memory.ledger.live_objects()
        if o.category == "model_state" and o.owner == "actor"
    )
    assert tracked == params + grads + optim + buffers
    # fp32 dense engine: the conversion only slices/reshapes, so the rollout's weights hold
    # exactly the actor's parameter bytes (qkv -> q, k, v; fc1 -> gate, up)
    assert s.memory.ledger.live_by_owner()["rollout"] == params


@pytest.mark.slow
def test_two_step_run_frees_every_step_object_within_its_step(trained):
    s, run_dir = trained
    assert s.memory.ledger.leaked_objects() == []
    ev = query(run_dir, "SELECT * FROM memory_events ORDER BY rank, event_id")
    assert lifecycle_violations(ev, require_freed=True) == []
    created: dict[str, int] = {}
    for obj, event, step, persistent in zip(
        ev["object"], ev["event"], ev["step"], ev["persistent"], strict=True
    ):
        if event == "create" and not persistent:
            created[obj] = step
        elif event == "free" and obj in created:
            assert created.pop(obj) == step, f"{obj} created in step {step} freed in another"
    assert created == {}
    objects = set(ev["object"])
    for expected in (
        "rollout/records",
        "trainer/train_batch",
        "actor/saved_activations",
        "actor/outputs",
    ):
        assert expected in objects
    assert any(o.startswith("rollout/kv_cache/") for o in objects)
    assert any(o.startswith("weight_sync/reshard/") for o in objects)


@pytest.mark.slow
def test_peaks_in_telemetry_sum_to_the_step_peak(trained):
    s, run_dir = trained
    steps = query(run_dir, "SELECT step, peak_memory_bytes FROM steps ORDER BY step")
    assert steps["step"] == [0, 1] and all(b > 0 for b in steps["peak_memory_bytes"])
    peaks = query(run_dir, "SELECT step, category, owner, bytes FROM memory_peaks")
    ev = query(run_dir, "SELECT * FROM memory_events ORDER BY rank, event_id")
    replay = replay_peaks(ev, device="cpu")  # the naive loop over the recorded events
    for step, peak_bytes in zip(steps["step"], steps["peak_memory_bytes"], strict=True):
        rows = {(c, o): b for st, c, o, b in zip(*peaks.values(), strict=True) if st == step}
        assert set(c for c, _ in rows) <= set(CATEGORIES)
        tracked = {
            k: b
            for k, b in rows.items()
            if k not in (ALLOCATOR_LINE, UNTRACKED_LINE) and k[1] != NOT_MEASURED_OWNER
        }
        assert sum(tracked.values()) == peak_bytes == s.memory.ledger.step_peak(step).total
        assert replay[step][0] == peak_bytes
        assert rows[ALLOCATOR_LINE] is None  # CPU: no allocator statistics, not zero
        assert rows[UNTRACKED_LINE] is not None  # process RSS - tracked, its own line
        assert rows[("operator_workspace", NOT_MEASURED_OWNER)] is None
        assert tracked[("model_state", "actor")] > 0 and tracked[("model_state", "rollout")] > 0


def test_a_second_trainable_model_is_its_own_owner():
    """A critic's weights, gradients and AdamW states are owned by ``critic``, never ``actor``."""
    mem, actor = small_memory()
    critic = nn.Linear(4, 1, bias=False)  # one float32 [1, 4] weight: 16 bytes
    opt = torch.optim.AdamW(critic.parameters(), lr=1e-3)
    mem.add_model("critic", critic, opt)
    assert mem.live_owner_bytes() == {"actor": 32, "critic": 16}
    x = torch.ones(3, 4)
    (actor(x).sum() + critic(x).sum()).backward()
    mem.backward_done()
    opt.step()
    mem.optimizer_stepped()
    # grads: actor 32, critic 16; AdamW: critic exp_avg + exp_avg_sq 32 (+ step scalar 4)
    owned = mem.live_owner_bytes()
    assert owned["actor"] == 64 and owned["critic"] == 16 + 16 + 32 + 4
    with pytest.raises(ValueError, match="already tracks"):
        mem.add_model("critic", critic, opt)
