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
    from memstack.memory import AsyncMemory
    from memstack.sync import Memory
    from memstack.types import (
        AddReport,
        AddResult,
        Allocation,
        ContextResult,
        DeadLetter,
        Document,
        ExportReport,
        ImportReport,
        KBDocument,
        KBHit,
        MaintenanceReport,
        ManifestItem,
        ReindexReport,
        Rewrite,
        SearchHit,
        Section,
        SessionOverview,
        SessionState,
        Skipped,
        StoredCandidate,
        StoredFact,
        StoreStatus,
        UserOverview,
        WorkerReport,
    )

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
    # The value types: the standard library only, no store or model behind them.
    "AddReport": "memstack.types",
    "AddResult": "memstack.types",
    "Allocation": "memstack.types",
    "ContextResult": "memstack.types",
    "DeadLetter": "memstack.types",
    "Document": "memstack.types",
    "ExportReport": "memstack.types",
    "ImportReport": "memstack.types",
    "KBDocument": "memstack.types",
    "KBHit": "memstack.types",
    "MaintenanceReport": "memstack.types",
    "ManifestItem": "memstack.types",
    "ReindexReport": "memstack.types",
    "Rewrite": "memstack.types",
    "SearchHit": "memstack.types",
    "Section": "memstack.types",
    "SessionOverview": "memstack.types",
    "SessionState": "memstack.types",
    "Skipped": "memstack.types",
    "StoreStatus": "memstack.types",
    "StoredCandidate": "memstack.types",
    "StoredFact": "memstack.types",
    "UserOverview": "memstack.types",
    "WorkerReport": "memstack.types",
    "AsyncMemory": "memstack.memory",
    "Memory": "memstack.sync",
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
