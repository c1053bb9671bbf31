"""The synchronous GRPO + IcePop loop — it reads like the seed's pseudocode.

    for step:
        prompts          = task.sample(B)                          # B prompts × G responses
        ids, rollout_lp  = rollout.generate(prompts)               # token-in / token-out
        rewards          = verifier(responses)
        adv              = grpo_advantages(rewards)                # (R − mean) / (std + ε)
        train_lp         = actor.logprob(exact ids)                # never re-tokenized
        trust            = icepop(train_lp, rollout_lp, β)         # 1/β ≤ exp(Δ) ≤ β
        loss             = clipped_policy_loss(train_lp, old_lp, adv, trust)
        optimizer.step(); version += 1
        every K steps: weight_sync(actor → rollout), probe

Telemetry records are built from CPU tensors once per step (``core.train.records``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import numpy as np
import torch

from core.algorithms.advantage import grpo_advantages
from core.algorithms.logprobs import token_logprobs
from core.algorithms.policy_loss import policy_loss
from core.algorithms.trust import STALE_CODE, trust_mask
from core.tasks.arithmetic import make_prompts, verify
from core.tokenizer.chat_template import CHAT_TEMPLATE_REV, encode_prompt
from core.tokenizer.tito import unpadded_prefix_hashes
from core.train.batch import build_train_batch
from core.train.evaluate import greedy_accuracy
from core.train.records import reward_component_rows, sample_rows, token_rows
from core.train.session import Session
from core.train.sparse_capture import capture_sparse, routing_replay
from core.train.sparse_records import emit_sparse_rows
from observability.sampling import keep_tokens_for


def rollout_step(s: Session, step: int):
    """Sample B prompts × G responses and score them with the verifier."""
    cfg = s.cfg
    b, g = cfg.algorithm.prompts_per_step, cfg.algorithm.group_size
    problems = make_prompts(b, seed=cfg.train.seed * 1_000_003 + step, cfg=cfg.task)
    problems = [p for p in problems for _ in range(g)]  # group-major: [B*G]
    prompts = [encode_prompt(p.question, tok=s.tok) for p in problems]
    rb = s.engine.generate(
        prompts,
        cfg.rollout.sampling(),
        eos_id=s.tok.eos_id,
        pad_id=s.tok.pad_id,
        generator=s.generator,
    )
    s.memory.rollout_done(rb)  # live IO, handed to the trainer
    texts, verdicts = [], []
    for i, p in enumerate(problems):
        ids = rb.response_ids[i][rb.response_mask[i]].tolist()
        finished = bool(rb.finished[i])
        texts.append(s.tok.decode(ids[:-1] if finished else ids))
        verdicts.append(verify(texts[-1], p, finished=finished))
    rewards = torch.tensor([v.reward for v in verdicts], dtype=torch.float32).view(b, g)
    return problems, rb, texts, verdicts, rewards


def old_logp_pass(s: Session, rb, tb) -> torch.Tensor:
    """π_old [B, T-1] from its own no-grad forward of the actor over the train batch (before the
    update; ``algorithm.old_logp = "separate"``)."""
    with torch.no_grad(), routing_replay(s.actor, rb, enabled=s.cfg.train.routing_replay):
        logits = s.actor.logits(tb.input_ids, tb.valid)[:, :-1]  # [B, T-1, V]
        return token_logprobs(logits, tb.targets, temperature=s.cfg.rollout.temperature)[0]


def train_step(s: Session, step: int) -> dict:
    cfg, alg = s.cfg, s.cfg.algorithm
    t0 = time.perf_counter()
    s.memory.begin_step(step)  # memory ledger (core.train.memory_hooks): the step's peak window
    problems, rb, texts, verdicts, rewards = rollout_step(s, step)
    t_rollout = time.perf_counter() - t0

    adv, adv_m = grpo_advantages(rewards, eps=alg.adv_eps)  # [B, G]
    adv = adv.flatten()  # [B*G]
    tb = build_train_batch(rb, tok=s.tok, retokenize=cfg.train.retokenize)
    staleness = s.version - rb.policy_version
    stale = staleness > alg.staleness_limit

    s.actor.train()
    separate_old = old_logp_pass(s, rb, tb) if alg.old_logp == "separate" else None
    s.memory.forward_begin(tb)  # measures saved activations until forward_end
    with routing_replay(s.actor, rb, enabled=cfg.train.routing_replay):
        logits = s.actor.logits(tb.input_ids, tb.valid)[:, :-1]  # [B, T-1, V]
    sparse = capture_sparse(s.actor, rb, tb)  # DSA/MoE records (None if dense), before the probe
    logp, entropy = token_logprobs(logits, tb.targets, temperature=cfg.rollout.temperature)
    entropy = entropy.detach()
    train_logp = logp.detach()  # one optimizer step per rollout batch: π_train at step start
    old_logp = {"rollout": tb.rollout_logp, "separate": separate_old}.get(alg.old_logp, train_logp)
    trusted, tm = trust_mask(
        train_logp,
        tb.rollout_logp,
        tb.action_mask,
        rule=alg.trust_rule,
        beta=alg.icepop_beta,
        eps_low=alg.eps_low,
        eps_high=alg.eps_high,
    )
    reason = tm["reason"]
    if stale:
        reason = torch.where(tb.action_mask, torch.full_like(reason, STALE_CODE), reason)
        trusted = torch.zeros_like(trusted)
    loss, lm = policy_loss(  # clip (GRPO) or is (the seed's async update: −sg(ρ)·Â·logp)
        logp,
        old_logp,
        adv,
        trusted,
        kind=alg.policy_loss,
        eps_low=alg.eps_low,
        eps_high=alg.eps_high,
        agg_mode=alg.loss_agg_mode,
        denominator=tb.action_mask.sum(),
    )
    s.memory.forward_end(logits, sparse=sparse)  # these stay alive for the step
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    s.memory.backward_done()  # new gradients in, saved activations out
    clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(s.actor.parameters(), clip)
    s.optimizer.step()
    s.memory.optimizer_stepped()
    s.version += 1
    t_train = time.perf_counter() - t0 - t_rollout
    if s.version % cfg.rollout.sync_every == 0:
        s.sync()
    s.memory.end_step(step)  # frees the step's live IO; memory_events / memory_peaks rows

    metrics = _step_metrics(tb, train_logp, entropy, trusted, reason, lm, adv_m, loss, grad_norm)
    metrics.update(
        step=step,
        policy_version=s.version,
        staleness_max=staleness,
        rollout_time_s=t_rollout,
        train_time_s=t_train,
        step_time_s=time.perf_counter() - t0,
        lr=cfg.optim.lr,
    )
    if sparse is not None:
        metrics.update(sparse.metrics())  # topk_agreement / route_agreement
    _emit(
        s,
        step,
        problems,
        rb,
        tb,
        texts,
        verdicts,
        rewards,
        adv,
        train_logp,
        old_logp,
        entropy,
        reason,
        stale,
        metrics,
        sparse,
    )
    return metrics


def _step_metrics(tb, train_lp, entropy, trusted, reason, lm, adv_m, loss, grad_norm) -> dict:
    act = tb.action_mask
    n_act = int(act.sum())
    delta = (train_lp - tb.rollout_logp).abs()[act]
    counts = torch.bincount(reason[act].to(torch.int64), minlength=6).tolist()
    frac = [c / max(n_act, 1) for c in counts]
    retok = (tb.targets != tb.rollout_targets)[act]
    return {
        "loss": float(loss.detach()),
        "policy_loss": float(loss.detach()),
        "entropy": float(entropy[act].mean()) if n_act else float("nan"),
        "grad_norm": float(grad_norm),
        "reward_mean": float(adv_m["reward_mean"]),
        "reward_std": float(adv_m["reward_std"]),
        "n_tokens": int(tb.valid.sum()),
        "n_loss_tokens": n_act,
        "n_trusted_tokens": int(trusted.sum()),
        "masked_fraction": 1.0 - int(trusted.sum()) / max(n_act, 1),
        "icepop_masked_fraction": frac[1],
        "dis_low_fraction": frac[2],
        "dis_high_fraction": frac[3],
        "stale_fraction": frac[5],
        "clip_fraction": float(lm["clip_fraction"]),
        "mismatch_abs_mean": float(delta.mean()) if n_act else float("nan"),
        "mismatch_abs_p99": float(delta.quantile(0.99)) if n_act else float("nan"),
        "degenerate_group_fraction": float(adv_m["degenerate_fraction"]),
        "retokenized_fraction": float(retok.float().mean()) if n_act else 0.0,
    }


def _emit(
    s,
    step,
    problems,
    rb,
    tb,
    texts,
    verdicts,
    rewards,
    adv,
    train_lp,
    old_lp,
    entropy,
    reason,
    stale,
    metrics,
    sparse=None,
) -> None:
    n = len(problems)
    sample_ids = torch.arange(s.next_sample_id, s.next_sample_id + n, dtype=torch.int64)
    s.next_sample_id += n
    keep = keep_tokens_for(sample_ids.numpy(), s.cfg.telemetry.token_sample_rate)
    g = s.cfg.algorithm.group_size
    s.telemetry.emit(
        "samples",
        sample_rows(
            step=step,
            sample_ids=sample_ids.numpy(),
            problems=problems,
            group_ids=step * s.cfg.algorithm.prompts_per_step + np.arange(n) // g,
            rewards=rewards.flatten().numpy(),
            advantages=adv.numpy(),
            reasons=[v.failure_reason for v in verdicts],
            texts=texts,
            finished=rb.finished.tolist(),
            n_prompt=rb.prompt_valid.sum(1).numpy(),
            n_response=rb.response_mask.sum(1).numpy(),
            status=[
                "stale" if stale else ("truncated" if not f else "trained")
                for f in rb.finished.tolist()
            ],
            version_rollout=rb.policy_version,
            version_train=s.version - 1,
            tokenizer_rev=s.tok.revision,
            chat_template_rev=CHAT_TEMPLATE_REV,
            sampling=s.sampling_record,
            keep=keep,
        ),
    )
    s.telemetry.emit(
        "reward_components",
        reward_component_rows(
            step=step,
            sample_ids=sample_ids.numpy(),
            rewards=rewards.flatten().numpy(),
            reasons=[v.failure_reason for v in verdicts],
        ),
    )
    if keep.any():
        valid_rollout = torch.cat([rb.prompt_valid, rb.response_mask], dim=1)
        rollout_ids = torch.cat([rb.prompt_ids, rb.response_ids], dim=1)
        s.telemetry.emit(
            "tokens",
            token_rows(
                step=step,
                sample_ids=sample_ids,
                input_ids=tb.input_ids,
                rollout_targets=tb.rollout_targets,
                valid_rollout=valid_rollout,
                n_prompt=tb.n_prompt,
                action_mask=tb.action_mask,
                rollout_logp=tb.rollout_logp,
                train_logp=train_lp,
                old_logp=old_lp,
                reason=reason,
                advantages=adv,
                entropy=entropy.detach(),
                prefix_hash=unpadded_prefix_hashes(rollout_ids, valid_rollout),
                version_rollout=rb.policy_version,
                keep=keep,
            ),
        )
    if sparse is not None:
        emit_sparse_rows(s.telemetry, sparse, step=step, sample_ids=sample_ids, keep=keep)
    row = {k: [v] for k, v in metrics.items()}
    row.update(rank=[0], wall_time=[datetime.now(UTC)], peak_memory_bytes=[s.peak_memory(step)])
    s.telemetry.emit("steps", row)
    s.telemetry.step_end(step)


def evaluate(s: Session, step: int) -> float:
    s.memory.begin_step(step)
    r = greedy_accuracy(
        s.engine,
        s.tok,
        s.cfg.task,
        n=s.cfg.train.eval_size,
        max_new_tokens=s.cfg.rollout.max_new_tokens,
    )
    s.telemetry.emit(
        "evals",
        {
            "step": [step],
            "policy_version": [s.engine.policy_version],
            "split": ["heldout"],
            "n": [r["n"]],
            "accuracy": [r["accuracy"]],
            "reward_mean": [r["reward_mean"]],
        },
    )
    return r["accuracy"]


def run_grpo(s: Session, *, steps: int, progress=None) -> dict:
    """Train ``steps`` GRPO steps; returns the summary (first/last eval, mean metrics)."""
    first = evaluate(s, 0)
    history = []
    for step in range(steps):
        t0 = time.perf_counter()
        m = train_step(s, step)
        m["wall_step_s"] = time.perf_counter() - t0  # includes telemetry emission
        history.append(m)
        if progress is not None:
            progress(m)
        every = s.cfg.train.eval_every
        if every and (step + 1) % every == 0 and step + 1 < steps:
            evaluate(s, step + 1)
    last = evaluate(s, steps) if steps else first
    s.memory.finish()  # last memory events; raises if a non-persistent object was never freed
    return {"eval_accuracy_start": first, "eval_accuracy_end": last, "steps": history}
