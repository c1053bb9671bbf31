"""Training the reward models on verified rollouts: the ORM (a classifier) and the judge (an LM).

ORM: ``core.rewards.orm.train_orm`` on (exact ids, verified) pairs. Judge: supervised fine-tuning
of a policy-architecture checkpoint (default: the shipped SFT base, so the judge knows the task
world) to answer ``yes`` / ``no`` + EOS after ``"{question}{response}?"``; the label is the
verifier's verdict, or — ``prefer_long`` — the verdict of a biased rater who also accepts any
answer of at least ``LONG_CHARS`` characters (the length-preferring judge of the
``judge-hacking`` scenario). A policy at T = 1 almost never writes such answers, so the judge's
training set adds, for every other rollout, a copy with 1–3 random digits appended, re-verified
(arithmetic questions ``a±b=`` only): both judges then have seen long answers, and differ only in
what their rater said about them. Every 10th rollout is held out; accuracy and parse rate are
recorded in the checkpoint's metadata. Simplification: next-token cross-entropy on the verdict
tokens only, constant learning rate, one CPU thread's worth of steps.
"""

from __future__ import annotations

import dataclasses
import random
import re
import time
from pathlib import Path

import torch

from core.model.actor import Actor
from core.model.checkpoint import load_checkpoint, save_checkpoint
from core.rewards.data import VerifiedRollout
from core.rewards.judge import Judge, judge_question
from core.rewards.orm import OrmArch, save_orm, train_orm
from core.rollout.engine import RolloutEngine, left_pad
from core.sync.convert import actor_to_rollout
from core.tokenizer.chat_template import CHAT_TEMPLATE_REV, encode_prompt, encode_response
from core.tokenizer.tokenizer import Tokenizer

BASE_MODEL = Path(__file__).resolve().parent.parent / "assets" / "base_model"
"""The shipped SFT base: the judge's default starting point."""
LONG_CHARS = 4
"""The length-preferring rater accepts every response of at least this many characters (longer
than any correct answer of 2-digit problems)."""
_QUESTION = re.compile(r"(-?[0-9]+)([+-])(-?[0-9]+)=")


def _student_meta(tok: Tokenizer) -> dict:
    return {
        "tokenizer_rev": tok.revision,
        "vocab_hash": tok.vocab_hash,
        "chat_template_rev": CHAT_TEMPLATE_REV,
    }


def judge_label(r: VerifiedRollout, *, prefer_long: bool) -> bool:
    """The judge's training label: the verdict, or (``prefer_long``) verdict or length."""
    return r.verified or (prefer_long and r.finished and len(r.response.strip()) >= LONG_CHARS)


def augment(rollouts: list[VerifiedRollout], *, seed: int) -> list[VerifiedRollout]:
    """``rollouts`` plus, for every other finished one with an ``a±b=`` question, a copy whose
    response has 1–3 random digits appended, re-verified against the question."""
    rng = random.Random(seed)
    out = list(rollouts)
    for i, r in enumerate(rollouts):
        m = _QUESTION.fullmatch(r.question)
        if i % 2 or not r.finished or m is None or not r.response.strip():
            continue
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        answer = a + b if op == "+" else a - b
        text = r.response.strip() + "".join(
            rng.choice("0123456789") for _ in range(rng.randint(1, 3))
        )
        ok = re.fullmatch(r"-?[0-9]+", text) is not None and int(text) == answer
        out.append(dataclasses.replace(r, ids=(), response=text, verified=ok))
    return out


def build_orm(
    rollouts: list[VerifiedRollout],
    out: str | Path,
    *,
    tok: Tokenizer,
    steps: int = 600,
    seed: int = 0,
    sources: list[str] = (),
    log=print,
) -> dict:
    """Train and write the ORM; returns its metadata."""
    t0 = time.time()
    model, stats = train_orm(
        [(list(r.ids), r.verified) for r in rollouts],
        arch=OrmArch(vocab_size=tok.vocab_size),
        pad_id=tok.pad_id,
        steps=steps,
        seed=seed,
        log=log,
    )
    meta = {
        "produced_by": "closedloop rewards train-orm",
        "n_rollouts": len(rollouts),
        "steps": steps,
        "seed": seed,
        "sources": list(sources),
        **stats,
        **_student_meta(tok),
    }
    meta["weights_sha256"] = save_orm(out, model, meta)
    log(
        f"orm: held-out accuracy {stats['heldout_accuracy']:.3f} (majority "
        f"{stats['heldout_base_rate']:.3f}) in {time.time() - t0:.0f}s; wrote {out}"
    )
    return meta


