"""The public value types: what :class:`memstack.AsyncMemory` returns and takes, and what
the HTTP API's client reads back into the same classes.

They live here, apart from the stores and pipelines that fill them, so that a module
that only exchanges values (the HTTP client above all) imports the standard library and
nothing of Redis, SQL, the vector stores or the models. The values of ``memstack.core``
(messages, identity, erasure, status, API keys) are as light and stay there.

Import them from ``memstack``; this module is where they are defined.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

# --- sessions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionState:
    fields: dict[str, Any]
    turns: int
    last_msg_id: str | None
    last_msg_at: datetime | None


@dataclass(frozen=True)
class UserOverview:
    user_id: str
    sessions: int
    messages: int
    last_message_at: datetime


@dataclass(frozen=True)
class SessionOverview:
    session_id: str
    messages: int
    first_message_at: datetime
    last_message_at: datetime


# --- facts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredFact:
    id: int
    user_id: str
    session_id: str
    msg_id: str
    key: str
    value: Any
    type: str
    confidence: float
    source: str
    valid_from: datetime
    valid_until: datetime | None
    supersedes_id: int | None
    # The message that withdrew this value with nothing in its place (a retraction);
    # None for a current value and for one a new value superseded.
    ended_by_msg_id: str | None = None
    # The stored value is beyond what a read hands on (the read bounds of
    # memstack.stores.sql.fact_rows: size, depth, not JSON): ``value`` is None and the
    # fact is left out of the current facts.
    withheld: bool = False
    # The message it came from is no longer in the ledger (delete_message,
    # forget_session): the fact stays, nothing re-derives it. Read by the management
    # verbs only (facts(), fact_history()); a fact set by hand names no message.
    source_deleted: bool = False
    # The candidate whose confirmation made this fact (docs/facts.md, "Candidates");
    # None for a fact extracted with confidence or set by hand.
    candidate_id: int | None = None

    @property
    def current(self) -> bool:
        return self.valid_until is None


@dataclass(frozen=True)
class StoredCandidate:
    """A fact read with too little confidence to be served (see docs/facts.md)."""

    id: int
    user_id: str
    session_id: str
    msg_id: str
    key: str
    value: Any
    type: str
    confidence: float
    source: str
    said_at: datetime
    # pending, confirmed (``fact_id`` is the fact it became), rejected, or superseded
    # (the user stated the key again after it)
    status: str
    decided_at: datetime | None = None
    fact_id: int | None = None


# --- context() and search() --------------------------------------------------------------


@dataclass(frozen=True)
class ManifestItem:
    """One item the read path considered, and what became of it."""

    layer: str
    key: str
    msg_ids: tuple[str, ...]
    preview: str
    tokens: int
    kept: bool
    reason: str | None = None
    score: float | None = None
    relevance: float | None = None
    recency: float | None = None
    distance: float | None = None
    ranks: Mapping[str, int] = field(default_factory=dict)
    detail: str = ""


@dataclass(frozen=True)
class Allocation:
    """The context's token budget: what the system text and the input reserved, and each
    layer's cap and use."""

    total: int
    reserved: int
    caps: dict[str, int]
    used: dict[str, int]

    @property
    def available(self) -> int:
        return self.total - self.reserved

    @property
    def spent(self) -> int:
        return self.reserved + sum(self.used.values())


@dataclass(frozen=True)
class Rewrite:
    """The query as the retrieval channels see it."""

    original: str
    terms: tuple[str, ...]
    weights: Mapping[str, float]
    entities: tuple[str, ...] = ()
    temporal: bool = False
    # "date": the question asks when something happened; "latest": the newest state.
    time_intent: Literal["date", "latest"] | None = None
    source: Literal["rules", "llm"] = "rules"
    # Terms added for the query's words by their neighbours (memstack.recall.word_neighbours).
    expanded: tuple[str, ...] = ()

    @property
    def keywords(self) -> str:
        """Entities and terms as one string: a second, denser query for the embedder."""
        seen: list[str] = []
        for w in (*self.entities, *self.terms):
            if w.casefold() not in {s.casefold() for s in seen}:
                seen.append(w)
        return " ".join(seen)


