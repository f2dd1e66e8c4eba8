"""Per-turn latency of the session knowledge cache against Level 2 alone.

A knowledge base of ``--chunks`` chunks (default 10,000) in the KB store (default Chroma
embedded: HNSW; Qdrant local mode is a brute-force scan, ~100 ms a search at 10k, which
would drown the figure being measured). ``--sessions`` sessions of ``--turns`` turns
(default 50 × 20) mixing long messages, medium ones and short replies ("选A，继续"), on
the real Redis. Each turn runs twice, on two sessions: once with ``kc_enabled=False``
(Level 2 alone: the old behaviour) and once with the cache (Level 1 + Level 2 + merge).

The overhead of a turn is its wall time minus the time spent inside the Level-2 search
(query embedding + vector search), measured in the same turn: what is left of the
Level-1 read (it runs during the search), the merge, rendering, the log call and the
metrics. Subtracting two p99s of whole turns would measure the noise of the vector
search instead. The Level-1 update runs after the turn has returned (in production,
during the LLM call); it is awaited between turns and reported on its own
(``update_after_turn_p99_ms``).

Embeddings: all-MiniLM-L6-v2 (``--embedder minilm``) embeds every query at turn time, as
in production. Embedding 10k chunks with it takes minutes on two cores, so by default
``--base`` distinct chunk texts are embedded with MiniLM and each is spread into
``chunks / base`` variants by a small random rotation of its vector (cosine ≈ 0.95 to
the original) with a distinct text; ``--full-embed`` embeds every chunk instead.

Last line: ``{"l2_p99_ms": …, "cached_p99_ms": …, "overhead_p99_ms": …, …}``.
Run: ``python benchmarks/knowledge_cache.py [--chunks 10000] [--store chroma]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from memstack.core.settings import Settings, load_settings
from memstack.knowledge.base import SCOPE_KEY, KnowledgeBase
from memstack.knowledge.cache import KnowledgeCache, KnowledgeItem, Level2Search, kb_search
from memstack.memory import AsyncMemory
from memstack.stores.vectors.base import VectorRecord

SUBJECTS = [
    "The settlement batch",
    "A refund request",
    "The acquiring bank",
    "Merchant onboarding",
    "The clearing file",
    "Chargeback handling",
    "The payout schedule",
    "Anti-money-laundering screening",
    "The reconciliation job",
    "Currency conversion",
    "The card network fee",
    "Fraud scoring",
    "The escrow account",
    "Split payments",
    "The ledger entry",
]
VERBS = [
    "must be reconciled against",
    "is delayed by",
    "is reported to",
    "is reversed when",
    "is routed through",
    "is capped by",
    "requires approval from",
    "is recorded in",
    "is settled after",
    "is blocked by",
]
OBJECTS = [
    "the T+1 window",
    "the central bank's daily report",
    "the merchant's bank account",
    "a manual review queue",
    "the cheapest channel",
    "the daily limit of 50,000 yuan",
    "the compliance officer",
    "the general ledger",
    "the card brand's rules",
    "a suspicious-transaction report",
    "the customer's dispute",
    "the FX rate of the day",
]
TAILS = [
    "so finance can close the books",
    "unless the amount exceeds the single-payment limit",
    "and the exception is logged",
    "within two business days",
    "for cross-border payments",
    "before the payout is released",
    "to satisfy the regulator",
    "when the channel is down",
]
SHORT_REPLIES = ["选A，继续", "好的", "B", "ok, continue", "yes please", "继续", "没问题", "next"]


def sentence(rng: random.Random) -> str:
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}."


def base_texts(n: int, rng: random.Random) -> list[str]:
    seen: set[str] = set()
    texts: list[str] = []
    while len(texts) < n:
        text = " ".join(sentence(rng) for _ in range(rng.randint(2, 3)))
        if text not in seen:
            seen.add(text)
            texts.append(text)
    return texts


def jitter(vector: Sequence[float], rng: random.Random, sigma: float) -> list[float]:
    noisy = [x + rng.gauss(0.0, sigma) for x in vector]
    norm = math.sqrt(sum(x * x for x in noisy))
    return [x / norm for x in noisy]


def messages(rng: random.Random, bases: list[str], turns: int) -> list[str]:
    out = []
    for _ in range(turns):
        kind = rng.random()
        if kind < 0.4:  # a long message about one topic of the knowledge base
            out.append("We need to clarify this: " + rng.choice(bases) + " " + sentence(rng))
        elif kind < 0.7:  # a medium one
            out.append(f"What about {rng.choice(SUBJECTS).lower()} and {rng.choice(OBJECTS)}?")
        else:  # a short reply with nothing to search for
            out.append(rng.choice(SHORT_REPLIES))
    return out


def p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)


async def build_kb(kb: KnowledgeBase, args: argparse.Namespace, rng: random.Random) -> float:
    t0 = time.perf_counter()
    variants = max(1, args.chunks // args.base)
    bases = base_texts(args.chunks if args.full_embed else args.base, rng)
    texts: list[str] = []
    vectors: list[list[float]] = []
    base_vectors = await kb.embedder.embed(bases)
    if args.full_embed:
        texts, vectors = bases, base_vectors
    else:
        for text, vector in zip(bases, base_vectors, strict=True):
            for j in range(variants):
                texts.append(text if j == 0 else f"{text} (clause {j})")
                vectors.append(list(vector) if j == 0 else jitter(vector, rng, args.sigma))
    records = [
        VectorRecord(
            id=f"{kb.namespace}:doc{i // 20}#{i % 20}",
            text=text,
            vector=vector,
            metadata={
                SCOPE_KEY: kb.namespace,
                "doc_id": f"doc{i // 20}",
                "title": f"doc {i // 20}",
                "source": "benchmark",
                "chunk_idx": i % 20,
                "model_version": kb.embedder.model_version,
            },
        )
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
    ]
    await kb.store.upsert(records)
    return time.perf_counter() - t0


class Timed:
    """Level 2 with a stopwatch: the time a turn spends searching."""

    def __init__(self, search: Level2Search) -> None:
        self.search = search
        self.last_s = 0.0

    async def __call__(self, query: str, top_k: int) -> Sequence[KnowledgeItem]:
        t0 = time.perf_counter()
        try:
            return await self.search(query, top_k)
        finally:
            self.last_s = time.perf_counter() - t0


async def run(args: argparse.Namespace) -> dict[str, object]:
    rng = random.Random(args.seed)
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    settings: Settings = load_settings(
        redis_url=args.redis_url,
        home=Path(tempfile.mkdtemp(prefix="memstack-kc-")),
        key_prefix=prefix,
        embedder=args.embedder,
        kb_store=args.store,
    )
    mem = await AsyncMemory.open(settings)
    try:
        kb = await mem.knowledge_base()
        build_s = await build_kb(kb, args, rng)
        print(f"knowledge base: {args.chunks} chunks in {build_s:.1f} s", file=sys.stderr)
        bases = base_texts(args.base, random.Random(args.seed))
        search = kb_search(kb)
        timed_off, timed_on = Timed(search), Timed(search)
        redis = mem.working.redis
        off = KnowledgeCache(redis, settings.model_copy(update={"kc_enabled": False}), timed_off)
        on = KnowledgeCache(redis, settings, timed_on)

        l2_ms: list[float] = []
        cached_ms: list[float] = []
        overhead_ms: list[float] = []
        l2_overhead_ms: list[float] = []
        update_ms: list[float] = []
        cache_sizes: list[int] = []
        for s in range(args.sessions + 1):  # session 0 warms up and is not counted
            turns = messages(rng, bases, args.turns)
            for i, message in enumerate(turns):
                # Alternate which arm goes first so neither always finds warm caches.
                order = [(off, timed_off), (on, timed_on)]
                if (s + i) % 2:
                    order.reverse()
                for cache, timed in order:
                    t0 = time.perf_counter()
                    await cache.turn(
                        "bench-user", f"s{s}-{'on' if cache is on else 'off'}", message
                    )
                    total = (time.perf_counter() - t0) * 1000
                    # The Level-1 update runs after the turn returned (in production,
                    # during the LLM call); wait for it here so it never overlaps the
                    # next measured turn, and record how long it still took.
                    t1 = time.perf_counter()
                    await cache.flush()
                    settle = (time.perf_counter() - t1) * 1000
                    if s == 0:
                        continue
                    extra = total - timed.last_s * 1000
                    if cache is on:
                        cached_ms.append(total)
                        overhead_ms.append(extra)
                        update_ms.append(settle)
                    else:
                        l2_ms.append(total)
                        l2_overhead_ms.append(extra)
            if s:
                cache_sizes.append(len(await on.cached("bench-user", f"s{s}-on")))
    finally:
        r = mem.working.redis
        keys = [k async for k in r.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await r.delete(*keys)
        await mem.close()
    return {
        "l2_p99_ms": p(l2_ms, 0.99),
        "cached_p99_ms": p(cached_ms, 0.99),
        "overhead_p99_ms": p(overhead_ms, 0.99),
        "overhead_p50_ms": p(overhead_ms, 0.50),
        "l2_bookkeeping_p99_ms": p(l2_overhead_ms, 0.99),
        "update_after_turn_p99_ms": p(update_ms, 0.99),
        "l2_p50_ms": p(l2_ms, 0.50),
        "cached_p50_ms": p(cached_ms, 0.50),
        "turns": len(cached_ms),
        "chunks": args.chunks,
        "store": args.store,
        "embedder": args.embedder,
        "cache_items_at_end_mean": round(sum(cache_sizes) / len(cache_sizes), 1),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=10000)
    ap.add_argument("--base", type=int, default=1000, help="chunks embedded with the model")
    ap.add_argument("--sigma", type=float, default=0.016, help="noise of the variants")
    ap.add_argument("--full-embed", action="store_true", help="embed every chunk (slow)")
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--store", choices=["chroma", "qdrant"], default="chroma")
    ap.add_argument("--embedder", choices=["minilm", "hashing"], default="minilm")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--seed", type=int, default=1)
    result = asyncio.run(run(ap.parse_args()))
    print(json.dumps(result))
