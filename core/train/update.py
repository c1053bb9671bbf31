"""The update: named loss terms summed, then one optimizer step per trainable model — or none.

Each term is a pure function's ``(loss, metrics)``; the total is their sum. A step in which no
token is trusted (e.g. every sample stale) takes **no** optimizer step: AdamW's moments would
otherwise still move the weights, and the policy version would be bumped for an update that
learned nothing. The step is then recorded as skipped with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.train.models import TrainableModel


@dataclass(frozen=True)
class UpdateResult:
    """What the optimizer step did."""

    loss: torch.Tensor
    """Scalar: the sum of the terms (detached)."""
    terms: dict[str, torch.Tensor]
    """term name -> its detached scalar loss."""
    grad_norm: torch.Tensor
    """Global grad norm before clipping (NaN when skipped)."""
    stepped: bool
    skip_reason: str | None = None
    update_norm: torch.Tensor | None = None
    """‖Δθ‖₂ over the trainable parameters: what the step moved them (None when skipped)."""
    param_norm: torch.Tensor | None = None
    """‖θ‖₂ of the trainable parameters after the step (None when skipped)."""


def total_loss(terms: dict[str, tuple[torch.Tensor, dict]]) -> torch.Tensor:
    """Σ of the named terms' losses (with grad)."""
    losses = [loss for loss, _ in terms.values()]
    return torch.stack(losses).sum() if len(losses) > 1 else losses[0]


def optimizer_step(
    model: TrainableModel,
    terms: dict[str, tuple[torch.Tensor, dict]],
    *,
    memory=None,
    skip_reason: str | None = None,
) -> UpdateResult:
    """Backward of the summed terms and one step of ``model``'s optimizer, unless ``skip_reason``.

    ``memory`` (a ``TrainingMemory`` or None) is told when gradients appear and the optimizer
    stepped. A skipped step runs no backward and leaves parameters and optimizer state untouched.
    """
    loss = total_loss(terms)
    detached = {name: t.detach() for name, (t, _) in terms.items()}
    model.optimizer.zero_grad(set_to_none=True)
    if skip_reason is not None:
        if memory is not None:
            memory.backward_done()  # the forward's saved activations are released unused
        nan = torch.tensor(float("nan"))
        return UpdateResult(loss.detach(), detached, nan, stepped=False, skip_reason=skip_reason)
    loss.backward()
    if memory is not None:
        memory.backward_done()
    clip = model.grad_clip if model.grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]  # a transient copy: Δθ measured, not modelled
    model.optimizer.step()
    if memory is not None:
        memory.optimizer_stepped()
    with torch.no_grad():
        update_norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p - b) for p, b in zip(params, before)])
        )
        param_norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p) for p in params])
        )
    return UpdateResult(
        loss.detach(),
        detached,
        grad_norm.detach(),
        stepped=True,
        update_norm=update_norm,
        param_norm=param_norm,
    )
