"""Naive Python-loop references for core/algorithms: one scalar at a time, in float64.

Deliberately the slowest, most literal reading of each formula (no broadcasting, no masks as
multiplications) so that the vectorized fp32 code is checked against an independent computation.
"""

from __future__ import annotations

import math

import torch

# Reason codes, restated here on purpose (not imported) so a renumbering is caught.
KEPT, ICEPOP, DIS_LOW, DIS_HIGH, NOT_ACTION = 0, 1, 2, 3, 4


def naive_advantages(rewards: torch.Tensor, eps: float) -> tuple[list[list[float]], list[bool]]:
    """[P, G] rewards → (advantages as nested lists, degenerate flag per group)."""
    advs, degenerate = [], []
    for row in rewards.tolist():
        mean = sum(row) / len(row)
        std = math.sqrt(sum((r - mean) ** 2 for r in row) / len(row))  # population std
        deg = all(r == row[0] for r in row)
        degenerate.append(deg)
        advs.append([0.0 if deg else (r - mean) / (std + eps) for r in row])
    return advs, degenerate


def naive_trust_reasons(
    train_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    rule: str,
    beta: float,
    eps_low: float,
    eps_high: float,
) -> list[list[int]]:
    """[B, T] inputs → reason code per token."""
    out = []
    for tr, ro, am in zip(train_logp.tolist(), rollout_logp.tolist(), action_mask.tolist()):
        row = []
        for a, b, is_action in zip(tr, ro, am):
            rho = math.exp(a - b)
            if not is_action:
                code = NOT_ACTION
            elif rule == "icepop":
                code = KEPT if 1.0 / beta <= rho <= beta else ICEPOP
            elif rule == "dis":
                if rho <= 1.0 - eps_low:
                    code = DIS_LOW
                elif rho >= 1.0 + eps_high:
                    code = DIS_HIGH
                else:
                    code = KEPT
            else:
                code = KEPT
            row.append(code)
        out.append(row)
    return out


def naive_aggregate(
    values: list[list[float]], mask: list[list[bool]], mode: str, denominator: float | None = None
) -> float:
    """Literal reading of each mode's formula; masked-out entries are never touched."""
    if mode == "token-mean":
        kept = [v for vr, mr in zip(values, mask) for v, m in zip(vr, mr) if m]
        return sum(kept) / max(len(kept), 1)
    if mode == "global-token":
        kept = [v for vr, mr in zip(values, mask) for v, m in zip(vr, mr) if m]
        return sum(kept) / max(denominator, 1.0)
    seqs = []
    for vr, mr in zip(values, mask):
        kept = [v for v, m in zip(vr, mr) if m]
        if not kept:
            continue  # sequences with no trusted token do not count in the sequence mean
        seqs.append(sum(kept) / len(kept) if mode == "seq-mean-token-mean" else sum(kept))
    return sum(seqs) / max(len(seqs), 1)


def naive_clipped_per_token(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
) -> tuple[list[list[float]], list[list[bool]]]:
    """[B, T] log-probs, [B] advantages → (per-token loss, clipped-branch-active flag)."""
    losses, clipped_flags = [], []
    for lp_row, old_row, adv in zip(logp.tolist(), old_logp.tolist(), advantages.tolist()):
        lrow, crow = [], []
        for lp, old in zip(lp_row, old_row):
            r = math.exp(lp - old)
            unclipped = r * adv
            clipped = min(max(r, 1.0 - eps_low), 1.0 + eps_high) * adv
            lrow.append(-min(unclipped, clipped))
            crow.append(clipped < unclipped)
        losses.append(lrow)
        clipped_flags.append(crow)
    return losses, clipped_flags


def naive_opd(
    teacher_logp: torch.Tensor, student_logp: torch.Tensor, tokens: torch.Tensor
) -> list[list[float]]:
    """[B, T] → per-token teacher − student on ``tokens``, 0.0 elsewhere."""
    out = []
    for tr, sr, mr in zip(teacher_logp.tolist(), student_logp.tolist(), tokens.tolist()):
        out.append([t - s if m else 0.0 for t, s, m in zip(tr, sr, mr)])
    return out


def naive_topk_kl_per_position(
    logits: torch.Tensor, teacher_ids: torch.Tensor, teacher_logp: torch.Tensor
) -> list[list[float]]:
    """[B, T, V] logits, [B, T, K] teacher ids/log-probs → ℓ_t per position, one term at a time."""
    out = []
    for lrow, irow, trow in zip(logits.tolist(), teacher_ids.tolist(), teacher_logp.tolist()):
        row = []
        for lg, ids, tlp in zip(lrow, irow, trow):
            z = max(lg)
            log_norm = z + math.log(sum(math.exp(x - z) for x in lg))
            total = 0.0
            for v, lt in zip(ids, tlp):
                ls = lg[v] - log_norm
                ps, pt = math.exp(ls), math.exp(lt)
                total += ps * (ls - lt) - ps + pt
            row.append(total)
        out.append(row)
    return out
