"""Step 1 of the read path: every store read in parallel, each under its own timeout.

A store that fails or times out leaves its layer empty and named in ``degraded``. The
stores come as one object (:class:`RecallStores`), whose lazily built parts (the
embedder, the vector store, the knowledge cache) are opened on the first read."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.core import metrics
from memstack.core.errors import ModelUnavailable, StoreUnavailable, ValidationError
from memstack.core.messages import Message
from memstack.core.settings import Settings
from memstack.knowledge.base import has_documents
from memstack.knowledge.cache import KnowledgeCache, KnowledgeTurn
from memstack.ml.embedders import Embedder
from memstack.recall import lexical, word_neighbours
from memstack.recall.lexical import Rewrite
from memstack.recall.ranking import dense_rewrite, without_names
from memstack.recall.request import Request
from memstack.stores.redis.working_memory import WorkingMemory
from memstack.stores.sql import facts as fact_store
from memstack.stores.sql import identity as identities
from memstack.stores.sql import ledger
from memstack.stores.sql import lexical as ledger_search
from memstack.stores.sql.facts import StoredFact
from memstack.stores.sql.lexical import LexicalHit
from memstack.stores.vectors.base import VectorHit, VectorStore
from memstack.text.terms import has_cjk

log = logging.getLogger("memstack.recall")
T = TypeVar("T")

Reads = async_sessionmaker[AsyncSession]


class RecallStores(Protocol):
    """The stores the read path reads (:class:`memstack.parts.Stores` is one): Redis,
    SQL for transactions (``db_sessions``) and single-statement reads (``reads``), and
    the parts built on first use."""

    settings: Settings
    working: WorkingMemory
    db_sessions: Reads
    reads: Reads

    @property
    def embedder(self) -> Embedder: ...

    @property
    def kb_opened(self) -> bool: ...

    async def memory_vectors(self) -> VectorStore: ...

    async def knowledge_cache(self) -> KnowledgeCache: ...


@dataclass
class _Gathered:
    window: list[Message] = field(default_factory=list)
    rebuilt: bool = False
    facts: list[StoredFact] = field(default_factory=list)
    superseded: dict[str, list[Any]] = field(default_factory=dict)
    vector: dict[str, list[VectorHit]] = field(default_factory=dict)
    # The query embeddings, kept for the one case that needs what the searches left
    # out (hit metadata and texts): the ledger is down.
    query_vectors: list[list[float]] = field(default_factory=list)
    lexical: list[LexicalHit] = field(default_factory=list)
    knowledge: Any = None
    degraded: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


async def guarded(g: _Gathered, layer: str, coro: Awaitable[T], default: T, timeout_s: float) -> T:
    """``coro``'s result, or ``default`` with ``layer`` degraded if it fails or times out."""
    start = time.perf_counter()
    try:
        # timeout(), not wait_for(): on 3.11 wait_for wraps the coroutine in one more
        # task, and a call runs five of these.
        async with asyncio.timeout(timeout_s):
            return await coro
    except ValidationError:
        raise
    except TimeoutError:
        g.degraded[layer] = f"timed out after {timeout_s:g} s"
    except Exception as exc:  # a store is down: the layer degrades, the call answers
        g.degraded[layer] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        g.timings[layer] = (time.perf_counter() - start) * 1000
    metrics.CONTEXT_DEGRADED.labels(layer=layer).inc()
    log.warning("context: layer %s degraded: %s", layer, g.degraded.get(layer))
    return default


async def query_rewrites(
    g: _Gathered,
    req: Request,
    llm: lexical.LLMRewriter | None,
    *,
    neighbours: bool,
    timeout_s: float,
) -> tuple[dict[str, str], Rewrite]:
    """The dense queries by channel, and the lexical rewrite: the rules' one, with the
    LLM's keywords and (``neighbours``) related words."""
    rewrite = req.rewrite
    if llm is not None:
        keywords = await guarded(g, "rewrite", llm.keywords(req.query), None, timeout_s)
        if keywords:
            rewrite = lexical.merge_rewrite(rewrite, keywords)
    queries = {"vector": req.query}
    second = dense_rewrite(req.query)
    if second is not None:
        queries["vector_rewrite"] = second
    if neighbours:
        try:
            rewrite = word_neighbours.expand(rewrite, word_neighbours.table())
        except ModelUnavailable as exc:
            g.degraded["word_neighbours"] = str(exc)[:300]
    return queries, rewrite


async def bound_names(reads: Reads, user_id: str) -> tuple[str, ...]:
    """The names the user speaks under (``set_identity``), as written."""
    async with reads() as s:
        found = (await identities.read(s, [user_id])).get(user_id)
    if found is None:
        return ()
    return (*([found.display_name] if found.display_name else []), *found.aliases)


