"""Lifecycle rules of the memory ledger: frees, transfers, reuse, persistence, tensor tracking."""

import itertools

import numpy as np
import pyarrow as pa
import pytest
import torch

from core.memory import CATEGORIES, EVENT_COLUMNS, LedgerError, MemoryLedger
from core.memory.checks import lifecycle_violations
from observability.records import build_table


def make_ledger() -> MemoryLedger:
    return MemoryLedger(
        rank=0, device="cpu", sample_at_peaks=False, clock=itertools.count(10, 10).__next__
    )


def test_categories_are_the_seven_of_issue_9():
    assert CATEGORIES == (
        "model_state",
        "saved_activations",
        "operator_workspace",
        "communication_buffers",
        "live_io",
        "allocator",
        "runtime_margin",
    )


def test_double_free_raises():
    led = make_ledger()
    led.create("kv/0", "live_io", 64, owner="rollout")
    led.free("kv/0")
    with pytest.raises(LedgerError, match="double free of 'kv/0'"):
        led.free("kv/0")
    with pytest.raises(LedgerError, match="transfer after free"):
        led.transfer("kv/0", owner="trainer")


def test_unknown_object_raises():
    led = make_ledger()
    with pytest.raises(LedgerError, match="unknown object 'ghost'"):
        led.free("ghost")
    with pytest.raises(LedgerError, match="reuse of unknown"):
        led.reuse("ghost")


def test_create_of_live_name_raises_and_recreate_after_free_is_allowed():
    led = make_ledger()
    led.create("buf", "communication_buffers", 8, owner="sync")
    with pytest.raises(LedgerError, match="already live"):
        led.create("buf", "communication_buffers", 8, owner="sync")
    led.free("buf")
    led.create("buf", "communication_buffers", 16, owner="sync")
    assert led.live_bytes == 16


def test_bad_arguments_raise_value_error():
    led = make_ledger()
    with pytest.raises(ValueError, match="category must be one of"):
        led.create("x", "activations", 1, owner="actor")
    with pytest.raises(ValueError, match="bytes must be >= 0"):
        led.create("x", "live_io", -1, owner="actor")
    with pytest.raises(ValueError, match="owner"):
        led.create("x", "live_io", 1, owner="")
    led.set_step(3)
    with pytest.raises(ValueError, match="backwards"):
        led.set_step(2)


def test_transfer_keeps_owner_history_and_bytes():
    led = make_ledger()
    led.create(
        "logprobs/teacher",
        "live_io",
        400,
        owner="teacher",
        producer="teacher.forward",
        consumer="loss",
    )
    led.transfer("logprobs/teacher", owner="trainer")
    led.transfer("logprobs/teacher", consumer="opd_loss")  # consumer only: no new owner entry
    rec = led.transfer("logprobs/teacher", owner="actor")
    assert rec.owner_history == ["teacher", "trainer", "actor"]
    assert rec.consumer == "opd_loss" and rec.bytes == 400
    cols = led.pending_columns()
    assert cols["event"] == ["create", "transfer", "transfer", "transfer"]
    assert cols["owner"] == ["teacher", "trainer", "trainer", "actor"]
    assert cols["bytes"] == [400] * 4
    assert led.live_by_owner() == {"actor": 400}  # bytes moved with the owner, counted once
    with pytest.raises(ValueError, match="at least one"):
        led.transfer("logprobs/teacher")


def test_reuse_counted_once():
    led = make_ledger()
    led.create("kv/block7", "live_io", 256, owner="rollout", consumer="req0")
    for req in ("req1", "req2", "req3"):
        led.reuse("kv/block7", consumer=req)
    rec = led.get("kv/block7")
    assert rec.reuse_count == 3 and rec.consumer == "req3"
    assert led.live_bytes == 256  # reuse adds no bytes
    assert led.step_peak(0).total == 256
    assert led.pending_columns()["event"] == ["create", "reuse", "reuse", "reuse"]


