"""Mixture-of-experts FFN (top-k of E SwiGLU experts) and its routing rule.

One routing rule for both engines: softmax over expert logits in fp32, the top-k experts by
probability with ties broken by the lower expert index, gates renormalized over the selected k.
The actor's ``MoEMLP`` is supplied through megatron's layer spec (``mlp`` submodule) because
megatron's ``MoELayer`` moves router weights to the GPU; it remains the GPU path. The routes of
the last forward are kept for telemetry, and a replay mode forces given routes (routing replay).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from core.quant.quantizer import fake_quant


def route(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic top-k routing.

    Args:
        logits: [N, E] router logits.
    Returns:
        (experts [N, k] int64 sorted by descending probability, ties by lower index;
         gates [N, k] fp32 summing to 1).
    """
    probs = logits.float().softmax(dim=-1)
    e = probs.shape[-1]
    # composite key: probability first, then lower index (stable sort on descending key)
    order = torch.sort(probs, dim=-1, descending=True, stable=True).indices[:, :k]
    del e
    gates = probs.gather(-1, order)
    return order, gates / gates.sum(dim=-1, keepdim=True)


def gates_for(logits: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """Gates of given (replayed) routes: softmax probabilities renormalized over ``experts``.

    Args:
        logits: [N, E]; experts: [N, k] int64.
    Returns:
        [N, k] fp32.
    """
    g = logits.float().softmax(dim=-1).gather(-1, experts)
    return g / g.sum(dim=-1, keepdim=True)


class MoEMLP(nn.Module):
    """megatron-compatible MLP module: ``forward(hidden [S, B, H]) -> (out, None)``."""

    def __init__(self, config, num_experts: int = 4, topk: int = 2, **_: object) -> None:
        super().__init__()
        h, f = config.hidden_size, config.ffn_hidden_size
        self.num_experts, self.topk = num_experts, topk
        std = config.init_method_std
        self.router = nn.Parameter(torch.randn(num_experts, h) * std)
        self.w_gate_up = nn.Parameter(torch.randn(num_experts, 2 * f, h) * std)
        self.w_down = nn.Parameter(torch.randn(num_experts, h, f) * std)
        self.last_routes: torch.Tensor | None = None  # [S, B, k]
        self.replay_routes: torch.Tensor | None = None  # [S, B, k] when replaying
        self.quant_spec = None  # QAT: a core.quant QuantSpec fake-quantizes the expert weights

    def forward(self, hidden: torch.Tensor, padding_mask=None, **_: object):
        s, b, h = hidden.shape
        x = hidden.reshape(s * b, h)
        logits = x @ self.router.t()  # [N, E]
        if self.replay_routes is not None:
            experts = self.replay_routes.reshape(s * b, self.topk).to(torch.int64)
            gates = gates_for(logits, experts)
        else:
            experts, gates = route(logits, self.topk)
        self.last_routes = experts.detach().reshape(s, b, self.topk)
        w_gu, w_dn = self.w_gate_up, self.w_down  # [E, 2F, H], [E, H, F]
        if self.quant_spec is not None:  # rows of the stack are quantized independently
            w_gu = fake_quant(w_gu.reshape(-1, h), self.quant_spec).view_as(w_gu)
            w_dn = fake_quant(w_dn.reshape(-1, w_dn.shape[-1]), self.quant_spec).view_as(w_dn)
        out = torch.zeros_like(x)
        for e in range(self.num_experts):
            hit = experts == e  # [N, k]
            rows = hit.any(dim=-1).nonzero(as_tuple=True)[0]
            if rows.numel() == 0:
                continue
            gate = (gates * hit).sum(dim=-1)[rows].to(x.dtype)  # [n_e]
            gu = x[rows] @ w_gu[e].t()
            g, u = gu.chunk(2, dim=-1)
            y = (F.silu(g) * u) @ w_dn[e].t()
            out = out.index_add(0, rows, y * gate[:, None])
        return out.reshape(s, b, h), None
