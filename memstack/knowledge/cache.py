"""The two-level session knowledge cache (docs/spec.md, Layers).

Level 2 searches the knowledge base with the current message, every turn. Level 1 is
what the session has already found: a JSON list in Redis under
``agent:session:{sid}:knowledge`` (the session's hash tag), whose TTL is the window's
and is refreshed every turn. Each turn:

1. Level 2: search with the message; hits under ``kb_min_score`` are noise and dropped;
2. Level 1: read the list, at the same time as the search;
3. :func:`merge_levels`, exactly the specification's: Level 1 first, a Level-2 item replaces one
   with the same text hash only with a strictly higher score, sort by score descending,
   keep ``kc_inject_max``;
4. render each item with its origin, ``[历史缓存]`` / ``[本轮检索]`` (en ``[cached]`` /
   ``[this turn]``), log the section's size and count it in the metrics;
5. update Level 1 in the background, after the section is returned (the specification updates
   it after the LLM call): one atomic Lua script appends this turn's hits scoring at
   least ``kc_threshold`` (an item whose text hash is cached replaces the old entry and
   moves to the tail), evicts the head past ``kc_capacity`` (FIFO) and refreshes the
   TTL. Being one script, concurrent turns of a session never lose each other's items.

The merge sees Level 1 as it was before this turn, so an item found now is labelled
"this turn" even though it is cached from now on. The text hash is
:func:`memstack.core.ids.text_hash`, the code base's only one.

With ``kc_enabled=False`` a turn is Level 2 alone, as before the cache: nothing is read
from or written to Redis.

The read path calls one method::

    turn = await cache.turn(user_id, session_id, message, locale="zh")
    turn.text            # the rendered "domain knowledge" section ("" when none)
    turn.items           # KnowledgeItem(text, score, origin, doc_id, title, ...), best first
    turn.chars, turn.cached_count, turn.retrieved_count
    turn.render("en")    # the same items with other labels
    turn.entries()       # one rendered string per item (to fit a token budget)

``AsyncMemory.knowledge_context(user_id, session_id, message)`` is the same call on the
memory object's cache. A failing Level-2 search is logged and the turn is served from
Level 1 alone (``turn.degraded`` says why); Redis failing on the read raises
:class:`~memstack.core.errors.StoreUnavailable`, on the background update it is logged and
counted. Call :meth:`KnowledgeCache.flush` before closing the Redis client.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from redis.asyncio import Redis

from memstack.core import metrics
from memstack.core.errors import (
    InvalidContent,
    StoreError,
    StoreUnavailable,
    ValidationError,
)
from memstack.core.ids import text_hash, validate_id
from memstack.core.settings import Settings
from memstack.stores.redis import scripts
from memstack.stores.redis.errors import REDIS_ERRORS
from memstack.stores.redis.keys import keys_for
from memstack.text.locales import resolve_locale

if TYPE_CHECKING:
    from memstack.knowledge.base import KnowledgeBase

log = logging.getLogger("memstack.knowledge")

Origin = Literal["cached", "retrieved"]
LABELS: dict[str, dict[Origin, str]] = {
    "zh": {"cached": "[历史缓存]", "retrieved": "[本轮检索]"},
    "en": {"cached": "[cached]", "retrieved": "[this turn]"},
}


@dataclass(frozen=True)
class KnowledgeItem:
    """One piece of knowledge; ``origin`` says which level it came from this turn."""

    text: str
    score: float
    origin: Origin = "retrieved"
    doc_id: str = ""
    title: str = ""
    source: str = ""
    chunk_id: str = ""

    def to_json(self, hash_: str | None = None) -> str:
        return json.dumps(
            {
                "hash": hash_ or text_hash(self.text),
                "text": self.text,
                "score": self.score,
                "doc_id": self.doc_id,
                "title": self.title,
                "source": self.source,
                "chunk_id": self.chunk_id,
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_cached(cls, data: dict[str, Any]) -> KnowledgeItem:
        return cls(
            text=str(data["text"]),
            score=float(data["score"]),
            origin="cached",
            doc_id=str(data.get("doc_id", "")),
            title=str(data.get("title", "")),
            source=str(data.get("source", "")),
            chunk_id=str(data.get("chunk_id", "")),
        )


class Scored(Protocol):
    @property
    def text(self) -> str: ...

    @property
    def score(self) -> float: ...


S = TypeVar("S", bound=Scored)


def merge_levels(level1: Iterable[S], level2: Iterable[S], max_total: int = 15) -> list[S]:
    """The specification's merge: Level 1 first (the baseline), Level 2 replaces an item of the
    same text hash only with a strictly higher score, then score descending, top N.

    The sort is stable, so on equal scores Level 1 comes first.
    """
    all_items: dict[str, S] = {}
    for item in level1:
        all_items[text_hash(item.text)] = item
    for item in level2:
        key = text_hash(item.text)
        if key not in all_items or item.score > all_items[key].score:
            all_items[key] = item
    sorted_items = sorted(all_items.values(), key=lambda r: r.score, reverse=True)
    return sorted_items[:max_total]


def render_items(items: Sequence[KnowledgeItem], locale: str) -> list[str]:
    """One entry per item: its origin label, the title when known, the text (which may
    span lines)."""
    labels = LABELS[_check_locale(locale)]
    sep = "：" if locale == "zh" else ": "
    return [
        f"{labels[i.origin]} {i.title}{sep}{i.text}" if i.title else f"{labels[i.origin]} {i.text}"
        for i in items
    ]


def render(items: Sequence[KnowledgeItem], locale: str) -> str:
    return "\n".join(render_items(items, locale))


@dataclass(frozen=True)
class KnowledgeTurn:
    """The domain-knowledge section of one turn: its items, best first, and their
    rendering in ``locale`` (``text``, ``chars`` characters long)."""

    items: tuple[KnowledgeItem, ...]
    text: str
    chars: int
    cached_count: int
    retrieved_count: int
    locale: str
    degraded: str | None = None

    @classmethod
    def of(
        cls, items: Sequence[KnowledgeItem], locale: str, degraded: str | None = None
    ) -> KnowledgeTurn:
        text = render(items, locale)
        cached = sum(1 for i in items if i.origin == "cached")
        return cls(tuple(items), text, len(text), cached, len(items) - cached, locale, degraded)

    def render(self, locale: str | None = None) -> str:
        return render(self.items, locale or self.locale)

    def entries(self, locale: str | None = None) -> list[str]:
        """The rendered items one by one, for a caller that fits them into a budget."""
        return render_items(self.items, locale or self.locale)


# Level 2: (query, top_k) -> hits, best first. KnowledgeBase.search fits via kb_search().
Level2Search = Callable[[str, int], Awaitable[Sequence[KnowledgeItem]]]


def kb_search(kb: KnowledgeBase) -> Level2Search:
    """Level 2 over a :class:`~memstack.knowledge.base.KnowledgeBase`."""

    async def search(query: str, top_k: int) -> list[KnowledgeItem]:
        return [
            KnowledgeItem(
                text=h.text,
                score=h.score,
                doc_id=h.doc_id,
                title=h.title,
                source=h.source,
                chunk_id=h.id,
            )
            for h in await kb.search(query, top_k)
        ]

    return search


def _check_locale(locale: str) -> str:
    if locale not in LABELS:
        raise ValidationError(f"locale must be one of {sorted(LABELS)}, got {locale!r}")
    return locale


class KnowledgeCache:
    """Level 1 in Redis plus a Level-2 search; see the module docstring."""

    def __init__(self, redis: Redis, settings: Settings, search: Level2Search) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = keys_for(settings)
        self.search = search
        self._turn = redis.register_script(scripts.KNOWLEDGE_TURN)
        # This process's cache updates still running, by session.
        self._pending: dict[tuple[str, str], asyncio.Task[None]] = {}

    @classmethod
    def over(cls, redis: Redis, settings: Settings, kb: KnowledgeBase) -> KnowledgeCache:
        """The usual cache: Level 2 is ``kb``'s search."""
        return cls(redis, settings, kb_search(kb))

    async def turn(
        self, user_id: str, session_id: str, message: str, *, locale: str | None = None
    ) -> KnowledgeTurn:
        """The knowledge section for ``message``; see the module docstring.

        Level 1 is read while Level 2 searches; the cache update runs in the background
        after the section is returned (the specification updates the cache after the LLM call),
        so the caller waits for neither Redis round trip. A later turn or
        :meth:`cached` of the same session in this process waits for it first.
        """
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        if not isinstance(message, str) or not message.strip():
            raise InvalidContent("message must be a non-empty string")
        loc = _check_locale(resolve_locale(locale or self.settings.locale, message))
        s = self.settings

        if not s.kc_enabled:
            level2, degraded = await self._level2(message)
            result = KnowledgeTurn.of(level2[: s.kc_inject_max], loc, degraded)
        else:
            await self._settle(user_id, session_id)
            search = asyncio.ensure_future(self._level2(message))
            try:
                level1 = await self._read(user_id, session_id)
            except BaseException:
                search.cancel()
                raise
            level2, degraded = await search
            result = KnowledgeTurn.of(merge_levels(level1, level2, s.kc_inject_max), loc, degraded)
            fresh = self._qualifying(level2)
            # Nothing to add and nothing cached: no key to create or keep alive.
            if fresh or level1:
                self._schedule(user_id, session_id, fresh)
        self._observe(session_id, result)
        return result

    async def cached(self, user_id: str, session_id: str) -> list[KnowledgeItem]:
        """Level 1 of the session, oldest first (the next to be evicted first)."""
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        await self._settle(user_id, session_id)
        return await self._read(user_id, session_id)

    async def flush(self) -> None:
        """Wait for every cache update still running (before closing the connection)."""
        while self._pending:
            await asyncio.gather(*self._pending.values(), return_exceptions=True)

    async def ttl_s(self, user_id: str, session_id: str) -> int:
        """Seconds the session's cache has left; -2 when there is none."""
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        try:
            return int(await self.redis.ttl(self.keys.knowledge(user_id, session_id)))
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc

    async def clear(self, user_id: str, session_id: str) -> None:
        """Drop the session's Level 1."""
        await self.cached(user_id, session_id)  # waits for pending updates
        try:
            await self.redis.delete(self.keys.knowledge(user_id, session_id))
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc

    # --- steps -------------------------------------------------------------------------
    async def _level2(self, message: str) -> tuple[list[KnowledgeItem], str | None]:
        s = self.settings
        try:
            hits = await self.search(message, s.kb_top_k)
        except StoreError as exc:
            # The cache exists for turns whose search finds nothing; a search that fails
            # is the same situation, so serve Level 1 instead of failing the turn.
            metrics.KNOWLEDGE_SEARCH_FAILURES.inc()
            log.warning("knowledge search failed, serving the session cache only: %s", exc)
            return [], f"knowledge base: {exc}"
        kept = [
            h if h.origin == "retrieved" else replace(h, origin="retrieved")
            for h in hits
            if h.score >= s.kb_min_score
        ]
        kept.sort(key=lambda h: h.score, reverse=True)
        return kept, None

    def _qualifying(self, level2: Sequence[KnowledgeItem]) -> dict[str, KnowledgeItem]:
        """This turn's hits that enter Level 1, by text hash: score >= threshold, the
        best of each hash."""
        best: dict[str, KnowledgeItem] = {}
        for item in level2:
            if item.score < self.settings.kc_threshold:
                continue
            key = text_hash(item.text)
            if key not in best or item.score > best[key].score:
                best[key] = item
        return best

    async def _read(self, user_id: str, session_id: str) -> list[KnowledgeItem]:
        try:
            raw = await self.redis.get(self.keys.knowledge(user_id, session_id))
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
        return self._parse(session_id, raw)

    async def _settle(self, user_id: str, session_id: str) -> None:
        pending = self._pending.get((user_id, session_id))
        if pending is not None:
            await asyncio.gather(pending, return_exceptions=True)

    def _schedule(self, user_id: str, session_id: str, fresh: dict[str, KnowledgeItem]) -> None:
        key = (user_id, session_id)
        previous = self._pending.get(key)
        task = asyncio.create_task(self._update(user_id, session_id, fresh, previous))
        self._pending[key] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._pending.get(key) is t:
                del self._pending[key]

        task.add_done_callback(done)

    async def _update(
        self,
        user_id: str,
        session_id: str,
        fresh: dict[str, KnowledgeItem],
        previous: asyncio.Task[None] | None,
    ) -> None:
        if previous is not None:
            # Two turns of one session in this process: apply their updates in order.
            await asyncio.gather(previous, return_exceptions=True)
        s = self.settings
        args: list[str | int] = [s.kc_capacity, s.window_ttl_s]
        for key, item in fresh.items():
            args += [key, item.to_json(key)]
        try:
            await self._turn(keys=[self.keys.knowledge(user_id, session_id)], args=args)
        except REDIS_ERRORS as exc:
            # The section was already served; losing one update costs the next turns
            # these items, not the conversation.
            metrics.KNOWLEDGE_CACHE_UPDATE_FAILURES.inc()
            log.warning("session %s: knowledge cache update failed: %s", session_id, exc)

    def _parse(self, session_id: str, raw: bytes | str | None) -> list[KnowledgeItem]:
        if raw is None:
            return []
        try:
            data = json.loads(raw)
            # cjson writes an empty Lua table as {}; the script never stores one, but
            # accept it rather than call the cache corrupt.
            if data == {}:
                return []
            return [KnowledgeItem.from_cached(d) for d in data]
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("session %s: corrupt knowledge cache ignored: %s", session_id, exc)
            return []

    def _observe(self, session_id: str, turn: KnowledgeTurn) -> None:
        chars = turn.chars
        cached, retrieved = turn.cached_count, turn.retrieved_count
        metrics.KNOWLEDGE_SECTION_CHARS.observe(chars)
        metrics.KNOWLEDGE_SECTION_ITEMS.observe(len(turn.items))
        metrics.KNOWLEDGE_ITEMS.labels(origin="cached").inc(cached)
        metrics.KNOWLEDGE_ITEMS.labels(origin="retrieved").inc(retrieved)
        metrics.KNOWLEDGE_TURNS.labels(cache="on" if self.settings.kc_enabled else "off").inc()
        log.info(
            "knowledge section session=%s chars=%d items=%d cached=%d this_turn=%d",
            session_id,
            chars,
            len(turn.items),
            cached,
            retrieved,
        )
