"""Quantization wired into the training core: QAT actor, sync quantizer, packed rollout, qparams.

Integration tier: real sessions on the shipped tiny base model (4 layers, H=128, F=352), CPU.
"""

import math

import pytest
import torch

from core.config import ConfigError, load_config
from core.loops.grpo import train_step
from core.loops.session import Session
from core.model.actor import Actor
from core.model.config import ModelConfig
from core.quant.presets import QuantConfig
from core.quant.qat import QATColumnParallelLinear, QATRowParallelLinear
from core.quant.quantizer import quantize
from core.quant.storage import QuantizedExpertWeights, QuantizedLinearWeight
from core.quant.wiring import build_quant_wiring, engine_row_map, qparams_mismatch, quantized_names
from core.rollout.engine import RolloutEngine
from core.scenario import load_scenario, scenario_config
from core.sync.weight_sync import WeightSync, payload_checksum
from observability import open_run
from observability.telemetry import NullTelemetry
from tests.conftest import make_run

SMALL = ["algorithm.prompts_per_step=2", "algorithm.group_size=4", "train.eval_size=16"]


def _session(*overrides: str) -> Session:
    return Session(load_config(None, [*SMALL, *overrides]), NullTelemetry())


def _by_tensor(rows: list[dict]) -> dict[tuple[int, str], dict[str, dict]]:
    out: dict = {}
    for r in rows:
        out.setdefault((r["policy_version"], r["tensor"]), {})[r["producer"]] = r
    return out


def test_two_step_w4a16_qat_run_writes_bit_identical_qparams(tmp_path):
    run = make_run(tmp_path, ['rollout.precision="w4a16"', "quant.qat=true", "train.steps=2"])
    con = open_run(run)
    cols = [c[0] for c in con.execute("SELECT * FROM qparams LIMIT 0").description]
    rows = [dict(zip(cols, r)) for r in con.execute("SELECT * FROM qparams").fetchall()]
    # 3 syncs (versions 0, 1, 2) x 28 tensors (4 layers x wq wk wv wo w_gate w_up w_down) x 3
    assert len(rows) == 3 * 28 * 3
    groups = _by_tensor(rows)
    assert len(groups) == 3 * 28
    for (version, tensor), prod in groups.items():
        assert set(prod) == {"qat_fake", "offline_real", "rollout_load"}, (version, tensor)
        assert qparams_mismatch(prod["qat_fake"], prod["offline_real"]) == [], tensor
        assert qparams_mismatch(prod["rollout_load"], prod["offline_real"]) == [], tensor
        # Same codes from the same master weight: the same max |w - dequantize| to the bit.
        assert prod["qat_fake"]["max_abs_err"] == prod["offline_real"]["max_abs_err"] > 0
    # Training moved the weights: the codes of some tensor change between versions.
    assert any(
        groups[(0, t)]["offline_real"]["code_hash"] != groups[(2, t)]["offline_real"]["code_hash"]
        for _, t in groups
    )


@pytest.fixture(scope="module")
def probes() -> dict[str, float]:
    """Post-sync probe mean |train - rollout| log-prob on the fixed probe batch, per setup."""
    setups = {
        "bf16": ['rollout.precision="bf16"'],
        "w4a16_qat": ['rollout.precision="w4a16"', "quant.qat=true"],
        "w4a16_no_qat": ['rollout.precision="w4a16"'],
    }
    return {k: _session(*v).last_sync.probe_mismatch_abs_mean for k, v in setups.items()}


def test_w4a16_engine_matches_the_qat_actor_like_a_bf16_engine(probes):
    # With QAT the engine multiplies exactly the actor's forward weights (dequantized codes, one
    # bf16 rounding), so what is left is bf16 activation rounding: the bf16 rollout's mismatch.
    # Measured on the base model: bf16 0.023, w4a16+QAT 0.021, w4a16 without QAT 0.092.
    assert probes["w4a16_qat"] <= 1.25 * probes["bf16"]
    # Without QAT the actor runs the float weights: the int4 error adds to the mismatch.
    assert probes["w4a16_no_qat"] >= 3.0 * probes["w4a16_qat"]


