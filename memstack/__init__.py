"""memstack: layered memory for long-running AI agents.

Redis holds what is happening now, PostgreSQL the facts that must be exact, a vector
store what may be said another way; a session knowledge cache keeps good retrievals.
"""

from memstack.core.api_keys import ApiKey
from memstack.core.erasure import UserErasure
from memstack.core.errors import (
    ConfigError,
    Conflict,
    ExtractionError,
    Forbidden,
    HomeInUse,
    InvalidContent,
    InvalidId,
    LockNotAcquired,
    MemstackError,
    NotFound,
    SchemaMismatch,
    StoreError,
    StoreUnavailable,
    Unauthorized,
    ValidationError,
)
from memstack.core.identity import UserIdentity
from memstack.core.messages import Message, Remembered
from memstack.core.settings import Settings, load_settings
from memstack.core.status import IngestStatus, StreamLag, WorkerBeat
from memstack.ingest.maintenance import MaintenanceReport, ReindexReport
from memstack.ingest.worker import WorkerReport
from memstack.knowledge.base import AddReport, AddResult, KBDocument, KBHit
from memstack.knowledge.documents import Document, Skipped
from memstack.memory import AsyncMemory
from memstack.recall.assembly import Section
from memstack.recall.budget import Allocation
from memstack.recall.lexical import Rewrite
from memstack.recall.result import ContextResult, ManifestItem
from memstack.recall.search import SearchHit
from memstack.stores.redis.queue import DeadLetter
from memstack.stores.redis.working_memory import SessionState
from memstack.stores.sql.candidates import StoredCandidate
from memstack.stores.sql.facts import StoredFact
from memstack.stores.sql.ledger import SessionOverview, UserOverview
from memstack.sync import Memory
from memstack.transfer.exporting import ExportReport
from memstack.transfer.importing import ImportReport
from memstack.wiring import StoreStatus

# The public API: import these from ``memstack``, not from the modules that define them.
__all__ = [
    "AddReport",
    "AddResult",
    "Allocation",
    "ApiKey",
    "AsyncMemory",
    "ConfigError",
    "Conflict",
    "ContextResult",
    "DeadLetter",
    "Document",
    "ExportReport",
    "ExtractionError",
    "Forbidden",
    "HomeInUse",
    "ImportReport",
    "IngestStatus",
    "InvalidContent",
    "InvalidId",
    "KBDocument",
    "KBHit",
    "LockNotAcquired",
    "MaintenanceReport",
    "ManifestItem",
    "Memory",
    "MemstackError",
    "Message",
    "NotFound",
    "ReindexReport",
    "Remembered",
    "Rewrite",
    "SchemaMismatch",
    "SearchHit",
    "Section",
    "SessionOverview",
    "SessionState",
    "Settings",
    "Skipped",
    "StoreError",
    "StoreStatus",
    "StoreUnavailable",
    "StoredCandidate",
    "StoredFact",
    "StreamLag",
    "Unauthorized",
    "UserErasure",
    "UserIdentity",
    "UserOverview",
    "ValidationError",
    "WorkerBeat",
    "WorkerReport",
    "load_settings",
]
__version__ = "0.1.0"
