"""The TP check and benchmark worker: ``torchrun --nproc-per-node N -m core.parallel.worker``.

Every rank builds the actor at TP = N from the same full weights (sharded with
``core.parallel.shard``), runs ``steps`` GRPO steps on one fixed batch (prompt + reference answer
of seeded task problems, seeded ±1 advantages) and records, per step, the step-start log-probs
and logsumexp of the targets, the loss, the grad norm, the step's wall and CPU time and the
process's peak RSS.
Rank 0 writes everything (plus the final weights gathered to full, and how far the replicated
parameters drifted apart across ranks) to ``--out`` with ``torch.save``; with ``--logits`` it
also reduces given TP = 1 logits vocabulary-parallel (``vocab_check``); with ``--run-dir`` every
rank records telemetry into one run per model (``core.parallel.recorder``). At TP = 1 ``run`` also
works in-process without torchrun (the reference the tests and the benchmark compare against).
Models: ``base`` (the shipped base model), ``qk-norm-tied`` (the base shape with Qwen3 q/k norms
and tied embeddings, seeded random weights) and ``bench`` (a wider seeded random model).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import time
from pathlib import Path

import torch

from core.model.actor import Actor
from core.model.checkpoint import load_checkpoint
from core.model.config import ModelConfig
from core.model.hf_weights import engine_shapes
from core.parallel.group import init_tensor_parallel, tp_group, tp_rank, tp_size
from core.parallel.logprobs import vocab_parallel_logprobs
from core.parallel.recorder import RankRecorder
from core.parallel.shard import gather_weights, partition, shard_weights
from core.parallel.step import PolicyBatch, policy_step
from core.rollout.engine import left_pad
from core.sync.convert import rollout_to_actor
from core.tasks.arithmetic import ArithmeticConfig, make_prompts
from core.tokenizer.chat_template import encode_prompt, encode_response
from core.tokenizer.tokenizer import Tokenizer

BASE = Path(__file__).resolve().parent.parent / "assets" / "base_model"
MODELS = ("base", "qk-norm-tied", "bench")


def model_weights(name: str) -> tuple[dict[str, torch.Tensor], ModelConfig]:
    """Full megatron weights and config of one of ``MODELS`` (seeded, identical on every rank)."""
    if name == "base":
        weights, cfg, _ = load_checkpoint(BASE)
        return weights, cfg
    if name == "qk-norm-tied":
        cfg = dataclasses.replace(load_checkpoint(BASE)[1], qk_norm=True, tie_embeddings=True)
    elif name == "bench":
        cfg = ModelConfig(
            vocab_size=4096,
            hidden_size=512,
            num_layers=4,
            num_heads=8,
            num_kv_heads=4,
            ffn_hidden_size=1408,
            max_seq_len=128,
        )
    else:
        raise ValueError(f"model {name!r} not in {MODELS}")
    g = torch.Generator().manual_seed(17)
    engine = {
        k: (1.0 + 0.1 * torch.randn(s, generator=g))
        if len(s) == 1
        else 0.05 * torch.randn(s, generator=g)
        for k, s in engine_shapes(cfg).items()
    }
    if cfg.tie_embeddings:
        engine["lm_head"] = engine["embed"]
    return rollout_to_actor(engine, cfg), cfg


def fixed_batch(
    n: int, *, vocab_size: int, seq_len: int | None = None, seed: int = 5
) -> PolicyBatch:
    """``n`` task problems as prompt + reference answer (or, with ``seq_len``, seeded random ids
    of that length for the wide benchmark model); ±1 advantages; responses are the action mask."""
    g = torch.Generator().manual_seed(seed)
    if seq_len is None:
        tok = Tokenizer.load()
        problems = make_prompts(n, seed=seed, cfg=ArithmeticConfig(min_digits=2, max_digits=2))
        prompts = [encode_prompt(p.question, tok=tok) for p in problems]
        seqs = [p + encode_response(q.answer, tok=tok) for p, q in zip(prompts, problems)]
        ids, valid = left_pad(seqs, tok.pad_id)
        action = torch.zeros_like(valid)
        for i, (p, s) in enumerate(zip(prompts, seqs)):
            action[i, ids.shape[1] - len(s) + len(p) :] = True
    else:
        ids = torch.randint(0, vocab_size, (n, seq_len), generator=g)
        valid = torch.ones_like(ids, dtype=torch.bool)
        action = torch.zeros_like(valid)
        action[:, seq_len // 2 :] = True
    adv = torch.randint(0, 2, (n,), generator=g).float() * 2 - 1
    return PolicyBatch(ids, valid, action[:, 1:], adv)


def run(
    model: str,
    *,
    steps: int,
    lr: float = 1e-4,
    batch_size: int = 16,
    run_dir: str | Path | None = None,
) -> dict:
    """Train ``steps`` steps at the current TP size; every rank returns the same record. With
    ``run_dir`` every rank also records its telemetry there (``core.parallel.recorder``)."""
    full, cfg = model_weights(model)
    actor = Actor(cfg, seed=0)
    actor.load_weights(shard_weights(full, cfg, rank=tp_rank(), size=tp_size()))
    opt = torch.optim.AdamW(actor.parameters(), lr=lr, betas=(0.9, 0.99), eps=1e-8)
    bench = model == "bench"
    batch = fixed_batch(batch_size, vocab_size=cfg.vocab_size, seq_len=64 if bench else None)
    config = {"model": model, "steps": steps, "lr": lr, "batch_size": batch_size, "tp": tp_size()}
    recorder = (
        None if run_dir is None else RankRecorder(run_dir, config=config, vocab_size=cfg.vocab_size)
    )
    timed = ("step_time_s", "step_cpu_s")
    rec: dict = {k: [] for k in ("logp", "logsumexp", "loss", "grad_norm", *timed)}
    for step in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        out = policy_step(actor, opt, batch)
        rec["step_time_s"].append(time.perf_counter() - t0)
        rec["step_cpu_s"].append(time.process_time() - c0)  # all threads, gloo's included
        if recorder is not None:
            recorder.step(
                step, out, batch, actor=actor, optimizer=opt, seconds=rec["step_time_s"][-1]
            )
        for k in ("logp", "logsumexp", "loss", "grad_norm"):
            rec[k].append(out[k])
    rec = {k: v if k in timed else torch.stack(v) for k, v in rec.items()}
    rec["action_mask"] = batch.action_mask
    rec["state_bytes"] = _state_bytes(actor, opt)
    rec["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    local = actor.named_weights()
    if tp_size() > 1:
        rec["weights"] = gather_weights(local, tp_group())
        rec["replicated_max_diff"] = _replicated_drift(local)
    else:
        rec["weights"] = {k: v.detach().clone() for k, v in local.items()}
        rec["replicated_max_diff"] = 0.0
    if recorder is not None:
        recorder.close()
    return rec


def vocab_check(path: str | Path) -> dict[str, torch.Tensor]:
    """The vocabulary-parallel reduction alone: ``path`` holds full ``logits`` [B, T, V] and
    ``targets`` [B, T] (computed at TP = 1); each rank keeps its vocabulary slice and megatron's
    reductions rebuild the log-probs and logsumexp (identical on every rank)."""
    ref = torch.load(path)
    local = ref["logits"].chunk(tp_size(), dim=-1)[tp_rank()]
    logp, lse = vocab_parallel_logprobs(local, ref["targets"], temperature=ref["temperature"])
    return {"logp": logp.detach(), "logsumexp": lse}


def _state_bytes(actor, opt) -> int:
    """Bytes of this rank's parameters, gradients and optimizer state tensors."""
    total = sum(
        p.numel() * p.element_size() * (2 if p.grad is not None else 1) for p in actor.parameters()
    )
    for state in opt.state.values():
        total += sum(t.numel() * t.element_size() for t in state.values() if torch.is_tensor(t))
    return total


