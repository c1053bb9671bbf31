"""From a rollout batch to the trainer's tensors, on the rollout's exact token IDs (TITO).

The trainer's sequence is the rollout's left-padded prompt followed by its response; targets are
the next tokens, and the action mask marks generated tokens (EOS included). The ``retokenize``
fault decodes each response to text and encodes it again — the TITO violation that changes IDs
when BPE merges differ from how the tokens were generated; the result is re-laid into the same
response slots (truncated or padded), and the rollout's log-probs no longer refer to the same
events.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.rollout.engine import RolloutBatch
from core.tokenizer.tokenizer import Tokenizer


@dataclass
class TrainBatch:
    """input_ids/valid [B, T]; targets/action_mask/rollout_logp [B, T-1] aligned to predictions."""

    input_ids: torch.Tensor
    valid: torch.Tensor
    targets: torch.Tensor
    action_mask: torch.Tensor
    rollout_logp: torch.Tensor
    rollout_targets: torch.Tensor
    n_prompt: int


def build_train_batch(rb: RolloutBatch, *, tok: Tokenizer, retokenize: bool = False) -> TrainBatch:
    response = rb.response_ids.clone()
    resp_mask = rb.response_mask.clone()
    if retokenize:
        for i in range(response.shape[0]):
            ids = rb.response_ids[i][rb.response_mask[i]].tolist()
            eos = ids[-1:] == [tok.eos_id]
            text = tok.decode(ids[:-1] if eos else ids)
            new = (tok.encode(text) + ([tok.eos_id] if eos else []))[: response.shape[1]]
            response[i] = tok.pad_id
            resp_mask[i] = False
            response[i, : len(new)] = torch.tensor(new, dtype=torch.int64)
            resp_mask[i, : len(new)] = True
    input_ids = torch.cat([rb.prompt_ids, response], dim=1)  # [B, T]
    valid = torch.cat([rb.prompt_valid, resp_mask], dim=1)
    tp = rb.prompt_ids.shape[1]
    pad = torch.zeros((response.shape[0], tp - 1), dtype=torch.bool)
    action_mask = torch.cat([pad, resp_mask], dim=1)  # [B, T-1], prediction of slot t+1
    rollout_logp = torch.cat([torch.zeros(pad.shape), rb.logprobs], dim=1)
    rollout_targets = torch.cat([rb.prompt_ids[:, 1:], rb.response_ids], dim=1)
    return TrainBatch(
        input_ids, valid, input_ids[:, 1:], action_mask, rollout_logp, rollout_targets, tp
    )
