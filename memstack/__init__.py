"""memstack: layered memory for long-running AI agents.

Redis holds what is happening now, PostgreSQL the facts that must be exact, a vector
store what may be said another way; a session knowledge cache keeps good retrievals.
"""

from memstack.documents import Document
from memstack.errors import (
    ConfigError,
    Conflict,
    ExtractionError,
    HomeInUse,
    InvalidContent,
    InvalidId,
    LockNotAcquired,
    MemstackError,
    NotFound,
    SchemaMismatch,
    StoreError,
    StoreUnavailable,
    ValidationError,
)
from memstack.facts import StoredFact
from memstack.knowledge_base import AddReport, AddResult, KBDocument, KBHit
from memstack.maintenance import MaintenanceReport, ReindexReport
from memstack.manifest import ContextResult
from memstack.memory import AsyncMemory
from memstack.queue import DeadLetter
from memstack.settings import Settings, load_settings
from memstack.sync import Memory
from memstack.worker import WorkerReport
from memstack.working_memory import SessionState, WindowMessage

# The public API: import these from ``memstack``, not from the modules that define them.
__all__ = [
    "AddReport",
    "AddResult",
    "AsyncMemory",
    "ConfigError",
    "Conflict",
    "ContextResult",
    "DeadLetter",
    "Document",
    "ExtractionError",
    "HomeInUse",
    "InvalidContent",
    "InvalidId",
    "KBDocument",
    "KBHit",
    "LockNotAcquired",
    "MaintenanceReport",
    "Memory",
    "MemstackError",
    "NotFound",
    "ReindexReport",
    "SchemaMismatch",
    "SessionState",
    "Settings",
    "StoreError",
    "StoreUnavailable",
    "StoredFact",
    "ValidationError",
    "WindowMessage",
    "WorkerReport",
    "load_settings",
]
__version__ = "0.1.0"