def _replicated_drift(local: dict[str, torch.Tensor]) -> float:
    """max |rank r - rank 0| over the replicated tensors (0.0: they stayed bitwise equal)."""
    worst = 0.0
    for name in sorted(local):
        if partition(name) is not None:
            continue
        t = local[name].detach().contiguous()
        ref = t.clone()
        torch.distributed.broadcast(
            ref, src=torch.distributed.get_global_rank(tp_group(), 0), group=tp_group()
        )
        worst = max(worst, float((t - ref).abs().max()))
    return worst


def _per_rank(value: float) -> list[float]:
    out = [torch.zeros(()) for _ in range(tp_size())]
    torch.distributed.all_gather(out, torch.tensor(float(value)), group=tp_group())
    return [float(v) for v in out]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="core.parallel.worker", description=__doc__)
    p.add_argument("--tp", type=int, required=True, help="tensor-parallel size (= nproc)")
    p.add_argument("--models", nargs="+", default=["base"], choices=MODELS)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16, help="sequences per step")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--out", required=True, help="torch.save file written by rank 0")
    p.add_argument("--logits", default=None, help="also run vocab_check on this torch.save file")
    p.add_argument(
        "--run-dir", default=None, help="record telemetry in RUN_DIR/<model>-tp<N> (one run each)"
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    init_tensor_parallel(args.tp)
    results = {}
    for model in args.models:
        run_dir = None if args.run_dir is None else Path(args.run_dir) / f"{model}-tp{args.tp}"
        rec = run(model, steps=args.steps, batch_size=args.batch_size, run_dir=run_dir)
        rec["step_time_s_per_rank"] = [_per_rank(t) for t in rec.pop("step_time_s")]
        rec["step_cpu_s_per_rank"] = [_per_rank(t) for t in rec.pop("step_cpu_s")]
        rec["peak_rss_bytes_per_rank"] = _per_rank(rec.pop("peak_rss_bytes"))
        rec["state_bytes_per_rank"] = _per_rank(rec.pop("state_bytes"))
        results[model] = rec
    vocab = vocab_check(args.logits) if args.logits else None
    if int(os.environ["RANK"]) == 0:
        torch.save({"tp": args.tp, "results": results, "vocab_check": vocab}, args.out)
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
