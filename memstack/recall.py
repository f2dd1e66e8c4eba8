"""The read path: ``context(user_id, session_id, query)`` (seed 002 §4, §5.1, §6.2).

1. Gather in parallel, each store under its own timeout: the recent window (Redis),
   current facts and superseded values (SQL), two dense searches (the question and a
   rewrite of it) with a hard ``user_id`` filter, BM25 over the ledger, and the session
   knowledge cache when a knowledge base is configured. A store that fails or times out
   leaves its layer empty and named in ``degraded``; the call still answers.
2. A window not known to hold the session's history (Redis lost or expired it) is repaired
   from the ledger.
3. Candidates are scored (:mod:`memstack.ranking`).
4. Filters, each recorded in the manifest (:mod:`memstack.manifest`): in the window;
   below the distance threshold; carrying a superseded fact value (§5.1); a
   near-duplicate (character-bigram Jaccard); the same message as a better chunk
   (:mod:`memstack.snippets`).
5. Per-layer token budgets (:mod:`memstack.budget`, :mod:`memstack.packing`), then
   assembly (:mod:`memstack.assembly`).

Every store query carries the user filter: the vector store refuses a search without
``scope``, SQL queries name ``user_id``, and the window drops other users' entries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import (
    CompoundSelect,
    String,
    and_,
    any_,
    bindparam,
    case,
    func,
    null,
    select,
    true,
    tuple_,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import aliased

from memstack import facts as fact_store
from memstack import ledger, lexical, metrics, word_neighbours
from memstack.assembly import (
    Assembled,
    Labels,
    Turn,
    age_header,
    assemble,
    labels_for,
    mark_outdated,
    render_fact,
    render_history_groups,
    render_turn,
    section_tokens,
)
from memstack.budget import Fit, allocate
from memstack.chunking import UNIT_LOOKBACK
from memstack.embedders import Embedder
from memstack.errors import (
    ConfigError,
    InvalidContent,
    ModelUnavailable,
    ValidationError,
)
from memstack.facts import StoredFact
from memstack.ids import msg_id_of_chunk, validate_id
from memstack.inputs import check_text
from memstack.lexical import LexicalHit, Rewrite, rewrite_query
from memstack.manifest import (
    BELOW_THRESHOLD,
    BUDGET,
    CURRENT_INPUT,
    DUPLICATE,
    IN_WINDOW,
    KEPT,
    LIMIT,
    STALE,
    ContextResult,
    ManifestItem,
    candidate_item,
    hit_item,
    make_item,
    preview,
)
from memstack.models import MessageRow
from memstack.packing import pack_history, pack_lines, pack_window
from memstack.periods import Period, named_period
from memstack.ranking import MIN_CONTENT_TERMS, Candidate, dense_rewrite, fuse
from memstack.reranker import RERANK_K, CrossEncoder
from memstack.settings import Settings
from memstack.snippets import char_bigrams, excerpt, jaccard, other_terms, stale_statements
from memstack.tokens import count_tokens, line_tokens, term_count
from memstack.vectorstores.base import VectorHit, VectorStore
from memstack.working_memory import WindowMessage, WorkingMemory

log = logging.getLogger("memstack.recall")
T = TypeVar("T")

# Candidates per channel never fall below this, whatever vector_top_k says: the budget,
# not the pool, should decide what is kept.
MIN_POOL = 20
# ...and grow with the history's share of the budget, one per this many tokens: a pool
# smaller than what the share can hold leaves it half empty (LoCoMo dev at 1000 tokens:
# 0.746 evidence recall with 20 per channel, 0.760 with 40, 0.763 with 60).
POOL_TOKENS = 20


# Most seconds a fact hit waits to be written (see Recall._hits).
HIT_FLUSH_S = 1.0
# Share of the score of the message a candidate answers (the one before it in its session).
ANSWER_PROPAGATION = 0.5
# Messages with fewer lexical terms than this are discounted in proportion: "ok, see you!"


@dataclass(frozen=True)
class _Row:
    msg_id: str
    role: str
    content: str
    created_at: float
    prev_id: str | None
    name: str | None


def _rows_statement(postgresql: bool) -> CompoundSelect[Any]:
    """Rows ``ids`` of the user, each with the id of the message before it, then (with
    ``head_id`` set) the next :data:`UNIT_LOOKBACK` messages after each of ``heads`` in
    its session: the replies that may share a head's exchange unit."""
    prev = aliased(MessageRow)
    prev_id = (
        select(prev.msg_id)
        .where(
            prev.user_id == MessageRow.user_id,
            prev.session_id == MessageRow.session_id,
            # A row comparison, not the equivalent OR: PostgreSQL turns only this form
            # into one backward step of ix_message_session_order.
            tuple_(prev.created_at, prev.msg_id) < tuple_(MessageRow.created_at, MessageRow.msg_id),
        )
        .order_by(prev.created_at.desc(), prev.msg_id.desc())
        .limit(1)
        .correlate(MessageRow)
        .scalar_subquery()
    )

    def among(column: Any, name: str) -> Any:
        # One array parameter on PostgreSQL: the same SQL text whatever the number of
        # ids, which psycopg parses once (an IN list of 50-100 ids took ~1.5 ms more
        # CPU per call). SQLite has no arrays.
        if postgresql:
            return column == any_(bindparam(name, type_=ARRAY(String)))
        return column.in_(bindparam(name, expanding=True))

    rows = select(
        MessageRow.msg_id,
        MessageRow.role,
        MessageRow.content,
        MessageRow.created_at,
        MessageRow.name,
        prev_id.label("prev_id"),
        null().label("head_id"),
    ).where(MessageRow.user_id == bindparam("user_id"), among(MessageRow.msg_id, "ids"))

    head, nxt = aliased(MessageRow), aliased(MessageRow)
    after_head = and_(
        nxt.user_id == head.user_id,
        nxt.session_id == head.session_id,
        tuple_(nxt.created_at, nxt.msg_id) > tuple_(head.created_at, head.msg_id),
    )
    of_heads = and_(head.user_id == bindparam("user_id"), among(head.msg_id, "heads"))
    columns = (nxt.msg_id, nxt.role, nxt.content, nxt.created_at, nxt.name)
    order = (nxt.created_at, nxt.msg_id)
    # A reply joins the unit of the user turn it answers (ingest.dialogue_records): a
    # head's unit is the head, if a user turn, and the replies after it up to the next
    # user turn, at most UNIT_LOOKBACK of them. Counting the user turns seen so far
    # keeps only those replies.
    if postgresql:
        # A few forward steps of ix_message_session_order per head.
        next_few = (
            select(*columns)
            .where(after_head)
            .order_by(*order)
            .limit(UNIT_LOOKBACK)
            .correlate(head)
            .subquery("next_few")
        )
        counted = select(
            next_few,
            func.sum(case((next_few.c.role == "user", 1), else_=0))
            .over(order_by=(next_few.c.created_at, next_few.c.msg_id))
            .label("users"),
        ).subquery("counted")
        later = (
            select(*(counted.c[c.key] for c in columns))
            .where(counted.c.users == 0)
            .lateral("later")
        )
        followers = (
            select(*later.c, null().label("prev_id"), head.msg_id.label("head_id"))
            .select_from(head)
            .join(later, true())
            .where(of_heads, head.role == "user")
        )
    else:  # SQLite has no LATERAL: number each head's later messages instead.
        users = func.sum(case((nxt.role == "user", 1), else_=0))
        numbered = (
            select(
                *columns,
                head.msg_id.label("head_id"),
                func.row_number().over(partition_by=head.msg_id, order_by=order).label("n"),
                users.over(partition_by=head.msg_id, order_by=order).label("users"),
            )
            .select_from(head)
            .join(nxt, after_head)
            .where(of_heads, head.role == "user")
            .subquery()
        )
        followers = select(
            *(numbered.c[c.key] for c in columns),
            null().label("prev_id"),
            numbered.c.head_id,
        ).where(numbered.c.n <= UNIT_LOOKBACK, numbered.c.users == 0)
    return union_all(rows, followers)


