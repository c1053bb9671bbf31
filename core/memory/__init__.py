"""Memory-owner ledger (issue 9): lifecycle events, per-step peaks, saved activations, model state."""

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
