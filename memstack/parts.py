""":class:`Stores`: one deployment's connections and the parts built over them, held in
one place for :class:`memstack.AsyncMemory`, its verbs and the read path.

Redis, SQL and the embedded journal are connected at open; the embedder, the two vector
stores (semantic memory, knowledge base), the ingest worker, the knowledge bases and the
session knowledge cache are built on first use, so that ``remember`` stays a single Redis
round trip from a cold start. How each is built from settings is :mod:`memstack.wiring`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from memstack.core.ids import DEFAULT_NAMESPACE
from memstack.core.settings import Settings
from memstack.ingest.worker import Worker
from memstack.knowledge.base import KnowledgeBase
from memstack.knowledge.cache import KnowledgeCache, kb_search
from memstack.knowledge.reembed import reembed
from memstack.ml.embedders import Embedder, build_embedder
from memstack.stores import home
from memstack.stores.journal import Journal
from memstack.stores.redis.queue import IngestQueue
from memstack.stores.redis.working_memory import WorkingMemory
from memstack.stores.sql import db, vector_space
from memstack.stores.vectors.base import VectorStore
from memstack.types import StoreStatus
from memstack.wiring import build_kb_store, build_memory_store, build_worker, session_factories

log = logging.getLogger("memstack.parts")


class Stores:
    """The stores of one deployment, and the parts built over them on first use.

    ``db_sessions`` are for transactions, ``reads`` for single-statement reads (see
    :func:`memstack.wiring.session_factories`)."""

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
        # One lock for both vector stores: concurrent first calls open each store once.
        self._build_lock = asyncio.Lock()

    async def close(self) -> None:
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

    # --- built on first use ------------------------------------------------------------
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
        """The ingest worker run in-process (``drain``, ``memstack worker``)."""
        if self._worker is None:
            vectors = await self.memory_vectors()
            self._worker = build_worker(
                self.settings, self.db_sessions, self.working, self.queue, self.embedder, vectors
            )
        return self._worker

    @property
    def kb_opened(self) -> bool:
        """Whether this process has opened the knowledge-base store."""
        return self._kb_store is not None

    async def kb_store(self) -> VectorStore:
        """The knowledge-base vector store, built on first use."""
        if self._kb_store is None:
            async with self._build_lock:
                if self._kb_store is None:
                    if not self.settings.kb_url:
                        home.claim(self.settings.home)
                    self._kb_store = await build_kb_store(self.settings, self.embedder)
        return self._kb_store

    async def knowledge_base(self, namespace: str = DEFAULT_NAMESPACE) -> KnowledgeBase:
        """The knowledge base of ``namespace``; its store is opened on first use."""
        store = await self.kb_store()
        kb = self._kbs.get(namespace)
        if kb is None:
            kb = KnowledgeBase(
                settings=self.settings,
                sessions=self.db_sessions,
                store=store,
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

    # --- a new vector space (reindex) ----------------------------------------------------
    async def drop_memory_vectors(self) -> None:
        """Drop the semantic-memory collection and record the configured embedder as the
        deployment's; the next :meth:`memory_vectors` and :meth:`worker` open a new one."""
        old = await build_memory_store(self.settings, self.embedder)
        await old.drop()
        await old.close()
        # Recorded now, not once the vectors are rebuilt: what is written from here on is
        # in the new space, so an interrupted re-embed leaves a deployment that opens on
        # it and finishes when run again.
        async with self.db_sessions() as s, s.begin():
            await vector_space.record(s, self.settings.key_prefix, self.settings.embedder)
        if self._memory_vectors is not None:
            await self._memory_vectors.close()
        self._memory_vectors = None
        self._worker = None

    async def reembed_knowledge_base(self) -> int:
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

    # --- health ----------------------------------------------------------------------------
    async def health(self) -> dict[str, StoreStatus]:
        """Each store probed once, all at once, each within ``store_timeout_s``; the
        knowledge base only when a server is configured for it."""
        settings = self.settings
        redis, engine = self.working.redis, self.engine

        async def redis_probe() -> str:
            await redis.ping()
            return "ping ok" + (" (embedded)" if settings.embedded_redis else "")

        async def database() -> str:
            await db.ping(engine)
            return f"{engine.dialect.name} ok"

        async def vector_count() -> str:
            return f"{await (await self.memory_vectors()).count()} vectors"

        async def kb_count() -> str:
            return f"{await (await self.kb_store()).count()} chunks"

        probes: dict[str, Callable[[], Awaitable[str]]] = {
            "redis": redis_probe,
            "database": database,
            "vectors": vector_count,
        }
        # Only a configured knowledge-base server is a dependency worth failing a probe for.
        if settings.kb_url:
            probes["knowledge_base"] = kb_count
        timeout_s = settings.store_timeout_s
        results = await asyncio.gather(*(_probe(n, p, timeout_s) for n, p in probes.items()))
        return dict(zip(probes, results, strict=True))


async def _probe(name: str, probe: Callable[[], Awaitable[str]], timeout_s: float) -> StoreStatus:
    try:
        return StoreStatus(ok=True, detail=await asyncio.wait_for(probe(), timeout_s))
    except TimeoutError:
        return StoreStatus(ok=False, detail=f"no answer within {timeout_s} s")
    except Exception as exc:
        # The error names hosts, ports and URLs: the log has it, the probe's answer not.
        log.warning("health probe of %s failed: %s: %s", name, type(exc).__name__, exc)
        return StoreStatus(ok=False, detail=f"unavailable ({type(exc).__name__})")
