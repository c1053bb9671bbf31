"""Saved-activation bytes on Linear -> ReLU -> Linear, derived by hand from what autograd saves."""

import itertools

import pytest
import torch
from torch import nn

from core.memory import MemoryLedger, SavedActivations


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


# What autograd saves for y = L2(relu(L1(x))), x: [B, 4] float32 with requires_grad=False:
#   L1 = addmm(b1, x, W1^T): saves mat1 = x (for dW1); mat2 = W1^T is NOT saved because
#        x needs no gradient                                       -> x          [B, 4]
#   ReLU: saves its result h                                        -> h          [B, 8]
#   L2 = addmm(b2, h, W2^T): saves mat1 = h (for dW2, same storage as ReLU's h) and
#        mat2 = W2^T (for dh; a view of the parameter W2 [2, 8])     -> h, W2
# Pack-hook calls: 4. Distinct storages: x, h, W2. Excluding parameters: x and h only,
#   bytes = 4 * (B*4 + B*8) = 48 * B; with B = 3: 144. W2 adds 16 floats = 64 bytes.
@pytest.mark.parametrize("batch", [3, 5])
def test_hand_derived_saved_bytes(batch):
    model = mlp()
    x = torch.randn(batch, 4)
    with SavedActivations(exclude=model.parameters()) as acts:
        model(x).sum()
    assert acts.num_saved == 4
    assert acts.bytes == 48 * batch
    assert acts.num_storages == 2
    assert acts.excluded_bytes == 64


def test_without_exclusion_parameters_count_once():
    model = mlp()
    with SavedActivations() as acts:
        model(torch.randn(3, 4))
    assert acts.bytes == 144 + 64  # x, h, W2 each once; h's second save deduplicated


def test_ledger_object_created_and_freed():
    led = MemoryLedger(device="cpu", sample_at_peaks=False, clock=itertools.count().__next__)
    model = mlp()
    with SavedActivations(led, owner="actor", exclude=model.parameters()) as acts:
        loss = model(torch.randn(3, 4)).sum()
    rec = led.get("actor/saved_activations")
    assert (rec.category, rec.owner, rec.bytes, rec.dtype, rec.logical_shape) == (
        "saved_activations",
        "actor",
        144,
        "float32",
        (2,),
    )
    loss.backward()
    acts.free()
    assert led.live_bytes == 0
    assert led.step_peak(0).by_category["saved_activations"] == 144


def test_no_grad_forward_saves_nothing():
    model = mlp()
    with torch.no_grad(), SavedActivations() as acts:
        model(torch.randn(3, 4))
    assert (acts.bytes, acts.num_saved) == (0, 0)
