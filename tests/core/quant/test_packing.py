"""int4 pack-quantized layout (goldens, naive-loop reference, padding) and safetensors round trip."""

import pytest
import torch
from safetensors import safe_open

from core.quant.presets import PRESETS, get_preset
from core.quant.quantizer import quantize
from core.quant.storage import (
    from_compressed,
    load_quantized,
    pack_int4,
    pack_int4_dim0,
    save_quantized,
    to_compressed,
    unpack_int4,
    unpack_int4_dim0,
)


def test_all_16_codes_golden_words():
    # Row 0 holds codes -8..-1 -> nibbles (c + 8) = 0..7, element i at bits 4i:
    #   word = 0x76543210 = 1985229328.
    # Row 1 holds codes 0..7 -> nibbles 8..15: word = 0xFEDCBA98 = 4275878552 unsigned, which as a
    #   two's complement int32 is 4275878552 - 2^32 = -19088744.
    codes = torch.arange(-8, 8, dtype=torch.int8).reshape(2, 8)
    packed = pack_int4(codes)
    assert packed.dtype == torch.int32
    assert packed.tolist() == [[0x76543210], [0xFEDCBA98 - 2**32]]
    assert torch.equal(unpack_int4(packed, cols=8), codes)


def _naive_pack(codes):
    """Python-int reference: sum of (c + 8) << 4i over each run of eight, zero-padded, signed."""
    rows, cols = codes.shape
    out = []
    for r in range(rows):
        words = []
        for w0 in range(0, cols, 8):
            v = sum((int(codes[r, c]) + 8) << (4 * (c - w0)) for c in range(w0, min(w0 + 8, cols)))
            words.append(v - 2**32 if v >= 2**31 else v)
        out.append(words)
    return torch.tensor(out, dtype=torch.int32)


@pytest.mark.parametrize("cols", [1, 7, 8, 9, 13, 16, 17, 31, 40])
def test_pack_matches_naive_and_unpacks_exactly(cols):
    gen = torch.Generator().manual_seed(cols)
    codes = torch.randint(-8, 8, (3, cols), generator=gen, dtype=torch.int8)
    packed = pack_int4(codes)
    assert packed.shape == (3, -(-cols // 8))
    assert torch.equal(packed, _naive_pack(codes))
    assert torch.equal(unpack_int4(packed, cols=cols), codes)


def test_padding_nibbles_are_zero():
    # K = 13: the second word holds elements 8..12 in bits 0..19; bits 20..31 are padding (0).
    codes = torch.full((2, 13), 7, dtype=torch.int8)  # nibble 15 everywhere real
    packed = pack_int4(codes)
    assert packed[:, 1].tolist() == [0x000FFFFF] * 2


def test_zero_point_layout_packs_along_n():
    # Zero points [N, G] pack along N: N = 13 -> [2, G]; exact round trip.
    zp = torch.randint(-8, 8, (13, 3), generator=torch.Generator().manual_seed(5), dtype=torch.int8)
    packed = pack_int4_dim0(zp)
    assert packed.shape == (2, 3)
    assert torch.equal(packed[:, 0], pack_int4(zp[:, :1].t().contiguous())[0])
    assert torch.equal(unpack_int4_dim0(packed, rows=13), zp)


def test_pack_rejects_bad_input():
    with pytest.raises(ValueError, match=r"codes must lie in \[-8, 7\]"):
        pack_int4(torch.tensor([[8]], dtype=torch.int8))
    with pytest.raises(ValueError, match="2-D int8"):
        pack_int4(torch.zeros(2, 8, dtype=torch.int32))
    with pytest.raises(ValueError, match="cols=17 does not fit 2 packed words"):
        unpack_int4(torch.zeros(1, 2, dtype=torch.int32), cols=17)


# int4 per channel with K = 13 needs padding; the presets cover groups, int8 and fp8.
_SPECS = [*sorted(PRESETS), "int4-channel-pad"]


def _spec(name):
    if name == "int4-channel-pad":
        return get_preset("int4-g32-sym").replace(name="int4-channel-pad", group_size=-1)
    return get_preset(name)


@pytest.mark.parametrize("name", _SPECS)
def test_compressed_entries_round_trip_exactly(name, tmp_path):
    spec = _spec(name)
    k = 13 if spec.group_size == -1 and spec.bits == 4 else 64
    w = torch.randn(10, k, generator=torch.Generator().manual_seed(6), dtype=torch.bfloat16)
    qt = quantize(w, spec)
    entries = to_compressed("layers.0.mlp.fc1", qt)
    packed = spec.packing == "pack-quantized"
    expected = {"weight_scale", "weight_shape", "weight_packed" if packed else "weight"}
    if not spec.symmetric:
        expected.add("weight_zero_point")
    assert {key.split(".")[-1] for key in entries} == expected
    assert entries["layers.0.mlp.fc1.weight_shape"].tolist() == [10, k]
    if packed:
        assert entries["layers.0.mlp.fc1.weight_packed"].shape == (10, -(-k // 8))

    path = tmp_path / "q.safetensors"
    save_quantized(path, {"layers.0.mlp.fc1": qt})
    with safe_open(str(path), framework="pt") as f:
        assert set(f.keys()) == set(entries)
    back = load_quantized(path)["layers.0.mlp.fc1"]
    assert back.spec == spec and back.shape == qt.shape
    assert torch.equal(back.codes.view(torch.int8), qt.codes.view(torch.int8))
    assert torch.equal(back.scales, qt.scales)
    assert (back.zeros is None) == (qt.zeros is None)
    if qt.zeros is not None:
        assert torch.equal(back.zeros, qt.zeros)


def test_from_compressed_rejects_spec_mismatch():
    qt = quantize(torch.randn(4, 64), get_preset("int4-g32-sym"))
    entries = to_compressed("w", qt)
    with pytest.raises(
        ValueError, match="w.weight_scale is torch.bfloat16 .* expects torch.float32"
    ):
        from_compressed(
            "w", entries, spec=get_preset("int4-g32-sym").replace(scale_dtype="float32")
        )
    with pytest.raises(KeyError, match="no quantized weight 'v'"):
        from_compressed("v", entries, spec=qt.spec)
