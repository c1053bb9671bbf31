"""The seven memory categories and four lifecycle events of the ledger (issue 9).

One source for the names written to ``memory_events.category`` / ``memory_events.event`` and
``memory_peaks.category``; contracts and the dashboard import them from here. Where each object
of the training loop goes (``core.memory.hooks``), and why:

==============================  =====================  ================  ===========================
object (ledger name)            category               owner             lifetime
==============================  =====================  ================  ===========================
actor/param|buffer/*            model_state            actor             persistent
actor/grad/*                    model_state            actor             backward -> next zero_grad
actor/optim/*/exp_avg|...       model_state            actor             persistent (first step on)
rollout/weights/*               model_state            rollout           one sync -> the next
rollout_worker_i/weights/v*     model_state            rollout_worker_i  one switch -> the next
rollout_worker_i/staged/v*      communication_buffers  rollout_worker_i  staged -> its switch
rollout_worker_i/kv_cache       saved_activations      rollout_worker_i  as reported per step
actor/saved_activations         saved_activations      actor             forward -> after backward
rollout/kv_cache/<n>            saved_activations      rollout           one generate / prefill call
teacher/<id>/weights/*          model_state            teacher/<id>      persistent
teacher/<id>/kv_cache/<n>       saved_activations      teacher/<id>      one prefill call
teacher/<id>/payload            live_io                trainer           prefill -> end of step
weight_sync/gather|reshard|...  communication_buffers  weight_sync       inside one sync
rollout/records|dsa_topk        live_io                trainer           generate -> end of step
trainer/train_batch             live_io                trainer           batch built -> end of step
actor/outputs (logits)          live_io                trainer           forward -> end of step
trainer/sparse_records          live_io                trainer           forward -> end of step
==============================  =====================  ================  ===========================

Rollout records are created with owner ``rollout`` and transferred to ``trainer`` (the owner
history keeps both); the DSA Top-k indices the rollout hands over are ``rollout/dsa_topk``, the
trainer's aligned train/rollout DSA Top-k and MoE records ``trainer/sparse_records``.
The async loop's rollout workers each own their engine replica (``core.memory.replicas``).
The KV cache is ``saved_activations``, deliberately: it holds the K/V projections a forward
computed for earlier positions and keeps for later decode steps — the inference form of tensors a
forward saves for a later computation, growing with batch x sequence like training activations.
It is not ``operator_workspace`` (it outlives every kernel, for the whole request), not ``live_io``
(it never leaves the engine) and not ``model_state`` (per request, not per model); the owner
(``rollout`` vs ``actor``) tells it apart from the trainer's activations.
"""

CATEGORIES = (
    "model_state",
    "saved_activations",
    "operator_workspace",
    "communication_buffers",
    "live_io",
    "allocator",
    "runtime_margin",
)
"""Memory categories, in report order."""

EVENTS = ("create", "transfer", "reuse", "free")
"""Lifecycle event kinds."""
