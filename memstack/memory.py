"""The public asyncio API: :class:`AsyncMemory`.

Its stores (:class:`memstack.parts.Stores`: the connections built from one
:class:`Settings`, and the heavier parts built on first use) are ``mem.stores``; the
verbs beyond those written here are the mixins of :mod:`memstack.verbs`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from memstack.core.errors import NotFound, ValidationError
from memstack.core.ids import DEFAULT_NAMESPACE, validate_id
from memstack.core.inputs import check_json, check_text
from memstack.core.messages import Message
from memstack.core.settings import Settings, load_settings
from memstack.core.time import Timestamp, moment
from memstack.ingest import maintenance
from memstack.ingest.worker import Worker
from memstack.knowledge.base import KnowledgeBase, Progress, Source
from memstack.knowledge.cache import KnowledgeCache, KnowledgeTurn
from memstack.ml.embedders import Embedder, prepare_queries
from memstack.parts import Stores
from memstack.stores.journal import Journal
from memstack.stores.redis.queue import IngestQueue
from memstack.stores.redis.working_memory import WorkingMemory
from memstack.stores.sql import db, tool_results
from memstack.stores.vectors.base import VectorStore
from memstack.types import (
    AddReport,
    ContextResult,
    DeadLetter,
    KBDocument,
    KBHit,
    MaintenanceReport,
    ReindexReport,
    SessionState,
    StoreStatus,
    WorkerReport,
)
from memstack.verbs.keys import KeyManagement
from memstack.verbs.operations import Operations
from memstack.verbs.reading import Management
from memstack.verbs.transfer import Portability
from memstack.verbs.writing import Writing
from memstack.wiring import connect


class AsyncMemory(Management, KeyManagement, Portability, Operations, Writing):
    """Layered memory for one deployment. Build with ``await AsyncMemory.open()``."""

    def __init__(
        self,
        settings: Settings,
        engine: AsyncEngine,
        working: WorkingMemory,
        journal: Journal | None = None,
    ) -> None:
        super().__init__(Stores(settings, engine, working, journal))

    @classmethod
    async def open(cls, settings: Settings | None = None) -> AsyncMemory:
        settings = settings or load_settings()
        settings, redis, engine, journal = await connect(settings)
        mem = cls(settings, engine, WorkingMemory(redis, settings), journal)
        await mem.stores.queue.replay_journal()
        return mem

    async def close(self) -> None:
        if self._recall is not None:
            await self._recall.aclose()
        await self.stores.close()

    # --- the stores, as attributes of their own (tests and integrations reach them) ---
    @property
    def settings(self) -> Settings:
        return self.stores.settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        self.stores.settings = settings

    @property
    def engine(self) -> AsyncEngine:
        return self.stores.engine

    @engine.setter
    def engine(self, engine: AsyncEngine) -> None:
        self.stores.engine = engine

    @property
    def db_sessions(self) -> async_sessionmaker[AsyncSession]:
        return self.stores.db_sessions

    @db_sessions.setter
    def db_sessions(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.stores.db_sessions = sessions

    @property
    def reads(self) -> async_sessionmaker[AsyncSession]:
        return self.stores.reads

    @property
    def working(self) -> WorkingMemory:
        return self.stores.working

    @working.setter
    def working(self, working: WorkingMemory) -> None:
        self.stores.working = working

    @property
    def queue(self) -> IngestQueue:
        return self.stores.queue

    @property
    def embedder(self) -> Embedder:
        """The configured embedder; built on first use (MiniLM loads on its first embed)."""
        return self.stores.embedder

    async def memory_vectors(self) -> VectorStore:
        """The semantic-memory vector store, opened on first use."""
        return await self.stores.memory_vectors()

    async def worker(self) -> Worker:
        """The ingest worker this object runs in-process (``drain``, ``memstack worker``)."""
        return await self.stores.worker()

    async def knowledge_base(self, namespace: str = DEFAULT_NAMESPACE) -> KnowledgeBase:
        """The knowledge base of ``namespace``; its store is opened on first use."""
        return await self.stores.knowledge_base(namespace)

    async def knowledge_cache(self) -> KnowledgeCache:
        """The session knowledge cache over the default namespace's knowledge base."""
        return await self.stores.knowledge_cache()

    # --- ingest ----------------------------------------------------------------------
    async def drain(self, *, now: Timestamp | None = None, summarize: bool = True) -> WorkerReport:
        """Process every pending ingest job in-process, then summarise quiet sessions.

        For scripts, tests and the embedded default, where no ``memstack worker`` runs.
        A job that keeps failing is retried until it reaches the dead-letter stream.
        """
        worker = await self.stores.worker()
        total = WorkerReport()
        while True:
            report = await worker.run_batch(block_ms=None)
            total.add(report)
            if not (report.processed or report.failed or report.dead_lettered):
                break
        if summarize:
            total.summaries += await worker.summarize_quiet(moment(now))
        return total

    async def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        return await self.stores.queue.dead_letters(count)

    async def backlog(self) -> int:
        """Ingest jobs queued or delivered and not yet acknowledged, over every stream."""
        return await self.stores.queue.pending_count()

    # --- maintenance -------------------------------------------------------------------
    async def maintain(
        self, *, dry_run: bool = True, now: Timestamp | None = None
    ) -> MaintenanceReport:
        """Archive cold facts and prune inactive users' old dialogue vectors.

        ``dry_run`` (the default) only counts what would go.
        """
        at, stores = moment(now), self.stores
        report = MaintenanceReport(dry_run=dry_run)
        async with db.guarded("archive facts"):
            report.facts_archived = await maintenance.archive_facts(
                stores.db_sessions, stores.settings, now=at, dry_run=dry_run
            )
        report.inactive_users, report.vectors_pruned = await maintenance.prune_vectors(
            stores.db_sessions,
            await stores.memory_vectors(),
            stores.settings,
            now=at,
            dry_run=dry_run,
        )
        return report

    async def health(self) -> dict[str, StoreStatus]:
        """Each store probed once: Redis, the database, the vector store, and a
        knowledge-base server if one is configured."""
        return await self.stores.health()

    async def keys_without_ttl(self) -> list[str]:
        return await self.stores.working.keys_without_ttl()

    async def reindex(self, progress: Callable[[int, int], None] | None = None) -> ReindexReport:
        """Drop the semantic-memory collection and rebuild it from the ledger with the
        configured embedder (after a model change: the error says ``memstack reindex``),
        which the deployment then keeps under ``embedder=auto``.

        Workers may keep running: a worker's next write finds the collection gone, opens
        the new one and writes there, and each session is rebuilt under the same lock
        that orders the workers' writes to it, so nothing is lost or dead-lettered.
        The knowledge base moves to the new embedder first (its chunks as stored)."""
        documents = await self.stores.reembed_knowledge_base()
        await self.stores.drop_memory_vectors()
        worker = await self.stores.worker()
        async with db.guarded("reindex"):
            report = await maintenance.reindex(worker.ingestor, progress=progress)
        report.documents = documents
        return report

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- write path -------------------------------------------------------------
    async def remember(
        self,
        user_id: str,
        session_id: str,
        role: str,
        content: str,
        *,
        msg_id: str | None = None,
        ts: Timestamp | None = None,
        name: str | None = None,
    ) -> str:
        """Record one message; return its ``msg_id``.

        Synchronous part only (docs/spec.md, Write path): the window, the state and the ingest job
        in one atomic Redis script. ``msg_id`` is the caller's idempotency key: a retry
        with the same one changes nothing. It is scoped to the session, so the id
        returned is ``"<user_id>/<session_id>:<msg_id>"`` (see
        :func:`memstack.core.ids.scoped_msg_id`).
        ``name`` is the author in a conversation of several people (OpenAI's ``name``):
        1–64 characters after stripping, no line break, control character or colon.
        """
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        checked = self._check_message(role, content, msg_id, ts, name)
        return (await self._write_message(user_id, session_id, checked)).msg_id

    async def window(self, user_id: str, session_id: str, n: int | None = None) -> list[Message]:
        """The session's last ``n`` messages (default ``recent_window_read``), oldest first;
        a window Redis lost is rebuilt from the ledger first."""
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        limit = self.stores.settings.window_max_messages
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= limit):
            raise ValidationError(f"n must be a whole number from 1 to {limit}, got {n!r}")
        messages, _repaired = await self.recall.window(user_id, session_id, n)
        return messages

    # --- task state ----------------------------------------------------------------
    async def set_state(self, user_id: str, session_id: str, values: Mapping[str, Any]) -> None:
        """Set task-state fields; a field whose value is None is deleted, the others are
        kept. A value larger than ``large_value_bytes`` is stored in the database; the
        hash keeps a reference ``{"$ref", "summary", "bytes"}``.
        """
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        if not isinstance(values, Mapping):
            raise ValidationError(f"state values must be a mapping, got {type(values).__name__}")
        encoded_values: dict[str, str] = {}
        for field, value in values.items():  # all checked before anything is written
            check_text("state field name", field, max_bytes=256)
            kind = f"state field {field!r}"
            encoded = check_json(kind, value, max_bytes=self.stores.settings.max_state_value_bytes)
            encoded_values[field] = value if isinstance(value, str) else encoded
        stored: dict[str, Any] = {}
        for field, value in values.items():
            encoded = encoded_values[field]
            size = len(encoded.encode("utf-8"))
            if size > self.stores.settings.large_value_bytes:
                ref = await tool_results.save(
                    self.stores.db_sessions, user_id, session_id, str(field), encoded
                )
                stored[field] = {"$ref": ref, "summary": encoded[:200], "bytes": size}
            else:
                stored[field] = value
        await self.stores.working.set_state(user_id, session_id, stored)

    async def get_state(self, user_id: str, session_id: str) -> SessionState:
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        return await self.stores.working.get_state(user_id, session_id)

    async def get_tool_result(self, user_id: str, ref: str) -> str:
        """The full content behind a ``$ref`` left in the state hash."""
        validate_id("user_id", user_id)
        validate_id("ref", ref)
        content = await tool_results.load(self.stores.db_sessions, user_id, ref)
        if content is None:
            raise NotFound(f"no tool result {ref!r} for this user")
        return content

    # --- knowledge base and session knowledge cache -------------------------------
    async def kb_add(
        self,
        *sources: Source,
        namespace: str = DEFAULT_NAMESPACE,
        progress: Progress | None = None,
    ) -> AddReport:
        """Add or replace documents: a ``Path`` is a file or folder, a ``str`` is the text
        of a document, a :class:`~memstack.knowledge.base.Document` is text with its id."""
        kb = await self.stores.knowledge_base(namespace)
        return await kb.add(sources, progress=progress)

    async def kb_remove(self, doc_id: str, *, namespace: str = DEFAULT_NAMESPACE) -> KBDocument:
        return await (await self.stores.knowledge_base(namespace)).remove(doc_id)

    async def kb_list(self, *, namespace: str = DEFAULT_NAMESPACE) -> list[KBDocument]:
        return await (await self.stores.knowledge_base(namespace)).documents()

    async def kb_search(
        self, query: str, top_k: int | None = None, *, namespace: str = DEFAULT_NAMESPACE
    ) -> list[KBHit]:
        return await (await self.stores.knowledge_base(namespace)).search(query, top_k)

    async def knowledge_context(
        self, user_id: str, session_id: str, message: str, *, locale: str | None = None
    ) -> KnowledgeTurn:
        """One turn of the session knowledge cache: the "domain knowledge" section for
        ``message`` (Level 2 merged with what the session found before)."""
        cache = await self.stores.knowledge_cache()
        return await cache.turn(user_id, session_id, message, locale=locale)

    # --- read path (memstack.recall) --------------------------------------------------
    async def prepare(self) -> None:
        """Load the models ``context()`` runs (the query embedder, the word-neighbour
        table, the cross-encoder if ``rerank`` is on) now, for a process that serves
        queries from its start: its first call then pays no load, and every call embeds
        with the same query model."""
        await prepare_queries(self.stores.embedder)
        await self.recall.prepare()

    async def context(
        self,
        user_id: str,
        session_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        now: Timestamp | None = None,
        locale: str | None = None,
        system: str | None = None,
        namespaces: Sequence[str] = (),
    ) -> ContextResult:
        """The assembled context for ``query`` (docs/spec.md, Read path): ``text``, chat
        ``messages``, the sections, and a manifest of every item considered. ``now`` (default: the
        clock) fixes recency and relative ages, so a call can be reproduced. The user's own
        conversation is recalled; memory an integration keeps (``"langgraph"``,
        ``"llama_index"``: :mod:`memstack.core.namespaces`) only if ``namespaces`` names it."""
        # Passed on as given: an aware datetime keeps its time zone, in which "yesterday"
        # or "上周" are read.
        return await self.recall.context(
            user_id,
            session_id,
            query,
            budget_tokens=budget_tokens,
            now=now,
            locale=locale,
            system=system,
            namespaces=namespaces,
        )