async def repaired_window(
    working: WorkingMemory,
    reads: Reads,
    user_id: str,
    session_id: str,
    n: int | None,
    ledger_messages: int,
) -> tuple[list[Message], bool]:
    """The session's last ``n`` messages, and whether the window had to be repaired
    with the ledger's last ``ledger_messages`` (see :meth:`Recall.window`)."""
    read = await working.window(user_id, session_id, n)
    if read.complete:
        return read.messages, False
    async with reads() as s:
        rows = await ledger.recent_messages(s, user_id, session_id, ledger_messages)
    await working.repair_window(user_id, session_id, rows)
    if not rows:
        return read.messages, False
    metrics.WINDOW_REBUILDS.inc()
    return (await working.window(user_id, session_id, n)).messages, True


async def window_from_ledger(
    reads: Reads, user_id: str, session_id: str, limit: int
) -> list[Message]:
    async with reads() as s:
        rows = await ledger.recent_messages(s, user_id, session_id, limit)
    return rows


async def read_facts(g: _Gathered, reads: Reads, user_id: str) -> None:
    async with reads() as s:
        g.facts, g.superseded = await fact_store.current_and_superseded(s, user_id)


async def _embed(g: _Gathered, embedder: Embedder, texts: list[str]) -> list[list[float]]:
    start = time.perf_counter()
    try:
        return await embedder.embed_queries(texts)
    finally:
        g.timings["embed"] = (time.perf_counter() - start) * 1000


async def search_vectors(
    g: _Gathered, stores: RecallStores, user_id: str, queries: Mapping[str, str], k: int
) -> None:
    queries = await _without_bound_names(g, stores, user_id, queries)
    model = stores.embedder
    names = list(queries)
    store, embedded = await asyncio.gather(
        stores.memory_vectors(), _embed(g, model, [queries[n] for n in names])
    )
    g.query_vectors = embedded
    # Ids and scores only: the ledger rows (read_rows), which the ranking reads anyway,
    # give each hit's messages, texts and times. On Chroma, reading metadata and
    # documents costs as much as the rest of the query.
    results = await store.search_many(embedded, scope={"user_id": user_id}, top_k=k, fields="ids")
    g.vector = dict(zip(names, results, strict=True))


async def _without_bound_names(
    g: _Gathered, stores: RecallStores, user_id: str, queries: Mapping[str, str]
) -> Mapping[str, str]:
    """A Chinese question searched without the names the user is bound to
    (:func:`without_names`); read here, where only the dense search waits for it."""
    question = queries["vector"]
    if not has_cjk(question):
        return queries
    read = bound_names(stores.reads, user_id)
    names = await guarded(g, "identity", read, (), stores.settings.store_timeout_s)
    stripped = without_names(question, names)
    return {**queries, "vector": stripped} if stripped else queries


async def full_hits(g: _Gathered, stores: RecallStores, user_id: str, k: int) -> None:
    """The vector channel again, with metadata and chunk texts: what a hit covers
    and shows when the ledger cannot say (it is down)."""
    store = await stores.memory_vectors()
    results = await store.search_many(
        g.query_vectors, scope={"user_id": user_id}, top_k=k, fields="all"
    )
    g.vector = dict(zip(g.vector, results, strict=True))


async def read_lexical(g: _Gathered, reads: Reads, user_id: str, rewrite: Rewrite, k: int) -> None:
    async with reads() as s:
        g.lexical = await ledger_search.search(s, user_id, rewrite.weights, limit=k)


async def knowledge_turn(stores: RecallStores, req: Request) -> KnowledgeTurn | None:
    """The session knowledge cache's turn for the query, or None without a knowledge base."""
    # Only a knowledge base that exists costs a search per turn: a server URL, one
    # this process opened, or documents in the registry, added by any process (read
    # at most every 30 s per process, at once after this process adds or removes
    # documents); otherwise the section stays empty.
    if not stores.settings.kb_url and not stores.kb_opened:
        try:
            if not await has_documents(stores.settings, stores.reads):
                return None
        except StoreUnavailable:
            # The database is down (the facts layer says so): no knowledge known.
            return None
    cache = await stores.knowledge_cache()
    return await cache.turn(req.user_id, req.session_id, req.query, locale=req.locale)


async def read_knowledge(
    g: _Gathered, stores: RecallStores, req: Request, timeout_s: float
) -> None:
    turn = await guarded(g, "knowledge", knowledge_turn(stores, req), None, timeout_s)
    if turn is not None and getattr(turn, "degraded", None):
        g.degraded["knowledge"] = str(turn.degraded)
    g.knowledge = turn
