"""The seven memory categories and four lifecycle events of the ledger (issue 9).

One source for the names written to ``memory_events.category`` / ``memory_events.event`` and
``memory_peaks.category``; contracts and the dashboard import them from here.
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
