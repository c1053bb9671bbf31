"""Model state in the ledger: parameters, buffers, gradients and optimizer states as objects.

Each tensor is one persistent ``model_state`` object named ``{owner}/{kind}/{param name}[/{key}]``
with ``kind`` in param|buffer|grad|optim. Tracking is idempotent: call it after the first
optimizer step (AdamW creates its states lazily) and again whenever tensors may have appeared;
already-tracked names are skipped. Simplification: gradients are treated as persistent (a loop
that zeroes with ``set_to_none=True`` calls :func:`free_gradients` after ``zero_grad``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.memory.ledger import MemoryLedger


@dataclass(frozen=True)
class ModelStateBytes:
    """Bytes of the model state tracked for one owner, by kind (all tracked, not only new)."""

    parameters: int
    buffers: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.parameters + self.buffers + self.gradients + self.optimizer


def _track(
    ledger: MemoryLedger,
    name: str,
    tensor: torch.Tensor,
    *,
    owner: str,
    producer: str,
    consumer: str,
) -> int:
    nbytes = tensor.numel() * tensor.element_size()
    if name not in ledger:
        ledger.track_tensor(
            name,
            tensor,
            category="model_state",
            owner=owner,
            producer=producer,
            consumer=consumer,
            persistent=True,
        )
    return nbytes


def track_model_state(
    ledger: MemoryLedger,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    owner: str,
) -> ModelStateBytes:
    """Track ``model``'s parameters, buffers and gradients and ``optimizer``'s tensor states.

    Works for any ``torch.optim`` optimizer: every tensor value in ``optimizer.state[p]``
    (AdamW: ``exp_avg``, ``exp_avg_sq``, ``step``; the ``step`` tensor lives on the CPU unless
    the optimizer is capturable/fused, so it leaves the device's total). Non-tensor states
    hold no device memory and are skipped. Reference/teacher/rollout weights: ``optimizer=None``.
    """
    names = {p: n for n, p in model.named_parameters()}
    params = grads = bufs = optim = 0
    for param, pname in names.items():
        params += _track(
            ledger,
            f"{owner}/param/{pname}",
            param,
            owner=owner,
            producer=f"{owner}.init",
            consumer=f"{owner}.forward",
        )
        if param.grad is not None:
            grads += _track(
                ledger,
                f"{owner}/grad/{pname}",
                param.grad,
                owner=owner,
                producer=f"{owner}.backward",
                consumer=f"{owner}.optimizer",
            )
    for bname, buf in model.named_buffers():
        bufs += _track(
            ledger,
            f"{owner}/buffer/{bname}",
            buf,
            owner=owner,
            producer=f"{owner}.init",
            consumer=f"{owner}.forward",
        )
    if optimizer is not None:
        unnamed = 0
        for param, state in optimizer.state.items():
            pname = names.get(param)
            if pname is None:  # a parameter the optimizer holds but the model does not name
                pname, unnamed = f"unnamed{unnamed}", unnamed + 1
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    optim += _track(
                        ledger,
                        f"{owner}/optim/{pname}/{key}",
                        value,
                        owner=owner,
                        producer=f"{owner}.optimizer",
                        consumer=f"{owner}.optimizer",
                    )
    return ModelStateBytes(parameters=params, buffers=bufs, gradients=grads, optimizer=optim)


def free_gradients(ledger: MemoryLedger, model: torch.nn.Module, *, owner: str) -> int:
    """Free the tracked gradient objects of ``model`` (after ``zero_grad(set_to_none=True)``)."""
    freed = 0
    for pname, _ in model.named_parameters():
        name = f"{owner}/grad/{pname}"
        if name in ledger:
            freed += ledger.get(name).bytes
            ledger.free(name)
    return freed