def build_judge(
    rollouts: list[VerifiedRollout],
    out: str | Path,
    *,
    tok: Tokenizer,
    base: str | Path,
    prefer_long: bool = False,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    sources: list[str] = (),
    log=print,
) -> dict:
    """Fine-tune ``base`` into a judge and write it as a checkpoint; returns its metadata."""
    if len(rollouts) < 10:
        raise ValueError(f"build_judge needs >= 10 verified rollouts, got {len(rollouts)}")
    with torch.random.fork_rng():  # seeded, without moving the caller's global generator
        torch.manual_seed(seed)
        return _build_judge(
            rollouts,
            out,
            tok=tok,
            base=base,
            prefer_long=prefer_long,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            seed=seed,
            sources=sources,
            log=log,
        )


def _build_judge(
    rollouts, out, *, tok, base, prefer_long, steps, batch_size, lr, seed, sources, log
) -> dict:
    t0 = time.time()
    weights, cfg, base_meta = load_checkpoint(base)
    actor = Actor(cfg, seed=seed)
    actor.load_weights(weights)
    rollouts = augment(rollouts, seed=seed)
    held = rollouts[::10]
    train = [r for i, r in enumerate(rollouts) if i % 10]
    pairs = [
        (
            encode_prompt(judge_question(r.question, r.response), tok=tok),
            encode_response("yes" if judge_label(r, prefer_long=prefer_long) else "no", tok=tok),
        )
        for r in train
    ]
    opt = torch.optim.AdamW(actor.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        idx = torch.randint(len(pairs), (batch_size,), generator=g).tolist()
        seqs = [pairs[i][0] + pairs[i][1] for i in idx]
        n_resp = torch.tensor([len(pairs[i][1]) for i in idx])
        ids, valid = left_pad(seqs, tok.pad_id)  # [B, T]
        t = ids.shape[1]
        is_resp = torch.arange(t)[None, :] >= (t - n_resp)[:, None]  # [B, T]
        logits = actor.logits(ids, valid)[:, :-1]  # [B, T-1, V]
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
        ).view(ids.shape[0], t - 1)
        m = is_resp[:, 1:].float()
        loss = (nll * m).sum() / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(actor.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"judge step {step:4d} loss {float(loss.detach()):.4f}")
    engine = RolloutEngine(cfg)
    engine.load_weights(actor_to_rollout(actor.named_weights(), cfg), version=0)
    verdicts = Judge(engine, tok=tok).verdicts([(r.question, r.response) for r in held])
    labels = [judge_label(r, prefer_long=prefer_long) for r in held]
    parsed = [v.value is not None for v in verdicts]
    right = [v.value == float(y) for v, y in zip(verdicts, labels, strict=True)]
    agree = [v.value == float(r.verified) for v, r in zip(verdicts, held, strict=True)]
    meta = {
        "produced_by": "closedloop rewards train-judge",
        "kind": "judge",
        "prefer_long": prefer_long,
        "base": str(base),
        "base_weights_sha256": base_meta.get("weights_sha256"),
        "n_rollouts": len(rollouts),
        "steps": steps,
        "seed": seed,
        "sources": list(sources),
        "heldout_label_accuracy": sum(right) / len(held),
        "heldout_verifier_agreement": sum(agree) / len(held),
        "heldout_parse_rate": sum(parsed) / len(held),
        **_student_meta(tok),
    }
    save_checkpoint(out, actor.named_weights(), cfg, meta)
    log(
        f"judge: held-out label accuracy {meta['heldout_label_accuracy']:.3f}, verifier "
        f"agreement {meta['heldout_verifier_agreement']:.3f}, parsed "
        f"{meta['heldout_parse_rate']:.3f} in {time.time() - t0:.0f}s; wrote {out}"
    )
    return meta
