"""The critic: a megatron-core ``GPTModel`` trunk with a scalar value head on its token states.

Built from the actor's layer specs (``core.model.actor.layer_specs``: our core attention and MoE
FFN through ``ModuleSpec``) with ``post_process=False``, so megatron returns the decoder's hidden
states [S, B, H]; the final RMSNorm (megatron's norm spec, as the actor's decoder builds it) and a
``Linear(H, 1)`` head follow. Initialised from the SFT base checkpoint (its output layer is not
used; the head starts at zero, V ≡ 0). SAO's third stabiliser: attention is frozen — only the
MLP / MoE projections (``decoder.layers.*.mlp.*``) and the head train
(``freeze_attention = False`` trains every parameter but the embedding).
Simplifications: dense core attention only (a DSA actor's critic attends densely); values are
fp32; ``values`` is token-aligned like ``Trajectories.train_logp`` (slot t: V of the state in
which token t is generated, from the hidden state of token t − 1; slot 0 holds 0).
"""

from __future__ import annotations

import hashlib

import torch
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.spec_utils import build_module
from torch import nn

from core.model.actor import init_distributed, layer_specs, transformer_config
from core.model.config import ModelConfig

FINAL_NORM = "decoder.final_layernorm.weight"
UNUSED = ("output_layer.weight",)
"""Base-checkpoint tensors the critic does not use (the LM head)."""


class Critic(nn.Module):
    """V_φ(s_t) for every token slot of a batch."""

    def __init__(self, cfg: ModelConfig, *, seed: int = 0, freeze_attention: bool = True) -> None:
        super().__init__()
        init_distributed()
        torch.manual_seed(seed)
        self.cfg = cfg
        tc = transformer_config(cfg)
        self.gpt = GPTModel(
            config=tc,
            transformer_layer_spec=layer_specs(cfg),
            vocab_size=cfg.vocab_size,
            max_sequence_length=cfg.max_seq_len,
            pre_process=True,
            post_process=False,
            share_embeddings_and_output_weights=False,
            position_embedding_type="none",
        )
        norm_spec = get_gpt_layer_local_spec(normalization="RMSNorm").submodules.input_layernorm
        self.final_norm = build_module(
            norm_spec, config=tc, hidden_size=cfg.hidden_size, eps=cfg.norm_eps
        )
        self.head = nn.Linear(cfg.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.freeze_attention = freeze_attention
        for name, p in self.named_parameters():
            p.requires_grad_(self.is_trainable(name))

    def is_trainable(self, name: str) -> bool:
        """Whether parameter ``name`` trains: the MLP/MoE projections and the head (all but the
        embedding when ``freeze_attention`` is off)."""
        if name.startswith("head."):
            return True
        if not self.freeze_attention:
            return not name.startswith("gpt.embedding.")
        return name.startswith("gpt.decoder.layers.") and ".mlp." in name

    def frozen_parameters(self) -> dict[str, torch.Tensor]:
        """The parameters training never changes, by name."""
        return {n: p for n, p in self.named_parameters() if not p.requires_grad}

    def frozen_checksum(self) -> str:
        """sha256 (16 hex digits) over the frozen parameters' bytes, in name order."""
        h = hashlib.sha256()
        for name, p in sorted(self.frozen_parameters().items()):
            h.update(name.encode())
            h.update(p.detach().contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    def load_base(self, weights: dict[str, torch.Tensor]) -> None:
        """Load an actor checkpoint's megatron weights (trunk + final norm; LM head unused)."""
        trunk = {k: v for k, v in weights.items() if k != FINAL_NORM and k not in UNUSED}
        missing, unexpected = self.gpt.load_state_dict(trunk, strict=False)
        missing = [k for k in missing if not k.endswith("_extra_state")]
        if missing or unexpected:
            raise ValueError(f"critic: base mismatch: missing {missing}, unexpected {unexpected}")
        if FINAL_NORM not in weights:
            raise ValueError(f"critic: base checkpoint has no {FINAL_NORM}")
        with torch.no_grad():
            self.final_norm.weight.copy_(weights[FINAL_NORM])

    def forward(self, input_ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """input_ids [B, T] int64, valid [B, T] bool -> per-slot outputs [B, T] fp32: the value of
        the state after token t (prediction space: slot t scores what follows token t)."""
        pad_mask = ~valid[:, None, None, :]  # [B, 1, 1, T], True = masked (megatron convention)
        pos = torch.zeros_like(input_ids)  # unused: no position embedding in megatron
        hidden = self.gpt(input_ids, pos, pad_mask)  # [T, B, H]
        h = self.final_norm(hidden).transpose(0, 1)  # [B, T, H]
        return self.head(h).squeeze(-1).float()  # [B, T]

    def values(self, input_ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Token-aligned values [B, T]: slot t holds V of the state that generates token t."""
        out = self(input_ids, valid)[:, :-1]  # [B, T-1]
        return torch.cat([torch.zeros_like(out[:, :1]), out], dim=1)