def test_packed_w4a16_engine_weights_take_under_030x_bf16():
    s = _session('rollout.precision="w4a16"')
    names = quantized_names(s.model_cfg)
    qws = [s.engine.weights[n] for n in names]
    assert all(isinstance(w, QuantizedLinearWeight) for w in qws)
    packed = sum(w.nbytes for w in qws)
    bf16 = sum(2 * w.shape[0] * w.shape[1] for w in qws)
    # int4 codes 0.5 B + one bf16 scale per 32 = 0.0625 B per element: 0.28125x, plus 16 B shapes.
    assert packed <= 0.30 * bf16
    assert packed / bf16 == pytest.approx(0.28125, abs=2e-3)
    # The weight sync counts (and checksums) exactly the packed tensors.
    assert payload_checksum({n: s.engine.weights[n] for n in names})[2] == packed


@pytest.mark.parametrize(
    ("precision", "preset", "dtype"),
    [("w8a16", "int8-channel", torch.int8), ("fp8", "fp8-e4m3-channel", torch.float8_e4m3fn)],
)
def test_w8a16_and_fp8_rollouts_train(precision, preset, dtype):
    s = _session(f'rollout.precision="{precision}"', "rollout.max_new_tokens=4")
    w = s.engine.weights["layers.0.wq"]
    assert w.spec.name == preset and w.to_quantized().codes.dtype == dtype
    m = train_step(s, 0)
    assert s.version == 1 and s.engine.policy_version == 1
    assert torch.isfinite(torch.tensor([m["loss"], m["mismatch_abs_mean"]])).all()
    groups = _by_tensor(s.quant.last_rows)
    assert len(groups) == 28 and all(k[0] == 1 for k in groups)
    for prod in groups.values():  # no QAT: only the sync quantizer and the engine's load
        assert set(prod) == {"offline_real", "rollout_load"}
        assert qparams_mismatch(prod["rollout_load"], prod["offline_real"]) == []


def test_qat_preset_differing_from_the_rollout_preset_shows_in_the_rows():
    s = _session(
        'rollout.precision="w4a16"', "quant.qat=true", 'quant.qat_preset="int4-g32-torchao"'
    )
    prod = _by_tensor(s.quant.last_rows)[(0, "layers.0.wq")]
    # torchao codes are in [-8, 7] with fp32 scales amax/7.5, the seed's in [-7, 7] with bf16
    # scales amax/7.
    assert qparams_mismatch(prod["qat_fake"], prod["offline_real"]) == [
        "qmin",
        "scale_dtype",
        "scale_hash",
        "code_hash",
    ]


def test_qat_bf16_rollout_syncs_float_weights_and_records_the_qat_view():
    s = _session('rollout.precision="bf16"', "quant.qat=true")
    assert s.weight_sync.quantizer is None
    assert isinstance(s.engine.weights["layers.0.wq"], torch.Tensor)
    qat = [
        m
        for m in s.actor.modules()
        if isinstance(m, QATColumnParallelLinear | QATRowParallelLinear)
    ]
    assert len(qat) == 4 * 4  # qkv, proj, fc1, fc2 per layer
    assert {r["producer"] for r in s.quant.last_rows} == {"qat_fake"}


def test_row_map_follows_the_qkv_layout():
    # megatron linear_qkv rows are [ng=2, rep + 2 = 4, d=32]: group g holds q heads 2g, 2g+1
    # (rows 128g .. 128g+63), then k (128g+64 ..), then v (128g+96 ..).
    cfg = ModelConfig(vocab_size=320)
    weights = Actor(cfg, seed=0).named_weights()  # only the shapes are read
    m = engine_row_map(weights, cfg, ["layers.0.wq", "layers.0.wk", "layers.0.wv", "layers.0.w_up"])
    qkv = "decoder.layers.0.self_attention.linear_qkv.weight"
    assert m["layers.0.wq"][0] == qkv
    assert m["layers.0.wq"][1].tolist() == [*range(0, 64), *range(128, 192)]
    assert m["layers.0.wk"][1].tolist() == [*range(64, 96), *range(192, 224)]
    assert m["layers.0.wv"][1].tolist() == [*range(96, 128), *range(224, 256)]
    assert m["layers.0.w_up"][1].tolist() == list(range(352, 704))


