"""Weight-sync checksums: equal iff the bits are equal; the ack re-hashes only what it must."""

import torch

from core.config import load_config
from core.loops.session import Session
from core.sync import weight_sync as ws
from core.sync.weight_sync import payload_checksum, tensor_checksum
from observability.telemetry import NullTelemetry


def test_checksum_sees_one_flipped_bit_and_not_the_copy():
    t = torch.randn(64, 32)
    flipped = t.clone()
    flipped.view(torch.int32)[3, 5] ^= 1  # the last mantissa bit of one element
    assert tensor_checksum(t.clone()) == tensor_checksum(t)
    assert tensor_checksum(flipped) != tensor_checksum(t)
    assert len(tensor_checksum(t)) == 16
    bf = t.to(torch.bfloat16)  # bf16 and fp8 payloads hash their bits too
    assert tensor_checksum(bf) == tensor_checksum(bf.clone())


def test_ack_reuses_the_send_checksum_only_for_the_same_object():
    w = {"a": torch.randn(8, 8), "b": torch.randn(4)}
    sent, per, nbytes = payload_checksum(w)
    hashed = {k: (w[k], c) for k, c in per.items()}
    assert payload_checksum(w, hashed=hashed) == (sent, per, nbytes)  # kept as sent
    changed = {"a": w["a"].clone(), "b": w["b"] + 1.0}  # a copy is hashed, so a change shows
    again, per2, _ = payload_checksum(changed, hashed=hashed)
    assert per2["a"] == per["a"] and per2["b"] != per["b"] and again != sent


def test_sync_hashes_only_what_the_engine_did_not_keep(monkeypatch):
    calls = []
    real = ws.tensor_checksum
    monkeypatch.setattr(ws, "tensor_checksum", lambda t: calls.append(1) or real(t))
    fp32 = Session(load_config(None), NullTelemetry())  # the fp32 engine keeps the payload
    n = len(fp32.engine.weights)
    calls.clear()
    fp32.sync()
    assert len(calls) == n  # the send only: the ack reuses it
    bf16 = Session(load_config(None, ['rollout.precision="bf16"']), NullTelemetry())
    calls.clear()
    bf16.sync()  # the bf16 engine casts floats: a new copy, hashed at the ack
    assert len(calls) > n
