"""``qparams`` rows at a weight sync: the same tensor as quantized by each of the three producers.

Rows are keyed by the *engine* tensor name (``layers.{l}.wq`` ... ``layers.{l}.experts.w_down``):
- ``qat_fake``: the actor's fake quantizer on its master weight (megatron layout), restricted to
  the rows that become the engine tensor;
- ``offline_real``: the sync quantizer's ``quantize`` on the engine-layout payload;
- ``rollout_load``: the codes re-derived (unpacked) from what the engine holds.
The actor -> engine row map is derived by pushing row-index tensors through
``core.sync.convert.actor_to_rollout`` (pure reshapes and slices), so it follows the conversion
exactly. Equal hashes therefore prove that quantize commutes with the conversion and that both
sides ran the same spec. ``max_abs_err`` = max |master weight - dequantize(codes)| in fp32.
"""

from __future__ import annotations

import torch

from core.model.actor import Actor
from core.quant.qat_actor import qat_weights
from core.quant.qparams import COLUMNS, qparams_row
from core.quant.quantizer import QuantizedTensor, quant_error, quantize
from core.quant.sync_quantizer import SyncQuantizer
from core.sync.convert import actor_to_rollout

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
