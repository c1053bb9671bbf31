"""Weight quantization: one spec, one quantizer, shared by QAT, weight sync and rollout.

Five modules: ``quantizer`` (``QuantSpec``, ``quantize`` / ``dequantize``, ``fake_quant``),
``presets`` (named specs and the ``[quant]`` section), ``storage`` (int4 packing, compressed-tensors
entries, the rollout's packed linear and expert weights), ``qat`` (the megatron QAT linears and the
actor's QAT modules; imports megatron) and ``wiring`` (the session's hooks: the weight sync's
quantize phase and the ``qparams`` rows of each producer; imports megatron, so not re-exported).
"""

from core.quant.presets import PRESETS, get_preset
from core.quant.quantizer import (
    QuantizedTensor,
    QuantSpec,
    dequantize,
    fake_quant,
    quant_error,
    quantize,
)
from core.quant.storage import (
    QuantizedLinearWeight,
    from_compressed,
    load_quantized,
    pack_int4,
    save_quantized,
    to_compressed,
    unpack_int4,
)

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
    "quant_error",
    "quantize",
    "save_quantized",
    "to_compressed",
    "unpack_int4",
]
