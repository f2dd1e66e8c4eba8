"""The :class:`Recall` read path: a context() call from its request to its result."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from memstack.core import metrics
from memstack.core.errors import ConfigError
from memstack.core.messages import Message
from memstack.core.settings import Settings
from memstack.ml.reranker import RERANK_K, CrossEncoder
from memstack.recall import lexical, word_neighbours
from memstack.recall.assembly import labels_for, section_tokens
from memstack.recall.candidates import _with_preview, collect, fill_from_rows, row_requests
from memstack.recall.filters import filter_candidates, in_namespaces
from memstack.recall.gather import (
    Reads,
    RecallStores,
    _Gathered,
    full_hits,
    guarded,
    query_rewrites,
    read_facts,
    read_knowledge,
    read_lexical,
    repaired_window,
    search_vectors,
    window_from_ledger,
)
from memstack.recall.hits import HitBuffer
from memstack.recall.layers import assemble_layers, offered, pack
from memstack.recall.manifest_build import packed_items, without_current_input
from memstack.recall.ranking import Candidate, fuse
from memstack.recall.request import Request, make_request
from memstack.recall.result import ContextResult, ManifestItem
from memstack.recall.rows import read_rows
from memstack.stores.sql.exchange_rows import LedgerRow
from memstack.text.locales import resolve_locale
from memstack.text.token_counts import count_tokens, line_tokens

# Candidates per channel never fall below this, whatever vector_top_k says: the budget,
# not the pool, should decide what is kept.
MIN_POOL = 20
# ...and grow with the history's share of the budget, one per this many tokens: a pool
# smaller than what the share can hold leaves it half empty.
POOL_TOKENS = 20


class Recall:
    """The read path over one deployment's stores. :class:`AsyncMemory` delegates to it.

    ``settings`` (default: the stores') shape the read path alone; the stores keep
    their own."""

    def __init__(self, stores: RecallStores, *, settings: Settings | None = None) -> None:
        settings = settings or stores.settings
        if settings.query_rewrite == "llm" and not settings.llm_url:
            raise ConfigError("query_rewrite=llm needs llm_url (MEMSTACK_LLM_URL)")
        self.settings = settings
        self.stores = stores
        self._llm: lexical.LLMRewriter | None = None
        self._reranker = CrossEncoder() if settings.rerank == "cross-encoder" else None
        # Fact hits, written in batches; settle() and aclose() write what is left.
        self._hits = HitBuffer(stores.db_sessions)
        if settings.query_rewrite == "llm" and settings.llm_url:
            self._llm = lexical.LLMRewriter.from_settings(settings)

    @property
    def reads(self) -> Reads:
        """Sessions for the read path's queries, each one statement; writes go through
        the stores' ``db_sessions``."""
        return self.stores.reads

    async def prepare(self) -> None:
        if self.settings.word_neighbours:
            await asyncio.to_thread(word_neighbours.table)
        if self._reranker is not None:
            await asyncio.to_thread(self._reranker.prepare)

    async def settle(self) -> None:
        """Write the bookkeeping of earlier context() calls (fact hits) now."""
        await self._hits.settle()

    async def aclose(self) -> None:
        await self.settle()
        if self._llm is not None:
            await self._llm.aclose()

    def reserved_tokens(
        self, query: str, locale: str | None = None, system: str | None = None
    ) -> int:
        """Tokens of the system text and the current-input section for ``query``."""
        labels = labels_for(resolve_locale(locale or self.settings.locale, query.strip()))
        return line_tokens(system if system is not None else labels.system) + section_tokens(
            labels.input, [query]
        )

    def pool(self, total: int, reserved: int) -> int:
        """Candidates per channel for a call with ``total`` tokens, ``reserved`` of them fixed."""
        share = max(total - reserved, 0) * self.settings.share_semantic
        return max(self.settings.vector_top_k, MIN_POOL, int(share) // POOL_TOKENS)

    async def window(
        self, user_id: str, session_id: str, n: int | None = None
    ) -> tuple[list[Message], bool]:
        """The session's last ``n`` messages, and whether the window had to be repaired.

        Redis is an accelerator, not the source of truth. A window that is not
        known complete (its first write found no window: a new session, an expired
        window, a lost Redis) gets the ledger's recent messages merged in, once; the
        repair is counted."""
        return await repaired_window(
            self.stores.working,
            self.reads,
            user_id,
            session_id,
            n,
            self.settings.window_max_messages,
        )

    async def _rows(
        self, user_id: str, msg_ids: Sequence[str], heads: Sequence[str]
    ) -> tuple[dict[str, LedgerRow], dict[str, tuple[str, ...]]]:
        """See :func:`memstack.recall.rows.read_rows`."""
        return await read_rows(self.reads, user_id, msg_ids, heads)

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
        namespaces: Iterable[str] = (),
    ) -> ContextResult:
        started = time.perf_counter()
        req = make_request(
            self.settings,
            user_id,
            session_id,
            query,
            budget_tokens=budget_tokens,
            now=now,
            locale=locale,
            system=system,
            namespaces=namespaces,
        )
        g = _Gathered()
        queries, rewrite = await query_rewrites(
            g,
            req,
            self._llm,
            neighbours=self.settings.word_neighbours,
            timeout_s=self.settings.store_timeout_s,
        )
        req = replace(req, rewrite=rewrite)
        await self._gather(g, req, queries)
        gathered_at = time.perf_counter()

        result = await self._build(g, req)
        result.timings_ms["gather"] = (gathered_at - started) * 1000
        result.timings_ms["rank_and_pack"] = (time.perf_counter() - gathered_at) * 1000
        result.timings_ms["total"] = (time.perf_counter() - started) * 1000
        metrics.CONTEXT_SECONDS.observe(time.perf_counter() - started)
        return result

    async def _window_into(self, g: _Gathered, user_id: str, session_id: str) -> None:
        g.window, g.rebuilt = await self.window(user_id, session_id)

    async def _gather(self, g: _Gathered, req: Request, queries: Mapping[str, str]) -> None:
        """Every store at once, each under its own timeout; a window Redis cannot give
        comes from the ledger."""
        s = self.settings
        timeout = s.store_timeout_s
        user_id, session_id = req.user_id, req.session_id
        pool = self.pool(req.total, req.reserved)
        reads: dict[str, Awaitable[None]] = {
            "window": self._window_into(g, user_id, session_id),
            "facts": read_facts(g, self.reads, user_id),
            "vector": search_vectors(g, self.stores, user_id, queries, pool),
            "lexical": read_lexical(g, self.reads, user_id, req.rewrite, pool),
        }
        tasks = [guarded(g, layer, read, None, timeout) for layer, read in reads.items()]
        tasks.append(read_knowledge(g, self.stores, req, timeout))
        await asyncio.gather(*tasks)
        if "window" in g.degraded:
            # Redis is down: the ledger still knows the session's last messages.
            from_ledger = window_from_ledger(self.reads, user_id, session_id, s.recent_window_read)
            fallback = await guarded(g, "window_ledger", from_ledger, [], timeout)
            if fallback:
                g.window = fallback
                g.degraded["window"] += " (served from the ledger)"

    async def _build(self, g: _Gathered, req: Request) -> ContextResult:
        window, manifest = without_current_input(g.window, req.query)
        window_ids = {m.msg_id for m in g.window}
        eligible = await self._semantic(g, req, window_ids, manifest)
        layers = offered(g, window, eligible, req.labels)
        packed = pack(layers, req, self.settings)
        manifest.extend(packed_items(layers, packed, self.settings.vector_keep))
        assembled = assemble_layers(layers, packed, req)
        tokens = count_tokens(assembled.text)
        if tokens > req.total:  # the section sums bound the whole; this would be a bug
            raise AssertionError(f"assembled {tokens} tokens for a budget of {req.total}")
        if packed.facts:
            self._hits.note([layers.fact_lines[i][0].id for i in packed.facts], req.now_s)
        return ContextResult(
            text=assembled.text,
            messages=assembled.messages,
            sections=assembled.sections,
            manifest=manifest,
            degraded=dict(g.degraded),
            allocation=packed.allocation,
            rewrite=req.rewrite,
            window_rebuilt=g.rebuilt,
            timings_ms=dict(g.timings),
            tokens=tokens,
        )

    async def _semantic(
        self, g: _Gathered, req: Request, window_ids: set[str], manifest: list[ManifestItem]
    ) -> list[Candidate]:
        """The history candidates that pass the filters, best first; the manifest gets
        the drops."""
        ranked, dropped, rows = await self.ranked(g, req, window_ids)
        # search() hands out every namespace; context() only those it was asked for.
        ranked = in_namespaces(ranked, req.namespaces)
        manifest.extend(_with_preview(d, rows) for d in dropped)
        eligible, filtered = filter_candidates(ranked, g, req, self.settings)
        manifest.extend(filtered)
        return eligible

    async def ranked(
        self, g: _Gathered, req: Request, skip: set[str]
    ) -> tuple[list[Candidate], list[ManifestItem], dict[str, LedgerRow]]:
        """What ``g`` gathered as history candidates, fused and (when on) re-ranked, best
        first, leaving out the messages of ``skip`` (those the window shows); with what
        was dropped on the way and the ledger rows read. ``context()`` filters and packs
        them; ``search()`` hands them out as they are."""
        s = self.settings
        rows, units = await self._ledger_rows(g, req)
        candidates, dropped = collect(g, skip, rows, units, s.distance_threshold)
        lengths = fill_from_rows(candidates, rows)
        ranked = fuse(
            candidates,
            settings=s,
            now_s=req.now_s,
            lengths=lengths,
            time_intent=req.rewrite.time_intent,
            query=req.query,
            period=req.period,
        )
        if self._reranker is not None and ranked:
            ranked = await self._rerank(g, self._reranker, req.query, ranked)
        return ranked, dropped, rows

    async def _ledger_rows(
        self, g: _Gathered, req: Request
    ) -> tuple[dict[str, LedgerRow], dict[str, tuple[str, ...]] | None]:
        """The ledger rows of every hit, which also say what each vector hit covers (its
        exchange unit); units None when the ledger is down, and the vector hits read
        again with what they cover and say."""
        timeout = self.settings.store_timeout_s
        heads, wanted, unit_heads = row_requests(g)
        rows: dict[str, LedgerRow] = {}
        units: dict[str, tuple[str, ...]] | None = {}
        if not wanted:
            return rows, units
        try:
            rows, units = await asyncio.wait_for(
                self._rows(req.user_id, wanted, unit_heads), timeout
            )
        except Exception as exc:  # the ledger is down: fall back to chunk texts
            g.degraded.setdefault("lexical", f"{type(exc).__name__}: {exc}"[:300])
            units = None
            if heads:
                again = full_hits(g, self.stores, req.user_id, self.pool(req.total, req.reserved))
                await guarded(g, "vector", asyncio.wait_for(again, timeout), None, timeout)
        return rows, units

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
        scores = await guarded(
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