def test_moe_expert_qat_and_w4a16_experts_rollout():
    cfg = ModelConfig(vocab_size=320, num_layers=2, moe_layers=(1,), ffn_hidden_size=64)
    wiring = build_quant_wiring(
        QuantConfig(qat=True, qat_scope="experts_only"),
        precision="w4a16",
        quant_preset="int4-g32-sym",
        model_cfg=cfg,
    )
    assert wiring.linear_overrides is None  # experts only: dense linears stay plain
    actor = Actor(cfg, seed=0)
    wiring.attach(actor)
    engine = RolloutEngine(cfg, precision="bf16")
    sync = WeightSync(engine, NullTelemetry(), quantizer=wiring.quantizer)
    ids = torch.randint(0, 320, (3, 12), generator=torch.Generator().manual_seed(0))
    valid = torch.ones_like(ids, dtype=torch.bool)
    report = sync.sync(actor, 0, (ids, valid))
    rows = wiring.record(actor, engine, 0, NullTelemetry())
    experts = engine.weights["layers.1.experts.w_gate"]
    assert isinstance(experts, QuantizedExpertWeights) and len(experts) == cfg.num_experts
    groups = _by_tensor(rows)
    assert {t for (_, t), p in groups.items() if "qat_fake" in p} == {
        "layers.1.experts.w_gate",
        "layers.1.experts.w_up",
        "layers.1.experts.w_down",
    }
    for prod in groups.values():
        assert qparams_mismatch(prod["rollout_load"], prod["offline_real"]) == []
        if "qat_fake" in prod:
            assert qparams_mismatch(prod["qat_fake"], prod["offline_real"]) == []
    # The engine's expert e is the dequantized expert e of the actor's fake-quantized stack.
    moe = actor.moe_modules()[1]
    ref = quantize(moe.w_gate_up.detach()[2, :64], wiring.qat_spec)
    assert torch.equal(experts[2], QuantizedLinearWeight.from_quantized(ref).dequantize())
    assert math.isfinite(report.probe_mismatch_abs_max)  # the quantized MoE engine runs
    # STE: the expert master weights receive gradients through the fake quantizer.
    actor.logits(ids, valid).sum().backward()
    assert moe.w_gate_up.grad is not None and moe.w_gate_up.grad.abs().sum() > 0


def test_bad_quant_settings_are_config_errors():
    with pytest.raises(ConfigError, match="rollout.quant_preset"):
        load_config(None, ['rollout.precision="w4a16"', 'rollout.quant_preset="int8-channel"'])
    with pytest.raises(ConfigError, match="quant.qat_scope"):
        load_config(None, ['quant.qat_scope="embeddings"'])
    with pytest.raises(ValueError, match="experts_only"):
        _session("quant.qat=true", 'quant.qat_scope="experts_only"')


def test_int4_scenario_control_trains_on_the_rollouts_own_int4_codes():
    # The per-channel int4-rollout-no-qat fault collapses only against a control whose QAT codes
    # are the rollout's: the control's fake quantizer must be the rollout's quantizer, bit for bit.
    sc = load_scenario("int4-rollout-no-qat")
    fault = scenario_config(sc.name, SMALL)
    control = scenario_config(sc.name, [*SMALL, *sc.control])
    assert fault.rollout.quant_preset == "int4-channel-sym" and not fault.quant.qat
    assert control.quant.qat and control.quant.qat_preset == control.rollout.quant_preset
    s = Session(control, NullTelemetry())
    groups = _by_tensor(s.quant.last_rows)
    assert len(groups) == 28
    for prod in groups.values():
        assert qparams_mismatch(prod["qat_fake"], prod["offline_real"]) == []
