"""The per-step peak and its breakdown on a scripted event sequence (hand-derived), and its output."""

import itertools

import pytest
import torch

from core.device import Device
from core.memory import MemoryLedger
from core.memory import ledger as ledger_mod
from core.memory.checks import lifecycle_violations, replay_peaks


class RecordingTelemetry:
    def __init__(self):
        self.batches = []

    def emit(self, table, columns):
        self.batches.append((table, {k: list(v) for k, v in columns.items()}))


def scripted_ledger() -> MemoryLedger:
    """Two steps; the fake clock ticks 10 per timestamp read (construction reads ts=10)."""
    led = MemoryLedger(device="cpu", sample_at_peaks=False, clock=itertools.count(10, 10).__next__)
    led.set_step(1)  # ts 20, window opens at total 0
    led.create("actor/w", "model_state", 1000, owner="actor", persistent=True)  # ts 30, total 1000
    led.create("kv/0", "live_io", 300, owner="rollout")  # ts 40, total 1300
    led.create("acts", "saved_activations", 500, owner="actor")  # ts 50, total 1800
    led.create("ws", "operator_workspace", 200, owner="actor")  # ts 60, total 2000  <- step-1 peak
    led.free("ws")  # ts 70, total 1800
    led.transfer("kv/0", owner="trainer")  # ts 80, total 1800 (owner changes, bytes do not)
    led.create("grad_buf", "communication_buffers", 150, owner="sync")  # ts 90, 1950 < 2000
    led.free("acts")  # ts 100, 1450
    led.reuse("kv/0")  # ts 110, no change
    led.free("kv/0")  # ts 120, 1150
    led.free("grad_buf")  # ts 130, 1000
    led.set_step(2)  # ts 140, window opens at 1000 (actor/w)
    led.create("acts", "saved_activations", 700, owner="actor")  # ts 150, 1700
    led.transfer("actor/w", device="cuda:1")  # ts 160, 700: offloaded weights leave this device
    led.create("big", "live_io", 1200, owner="rollout")  # ts 170, 1900  <- step-2 peak
    led.free("acts")  # ts 180, 1200
    led.free("big")  # ts 190, 0
    return led


def test_scripted_peaks_and_breakdown():
    led = scripted_ledger()
    assert led.step_peak(0).total == 0
    p1 = led.step_peak(1)
    assert (p1.total, p1.ts) == (2000, 60)
    assert p1.by_category == {
        "model_state": 1000,
        "saved_activations": 500,
        "operator_workspace": 200,
        "communication_buffers": 0,
        "live_io": 300,
        "allocator": 0,
        "runtime_margin": 0,
    }
    assert p1.by_owner == {"actor": 1700, "rollout": 300}  # kv/0 still owned by rollout at ts 60
    p2 = led.step_peak(2)
    assert (p2.total, p2.ts) == (1900, 170)
    assert p2.by_category_owner == {
        ("saved_activations", "actor"): 700,
        ("live_io", "rollout"): 1200,
    }
    assert p2.by_category["model_state"] == 0  # actor/w sits on cuda:1 at the peak
    with pytest.raises(KeyError, match="known steps"):
        led.step_peak(3)
    led.close()  # only the persistent weights remain


def test_incremental_peak_matches_naive_replay():
    led = scripted_ledger()
    cols = led.pending_columns()
    assert lifecycle_violations(cols) == []
    replay = replay_peaks(cols, device="cpu")
    for step in (1, 2):
        peak = led.step_peak(step)
        assert replay[step] == (peak.total, dict(peak.by_category_owner))


def test_flush_emits_events_and_peak_rows():
    led = scripted_ledger()
    sink = RecordingTelemetry()
    peak = led.flush_to(sink, step=2)
    (t_events, events), (t_peaks, peaks) = sink.batches
    assert (t_events, t_peaks) == ("memory_events", "memory_peaks")
    assert (
        len(events["event"]) == 16
    )  # 11 in step 1, 5 in step 2 and len({len(v) for v in events.values()}) == 1
    assert (events["event"][12], events["device"][12]) == ("transfer", "cuda:1")
    rows = set(zip(peaks["step"], peaks["rank"], peaks["category"], peaks["owner"], peaks["bytes"]))
    assert rows == {
        (2, 0, "saved_activations", "actor", 700),
        (2, 0, "live_io", "rollout", 1200),
        (2, 0, "allocator", "allocator", None),  # CPU: not measured
        (2, 0, "runtime_margin", "untracked", None),  # sampling off: not measured
    }  # operator_workspace was tracked in step 1, so no "not_measured" line
    assert peak.total == 1900
    sink.batches.clear()
    led.flush_to(sink, step=2)  # nothing pending: only the peak again
    assert [t for t, _ in sink.batches] == ["memory_peaks"]


def test_cpu_untracked_line_from_rss(monkeypatch):
    monkeypatch.setattr(ledger_mod, "process_rss_bytes", lambda: 10_000)
    led = MemoryLedger(device="cpu", clock=itertools.count().__next__)
    led.create("batch", "live_io", 2_500, owner="trainer")
    peak = led.step_peak(0)
    assert (peak.measured_bytes, peak.untracked_bytes, peak.allocator_bytes) == (
        10_000,
        7_500,
        None,
    )
    assert peak.rows() == {
        ("live_io", "trainer"): 2_500,
        ("allocator", "allocator"): None,
        ("runtime_margin", "untracked"): 7_500,  # 10_000 RSS - 2_500 tracked
        ("operator_workspace", "not_measured"): None,
    }


def test_fake_cuda_allocator_line(monkeypatch):
    allocated = {"now": 0}
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev: allocated["now"])
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev: 4096)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda dev: allocated["now"])
    led = MemoryLedger(device=Device("cuda"), clock=itertools.count().__next__)
    allocated["now"] = 1_200  # the allocator sees 200 bytes the ledger does not
    led.create("actor/w", "model_state", 1_000, owner="actor", persistent=True)
    peak = led.step_peak(0)
    assert peak.allocator_bytes == 4096 - 1_200  # reserved - allocated
    assert peak.untracked_bytes == 200  # allocated - tracked
    assert led.pending_columns()["device"] == ["cuda:0"]
