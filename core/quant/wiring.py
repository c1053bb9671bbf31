"""How a training session uses the quantizer: QAT hooks, the sync's quantize phase, qparams rows.

Telemetry rows (``qparams`` table) proving that every producer used the same quantizer.

Each producer (``qat_fake`` in the actor, ``offline_real`` at weight sync, ``rollout_load`` in the
rollout engine) emits one row per quantized tensor. Hashes are sha256 (first 16 hex chars) over a
canonical form: the header ``"<dtype>|<shape>|"`` followed by the raw little-endian bytes of the
*unpacked*, contiguous, row-major codes [N, K], scales [N, G] or zero points [N, G]. Two rows have
equal hashes exactly when the tensors are bit-identical (up to sha256 collisions), whatever the
storage packing; ``qparams_mismatch`` names the columns on which two rows disagree.

Offline (real) quantization at weight sync: the ``quantize`` phase of ``WeightSync``.

``rollout.precision`` selects the spec: ``w4a16`` -> ``rollout.quant_preset`` (an int4 preset),
``w8a16`` -> ``int8-channel``, ``fp8`` -> ``fp8-e4m3-channel``. The quantizer replaces the engine
layout's dense linears (``wq wk wv wo w_gate w_up w_down``) and MoE expert stacks with packed
weights (``QuantizedLinearWeight`` / ``QuantizedExpertWeights``) made by the one ``quantize``;
embeddings, norms, output head, routers and DSA indexers stay float (the engine casts to bf16).

``qparams`` rows at a weight sync: the same tensor as quantized by each of the three producers.

Rows are keyed by the *engine* tensor name (``layers.{l}.wq`` ... ``layers.{l}.experts.w_down``):
- ``qat_fake``: the actor's fake quantizer on its master weight (megatron layout), restricted to
  the rows that become the engine tensor;
- ``offline_real``: the sync quantizer's ``quantize`` on the engine-layout payload;
- ``rollout_load``: the codes re-derived (unpacked) from what the engine holds.
The actor -> engine row map is derived by pushing row-index tensors through
``core.sync.convert.actor_to_rollout`` (pure reshapes and slices), so it follows the conversion
exactly. Equal hashes therefore prove that quantize commutes with the conversion and that both
sides ran the same spec. ``max_abs_err`` = max |master weight - dequantize(codes)| in fp32.

How a training session wires quantization: QAT in the actor, the sync quantizer, qparams rows.

``build_quant_wiring`` turns the ``[quant]`` and ``[rollout]`` sections into the three hooks the
session needs: ``linear_overrides`` for ``Actor``, ``attach(actor)`` after it is built (MoE
experts), ``quantizer`` for ``WeightSync`` and ``record(...)`` after every sync. With QAT off and an
fp32/bf16 rollout every hook is a no-op, so the default path is unchanged.

QAT in the megatron actor: which modules fake-quantize, and their weights as the forward sees them.

Dense linears become the QAT linears through the actor's layer spec (``linear_overrides`` of
``ModuleSpec(module=QAT..., params={"quant_spec": ...})``); MoE expert stacks (our ``MoEMLP``) get
``quant_spec`` set after the model is built. ``qat_weights`` lists every fake-quantized parameter
as the 2-D [rows, K] view that ``quantize`` sees, keyed by its megatron name.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch
from megatron.core.transformer.spec_utils import ModuleSpec

from core.model.actor import Actor
from core.model.config import ModelConfig
from core.model.moe import MoEMLP
from core.quant.presets import QuantConfig, get_preset, rollout_spec
from core.quant.qat import QATColumnParallelLinear, QATRowParallelLinear
from core.quant.quantizer import QuantizedTensor, QuantSpec, quant_error, quantize
from core.quant.storage import QuantizedExpertWeights, QuantizedLinearWeight
from core.sync.convert import LINEAR_NAMES, actor_to_rollout

PRODUCERS = ("qat_fake", "offline_real", "rollout_load")
SPEC_COLUMNS = (
    "bits",
    "qmin",
    "qmax",
    "group_size",
    "symmetric",
    "scale_dtype",
    "rounding",
    "packing",
)
HASH_COLUMNS = ("scale_hash", "code_hash", "zero_hash")
COLUMNS = (
    *SPEC_COLUMNS,
    *HASH_COLUMNS,
    "max_abs_err",
    "numel",
    "spec_name",
    "tensor",
    "producer",
    "policy_version",
)


def tensor_hash(t: torch.Tensor) -> str:
    """sha256[:16] of ``"<dtype>|<shape>|"`` + the raw bytes of ``t`` (any shape, row-major)."""
    t = t.detach().contiguous().cpu()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    header = f"{str(t.dtype).removeprefix('torch.')}|{tuple(t.shape)}|".encode()
    return hashlib.sha256(header + raw).hexdigest()[:16]


def qparams_row(
    name: str,
    qt: QuantizedTensor,
    *,
    producer: str,
    policy_version: int,
    max_abs_err: float | torch.Tensor,
) -> dict[str, object]:
    """One ``qparams`` row (columns ``COLUMNS``) for the quantized tensor ``name``.

    ``max_abs_err`` is max |w - dequantize(qt)| (see ``core.quant.quantizer.quant_error``); a
    tensor is moved to the host here, so call this at a sync point (end of weight sync).
    """
    if producer not in PRODUCERS:
        raise ValueError(f"producer={producer!r} is not allowed; choose one of {PRODUCERS}")
    s = qt.spec
    return {
        "bits": s.bits,
        "qmin": s.qmin,
        "qmax": s.qmax,
        "group_size": s.group_size,
        "symmetric": s.symmetric,
        "scale_dtype": s.scale_dtype,
        "rounding": s.rounding,
        "packing": s.packing,
        "scale_hash": tensor_hash(qt.scales),
        "code_hash": tensor_hash(qt.codes),
        "zero_hash": None if qt.zeros is None else tensor_hash(qt.zeros),
        "max_abs_err": float(max_abs_err),
        "numel": qt.shape[0] * qt.shape[1],
        "spec_name": s.name,
        "tensor": name,
        "producer": producer,
        "policy_version": int(policy_version),
    }


def qparams_mismatch(a: dict[str, object], b: dict[str, object]) -> list[str]:
    """Spec and hash columns on which rows ``a`` and ``b`` (same tensor) differ; [] = identical."""
    return [c for c in (*SPEC_COLUMNS, *HASH_COLUMNS, "numel") if a[c] != b[c]]


EXPERT_NAMES = ("experts.w_gate", "experts.w_up", "experts.w_down")
"""Engine MoE expert stacks [E, N, K] (quantized row-wise like the dense linears)."""


def quantized_names(cfg: ModelConfig) -> list[str]:
    """Engine weight names the rollout quantizes: dense linears and expert stacks per layer."""
    names = []
    for layer in range(cfg.num_layers):
        p = f"layers.{layer}."
        ffn = EXPERT_NAMES if layer in cfg.moe_layers else ("w_gate", "w_up", "w_down")
        names += [p + n for n in LINEAR_NAMES if n not in ("w_gate", "w_up", "w_down")]
        names += [p + n for n in ffn]
    return names


class SyncQuantizer:
    """``callable(payload, version) -> payload`` for ``WeightSync(quantizer=...)``.

    ``last`` holds, for the most recent call, each quantized tensor's canonical ``QuantizedTensor``
    (stacked [E * N, K] for experts) and its 0-d max |w - dequantize| (the ``offline_real`` rows).
    """

    def __init__(self, spec: QuantSpec, cfg: ModelConfig) -> None:
        self.spec = spec
        self.names = quantized_names(cfg)
        for name in self.names:  # fail at build time, not at the first sync
            k = cfg.ffn_hidden_size if name.endswith("w_down") else cfg.hidden_size
            if name.endswith(".wo"):
                k = cfg.num_heads * cfg.head_dim
            spec.check_weight_shape((1, k))
        self.last: dict[str, tuple[QuantizedTensor, torch.Tensor]] = {}
        self.last_version: int | None = None

    def __call__(self, payload: dict, version: int) -> dict:
        out = dict(payload)
        self.last = {}
        for name in self.names:
            w = payload[name]  # [N, K] or experts [E, N, K]
            qt = quantize(w.reshape(-1, w.shape[-1]), self.spec)
            self.last[name] = (qt, quant_error(w.reshape(-1, w.shape[-1]), qt))
            if w.dim() == 3:
                out[name] = QuantizedExpertWeights.from_quantized(
                    qt, num_experts=w.shape[0], name=name
                )
            else:
                out[name] = QuantizedLinearWeight.from_quantized(qt, name=name)
        self.last_version = version
        return out


_ROW_BITS = 32


def engine_row_map(
    weights: dict[str, torch.Tensor], cfg, names: list[str]
) -> dict[str, tuple[str, torch.Tensor]]:
    """Engine name -> (megatron name, int64 rows of its [rows, K] view) for each of ``names``.

    ``weights``: the actor's named weights (only shapes are read). Raises ``ValueError`` if an
    engine tensor mixes rows of several actor tensors.
    """
    keys = sorted(weights)
    tagged = {}
    for i, k in enumerate(keys):
        shape = weights[k].shape
        rows = torch.arange(weights[k].numel() // shape[-1], dtype=torch.int64) + (i << _ROW_BITS)
        tagged[k] = rows.reshape(*shape[:-1], 1).expand(shape).contiguous()
    engine = actor_to_rollout(tagged, cfg)
    out = {}
    for name in names:
        t = engine[name]
        first = t.reshape(-1, t.shape[-1])[:, 0]  # [rows]
        ids = torch.unique(first >> _ROW_BITS)
        if ids.numel() != 1:
            raise ValueError(f"engine tensor {name} mixes rows of several actor tensors")
        out[name] = (keys[int(ids)], first & ((1 << _ROW_BITS) - 1))
    return out


def select_rows(qt: QuantizedTensor, rows: torch.Tensor) -> QuantizedTensor:
    """The quantized rows ``rows`` [R] of ``qt`` (row-wise specs: groups never cross rows)."""
    zeros = None if qt.zeros is None else qt.zeros[rows]
    return QuantizedTensor(
        qt.codes[rows], qt.scales[rows], zeros, qt.spec, (len(rows), qt.shape[1])
    )


def qat_fake_rows(
    actor: Actor, version: int, row_map: dict[str, tuple[str, torch.Tensor]]
) -> list[dict]:
    """``qat_fake`` rows for every engine tensor whose actor weight is fake-quantized."""
    views, full, rows = qat_weights(actor), {}, []
    for name, (actor_name, idx) in row_map.items():
        if actor_name not in views:
            continue
        w, spec = views[actor_name]  # [rows, K], the forward's view
        if actor_name not in full:
            full[actor_name] = quantize(w, spec)
        qt = select_rows(full[actor_name], idx)
        err = quant_error(w.detach()[idx], qt)
        rows.append(
            qparams_row(name, qt, producer="qat_fake", policy_version=version, max_abs_err=err)
        )
    return rows


def sync_rows(
    quantizer: SyncQuantizer,
    engine,
    masters: dict[str, torch.Tensor],
    version: int,
    row_map: dict[str, tuple[str, torch.Tensor]],
) -> list[dict]:
    """``offline_real`` rows (from ``quantizer.last``) and ``rollout_load`` rows (the engine's
    stored weights unpacked) for ``version``; ``masters`` are the actor weights that were synced.
    An engine that holds the payload dequantized (the vLLM engine) has no ``rollout_load`` rows."""
    if quantizer.last_version != version:
        raise ValueError(
            f"sync quantizer last ran for version {quantizer.last_version}, not {version}"
        )
    rows = []
    for name, (qt, err) in quantizer.last.items():
        rows.append(
            qparams_row(name, qt, producer="offline_real", policy_version=version, max_abs_err=err)
        )
    held = engine.weights
    for name in quantizer.last:
        if isinstance(held[name], torch.Tensor):  # served dequantized (vLLM): nothing packed held
            continue
        loaded = held[name].to_quantized()
        actor_name, idx = row_map[name]
        master = masters[actor_name]
        err = quant_error(master.reshape(-1, master.shape[-1])[idx], loaded)
        rows.append(
            qparams_row(
                name, loaded, producer="rollout_load", policy_version=version, max_abs_err=err
            )
        )
    return rows


def as_columns(rows: list[dict]) -> dict[str, list]:
    """Row dicts -> the columnar batch ``telemetry.emit("qparams", ...)`` takes."""
    return {c: [r[c] for r in rows] for c in COLUMNS}


@dataclass
class QuantWiring:
    qat_spec: QuantSpec | None
    """The actor's fake-quantization spec (None: no QAT)."""
    qat_scope: str
    """``all_linears`` or ``experts_only``."""
    quantizer: SyncQuantizer | None
    """The weight-sync quantizer (None: float rollout)."""
    linear_overrides: dict | None
    """``Actor(linear_overrides=...)``: QAT linears through the layer spec."""
    last_rows: list[dict] = field(default_factory=list)
    """The ``qparams`` rows of the most recent ``record`` call."""
    _row_map: dict[str, tuple[str, torch.Tensor]] | None = None

    @property
    def active(self) -> bool:
        return self.qat_spec is not None or self.quantizer is not None

    def attach(self, actor: Actor) -> None:
        """Turn on expert QAT in a built actor (MoE layers); no-op without QAT."""
        if self.qat_spec is not None:
            enable_expert_qat(actor, self.qat_spec)

    def record(self, actor: Actor, engine, version: int, telemetry) -> list[dict]:
        """Emit the ``qparams`` rows of the sync that just installed ``version``; returns them."""
        if not self.active:
            return []
        masters = actor.named_weights()
        if self._row_map is None:
            self._row_map = engine_row_map(masters, actor.cfg, quantized_names(actor.cfg))
        rows = qat_fake_rows(actor, version, self._row_map) if self.qat_spec is not None else []
        if self.quantizer is not None:
            rows += sync_rows(self.quantizer, engine, masters, version, self._row_map)
        if rows:
            telemetry.emit("qparams", as_columns(rows))
        self.last_rows = rows
        return rows


