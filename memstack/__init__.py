"""memstack: layered memory for long-running AI agents.

Redis holds what is happening now, PostgreSQL the facts that must be exact, a vector
store what may be said another way; a session knowledge cache keeps good retrievals.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from memstack.core.api_keys import ApiKey
    from memstack.core.erasure import UserErasure
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

# Where each public name lives, imported on first use (PEP 562): ``import memstack``
# (and with it every ``memstack …`` command, ``--help`` included) then costs the
# exception tree, not Redis, SQLAlchemy and the models behind AsyncMemory.
_LAZY: dict[str, str] = {
    "ApiKey": "memstack.core.api_keys",
    "UserErasure": "memstack.core.erasure",
    "UserIdentity": "memstack.core.identity",
    "Message": "memstack.core.messages",
    "Remembered": "memstack.core.messages",
    "Settings": "memstack.core.settings",
    "load_settings": "memstack.core.settings",
    "IngestStatus": "memstack.core.status",
    "StreamLag": "memstack.core.status",
    "WorkerBeat": "memstack.core.status",
    "MaintenanceReport": "memstack.ingest.maintenance",
    "ReindexReport": "memstack.ingest.maintenance",
    "WorkerReport": "memstack.ingest.worker",
    "AddReport": "memstack.knowledge.base",
    "AddResult": "memstack.knowledge.base",
    "KBDocument": "memstack.knowledge.base",
    "KBHit": "memstack.knowledge.base",
    "Document": "memstack.knowledge.documents",
    "Skipped": "memstack.knowledge.documents",
    "AsyncMemory": "memstack.memory",
    "Section": "memstack.recall.assembly",
    "Allocation": "memstack.recall.budget",
    "Rewrite": "memstack.recall.lexical",
    "ContextResult": "memstack.recall.result",
    "ManifestItem": "memstack.recall.result",
    "SearchHit": "memstack.recall.search",
    "DeadLetter": "memstack.stores.redis.queue",
    "SessionState": "memstack.stores.redis.working_memory",
    "StoredCandidate": "memstack.stores.sql.candidates",
    "StoredFact": "memstack.stores.sql.facts",
    "SessionOverview": "memstack.stores.sql.ledger",
    "UserOverview": "memstack.stores.sql.ledger",
    "Memory": "memstack.sync",
    "ExportReport": "memstack.transfer.exporting",
    "ImportReport": "memstack.transfer.importing",
    "StoreStatus": "memstack.wiring",
}

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # the next lookup is an ordinary one
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
