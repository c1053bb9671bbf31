"""GPU check of the memory ledger (issue 9): a training step's ledger peak vs ``max_memory_allocated``.

The rollout engine runs on the CPU (its kernels are CPU-only), as does the weight sync; the
trainer half of each GRPO step — actor forward, loss, backward, AdamW step — runs on CUDA with a
``TrainingMemory`` ledger on ``cuda:0``, called at the same points as ``core.train.grpo``. Per
step, CUDA's peak counter is reset at the step start; the ledger's tracked peak is compared with
``torch.cuda.max_memory_allocated`` (acceptance: within 5%). Simplification: untracked CUDA
allocations (logits and other non-saved forward outputs, backward and optimizer temporaries) are
what the ratio measures; no weight sync between steps (the CPU engine keeps the initial
weights: memory, not learning, is measured).
Usage: ``python benchmarks/memory_gpu.py [--steps 3] [--set section.key=value ...]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

TOLERANCE = 0.05
"""Acceptance: |ledger / max_memory_allocated - 1| <= 5%."""
MIB = 2**20


def trainer_step_on_cuda(s, mem, step: int, dev) -> tuple[int, int, object]:
    """One GRPO step, trainer half on CUDA; returns (ledger peak, torch peak, the ledger's Peak)."""
    from core.algorithms.advantage import grpo_advantages
    from core.algorithms.logprobs import token_logprobs
    from core.algorithms.policy_loss import policy_loss
    from core.algorithms.trust import trust_mask
    from core.train.batch import build_train_batch
    from core.train.grpo import rollout_step

    cfg, alg = s.cfg, s.cfg.algorithm
    mem.begin_step(step)
    _, rb, _, _, rewards = rollout_step(s, step)  # CPU engine; records are CPU (not on cuda:0)
    dev.synchronize()
    dev.reset_peak_stats()
    adv, _ = grpo_advantages(rewards, eps=alg.adv_eps)  # [B, G]
    adv = adv.flatten().to(dev.torch_device)  # [B*G]
    tb = build_train_batch(rb, tok=s.tok)
    tb = dataclasses.replace(
        tb,
        **{
            f.name: getattr(tb, f.name).to(dev.torch_device)
            for f in dataclasses.fields(tb)
            if isinstance(getattr(tb, f.name), torch.Tensor)
        },
    )
    s.actor.train()
    mem.forward_begin(tb)
    logits = s.actor.logits(tb.input_ids, tb.valid)[:, :-1]  # [B, T-1, V]
    logp, _ = token_logprobs(logits, tb.targets, temperature=cfg.rollout.temperature)
    train_logp = logp.detach()
    old_logp = tb.rollout_logp if alg.old_logp == "rollout" else train_logp
    trusted, _ = trust_mask(
        train_logp,
        tb.rollout_logp,
        tb.action_mask,
        rule=alg.trust_rule,
        beta=alg.icepop_beta,
        eps_low=alg.eps_low,
        eps_high=alg.eps_high,
    )
    loss, _ = policy_loss(
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
    mem.forward_end(logits)
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    mem.backward_done()
    clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
    torch.nn.utils.clip_grad_norm_(s.actor.parameters(), clip)
    s.optimizer.step()
    mem.optimizer_stepped()
    dev.synchronize()
    torch_peak = dev.allocator_stats().max_allocated
    del logits, logp, old_logp, trusted, loss, tb
    peak = mem.end_step(step)
    return peak.total, torch_peak, peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=3, help="training steps (the last is reported)"
    )
    parser.add_argument("--set", action="append", default=[], help="config override, k=v")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "memory_gpu: CUDA is not available (torch.cuda.is_available() is False). This "
            "benchmark compares the ledger's step peak with torch.cuda.max_memory_allocated and "
            "needs an NVIDIA GPU; nothing was measured.",
            file=sys.stderr,
        )
        return 2

    from core.config import load_config
    from core.device import Device
    from core.telemetry import NullTelemetry
    from core.train.memory_hooks import TrainingMemory
    from core.train.session import Session

    dev = Device.from_string("cuda")
    cfg = load_config(None, args.set)
    s = Session(cfg, NullTelemetry())  # built on the CPU: engine, weight sync, first sync
    s.engine.memory_hooks = None  # the CPU ledger stays with the CPU engine; not compared here
    s.actor.to(dev.torch_device)  # same Parameter objects: the optimizer (no state yet) follows
    mem = TrainingMemory(s.actor, s.optimizer, telemetry=NullTelemetry())
    s.memory = mem  # rollout_step reports its records here (CPU tensors: off the cuda total)
    print(f"device {torch.cuda.get_device_name(dev.index)}; ledger on {mem.ledger.device.name}")
    print(f"{'step':>4} {'ledger MiB':>11} {'torch MiB':>10} {'ratio':>7}")
    ratio, peak = float("nan"), None
    for step in range(args.steps):
        ledger_peak, torch_peak, peak = trainer_step_on_cuda(s, mem, step, dev)
        ratio = ledger_peak / torch_peak
        print(f"{step:>4} {ledger_peak / MIB:>11.2f} {torch_peak / MIB:>10.2f} {ratio:>7.3f}")
    print("breakdown at the last step's ledger peak (category/owner: MiB; None = not measured):")
    for (category, owner), nbytes in sorted(peak.rows().items()):
        shown = "None" if nbytes is None else f"{nbytes / MIB:.2f}"
        print(f"  {category}/{owner}: {shown}")
    ok = abs(ratio - 1.0) <= TOLERANCE
    print(
        f"ledger / torch.cuda.max_memory_allocated = {ratio:.3f}: {'within' if ok else 'outside'} 5%"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
