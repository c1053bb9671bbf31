"""Weight quantization: one spec, one quantizer, shared by QAT, weight sync and rollout.

The megatron QAT linears live in ``core.quant.qat_linear`` (not re-exported: it imports megatron).
Training-core integration (not re-exported): ``config`` (``[quant]``), ``qat_actor`` (QAT modules
in the actor), ``sync_quantizer`` (weight-sync quantize phase), ``experts`` (packed MoE experts),
``telemetry`` (qparams rows per producer) and ``wiring`` (the session's hooks).
"""

from core.quant.fake_quant import fake_quant
from core.quant.linear import QuantizedLinearWeight
from core.quant.packing import pack_int4, unpack_int4
from core.quant.presets import PRESETS, get_preset
from core.quant.qparams import qparams_mismatch, qparams_row, tensor_hash
from core.quant.quantizer import QuantizedTensor, dequantize, quant_error, quantize
from core.quant.serialization import from_compressed, load_quantized, save_quantized, to_compressed
from core.quant.spec import QuantSpec

__all__ = [
    "PRESETS",
    "QuantSpec",
    "QuantizedLinearWeight",
    "QuantizedTensor",
    "dequantize",
    "fake_quant",
    "from_compressed",
    "get_preset",
    "load_quantized",
    "pack_int4",
    "qparams_mismatch",
    "qparams_row",
    "quant_error",
    "quantize",
    "save_quantized",
    "tensor_hash",
    "to_compressed",
    "unpack_int4",
]
