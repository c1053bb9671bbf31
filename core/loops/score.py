"""Score: the actor's log-probs (and π_old) on the trajectories' exact token ids.

The training forward is the scoring forward: one actor pass gives the log-probs with grad that the
loss differentiates, and their detached copy is ``Trajectories.train_logp`` (π_train at the start
of the step, what the trust mask compares with the rollout). ``algorithm.old_logp = "separate"``
runs π_old as its own no-grad forward first. The ``train.retokenize`` fault decodes the
post-prompt tokens to text and encodes them again — the TITO violation (BPE merges change the
ids); the trainer then scores other events than the rollout sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.algorithms.policy import token_logprobs
from core.rollout.trajectories import Trajectories
from core.telemetry.sparse import routing_replay
from core.tokenizer.tokenizer import Tokenizer


@dataclass
class ActorForward:
    """One training forward, in prediction space (slot t predicts token t + 1)."""

    logits: torch.Tensor
    """[B, T-1, V] fp32."""
    logp: torch.Tensor
    """[B, T-1] fp32 with grad: log π_θ of each target token."""


def trainer_inputs(traj: Trajectories, *, tok: Tokenizer, retokenize: bool) -> None:
    """Fill ``traj.train_ids``/``train_valid``: the rollout's ids, or their re-tokenization under
    the fault (each sample's post-prompt tokens decoded, encoded again, re-laid into its slots)."""
    if not retokenize:
        traj.train_ids, traj.train_valid = traj.ids, traj.valid
        return
    ids, valid = traj.ids.clone(), traj.valid.clone()
    tp = traj.n_prompt
    for i in range(traj.size):
        row = traj.ids[i, tp:][traj.valid[i, tp:]].tolist()
        eos = row[-1:] == [tok.eos_id]
        text = tok.decode(row[:-1] if eos else row)
        new = (tok.encode(text) + ([tok.eos_id] if eos else []))[: ids.shape[1] - tp]
        ids[i, tp:], valid[i, tp:] = tok.pad_id, False
        ids[i, tp : tp + len(new)] = torch.tensor(new, dtype=torch.int64)
        valid[i, tp : tp + len(new)] = True
    traj.train_ids, traj.train_valid = ids, valid


def actor_forward(
    actor, traj: Trajectories, *, temperature: float, replay: bool, shared_prefix: bool = False
):
    """The training forward over ``traj.train_ids`` (with grad). Fills ``train_logp``/``entropy``.
    ``shared_prefix``: rows sharing their prompt forward it once (``Actor.logits``'s ``n_prompt``)."""
    n_prompt = traj.n_prompt if shared_prefix else 0
    with routing_replay(actor, traj, enabled=replay):
        logits = actor.logits(traj.train_ids, traj.train_valid, n_prompt=n_prompt)[:, :-1]
    logp, entropy = token_logprobs(logits, traj.train_ids[:, 1:], temperature=temperature)
    traj.train_logp = traj.token_aligned(logp.detach())
    traj.entropy = traj.token_aligned(entropy.detach())
    return ActorForward(logits, logp)


def old_logp_pass(
    actor, traj: Trajectories, *, temperature: float, replay: bool, shared_prefix: bool = False
):
    """π_old [B, T] from its own no-grad forward before the update (``old_logp = "separate"``)."""
    n_prompt = traj.n_prompt if shared_prefix else 0
    with torch.no_grad(), routing_replay(actor, traj, enabled=replay):
        logits = actor.logits(traj.train_ids, traj.train_valid, n_prompt=n_prompt)[:, :-1]
        logp = token_logprobs(logits, traj.train_ids[:, 1:], temperature=temperature)[0]
    return traj.token_aligned(logp)