def build_quant_wiring(
    quant: QuantConfig, *, precision: str, quant_preset: str, model_cfg: ModelConfig
) -> QuantWiring:
    """Hooks for ``quant`` and ``rollout.precision``/``rollout.quant_preset``; ValueError if the
    QAT scope has nothing to quantize (``experts_only`` on a model without MoE layers)."""
    spec = rollout_spec(precision, quant_preset)
    quantizer = None if spec is None else SyncQuantizer(spec, model_cfg)
    if not quant.qat:
        return QuantWiring(None, quant.qat_scope, quantizer, None)
    if quant.qat_scope == "experts_only" and not model_cfg.moe_layers:
        raise ValueError("quant.qat_scope='experts_only' but model.moe_layers is empty")
    qat_spec = get_preset(quant.qat_preset)
    overrides = qat_linear_overrides(qat_spec, quant.qat_scope)
    return QuantWiring(qat_spec, quant.qat_scope, quantizer, overrides)


def qat_linear_overrides(spec: QuantSpec, scope: str) -> dict[str, ModuleSpec] | None:
    """``Actor(linear_overrides=...)`` for ``scope`` (None for ``experts_only``)."""
    if scope == "experts_only":
        return None
    col = ModuleSpec(module=QATColumnParallelLinear, params={"quant_spec": spec})
    row = ModuleSpec(module=QATRowParallelLinear, params={"quant_spec": spec})
    return {"linear_qkv": col, "linear_proj": row, "linear_fc1": col, "linear_fc2": row}


def enable_expert_qat(actor: Actor, spec: QuantSpec) -> int:
    """Fake-quantize every MoE layer's expert weights; returns the number of MoE layers."""
    for moe in actor.moe_modules().values():
        for w in (moe.w_gate_up, moe.w_down):
            spec.check_weight_shape(w.shape[1:])
        moe.quant_spec = spec
    return len(actor.moe_modules())


def qat_weights(actor: Actor) -> dict[str, tuple[torch.Tensor, QuantSpec]]:
    """Megatron parameter name -> (weight as [rows, K], spec) for every fake-quantized weight."""
    out: dict[str, tuple[torch.Tensor, QuantSpec]] = {}
    for name, mod in actor.gpt.named_modules():
        if isinstance(mod, QATColumnParallelLinear | QATRowParallelLinear):
            out[f"{name}.weight"] = (mod.weight, mod.quant_spec)
        elif isinstance(mod, MoEMLP) and mod.quant_spec is not None:
            for pname in ("w_gate_up", "w_down"):
                w = getattr(mod, pname)  # [E, N, K]
                out[f"{name}.{pname}"] = (w.reshape(-1, w.shape[-1]), mod.quant_spec)
    return out