def test_persistent_objects_exempt_from_free_rule():
    led = make_ledger()
    led.create("actor/param/w", "model_state", 100, owner="actor", persistent=True)
    led.create("batch/0", "live_io", 10, owner="trainer")
    assert [r.name for r in led.leaked_objects()] == ["batch/0"]
    with pytest.raises(LedgerError, match="1 non-persistent.*'batch/0'"):
        led.close()
    led.free("batch/0")
    led.close()  # the persistent parameter may stay live
    assert lifecycle_violations(led.pending_columns()) == []


def test_timestamps_monotonic_and_event_ids_increase():
    clock = iter([50, 40, 60, 60, 70]).__next__  # a clock that steps back once
    led = MemoryLedger(device="cpu", sample_at_peaks=False, clock=clock)  # consumes 50
    led.create("a", "live_io", 1, owner="x")  # 40 -> clamped to 50
    led.create("b", "live_io", 1, owner="x")  # 60
    led.free("a")  # 60
    led.free("b")  # 70
    cols = led.pending_columns()
    assert cols["ts"] == [50, 60, 60, 70]
    assert cols["event_id"] == [0, 1, 2, 3]


def test_track_tensor_derives_bytes_shape_dtype_layout():
    led = make_ledger()
    x = torch.zeros(3, 5, dtype=torch.bfloat16)
    rec = led.track_tensor("x", x, category="live_io", owner="rollout", producer="sampler")
    assert (rec.bytes, rec.logical_shape, rec.dtype, rec.layout, rec.device) == (
        30,
        (3, 5),
        "bfloat16",
        "contiguous",
        "cpu",
    )
    rec_t = led.track_tensor("xt", x.t(), category="live_io", owner="rollout")
    assert rec_t.layout == "strided" and rec_t.logical_shape == (5, 3)
    # int4 weights packed two per uint8: 4x8 logical values in 16 bytes
    packed = torch.zeros(4, 4, dtype=torch.uint8)
    rec_p = led.track_tensor(
        "w4",
        packed,
        category="model_state",
        owner="rollout_engine",
        logical_shape=(4, 8),
        layout="packed",
    )
    assert (rec_p.bytes, rec_p.logical_shape, rec_p.layout, rec_p.dtype) == (
        16,
        (4, 8),
        "packed",
        "uint8",
    )
    cols = led.pending_columns()
    assert tuple(cols) == EVENT_COLUMNS
    assert cols["logical_shape"] == ["[3, 5]", "[5, 3]", "[4, 8]"]
    assert cols["device_kind"] == ["cpu"] * 3 and cols["rank"] == [0] * 3


def test_telemetry_columns_type_shapes_and_time_for_the_sink():
    led = make_ledger()
    led.create("a", "live_io", 8, logical_shape=(2, 4), owner="x")
    led.create("s", "live_io", 4, owner="x")  # a scalar: empty shape
    led.free("a")
    cols = led.telemetry_columns()
    assert tuple(cols) == EVENT_COLUMNS
    assert cols["logical_shape"] == [[2, 4], [], [2, 4]]
    assert cols["ts"].dtype == "datetime64[us]" and len(cols["ts"]) == 3
    assert cols["object"] == ["a", "s", "a"]
    assert cols["event"] == ["create", "create", "free"]  # plain columns: no Arrow types
    assert cols["bytes"].dtype == np.int64 and cols["persistent"].dtype == bool
    assert led.pending_columns()["logical_shape"] == ["[2, 4]", "[]", "[2, 4]"]


def test_telemetry_columns_convert_to_the_rows_of_the_plain_columns():
    """The sink stores the typed columns exactly as it stores the ledger's plain lists."""
    led = make_ledger()
    led.create("a", "live_io", 8, logical_shape=(2, 4), owner="x")
    first = led.telemetry_columns()
    led._pending.clear()
    led.create("b", "saved_activations", 4, owner="y")
    led.free("a")
    second = led.telemetry_columns()
    plain = led.pending_columns()
    plain["ts"] = second["ts"]
    plain["logical_shape"] = second["logical_shape"]
    typed = build_table("memory_events", second, run_id="r", rank=0)
    assert typed.equals(build_table("memory_events", plain, run_id="r", rank=0))
    assert typed.schema.field("category").type == pa.string()
    assert first["owner"] == ["x"]


def test_empty_ledger_has_empty_columns():
    assert make_ledger().pending_columns() == {col: [] for col in EVENT_COLUMNS}
