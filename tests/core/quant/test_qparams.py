"""qparams telemetry rows: the three producers agree bit for bit, and spec mismatches show up."""

import pytest
import torch

from core.quant.presets import get_preset
from core.quant.quantizer import dequantize, fake_quant, quant_error, quantize
from core.quant.storage import QuantizedLinearWeight, load_quantized, save_quantized
from core.quant.wiring import COLUMNS, qparams_mismatch, qparams_row, tensor_hash


def _tie_rich_weight():
    # Every element is a multiple of 0.5 and each group of 32 contains amax = 7, so with the seed
    # spec (s = 7 / 7 = 1) many x / s are exact .5 ties: half_even and half_away disagree there.
    gen = torch.Generator().manual_seed(0)
    w = torch.randint(-14, 15, (4, 64), generator=gen) / 2.0
    w[:, 0] = 7.0
    w[:, 32] = -7.0
    return w.to(torch.bfloat16)


def test_three_producers_agree(tmp_path):
    spec = get_preset("int4-g32-sym")
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(1), dtype=torch.bfloat16)
    qat = quantize(w, spec)  # what fake_quant(w) used in the forward
    save_quantized(tmp_path / "sync.safetensors", {"l0.fc1": quantize(w.clone(), spec)})
    offline = load_quantized(tmp_path / "sync.safetensors")["l0.fc1"]
    rollout = QuantizedLinearWeight.from_quantized(offline, name="l0.fc1").to_quantized()
    err = quant_error(w, qat)
    rows = [
        qparams_row("l0.fc1", qt, producer=p, policy_version=3, max_abs_err=err)
        for qt, p in [(qat, "qat_fake"), (offline, "offline_real"), (rollout, "rollout_load")]
    ]
    assert all(tuple(r) == COLUMNS for r in rows)
    assert qparams_mismatch(rows[0], rows[1]) == [] and qparams_mismatch(rows[0], rows[2]) == []
    r = rows[2]
    assert (r["bits"], r["qmin"], r["qmax"], r["group_size"], r["numel"]) == (4, -7, 7, 32, 1024)
    assert (r["spec_name"], r["tensor"], r["producer"], r["policy_version"]) == (
        "int4-g32-sym",
        "l0.fc1",
        "rollout_load",
        3,
    )
    assert r["zero_hash"] is None and len(r["code_hash"]) == 16
    assert r["max_abs_err"] == float(err) > 0
    # ... and the weight the actor trained against is the weight the rollout engine multiplies by.
    rollout_w = dequantize(rollout, dtype=torch.bfloat16)
    assert torch.equal(fake_quant(w, spec).view(torch.int16), rollout_w.view(torch.int16))


def test_different_qmax_is_detected():
    w = torch.randn(4, 64, generator=torch.Generator().manual_seed(2))
    a = qparams_row(
        "w",
        quantize(w, get_preset("int4-g32-sym")),
        producer="qat_fake",
        policy_version=0,
        max_abs_err=0.0,
    )
    b = qparams_row(
        "w",
        quantize(w, get_preset("int4-g32-torchao")),
        producer="offline_real",
        policy_version=0,
        max_abs_err=0.0,
    )
    assert qparams_mismatch(a, b) == ["qmin", "scale_dtype", "scale_hash", "code_hash"]


def test_different_rounding_is_detected_in_fields_and_codes():
    w = _tie_rich_weight()
    even, away = (
        get_preset("int4-g32-sym"),
        get_preset("int4-g32-sym").replace(rounding="half_away"),
    )
    a = qparams_row("w", quantize(w, even), producer="qat_fake", policy_version=0, max_abs_err=0.0)
    b = qparams_row(
        "w", quantize(w, away), producer="offline_real", policy_version=0, max_abs_err=0.0
    )
    # Same scales (amax / 7 = 1 either way); the codes differ at the ties.
    assert qparams_mismatch(a, b) == ["rounding", "code_hash"]


def test_tensor_hash_sees_every_bit_dtype_and_shape():
    codes = torch.zeros(4, 8, dtype=torch.int8)
    flipped = codes.clone()
    flipped[3, 7] = 1
    assert tensor_hash(codes) == tensor_hash(codes.clone())
    assert tensor_hash(codes) != tensor_hash(flipped)
    assert tensor_hash(codes) != tensor_hash(codes.reshape(8, 4))  # same bytes, other shape
    assert tensor_hash(codes) != tensor_hash(codes.to(torch.uint8))  # same bytes, other dtype
    s = torch.tensor([[1.0]], dtype=torch.bfloat16)
    assert tensor_hash(s) != tensor_hash(s.to(torch.float32))
    fp8 = quantize(torch.randn(2, 8), get_preset("fp8-e4m3-channel"))
    assert len(tensor_hash(fp8.codes)) == 16
    # Non-contiguous views hash their logical row-major content.
    m = torch.arange(12, dtype=torch.int8).reshape(3, 4)
    assert tensor_hash(m.t()) == tensor_hash(m.t().contiguous())


def test_bad_producer_is_an_error():
    qt = quantize(torch.randn(2, 32), get_preset("int4-g32-sym"))
    with pytest.raises(ValueError, match="producer='trainer' is not allowed"):
        qparams_row("w", qt, producer="trainer", policy_version=0, max_abs_err=0.0)
