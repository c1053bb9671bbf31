"""QuantSpec validation and the preset registry: bad specs are clear errors naming the field."""

import json

import pytest
import torch

from core.quant.presets import PRESETS, get_preset
from core.quant.quantizer import QuantSpec


def test_presets_are_valid_and_named_after_their_key():
    assert set(PRESETS) == {
        "int4-g32-sym",
        "int4-g32-torchao",
        "int4-g32-asym",
        "int4-channel-sym",
        "int8-channel",
        "fp8-e4m3-channel",
    }
    for name, spec in PRESETS.items():
        assert spec.name == name
        assert QuantSpec(**json.loads(json.dumps(spec.as_dict()))) == spec  # JSON round trip


def test_seed_and_torchao_presets_pin_their_ranges():
    seed, tao = get_preset("int4-g32-sym"), get_preset("int4-g32-torchao")
    assert (seed.qmin, seed.qmax, seed.group_size, seed.symmetric) == (-7, 7, 32, True)
    assert (tao.qmin, tao.qmax, tao.group_size, tao.symmetric) == (-8, 7, 32, True)
    assert get_preset("fp8-e4m3-channel").code_dtype == torch.float8_e4m3fn


def test_get_preset_typo_lists_valid_names():
    with pytest.raises(
        ValueError, match="valid presets: fp8-e4m3-channel, int4-channel-sym, int4-g32-asym"
    ):
        get_preset("int4-g32")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"bits": 3}, r"QuantSpec.bits=3 is not allowed; choose one of \(4, 8\)"),
        ({"bits": 16}, r"QuantSpec.bits=16"),
        ({"qmax": 8}, r"QuantSpec.qmax=8 must be an int in \[1, 7\] for int4"),
        ({"qmin": -9}, r"QuantSpec.qmin=-9 must be an int in \[-8, -1\] for int4"),
        ({"qmin": -5}, r"qmin=-5 must be -qmax or -qmax-1"),
        ({"group_size": 0}, r"group_size must be -1 \(per channel\) or >= 1"),
        ({"rounding": "stochastic"}, r"QuantSpec.rounding='stochastic' is not allowed"),
        ({"scale_dtype": "float64"}, r"QuantSpec.scale_dtype='float64'"),
        ({"eps": 0.0}, r"QuantSpec.eps must be a finite float > 0"),
        ({"eps": 1e-50}, r"underflows to 0 in scale_dtype=bfloat16"),
        (
            {"symmetric": False},
            r"QuantSpec.scale_rule='max_abs' is not allowed; choose one of \('min_max',\)",
        ),
        ({"zero_point_domain": "int"}, r"QuantSpec.zero_point_domain='int'"),
        ({"bits": 8, "qmin": -127, "qmax": 127}, r"packing='pack-quantized' needs int4 codes"),
        ({"format": "float8_e5m2"}, r"QuantSpec.format='float8_e5m2'"),
    ],
)
def test_bad_specs_name_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        get_preset("int4-g32-sym").replace(**changes)


def test_fp8_spec_constraints():
    fp8 = get_preset("fp8-e4m3-channel")
    with pytest.raises(
        ValueError,
        match=r"QuantSpec.rounding='half_away' is not allowed; choose one of \('half_even',\)",
    ):
        fp8.replace(rounding="half_away")
    with pytest.raises(ValueError, match=r"must be \(-448, 448\) for float8_e4m3fn"):
        fp8.replace(qmax=240)


def test_unknown_field_is_an_error():
    with pytest.raises(ValueError, match=r"unknown QuantSpec field\(s\) \['groupsize'\]"):
        get_preset("int4-g32-sym").replace(groupsize=64)


def test_shape_checks():
    spec = get_preset("int4-g32-sym")
    assert spec.check_weight_shape((5, 64)) == (5, 64)
    with pytest.raises(ValueError, match="group_size=32 must divide in_features=48"):
        spec.check_weight_shape((5, 48))
    with pytest.raises(ValueError, match="weight must be 2-D"):
        spec.check_weight_shape((2, 3, 64))
    assert get_preset("int8-channel").check_weight_shape((3, 7)) == (3, 7)  # per channel: any K
