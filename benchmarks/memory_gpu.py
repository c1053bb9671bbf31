"""GPU check of the memory ledger (issue 9): a training step's ledger peak vs ``max_memory_allocated``.

The rollout engine runs on the CPU (its kernels are CPU-only), as does the weight sync; the
trainer half of each GRPO step — actor forward, loss, backward, AdamW step — runs on CUDA with a
``TrainingMemory`` ledger on ``cuda:0``, called at the same points as ``core.loops.grpo``. Per
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
    from core.algorithms.policy import grpo_token_advantages
    from core.loops.grpo import collect_step, policy_term, trust
    from core.loops.step import actor_forward, optimizer_step, trainer_inputs

    cfg, alg = s.cfg, s.cfg.algorithm
    mem.begin_step(step)
    traj = collect_step(s, step)  # CPU engine; records are CPU (not on cuda:0)
    trainer_inputs(traj, tok=s.tok, retokenize=False)
    dev.synchronize()
    dev.reset_peak_stats()
    traj = dataclasses.replace(
        traj,
        **{
            f.name: getattr(traj, f.name).to(dev.torch_device)
            for f in dataclasses.fields(traj)
            if isinstance(getattr(traj, f.name), torch.Tensor)
        },
    )
    traj.train_ids, traj.train_valid = traj.ids, traj.valid
    s.actor.train()
    mem.forward_begin({"ids": traj.train_ids, "valid": traj.train_valid})
    fwd = actor_forward(s.actor, traj, temperature=cfg.rollout.temperature, replay=False)
    actions = traj.targets(traj.generated & traj.train_valid)
    traj.advantages, _ = grpo_token_advantages(
        traj.reward, traj.generated, group_size=alg.group_size, eps=alg.adv_eps
    )
    trusted, _ = trust(traj, actions, alg)
    traj.old_logp = traj.rollout_logp if alg.old_logp == "rollout" else None
    terms = {"policy": policy_term(fwd.logp, traj, trusted, actions=actions, alg=alg)}
    mem.forward_end(fwd.logits)
    optimizer_step(s.models.actor, terms, memory=mem)
    dev.synchronize()
    torch_peak = dev.allocator_stats().max_allocated
    del fwd, trusted, terms, traj
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
    from core.loops.session import Session
    from core.memory.hooks import TrainingMemory
    from observability.telemetry import NullTelemetry

    dev = Device.from_string("cuda")
    cfg = load_config(None, args.set)
    s = Session(cfg, NullTelemetry())  # built on the CPU: engine, weight sync, first sync
    s.engine.memory_hooks = None  # the CPU ledger stays with the CPU engine; not compared here
    s.actor.to(dev.torch_device)  # same Parameter objects: the optimizer (no state yet) follows
    mem = TrainingMemory(s.actor, s.optimizer, telemetry=NullTelemetry())
    s.memory = mem  # collect_step reports its records here (CPU tensors: off the cuda total)
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