@dataclass(frozen=True)
class Section:
    name: str
    title: str | None
    lines: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        if not self.lines:
            return ""
        return "\n".join([self.title, *self.lines] if self.title else self.lines)

    @property
    def tokens(self) -> int:
        # Imported when asked: the module is light, the tokenizer it loads on first
        # count is not, and most holders of a Section (the HTTP client) never count.
        from memstack.text.token_counts import count_tokens

        return count_tokens(self.text)


@dataclass(frozen=True)
class ContextResult:
    text: str
    messages: list[dict[str, str]]
    sections: Mapping[str, Any]
    manifest: list[ManifestItem]
    degraded: dict[str, str]
    allocation: Allocation
    rewrite: Rewrite
    window_rebuilt: bool
    timings_ms: dict[str, float]
    tokens: int

    def kept(self, layer: str | None = None) -> list[ManifestItem]:
        return [m for m in self.manifest if m.kept and (layer is None or m.layer == layer)]

    def kept_msg_ids(self, layer: str | None = None) -> set[str]:
        return {i for m in self.kept(layer) for i in m.msg_ids}


@dataclass(frozen=True)
class SearchHit:
    """One message that answers a query, best first. ``score`` is the read path's
    (``relevance`` blended with ``recency``); ``ranks`` are its places in each channel
    (``vector``, ``vector_rewrite``, ``lexical``, ``rerank``)."""

    msg_id: str
    session_id: str
    role: str
    text: str
    created_at: datetime
    score: float
    relevance: float
    recency: float
    name: str | None = None
    ranks: dict[str, int] = field(default_factory=dict)


# --- the knowledge base ------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    """A document to add. ``doc_id`` defaults to one derived from the content (a string)
    or the path (a file); give it explicitly to replace a document by adding it again."""

    text: str
    doc_id: str | None = None
    title: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class Skipped:
    """A file of a folder that was not added, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class KBDocument:
    """One registered document."""

    namespace: str
    doc_id: str
    title: str
    source: str
    content_hash: str
    chunk_count: int
    model_version: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class KBHit:
    """One chunk found by a knowledge-base search; ``score`` is cosine similarity."""

    id: str
    doc_id: str
    title: str
    source: str
    chunk_idx: int
    text: str
    score: float


@dataclass(frozen=True)
class AddResult:
    doc_id: str
    title: str
    source: str
    status: Literal["added", "replaced", "unchanged"]
    chunk_count: int


class AddReport(list[AddResult]):
    """What adding documents did: one :class:`AddResult` per document, in order (it is
    that list), and ``skipped``, the files of folders it left out."""

    def __init__(self, results: Iterable[AddResult] = (), skipped: Iterable[Skipped] = ()) -> None:
        super().__init__(results)
        self.skipped: list[Skipped] = list(skipped)


# --- operations --------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreStatus:
    """One store's answer to a probe: whether it answered, and what (never its address)."""

    ok: bool
    detail: str


@dataclass
class DeadLetter:
    entry_id: str
    fields: dict[str, str]
    error: str
    deliveries: int


@dataclass
class WorkerReport:
    processed: int = 0
    failed: int = 0
    dead_lettered: int = 0
    summaries: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, other: WorkerReport) -> None:
        self.processed += other.processed
        self.failed += other.failed
        self.dead_lettered += other.dead_lettered
        self.summaries += other.summaries
        self.errors += other.errors


@dataclass
class MaintenanceReport:
    dry_run: bool
    facts_archived: int = 0
    inactive_users: list[str] = field(default_factory=list)
    vectors_pruned: int = 0


@dataclass
class ReindexReport:
    messages: int = 0
    chunks: int = 0
    summaries: int = 0
    documents: int = 0  # knowledge-base documents moved to another embedder


# --- export and import -------------------------------------------------------------------


@dataclass
class ExportReport:
    """What an export wrote: its users, its records by type, the knowledge-base
    documents left out because a chunk of theirs is missing from the vector store
    (``namespace/doc_id``: add them again), and the fact rows and fact candidates left
    out because their stored value cannot be read back (the log names each)."""

    users: list[str] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)
    skipped_documents: list[str] = field(default_factory=list)
    withheld_facts: int = 0


@dataclass
class ImportReport:
    """What an import found and did: records of the file by type, and what each wrote
    that was not here yet (messages, facts, summaries and tool results: new rows; state:
    sessions set; document: documents added or replaced)."""

    users: list[str] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)
    written: dict[str, int] = field(default_factory=dict)
