"""QAT megatron linears on the CPU (gloo, world size 1): the forward uses exactly the offline
quantizer's weight, the gradient reaching the master weight is the straight-through one, and
``qat_layer_spec`` swaps the right linears of a local GPT layer spec."""

import pytest
import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.spec_utils import ModuleSpec, build_module
from megatron.core.transformer.transformer_config import TransformerConfig

from core.quant.presets import get_preset
from core.quant.qat import QATColumnParallelLinear, QATRowParallelLinear, qat_layer_spec
from core.quant.quantizer import dequantize, quantize


@pytest.fixture(scope="module")
def config():
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel()
    torch.manual_seed(0)
    return TransformerConfig(
        num_layers=1,
        hidden_size=64,
        num_attention_heads=4,
        use_cpu_initialization=True,
        perform_initialization=True,
        params_dtype=torch.float32,
        add_bias_linear=False,
    )


def _pair(kind, config, spec_name):
    """A QAT linear and a plain megatron linear whose weight is the QAT weight's dequantized codes."""
    init = torch.nn.init.normal_
    if kind == "column":
        kw = dict(config=config, init_method=init, bias=False, gather_output=False)
        qat = QATColumnParallelLinear(64, 96, quant_spec=spec_name, **kw)
        plain = ColumnParallelLinear(64, 96, **kw)
    else:
        kw = dict(
            config=config, init_method=init, bias=False, input_is_parallel=True, skip_bias_add=True
        )
        qat = QATRowParallelLinear(64, 96, quant_spec=spec_name, **kw)
        plain = RowParallelLinear(64, 96, **kw)
    with torch.no_grad():
        plain.weight.copy_(dequantize(quantize(qat.weight, qat.quant_spec), dtype=torch.float32))
    return qat, plain


@pytest.mark.parametrize("kind", ["column", "row"])
@pytest.mark.parametrize("spec_name", ["int4-g32-sym", "int4-g32-torchao", "fp8-e4m3-channel"])
def test_forward_and_ste_backward_match_a_linear_on_the_quantized_weight(config, kind, spec_name):
    qat, plain = _pair(kind, config, spec_name)
    x = torch.randn(5, 2, 64, generator=torch.Generator().manual_seed(1))
    y_qat, _ = qat(x)
    y_plain, _ = plain(x)
    assert y_qat.shape == (5, 2, 96)
    assert torch.equal(y_qat, y_plain)  # the forward weight is dequantize(quantize(w)), bit for bit
    upstream = torch.randn_like(y_qat)
    y_qat.backward(upstream)
    y_plain.backward(upstream)
    # STE: the master weight receives exactly the gradient w.r.t. the quantized weight.
    assert torch.equal(qat.weight.grad, plain.weight.grad)
    assert not torch.equal(qat.weight, plain.weight)  # masters stay unquantized


def test_quantized_weight_is_what_the_offline_quantizer_produces(config):
    qat, _ = _pair("column", config, "int4-g32-sym")
    a, b = qat.quantized_weight(), quantize(qat.weight.detach().clone(), get_preset("int4-g32-sym"))
    assert torch.equal(a.codes, b.codes) and torch.equal(a.scales, b.scales)


def test_layer_spec_all_linears(config):
    spec = qat_layer_spec(get_gpt_layer_local_spec(), quant_spec="int4-g32-sym")
    layer = build_module(spec, config=config, layer_number=1)
    attn, mlp = layer.self_attention, layer.mlp
    assert isinstance(attn.linear_qkv, QATColumnParallelLinear)
    assert isinstance(attn.linear_proj, QATRowParallelLinear)
    assert isinstance(mlp.linear_fc1, QATColumnParallelLinear)
    assert isinstance(mlp.linear_fc2, QATRowParallelLinear)
    assert mlp.linear_fc1.quant_spec == get_preset("int4-g32-sym")
    # The MLP runs on the CPU (megatron's attention kernels need CUDA); the STE gradient arrives.
    out, _ = mlp(torch.randn(3, 2, 64))
    out.sum().backward()
    assert mlp.linear_fc1.weight.grad is not None and mlp.linear_fc2.weight.grad is not None
    # The original spec is untouched.
    assert get_gpt_layer_local_spec().submodules.mlp.submodules.linear_fc1 is ColumnParallelLinear


def test_layer_spec_experts_only():
    spec = qat_layer_spec(
        get_gpt_layer_local_spec(num_experts=4), quant_spec="int4-g32-sym", scope="experts_only"
    )
    sub = spec.submodules
    assert sub.self_attention.submodules.linear_qkv is ColumnParallelLinear
    assert sub.mlp.submodules.shared_experts.submodules.linear_fc1 is ColumnParallelLinear
    experts = sub.mlp.submodules.experts.submodules
    assert isinstance(experts.linear_fc1, ModuleSpec)
    assert experts.linear_fc1.module is QATColumnParallelLinear
    assert experts.linear_fc2.module is QATRowParallelLinear
    assert experts.linear_fc2.params == {"quant_spec": get_preset("int4-g32-sym")}


def test_bad_qat_configurations(config):
    with pytest.raises(ValueError, match="scope='attention' is not allowed"):
        qat_layer_spec(get_gpt_layer_local_spec(), quant_spec="int4-g32-sym", scope="attention")
    with pytest.raises(
        ValueError, match="no ColumnParallelLinear/RowParallelLinear in scope 'experts_only'"
    ):
        qat_layer_spec(get_gpt_layer_local_spec(), quant_spec="int4-g32-sym", scope="experts_only")
    with pytest.raises(ValueError, match="unknown quantization preset 'int4'"):
        QATColumnParallelLinear(
            64, 32, quant_spec="int4", config=config, init_method=torch.nn.init.normal_
        )
    with pytest.raises(ValueError, match="group_size=32 must divide in_features=48"):
        QATColumnParallelLinear(
            48, 32, quant_spec="int4-g32-sym", config=config, init_method=torch.nn.init.normal_
        )


def test_gradient_accumulation_fusion_is_rejected(config):
    import dataclasses

    fused = dataclasses.replace(config, gradient_accumulation_fusion=True)
    with pytest.raises(
        ValueError, match="gradient_accumulation_fusion=True is not supported with QAT"
    ):
        QATColumnParallelLinear(
            64, 32, quant_spec="int4-g32-sym", config=fused, init_method=torch.nn.init.normal_
        )
