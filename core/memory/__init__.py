"""Memory-owner ledger (issue 9): lifecycle events, per-step peaks, saved activations, model state.

Its glue to the loops is here too (not re-exported): ``hooks`` (the session's ``TrainingMemory``),
``sync_hooks`` (the weight sync's buffers) and ``replicas`` (async rollout workers' engine replicas).
"""

from core.memory.activations import SavedActivations
from core.memory.categories import CATEGORIES, EVENTS
from core.memory.events import EVENT_COLUMNS, MemoryEvent
from core.memory.ledger import LedgerError, MemoryLedger, MemoryObject
from core.memory.model_state import ModelStateBytes, free_gradients, track_model_state
from core.memory.peak import Peak

__all__ = [
    "CATEGORIES",
    "EVENTS",
    "EVENT_COLUMNS",
    "LedgerError",
    "MemoryEvent",
    "MemoryLedger",
    "MemoryObject",
    "ModelStateBytes",
    "Peak",
    "SavedActivations",
    "free_gradients",
    "track_model_state",
]
