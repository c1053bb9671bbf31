"""How a training session wires quantization: QAT in the actor, the sync quantizer, qparams rows.

``build_quant_wiring`` turns the ``[quant]`` and ``[rollout]`` sections into the three hooks the
session needs: ``linear_overrides`` for ``Actor``, ``attach(actor)`` after it is built (MoE
experts), ``quantizer`` for ``WeightSync`` and ``record(...)`` after every sync. With QAT off and an
fp32/bf16 rollout every hook is a no-op, so the default path is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.model.actor import Actor
from core.model.config import ModelConfig
from core.quant.config import QuantConfig
from core.quant.presets import get_preset
from core.quant.qat_actor import enable_expert_qat, qat_linear_overrides
from core.quant.spec import QuantSpec
from core.quant.sync_quantizer import SyncQuantizer, quantized_names, rollout_spec
from core.quant.telemetry import as_columns, engine_row_map, qat_fake_rows, sync_rows


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