# Candidate ledger rows and the followers of unit heads. Built once: building the
# statement took ~2 ms of CPU, more than PostgreSQL spends running it.
_ROWS = {True: _rows_statement(True), False: _rows_statement(False)}


# --- the read path ---------------------------------------------------------------------------

KnowledgeProvider = Callable[[str, str, str, str], Awaitable[Any]]


@dataclass
class _Gathered:
    window: list[WindowMessage] = field(default_factory=list)
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


class Recall:
    """The read path over one deployment's stores. :class:`AsyncMemory` delegates to it."""

    def __init__(
        self,
        settings: Settings,
        *,
        working: WorkingMemory,
        sessions: async_sessionmaker[AsyncSession],
        reads: async_sessionmaker[AsyncSession] | None = None,
        embedder: Callable[[], Embedder],
        vectors: Callable[[], Awaitable[VectorStore]],
        knowledge: KnowledgeProvider | None = None,
    ) -> None:
        if settings.query_rewrite == "llm" and not settings.llm_url:
            raise ConfigError("query_rewrite=llm needs llm_url (MEMSTACK_LLM_URL)")
        self.settings = settings
        self.working = working
        self.sessions = sessions
        # Sessions for the read path's queries, each one statement (autocommit where
        # the caller provides it); writes go through ``sessions``.
        self.reads = reads or sessions
        self._embedder = embedder
        self._vectors = vectors
        self.knowledge = knowledge
        self._llm: lexical.LLMRewriter | None = None
        self._reranker = CrossEncoder() if settings.rerank == "cross-encoder" else None
        # Fact hits of calls since the last write, by fact id: (count, latest call time).
        # One write per HIT_FLUSH_S rather than a transaction per call, which cost more
        # CPU than any query of the call; settle() and aclose() write what is left.
        self._hits: dict[int, tuple[int, float]] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._flush_now = asyncio.Event()
        if settings.query_rewrite == "llm" and settings.llm_url:
            self._llm = lexical.LLMRewriter.from_settings(settings)

    async def prepare(self) -> None:
        if self.settings.word_neighbours:
            await asyncio.to_thread(word_neighbours.table)
        if self._reranker is not None:
            await asyncio.to_thread(self._reranker.prepare)

    async def settle(self) -> None:
        """Write the bookkeeping of earlier context() calls (fact hits) now."""
        while self._flusher is not None:
            self._flush_now.set()
            await self._flusher

    def _note_hits(self, fact_ids: Sequence[int], now_s: float) -> None:
        for fid in fact_ids:
            count, at = self._hits.get(fid, (0, now_s))
            self._hits[fid] = (count + 1, max(at, now_s))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_hits_later())

    async def _flush_hits_later(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._flush_now.wait(), HIT_FLUSH_S)
        self._flush_now.clear()
        hits, self._hits = self._hits, {}
        self._flusher = None
        # The archive rule spares facts that reach a context; a failure here must not
        # cost any caller the context it already has.
        try:
            async with self.sessions.begin() as s:
                await fact_store.record_hits(
                    s,
                    {
                        fid: (count, datetime.fromtimestamp(at, tz=UTC))
                        for fid, (count, at) in hits.items()
                    },
                )
        except Exception as exc:
            log.warning("could not record the hits of %d facts: %s", len(hits), exc)

    async def aclose(self) -> None:
        await self.settle()
        if self._llm is not None:
            await self._llm.aclose()

    def reserved_tokens(
        self, query: str, locale: str | None = None, system: str | None = None
    ) -> int:
        """Tokens of the system text and the current-input section for ``query``."""
        labels = labels_for(locale or self.settings.locale)
        return line_tokens(system if system is not None else labels.system) + section_tokens(
            labels.input, [query]
        )

    # --- gathering ----------------------------------------------------------------------

    async def _guarded(
        self,
        g: _Gathered,
        layer: str,
        coro: Awaitable[T],
        default: T,
        timeout_s: float | None = None,
    ) -> T:
        start = time.perf_counter()
        timeout_s = self.settings.store_timeout_s if timeout_s is None else timeout_s
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

    async def _window(self, g: _Gathered, user_id: str, session_id: str) -> None:
        g.window, g.rebuilt = await self.window(user_id, session_id)

    async def window(
        self, user_id: str, session_id: str, n: int | None = None
    ) -> tuple[list[WindowMessage], bool]:
        """The session's last ``n`` messages, and whether the window had to be repaired.

        Seed §5.1: Redis is an accelerator, not the source of truth. A window that is not
        known complete (its first write found no window: a new session, an expired
        window, a lost Redis) gets the ledger's recent messages merged in, once; the
        repair is counted."""
        read = await self.working.window(user_id, session_id, n)
        if read.complete:
            return read.messages, False
        async with self.reads() as s:
            rows = await ledger.recent_messages(
                s, user_id, session_id, self.settings.window_max_messages
            )
        await self.working.repair_window(user_id, session_id, [_window_message(r) for r in rows])
        if not rows:
            return read.messages, False
        metrics.WINDOW_REBUILDS.inc()
        return (await self.working.window(user_id, session_id, n)).messages, True

    async def _window_from_ledger(self, user_id: str, session_id: str) -> list[WindowMessage]:
        async with self.reads() as s:
            rows = await ledger.recent_messages(
                s, user_id, session_id, self.settings.recent_window_read
            )
        return [_window_message(r) for r in rows]

    async def _facts(self, g: _Gathered, user_id: str) -> None:
        async with self.reads() as s:
            g.facts, g.superseded = await fact_store.current_and_superseded(s, user_id)

    def pool(self, total: int, reserved: int) -> int:
        """Candidates per channel for a call with ``total`` tokens, ``reserved`` of them fixed."""
        share = max(total - reserved, 0) * self.settings.share_semantic
        return max(self.settings.vector_top_k, MIN_POOL, int(share) // POOL_TOKENS)

    async def _vector(self, g: _Gathered, user_id: str, queries: Mapping[str, str], k: int) -> None:
        embedder = self._embedder()
        names = list(queries)

        async def embed() -> list[list[float]]:
            start = time.perf_counter()
            try:
                return await embedder.embed_queries([queries[n] for n in names])
            finally:
                g.timings["embed"] = (time.perf_counter() - start) * 1000

        vectors_store, embedded = await asyncio.gather(self._vectors(), embed())
        g.query_vectors = embedded
        # Ids and scores only: the ledger rows (_rows), which the ranking reads anyway,
        # give each hit's messages, texts and times. On Chroma, reading metadata and
        # documents costs as much as the rest of the query.
        results = await vectors_store.search_many(
            embedded, scope={"user_id": user_id}, top_k=k, fields="ids"
        )
        g.vector = dict(zip(names, results, strict=True))

    async def _full_hits(self, g: _Gathered, user_id: str, k: int) -> None:
        """The vector channel again, with metadata and chunk texts: what a hit covers
        and shows when the ledger cannot say (it is down)."""
        store = await self._vectors()
        results = await store.search_many(
            g.query_vectors, scope={"user_id": user_id}, top_k=k, fields="all"
        )
        g.vector = dict(zip(g.vector, results, strict=True))

    async def _lexical(self, g: _Gathered, user_id: str, rewrite: Rewrite, k: int) -> None:
        async with self.reads() as s:
            g.lexical = await lexical.search(s, user_id, rewrite, limit=k)

    async def _rows(
        self, user_id: str, msg_ids: Sequence[str], heads: Sequence[str]
    ) -> tuple[dict[str, _Row], dict[str, tuple[str, ...]]]:
        """Ledger rows of the candidates, each with the id of the message before it, and
        the exchange unit (message ids) of each of ``heads``, whose followers' rows are
        added. ``heads`` must be among ``msg_ids``."""
        if not msg_ids:
            return {}, {}
        async with self.reads() as s:
            stmt = _ROWS[s.get_bind().dialect.name == "postgresql"]
            result = await s.execute(
                stmt, {"user_id": user_id, "ids": list(msg_ids), "heads": list(heads)}
            )
            got = result.all()
        rows: dict[str, _Row] = {}
        following: dict[str, list[_Row]] = {}
        for r in got:
            row = _Row(r.msg_id, r.role, r.content, r.created_at.timestamp(), r.prev_id, r.name)
            if r.head_id is None:
                rows[r.msg_id] = row
            else:
                following.setdefault(r.head_id, []).append(row)
        units: dict[str, tuple[str, ...]] = {}
        for head in heads:
            first = rows.get(head)
            if first is None:
                continue
            members = [first]
            for x in sorted(following.get(head, ()), key=lambda x: (x.created_at, x.msg_id)):
                # Each follower answers the message just before it in the session.
                members.append(rows.setdefault(x.msg_id, replace(x, prev_id=members[-1].msg_id)))
            units[head] = tuple(m.msg_id for m in members)
        return rows, units

    # --- the call --------------------------------------------------------------------------

    async def context(
        self,
        user_id: str,
        session_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        now: datetime | float | None = None,
        locale: str | None = None,
        system: str | None = None,
    ) -> ContextResult:
        started = time.perf_counter()
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        if not check_text("query", query, max_bytes=self.settings.max_message_bytes).strip():
            raise InvalidContent("query must be a non-empty string")
        query = query.strip()
        labels = labels_for(locale or self.settings.locale)
        total = self.settings.budget_tokens if budget_tokens is None else budget_tokens
        if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
            raise ValidationError(f"budget_tokens must be a positive integer, got {total!r}")
        system_text = labels.system if system is None else system
        reserved = line_tokens(system_text) + section_tokens(labels.input, [query])
        if reserved > total:
            raise ValidationError(
                f"the system text and the query take {reserved} tokens, more than "
                f"budget_tokens={total}"
            )
        now_s = _epoch_s(now)
        # Dates in the query are read in now's time zone; epoch seconds mean UTC.
        period = named_period(
            query, now if isinstance(now, datetime) else datetime.fromtimestamp(now_s, UTC)
        )

        rewrite = rewrite_query(query)
        g = _Gathered()
        if self._llm is not None:
            keywords = await self._guarded(g, "rewrite", self._llm.keywords(query), None)
            if keywords:
                rewrite = lexical.merge_rewrite(rewrite, keywords)
        queries = {"vector": query}
        second = dense_rewrite(query, rewrite)
        if second is not None:
            queries["vector_rewrite"] = second
        if self.settings.word_neighbours:
            try:
                rewrite = word_neighbours.expand(rewrite, word_neighbours.table())
            except ModelUnavailable as exc:
                g.degraded["word_neighbours"] = str(exc)[:300]

        pool = self.pool(total, reserved)
        tasks: list[Awaitable[Any]] = [
            self._guarded(g, "window", self._window(g, user_id, session_id), None),
            self._guarded(g, "facts", self._facts(g, user_id), None),
            self._guarded(g, "vector", self._vector(g, user_id, queries, pool), None),
            self._guarded(g, "lexical", self._lexical(g, user_id, rewrite, pool), None),
        ]
        if self.knowledge is not None:
            tasks.append(self._knowledge(g, user_id, session_id, query, locale))
        await asyncio.gather(*tasks)
        if "window" in g.degraded:
            # Redis is down: the ledger still knows the session's last messages.
            fallback = await self._guarded(
                g, "window_ledger", self._window_from_ledger(user_id, session_id), []
            )
            if fallback:
                g.window = fallback
                g.degraded["window"] += " (served from the ledger)"
        gathered_at = time.perf_counter()

        result = await self._build(
            g, user_id, query, rewrite, period, labels, system_text, total, reserved, now_s
        )
        result.timings_ms["gather"] = (gathered_at - started) * 1000
        result.timings_ms["rank_and_pack"] = (time.perf_counter() - gathered_at) * 1000
        result.timings_ms["total"] = (time.perf_counter() - started) * 1000
        metrics.CONTEXT_SECONDS.observe(time.perf_counter() - started)
        return result

    async def _knowledge(
        self, g: _Gathered, user_id: str, session_id: str, query: str, locale: str | None
    ) -> None:
        assert self.knowledge is not None
        loc = locale or self.settings.locale
        turn = await self._guarded(
            g, "knowledge", self.knowledge(user_id, session_id, query, loc), None
        )
        if turn is not None and getattr(turn, "degraded", None):
            g.degraded["knowledge"] = str(turn.degraded)
        g.knowledge = turn

    async def _build(
        self,
        g: _Gathered,
        user_id: str,
        query: str,
        rewrite: Rewrite,
        period: Period | None,
        labels: Labels,
        system_text: str,
        total: int,
        reserved: int,
        now_s: float,
    ) -> ContextResult:
        s = self.settings
        manifest: list[ManifestItem] = []

        # Recent window: the query itself may already be its last message.
        window = list(g.window)
        if window and window[-1].role == "user" and window[-1].content.strip() == query:
            current = window.pop()
            manifest.append(
                make_item(
                    "window",
                    current.msg_id,
                    (current.msg_id,),
                    current.content,
                    0,
                    False,
                    CURRENT_INPUT,
                )
            )
        window_ids = {m.msg_id for m in g.window}

        # Semantic candidates: the ledger rows of every hit, which also say what each
        # vector hit covers (its exchange unit).
        bare = [h.id for hits in g.vector.values() for h in hits if not h.metadata]
        heads = [msg_id_of_chunk(i) for i in bare]
        wanted = list(dict.fromkeys([*heads, *(lex.msg_id for lex in g.lexical)]))
        rows: dict[str, _Row] = {}
        units: dict[str, tuple[str, ...]] | None = {}
        if wanted:
            try:
                rows, units = await asyncio.wait_for(
                    self._rows(
                        user_id, wanted, list(dict.fromkeys(filter(None, map(_unit_head, bare))))
                    ),
                    s.store_timeout_s,
                )
            except Exception as exc:  # the ledger is down: fall back to chunk texts
                g.degraded.setdefault("lexical", f"{type(exc).__name__}: {exc}"[:300])
                units = None
                if heads:
                    await self._guarded(
                        g,
                        "vector",
                        asyncio.wait_for(
                            self._full_hits(g, user_id, self.pool(total, reserved)),
                            s.store_timeout_s,
                        ),
                        None,
                    )
        candidates, dropped = self._candidates(g, window_ids, rows, units)
        manifest.extend(_with_preview(d, rows) for d in dropped)
        lengths: dict[str, int] = {}
        for m, c in candidates.items():
            row = rows.get(m)
            if row is not None:
                c.role, c.content, c.created_at, c.prev_id, c.name = (
                    row.role,
                    row.content,
                    row.created_at,
                    row.prev_id,
                    row.name,
                )
                # Only short messages can fall under the discount; skip segmenting the rest.
                lengths[m] = (
                    term_count(row.content)
                    if len(row.content) < 20 * MIN_CONTENT_TERMS
                    else MIN_CONTENT_TERMS
                )
        ranked = fuse(
            candidates,
            settings=s,
            now_s=now_s,
            lengths=lengths,
            time_intent=rewrite.time_intent,
            query=query,
            period=period,
        )
        if self._reranker is not None and ranked:
            ranked = await self._rerank(g, self._reranker, query, ranked)
        current_values = {f.key: f.value for f in g.facts}
        eligible: list[Candidate] = []
        seen_grams: list[set[str]] = []
        covered: set[str] = set()
        eligible_tokens = 0
        for c in ranked:
            c.text = (
                excerpt(c.content, rewrite.weights, s.chunk_split_chars)
                if c.content is not None
                else c.chunk_text
            )
            stale_key_, c.text = _outdated(c.text, g.superseded, current_values, labels)
            age = now_s - (c.created_at if c.created_at is not None else now_s)
            c.header = age_header(age, labels)
            # Without its ledger row, the unit's chunk text already reads "role: content".
            c.body = (
                render_turn(c.role, c.text, labels, c.name)
                if c.content is not None
                else c.text.replace("\n", "\n  ")
            )
            c.header_tokens = line_tokens(c.header)
            # Priced as it prints inside a group: indented under a shared age header.
            c.body_tokens = line_tokens("  " + c.body)
            c.tokens = c.header_tokens + c.body_tokens
            ids = (c.msg_id,) if c.content is not None else (c.chunk_msg_ids or (c.msg_id,))
            reason: str | None = None
            detail = ""
            # Bodies only: a header is paid once per group of same-age items, so summing
            # c.tokens stopped the list about one item short of what the packer could fit.
            if len(eligible) >= s.vector_keep or eligible_tokens > total:
                # Never packed whatever the filters say: skip their cost (Jaccard is
                # quadratic) and record why.
                reason = LIMIT if len(eligible) >= s.vector_keep else BUDGET
                detail = "ranked below what the budget can hold"
            elif covered.issuperset(ids):
                reason, detail = DUPLICATE, "same message as a better item"
            elif stale_key_ is not None:
                reason, detail = STALE, f"says nothing but a superseded value of {stale_key_}"
                metrics.STALE_DROPS.inc()
            else:
                grams = char_bigrams(c.text)
                if any(
                    # Jaccard cannot exceed the size ratio: most pairs end here.
                    min(len(grams), len(other)) > s.jaccard_threshold * max(len(grams), len(other))
                    and jaccard(grams, other) > s.jaccard_threshold
                    for other in seen_grams
                ):
                    reason, detail = DUPLICATE, "near-duplicate of a better item"
                else:
                    seen_grams.append(grams)
            if reason is None:
                covered.update(ids)
                eligible.append(c)
                eligible_tokens += c.body_tokens
            else:
                manifest.append(candidate_item(c, ids, False, reason, detail))

        # Budgets.
        fact_lines = [(f, render_fact(f.key, f.value, f.source, labels)) for f in g.facts]
        knowledge_items = list(getattr(g.knowledge, "items", ()) or ())
        knowledge_lines = [_knowledge_line(i, labels) for i in knowledge_items]
        window_turns = [Turn(m.role, m.content, m.name) for m in window]

        packs: dict[str, Any] = {}

        def packer(name: str, pack: Callable[[int], tuple[Any, Fit]]) -> Callable[[int], Fit]:
            def run(cap: int) -> Fit:
                packs[name], fit = pack(cap)
                return fit

            return run

        allocation = allocate(
            total,
            reserved=reserved,
            shares={
                "facts": s.share_facts,
                "knowledge": s.share_knowledge,
                "semantic": s.share_semantic,
                "window": s.share_window,
            },
            packers={
                "facts": packer(
                    "facts", lambda cap: pack_lines(labels.facts, [ln for _, ln in fact_lines], cap)
                ),
                "knowledge": packer(
                    "knowledge", lambda cap: pack_lines(labels.knowledge, knowledge_lines, cap)
                ),
                "semantic": packer(
                    "semantic",
                    lambda cap: pack_history(labels.history, eligible, cap, s.vector_keep),
                ),
                "window": packer("window", lambda cap: pack_window(labels, window_turns, cap)),
            },
        )

        # Manifest of the packed layers.
        fact_kept = set(packs.get("facts", []))
        for i, (f, line) in enumerate(fact_lines):
            manifest.append(
                make_item(
                    "facts",
                    f"fact:{f.id}",
                    (f.msg_id,),
                    line,
                    count_tokens(line),
                    i in fact_kept,
                    None if i in fact_kept else BUDGET,
                    score=f.confidence,
                    detail=f.key,
                )
            )
        knowledge_kept = set(packs.get("knowledge", []))
        for i, (item, line) in enumerate(zip(knowledge_items, knowledge_lines, strict=True)):
            manifest.append(
                make_item(
                    "knowledge",
                    str(getattr(item, "chunk_id", "") or i),
                    (),
                    line,
                    count_tokens(line),
                    i in knowledge_kept,
                    None if i in knowledge_kept else BUDGET,
                    score=float(getattr(item, "score", 0.0)),
                    detail=str(getattr(item, "origin", "")),
                )
            )
        chosen_sem: list[Candidate] = packs.get("semantic", [])
        chosen_ids = {c.msg_id for c in chosen_sem}
        for rank, c in enumerate(eligible):
            ids = (c.msg_id,) if c.content is not None else (c.chunk_msg_ids or (c.msg_id,))
            if c.msg_id in chosen_ids:
                manifest.append(candidate_item(c, ids, True, KEPT, ""))
            else:
                why = LIMIT if rank >= s.vector_keep else BUDGET
                manifest.append(candidate_item(c, ids, False, why, ""))
        window_kept = dict(packs.get("window", []))
        for i, wm in enumerate(window):
            kept = i in window_kept
            manifest.append(
                make_item(
                    "window",
                    wm.msg_id,
                    (wm.msg_id,),
                    wm.content,
                    count_tokens(wm.content),
                    kept,
                    None if kept else BUDGET,
                    detail="truncated" if kept and window_kept[i] != wm.content else "",
                )
            )

        # Assembly: history in time order, so the model reads it as a story.
        history = render_history_groups(
            [
                (c.header, c.body)
                for c in sorted(chosen_sem, key=lambda c: (c.created_at or 0, c.msg_id))
            ]
        )
        assembled: Assembled = assemble(
            labels=labels,
            system=system_text,
            facts=[fact_lines[i][1] for i in sorted(fact_kept)],
            knowledge=[knowledge_lines[i] for i in sorted(knowledge_kept)],
            history=history,
            recent=[
                Turn(window[i].role, text, window[i].name)
                for i, text in sorted(window_kept.items())
            ],
            query=query,
        )
        tokens = count_tokens(assembled.text)
        if tokens > total:  # the section sums bound the whole; this would be a bug
            raise AssertionError(f"assembled {tokens} tokens for a budget of {total}")
        if fact_kept:
            self._note_hits([fact_lines[i][0].id for i in fact_kept], now_s)
        return ContextResult(
            text=assembled.text,
            messages=assembled.messages,
            sections=assembled.sections,
            manifest=manifest,
            degraded=dict(g.degraded),
            allocation=allocation,
            rewrite=rewrite,
            window_rebuilt=g.rebuilt,
            timings_ms=dict(g.timings),
            tokens=tokens,
        )

    async def _rerank(
        self, g: _Gathered, reranker: CrossEncoder, query: str, ranked: list[Candidate]
    ) -> list[Candidate]:
        """``ranked`` reordered by the fusion of each candidate's rank with the
        cross-encoder's (on the top ``rerank_top_n``); as it was if the model fails or
        times out, which the result reports as the degraded layer ``rerank``."""
        top = ranked[: self.settings.rerank_top_n]
        texts = [
            c.chunk_text if c.content is None else f"{c.name}: {c.content}" if c.name else c.content
            for c in top
        ]
        scores = await self._guarded(
            g, "rerank", reranker.scores(query, texts), None, self.settings.rerank_timeout_s
        )
        if scores is None:
            return ranked
        by_score = sorted(range(len(top)), key=lambda i: -scores[i])
        for rank, i in enumerate(by_score, start=1):
            top[i].ranks["rerank"] = rank
        fused = {
            c.msg_id: 1 / (RERANK_K + rank)
            + (1 / (RERANK_K + c.ranks["rerank"]) if "rerank" in c.ranks else 0.0)
            for rank, c in enumerate(ranked, start=1)
        }
        return sorted(ranked, key=lambda c: -fused[c.msg_id])

    def _candidates(
        self,
        g: _Gathered,
        window_ids: set[str],
        rows: Mapping[str, _Row],
        units: Mapping[str, tuple[str, ...]] | None,
    ) -> tuple[dict[str, Candidate], list[ManifestItem]]:
        """Messages from every channel with their per-channel ranks; drops recorded.
        ``units`` (None: the ledger is down) gives what an ids-only hit covers."""
        s = self.settings
        out: dict[str, Candidate] = {}
        dropped: list[ManifestItem] = []
        max_distance = s.distance_threshold
        for channel, hits in g.vector.items():
            rank = 0
            seen_msgs: set[str] = set()
            for hit in hits:
                meta = hit.metadata
                distance = 1.0 - hit.score
                found = _hit_msg_ids(hit, rows, units)
                if found is None:
                    # An ids-only hit without a ledger row of this user: a summary (it
                    # quotes no message), or a message deleted since.
                    continue
                ids = found
                if channel == "vector" and max_distance is not None and distance > max_distance:
                    dropped.append(hit_item(hit, ids, BELOW_THRESHOLD, distance))
                    continue
                if (
                    channel == "vector_rewrite"
                    and max_distance is not None
                    and distance > max_distance
                ):
                    continue
                if str(meta.get("source_layer", "dialogue")) == "summary":
                    # A summary speaks for many messages but quotes none of them; its
                    # messages are found on their own, so it only adds noise here.
                    continue
                if seen_msgs.issuperset(ids):
                    if channel == "vector":
                        dropped.append(
                            hit_item(
                                hit, ids, DUPLICATE, distance, "a better chunk of the same message"
                            )
                        )
                    continue
                rank += 1
                seen_msgs.update(ids)
                for m in ids:
                    if m in window_ids:
                        continue
                    c = out.setdefault(m, Candidate(m))
                    if channel not in c.ranks:
                        c.ranks[channel] = rank
                    if channel == "vector" and c.similarity is None:
                        c.similarity = hit.score
                        c.chunk_text = hit.text
                        c.chunk_msg_ids = ids
                    created = meta.get("created_at")
                    if c.created_at is None and isinstance(created, int | float):
                        c.created_at = float(created)
                if all(m in window_ids for m in ids) and channel == "vector":
                    dropped.append(hit_item(hit, ids, IN_WINDOW, distance))
        for rank, lex in enumerate(g.lexical, start=1):
            if lex.msg_id in window_ids:
                if not any(d.msg_ids == (lex.msg_id,) and d.reason == IN_WINDOW for d in dropped):
                    dropped.append(
                        make_item(
                            "semantic",
                            lex.msg_id,
                            (lex.msg_id,),
                            lex.content,
                            0,
                            False,
                            IN_WINDOW,
                            ranks={"lexical": rank},
                        )
                    )
                continue
            c = out.setdefault(lex.msg_id, Candidate(lex.msg_id))
            c.ranks.setdefault("lexical", rank)
        return out, dropped


# --- small helpers -----------------------------------------------------------------------------


# A recalled item with fewer lexical terms than this besides a superseded value (and
# the words naming its fact) says nothing else: "好的，五千以内。", "I live in Berlin."
# It is dropped; one that says more is kept, its outdated sentences marked.
MIN_OTHER_TERMS = 3


def _outdated(
    text: str,
    superseded: Mapping[str, Sequence[Any]],
    current: Mapping[str, Any],
    labels: Labels,
) -> tuple[str | None, str]:
    """(the key, if ``text`` says nothing but a superseded value; ``text`` with a note
    after each sentence that repeats one). Seed 002 §5.1 keeps a changed value from the
    model; dropping the whole message also lost whatever else it said ("I live in
    Berlin and I'm vegetarian" is evidence of the diet after a move)."""
    stale = stale_statements(text, superseded, current)
    if not stale:
        return None, text
    keys = sorted({key for _start, _end, key in stale})
    if other_terms(text, keys, superseded) < MIN_OTHER_TERMS:
        return stale[0][2], text
    return None, mark_outdated(text, stale, current, labels)


def _epoch_s(now: datetime | float | None) -> float:
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise ValidationError("now must be timezone-aware")
        return now.timestamp()
    if isinstance(now, bool) or not isinstance(now, int | float):
        raise ValidationError(f"now must be a datetime or epoch seconds, got {type(now).__name__}")
    return float(now)


def _window_message(m: ledger.LedgerMessage) -> WindowMessage:
    return WindowMessage(
        m.msg_id, m.user_id, m.role, m.content, int(m.created_at.timestamp() * 1000), m.name
    )


def _unit_head(vector_id: str) -> str | None:
    """The head message of a dialogue chunk's exchange unit (``msg_id#chunk_idx``); None
    for other chunks (an inferred fact's ``msg_id#fact-key`` covers its message only)."""
    head, _, idx = vector_id.rpartition("#")
    return head if head and idx.isdigit() else None


def _hit_msg_ids(
    hit: VectorHit, rows: Mapping[str, _Row], units: Mapping[str, tuple[str, ...]] | None
) -> tuple[str, ...] | None:
    """The messages a hit covers: from its metadata when the search returned it, else
    from the ledger (None when the ledger has no row for it)."""
    raw = hit.metadata.get("msg_ids")
    if isinstance(raw, str) and raw:
        return tuple(x for x in raw.split(",") if x)
    msg = hit.metadata.get("msg_id")
    if msg:
        return (str(msg),)
    head = msg_id_of_chunk(hit.id)
    if hit.metadata or units is None:
        return (head,)
    if head not in rows:
        return None
    return units.get(head, (head,)) if _unit_head(hit.id) else (head,)


def _with_preview(item: ManifestItem, rows: Mapping[str, _Row]) -> ManifestItem:
    """A dropped vector hit's manifest item with the text of its messages, when the
    search left the text out and the ledger has them."""
    if item.preview or not item.msg_ids or not all(i in rows for i in item.msg_ids):
        return item
    text = "\n".join(rows[i].content for i in item.msg_ids)
    return replace(item, preview=preview(text), tokens=count_tokens(text))


def _knowledge_line(item: Any, labels: Labels) -> str:
    from memstack.knowledge_cache import render

    return render([item], labels.locale)
