"""The public asyncio API: :class:`AsyncMemory`.

One object holds the connections built from one :class:`Settings`; the heavier parts
(embedder, vector stores, extractors) are built on first use so that ``remember``
stays a single Redis round trip from a cold start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from memstack.core.errors import NotFound, StoreUnavailable, ValidationError
from memstack.core.ids import DEFAULT_NAMESPACE, validate_id
from memstack.core.inputs import check_json, check_text
from memstack.core.messages import Message
from memstack.core.settings import Settings, load_settings
from memstack.core.time import Timestamp, moment
from memstack.ingest import maintenance
from memstack.ingest.worker import Worker
from memstack.knowledge.base import KnowledgeBase, Progress, Source, has_documents
from memstack.knowledge.cache import KnowledgeCache, KnowledgeTurn, kb_search
from memstack.knowledge.reembed import reembed
from memstack.ml.embedders import Embedder, build_embedder, prepare_queries
from memstack.recall import Recall
from memstack.stores import home
from memstack.stores.journal import Journal
from memstack.stores.redis.queue import IngestQueue
from memstack.stores.redis.working_memory import WorkingMemory
from memstack.stores.sql import db, tool_results, vector_space
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
from memstack.wiring import (
    build_kb_store,
    build_memory_store,
    build_worker,
    connect,
    probe_stores,
    session_factories,
)


class AsyncMemory(Management, KeyManagement, Portability, Operations, Writing):
    """Layered memory for one deployment. Build with ``await AsyncMemory.open()``."""

    def __init__(
        self,
        settings: Settings,
        engine: AsyncEngine,
        working: WorkingMemory,
        journal: Journal | None = None,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.db_sessions, self.reads = session_factories(engine)
        self.working = working
        self.queue = IngestQueue(
            working.redis,
            working.keys,
            claim_idle_ms=settings.ingest_claim_idle_ms,
            max_deliveries=settings.ingest_max_deliveries,
            journal=journal,
        )
        self._embedder: Embedder | None = None
        self._memory_vectors: VectorStore | None = None
        self._worker: Worker | None = None
        self._kb_store: VectorStore | None = None
        self._kbs: dict[str, KnowledgeBase] = {}
        self._knowledge_cache: KnowledgeCache | None = None
        self._recall: Recall | None = None
        self._build_lock = asyncio.Lock()

    @classmethod
    async def open(cls, settings: Settings | None = None) -> AsyncMemory:
        settings = settings or load_settings()
        settings, redis, engine, journal = await connect(settings)
        mem = cls(settings, engine, WorkingMemory(redis, settings), journal)
        await mem.queue.replay_journal()
        return mem

    async def close(self) -> None:
        if self._recall is not None:
            await self._recall.aclose()
        if self._memory_vectors is not None:
            await self._memory_vectors.close()
        if self._knowledge_cache is not None:
            await self._knowledge_cache.flush()
        if self._kb_store is not None:
            await self._kb_store.close()
        await self.working.redis.aclose()
        await self.engine.dispose()
        if self.queue.journal is not None:
            self.queue.journal.close()

    # --- lazily built parts ----------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        """The configured embedder; built on first use (MiniLM loads on its first embed)."""
        if self._embedder is None:
            self._embedder = build_embedder(self.settings)
        return self._embedder

    async def memory_vectors(self) -> VectorStore:
        """The semantic-memory vector store, opened on first use."""
        if self._memory_vectors is None:
            async with self._build_lock:
                if self._memory_vectors is None:
                    if not self.settings.vector_url:
                        home.claim(self.settings.home)
                    store = await build_memory_store(self.settings, self.embedder)
                    # Opens the collection now: a model or dimension mismatch (which names
                    # `memstack reindex`) must stop a worker before it takes any job.
                    await store.count()
                    self._memory_vectors = store
        return self._memory_vectors

    async def worker(self) -> Worker:
        """The ingest worker this object runs in-process (``drain``, ``memstack worker``)."""
        if self._worker is None:
            vectors = await self.memory_vectors()
            self._worker = build_worker(
                self.settings, self.db_sessions, self.working, self.queue, self.embedder, vectors
            )
        return self._worker

    # --- ingest ----------------------------------------------------------------------
    async def drain(self, *, now: Timestamp | None = None, summarize: bool = True) -> WorkerReport:
        """Process every pending ingest job in-process, then summarise quiet sessions.

        For scripts, tests and the embedded default, where no ``memstack worker`` runs.
        A job that keeps failing is retried until it reaches the dead-letter stream.
        """
        worker = await self.worker()
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
        return await self.queue.dead_letters(count)

    async def backlog(self) -> int:
        """Ingest jobs queued or delivered and not yet acknowledged, over every stream."""
        return await self.queue.pending_count()

    # --- maintenance -------------------------------------------------------------------
    async def maintain(
        self, *, dry_run: bool = True, now: Timestamp | None = None
    ) -> MaintenanceReport:
        """Archive cold facts and prune inactive users' old dialogue vectors.

        ``dry_run`` (the default) only counts what would go.
        """
        at = moment(now)
        report = MaintenanceReport(dry_run=dry_run)
        async with db.guarded("archive facts"):
            report.facts_archived = await maintenance.archive_facts(
                self.db_sessions, self.settings, now=at, dry_run=dry_run
            )
        report.inactive_users, report.vectors_pruned = await maintenance.prune_vectors(
            self.db_sessions, await self.memory_vectors(), self.settings, now=at, dry_run=dry_run
        )
        return report

    async def health(self) -> dict[str, StoreStatus]:
        """Each store probed once: Redis, the database, the vector store, and a
        knowledge-base server if one is configured."""
        return await probe_stores(
            self.settings, self.working.redis, self.engine, self.memory_vectors, self.knowledge_base
        )

    async def keys_without_ttl(self) -> list[str]:
        return await self.working.keys_without_ttl()

    async def reindex(self, progress: Callable[[int, int], None] | None = None) -> ReindexReport:
        """Drop the semantic-memory collection and rebuild it from the ledger with the
        configured embedder (after a model change: the error says ``memstack reindex``),
        which the deployment then keeps under ``embedder=auto``.

        Workers may keep running: a worker's next write finds the collection gone, opens
        the new one and writes there, and each session is rebuilt under the same lock
        that orders the workers' writes to it, so nothing is lost or dead-lettered.
        The knowledge base moves to the new embedder first (its chunks as stored)."""
        documents = await self._reembed_knowledge_base()
        old = await build_memory_store(self.settings, self.embedder)
        await old.drop()
        await old.close()
        # Recorded now, not at the end: what is written from here on is in the new space,
        # so an interrupted re-embed leaves a deployment that opens on it and finishes
        # when run again.
        async with self.db_sessions() as s, s.begin():
            await vector_space.record(s, self.settings.key_prefix, self.settings.embedder)
        if self._memory_vectors is not None:
            await self._memory_vectors.close()
        self._memory_vectors = None
        self._worker = None
        worker = await self.worker()
        async with db.guarded("reindex"):
            report = await maintenance.reindex(worker.ingestor, progress=progress)
        report.documents = documents
        return report

    async def _reembed_knowledge_base(self) -> int:
        """Move the knowledge base to the configured embedder when the deployment's
        recorded one is another; how many documents moved."""
        async with self.db_sessions() as s:
            before = await vector_space.recorded(s, self.settings.key_prefix)
        if before is None or before == self.settings.embedder:
            return 0
        was = self.settings.with_embedder(before)
        old = await build_kb_store(was, build_embedder(was))
        if self._knowledge_cache is not None:
            await self._knowledge_cache.flush()
        if self._kb_store is not None:
            await self._kb_store.close()
        self._kb_store, self._kbs, self._knowledge_cache = None, {}, None
        return await reembed(
            self.settings,
            self.db_sessions,
            self.embedder,
            old,
            lambda: build_kb_store(self.settings, self.embedder),
        )

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
        limit = self.settings.window_max_messages
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
            encoded = check_json(kind, value, max_bytes=self.settings.max_state_value_bytes)
            encoded_values[field] = value if isinstance(value, str) else encoded
        stored: dict[str, Any] = {}
        for field, value in values.items():
            encoded = encoded_values[field]
            size = len(encoded.encode("utf-8"))
            if size > self.settings.large_value_bytes:
                ref = await tool_results.save(
                    self.db_sessions, user_id, session_id, str(field), encoded
                )
                stored[field] = {"$ref": ref, "summary": encoded[:200], "bytes": size}
            else:
                stored[field] = value
        await self.working.set_state(user_id, session_id, stored)

    async def get_state(self, user_id: str, session_id: str) -> SessionState:
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        return await self.working.get_state(user_id, session_id)

    async def get_tool_result(self, user_id: str, ref: str) -> str:
        """The full content behind a ``$ref`` left in the state hash."""
        validate_id("user_id", user_id)
        validate_id("ref", ref)
        content = await tool_results.load(self.db_sessions, user_id, ref)
        if content is None:
            raise NotFound(f"no tool result {ref!r} for this user")
        return content

    # --- knowledge base and session knowledge cache -------------------------------
    async def knowledge_base(self, namespace: str = DEFAULT_NAMESPACE) -> KnowledgeBase:
        """The knowledge base of ``namespace``; its store is opened on first use."""
        if self._kb_store is None:
            async with self._build_lock:
                if self._kb_store is None:
                    if not self.settings.kb_url:
                        home.claim(self.settings.home)
                    self._kb_store = await build_kb_store(self.settings, self.embedder)
        kb = self._kbs.get(namespace)
        if kb is None:
            kb = KnowledgeBase(
                settings=self.settings,
                sessions=self.db_sessions,
                store=self._kb_store,
                embedder=self.embedder,
                namespace=namespace,
            )
            self._kbs[namespace] = kb
        return kb

    async def knowledge_cache(self) -> KnowledgeCache:
        """The session knowledge cache over the default namespace's knowledge base."""
        if self._knowledge_cache is None:
            kb = await self.knowledge_base()
            self._knowledge_cache = KnowledgeCache(self.working.redis, self.settings, kb_search(kb))
        return self._knowledge_cache

    async def kb_add(
        self,
        *sources: Source,
        namespace: str = DEFAULT_NAMESPACE,
        progress: Progress | None = None,
    ) -> AddReport:
        """Add or replace documents: a ``Path`` is a file or folder, a ``str`` is the text
        of a document, a :class:`~memstack.knowledge.base.Document` is text with its id."""
        kb = await self.knowledge_base(namespace)
        return await kb.add(sources, progress=progress)

    async def kb_remove(self, doc_id: str, *, namespace: str = DEFAULT_NAMESPACE) -> KBDocument:
        return await (await self.knowledge_base(namespace)).remove(doc_id)

    async def kb_list(self, *, namespace: str = DEFAULT_NAMESPACE) -> list[KBDocument]:
        return await (await self.knowledge_base(namespace)).documents()

    async def kb_search(
        self, query: str, top_k: int | None = None, *, namespace: str = DEFAULT_NAMESPACE
    ) -> list[KBHit]:
        return await (await self.knowledge_base(namespace)).search(query, top_k)

    async def knowledge_context(
        self, user_id: str, session_id: str, message: str, *, locale: str | None = None
    ) -> KnowledgeTurn:
        """One turn of the session knowledge cache: the "domain knowledge" section for
        ``message`` (Level 2 merged with what the session found before)."""
        cache = await self.knowledge_cache()
        return await cache.turn(user_id, session_id, message, locale=locale)

    # --- read path (memstack.recall) --------------------------------------------------
    async def prepare(self) -> None:
        """Load the models ``context()`` runs (the query embedder, the word-neighbour
        table, the cross-encoder if ``rerank`` is on) now, for a process that serves
        queries from its start: its first call then pays no load, and every call embeds
        with the same query model."""
        await prepare_queries(self.embedder)
        await self.recall.prepare()

    @property
    def recall(self) -> Recall:
        """The read path over this object's stores; built on first use."""
        if self._recall is None:
            self._recall = Recall(
                self.settings,
                working=self.working,
                sessions=self.db_sessions,
                reads=self.reads,
                embedder=lambda: self.embedder,
                vectors=self.memory_vectors,
                knowledge=self._knowledge_section,
            )
        return self._recall

    async def _knowledge_section(
        self, user_id: str, session_id: str, message: str, locale: str
    ) -> KnowledgeTurn | None:
        # Only a knowledge base that exists costs a search per turn: a server URL, one
        # this process opened, or documents in the registry, added by any process (read
        # at most every 30 s per process, at once after this process adds or removes
        # documents); otherwise the section stays empty.
        if not self.settings.kb_url and self._kb_store is None:
            try:
                if not await has_documents(self.settings, self.reads):
                    return None
            except StoreUnavailable:
                # The database is down (the facts layer says so): no knowledge known.
                return None
        return await self.knowledge_context(user_id, session_id, message, locale=locale)

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
