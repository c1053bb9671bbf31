"""Tracked model-state bytes equal parameter + gradient + optimizer-state tensor bytes exactly."""

import itertools

import torch
from torch import nn

from core.memory import MemoryLedger, free_gradients, track_model_state


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def test_model_state_bytes_exact_after_adamw_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    led = MemoryLedger(device="cpu", sample_at_peaks=False, clock=itertools.count().__next__)

    before = track_model_state(led, model, opt, owner="actor")  # no grads, no states yet
    # parameters: 4*8 + 8 + 8*2 + 2 = 58 float32 = 232 bytes
    assert (before.parameters, before.gradients, before.optimizer, before.total) == (232, 0, 0, 232)

    model(torch.randn(3, 4)).pow(2).mean().backward()
    opt.step()
    after = track_model_state(led, model, opt, owner="actor")
    # grads 232; AdamW per parameter: exp_avg + exp_avg_sq (232 + 232) + a float32 `step` (4 x 4)
    assert (after.parameters, after.gradients, after.optimizer) == (232, 232, 480)
    assert after.total == 944

    expected = sum(nbytes(p) + nbytes(p.grad) for p in model.parameters())
    expected += sum(nbytes(v) for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
    assert after.total == expected == 944
    assert led.live_by_category()["model_state"] == expected
    assert all(r.persistent and r.category == "model_state" for r in led.live_objects())
    assert "actor/optim/0.weight/exp_avg_sq" in led

    n_events = len(led.pending_columns()["event"])
    assert track_model_state(led, model, opt, owner="actor") == after  # idempotent
    assert len(led.pending_columns()["event"]) == n_events
    led.close()  # persistent: nothing leaks


def test_buffers_and_free_gradients():
    model = nn.BatchNorm1d(
        3
    )  # params weight, bias [3]; buffers running_mean/var [3], num_batches_tracked int64
    led = MemoryLedger(device="cpu", sample_at_peaks=False, clock=itertools.count().__next__)
    model(torch.randn(4, 3)).sum().backward()
    got = track_model_state(led, model, owner="reference")
    assert (got.parameters, got.buffers, got.gradients) == (24, 12 + 12 + 8, 24)
    assert free_gradients(led, model, owner="reference") == 24
    assert led.live_bytes == 24 + 32
