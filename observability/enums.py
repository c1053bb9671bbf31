"""Enumerations of the telemetry schema: the allowed values of its enum columns.

Stored as strings; the writer rejects anything else. Part of the one schema source
(``observability.schema`` builds its columns from these).
"""

RUN_STATUSES = ("running", "finished", "failed")
ROLES = ("prompt", "action", "observation", "summary", "padding", "tail")
MASK_REASONS = ("kept", "icepop", "dis_low", "dis_high", "not_action", "stale", "dropped")
SAMPLE_STATUSES = ("trained", "env_failure", "stale", "dropped_group", "truncated", "masked")
"""``masked``: left out of the loss by a sample-level mask whose reason the producer does not say
(an imported NeMo-RL ``sample_loss_mask`` of 0, a slime sample whose loss mask is all zero)."""
ENGINES = ("train", "rollout")
QPARAM_PRODUCERS = ("qat_fake", "offline_real", "rollout_load")
SYNC_PHASES = ("gather", "reshard", "quantize", "send", "switch", "ack")
MEMORY_CATEGORIES = (
    "model_state",
    "saved_activations",
    "operator_workspace",
    "communication_buffers",
    "live_io",
    "allocator",
    "runtime_margin",
)
MEMORY_EVENTS = ("create", "transfer", "reuse", "free")
CONTRACT_STATUSES = ("pass", "fail", "warn", "error", "not_applicable")
TEACHER_PAYLOADS = ("sampled", "topk", "full")
TEACHER_SOURCES = ("same", "off")
"""A teacher's source relative to the student: forked from the same SFT base, or not."""
