"""Read-path latency: ``context()`` over 10k and 100k chunks spread across 1,000 users,
or held by fewer (``--users 1``: one heavy user holding them all).

Stores: the local Redis and PostgreSQL servers, Chroma embedded in a temp folder, the
default embedder (``MEMSTACK_EMBEDDER`` picks another), whose query embedding is part
of every call.

The corpus is synthetic chat turns. Embedding 100k texts would take minutes and
measure ingest, not recall, so a pool of distinct texts is embedded once and each
chunk takes a pool text with its vector plus a little noise (every vector differs; the
HNSW index sees a realistic spread). Ledger rows carry the same texts, so the lexical
channel finds what the vectors find.

Prints each stage's median share of the call, and as its last line a JSON list of
``{"users": …, "chunks": …, "p50_ms": …, "p99_ms": …}``, one per users × size, all from
the same run. Goal: p99 ≤ 50 ms.
Run: ``python benchmarks/context.py [--sizes 10000 100000] [--users 1 1000] [--queries 300]``;
``--brute-force-max 0`` sends every search to Chroma's filtered HNSW query, for the
comparison with the brute-force scoring of small scopes; ``--shards 1`` keeps all
vectors in one collection, as before sharding; ``--named`` asks questions that name
someone ("What did Tim say about …?"), which embed a second query without the name.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg

from memstack.core.facts.fact import Fact
from memstack.core.ids import chunk_id
from memstack.core.messages import Message
from memstack.core.settings import load_settings
from memstack.memory import AsyncMemory
from memstack.stores.sql import db, ledger
from memstack.stores.sql.facts import write_fact
from memstack.stores.vectors.base import VectorRecord
from memstack.stores.vectors.chroma import ChromaStore

USERS = 1000
# Users the queries go to (each with a live session and a fact); fewer when fewer exist.
SAMPLED_USERS = 100
POOL = 4000
NOW = datetime(2025, 6, 1, tzinfo=UTC)

SUBJECTS = "I we my sister my boss the team my neighbour our kids".split()
VERBS = "visited bought planned cooked fixed painted booked tried cancelled discussed".split()
OBJECTS = (
    "a laptop|a bike|the garden|a trip to Kyoto|a sourdough loaf|the kitchen sink|a violin|"
    "a marathon plan|a budget sheet|the roof|a tent|a pottery class|a new phone|the car"
).split("|")
WHENS = "yesterday|last week|on Sunday|in May|this morning|two days ago|last year".split("|")
EXTRAS = (
    "it cost about 300 dollars|battery life matters most|we want something light|"
    "the weather was terrible|it took the whole afternoon|my friend recommended it|"
    "I am not sure it was worth it|we will try again next month"
).split("|")


def sentence(rng: random.Random) -> str:
    return (
        f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)} "
        f"{rng.choice(WHENS)}, and {rng.choice(EXTRAS)}."
    )


NAMES = "Anna Tim Melanie Caroline Joanna Nate".split()


def question(rng: random.Random, named: bool = False) -> str:
    topic = rng.choice(OBJECTS).split(" ", 1)[-1]
    if named:
        # A name makes context() embed a second query without it (ranking.dense_rewrite).
        return f"What did {rng.choice(NAMES)} say about {topic}?"
    return f"What did we say about {topic}?"


async def build(mem: AsyncMemory, chunks: int, n_users: int, rng: random.Random) -> list[str]:
    texts = list({sentence(rng) for _ in range(POOL * 2)})[:POOL]
    pool = np.asarray(await mem.embedder.embed(texts), dtype=np.float32)
    store = await mem.memory_vectors()
    per_user = chunks // n_users
    users = [f"bu{i:04d}" for i in range(n_users)]
    records: list[VectorRecord] = []
    rows: list[Message] = []
    for u in users:
        for j in range(per_user):
            k = rng.randrange(len(texts))
            vec = pool[k] + np.random.default_rng(rng.randrange(1 << 30)).normal(
                0, 0.02, pool.shape[1]
            )
            vec = vec / np.linalg.norm(vec)
            session = f"{u}-s{j // 20}"
            msg_id = f"{session}:{j}"
            created = NOW - timedelta(hours=per_user - j)
            rows.append(Message(msg_id, u, session, "user", texts[k], created))
            records.append(
                VectorRecord(
                    chunk_id(msg_id, 0),
                    texts[k],
                    vec.tolist(),
                    {
                        "user_id": u,
                        "session_id": session,
                        "msg_id": msg_id,
                        "msg_ids": msg_id,
                        "role": "user",
                        "chunk_idx": 0,
                        "created_at": int(created.timestamp()),
                        "topic": "",
                        "source_layer": "dialogue",
                        "model_version": mem.embedder.model_version,
                    },
                )
            )
        if len(records) >= 5000:
            await store.upsert(records)
            async with mem.db_sessions.begin() as s:
                await ledger.insert_messages(s, rows)
            records, rows = [], []
    if records:
        await store.upsert(records)
        async with mem.db_sessions.begin() as s:
            await ledger.insert_messages(s, rows)
    sampled = rng.sample(users, min(SAMPLED_USERS, n_users))
    for u in sampled:
        # A live session with a few turns and a stated fact, as a real caller has.
        for i in range(4):
            await mem.remember(u, f"{u}-live", "user" if i % 2 == 0 else "assistant", sentence(rng))
        await write_fact(
            mem.db_sessions,
            user_id=u,
            session_id=f"{u}-live",
            msg_id=f"{u}-live:fact",
            fact=Fact(
                key="budget_limit",
                value={"amount": 800, "currency": "USD"},
                type="constraint",
                confidence=0.95,
                source="user_stated",
            ),
            at=NOW,
            accepted_at=None,
        )
    return sampled


async def measure(
    mem: AsyncMemory, users: list[str], n: int, rng: random.Random, named: bool
) -> tuple[list[float], dict[str, list[float]]]:
    # Warm the model, the pools and every sampled user's shard: a serving process keeps
    # the shards it has read loaded, and the first read of one costs tens to hundreds of
    # ms once (docs/benchmarks.md), which is start-up, not the steady state measured here.
    await mem.prepare()
    for u in users:
        await mem.context(u, f"{u}-live", question(rng, named), now=NOW, locale="en")
    totals: list[float] = []
    stages: dict[str, list[float]] = {}
    for _ in range(n):
        u = rng.choice(users)
        t0 = time.perf_counter()
        result = await mem.context(u, f"{u}-live", question(rng, named), now=NOW, locale="en")
        totals.append((time.perf_counter() - t0) * 1000)
        for k, v in result.timings_ms.items():
            stages.setdefault(k, []).append(v)
    return totals, stages


def pct(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


async def run_size(chunks: int, n_users: int, args: argparse.Namespace) -> dict[str, float]:
    name = f"memstack_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.pg_admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{args.pg_admin.rsplit('/', 1)[0]}/{name}"
    home = Path(tempfile.mkdtemp(prefix="memstack-bench-"))
    settings = load_settings(
        redis_url=args.redis_url,
        database_url=url,
        home=home,
        key_prefix=f"bench{uuid.uuid4().hex[:8]}",
        auto_migrate=True,
        **({} if args.shards is None else {"chroma_shards": args.shards}),
    )
    db.upgrade(settings)
    rng = random.Random(chunks)
    try:
        async with await AsyncMemory.open(settings) as mem:
            if args.brute_force_max is not None:
                store = await mem.memory_vectors()
                assert isinstance(store, ChromaStore)
                store.brute_force_max = args.brute_force_max
            t0 = time.perf_counter()
            users = await build(mem, chunks, n_users, rng)
            print(f"{chunks} chunks over {n_users} users built in {time.perf_counter() - t0:.0f} s")
            # What autovacuum does within a minute of a bulk load (it is off on some
            # machines): an unanalysed table gets plans that scan a user's whole
            # history per candidate instead of a few index steps, and the keyword
            # index is read from the index alone only where the visibility map says so.
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
            totals, stages = await measure(mem, users, args.queries, rng, args.named)
            r = mem.working.redis
            keys = [k async for k in r.scan_iter(match=mem.working.keys.pattern(), count=1000)]
            if keys:
                await r.delete(*keys)
    finally:
        with psycopg.connect(args.pg_admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    p50_total = statistics.median(totals)
    print(
        f"  context(): p50 {p50_total:.1f} ms, p95 {pct(totals, 95):.1f}, p99 {pct(totals, 99):.1f}"
    )
    for stage in ("embed", "vector", "lexical", "facts", "window", "gather", "rank_and_pack"):
        if stage in stages:
            med = statistics.median(stages[stage])
            print(f"  {stage:14s} median {med:6.1f} ms  ({med / p50_total:5.0%} of the call)")
    return {
        "users": n_users,
        "chunks": chunks,
        "p50_ms": round(p50_total, 1),
        "p99_ms": round(pct(totals, 99), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--users", type=int, nargs="+", default=[USERS])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument(
        "--brute-force-max",
        type=int,
        default=None,
        help="override ChromaStore.brute_force_max (0: the HNSW query for every search)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=None,
        help="MEMSTACK_CHROMA_SHARDS for the run (default: the setting's default)",
    )
    parser.add_argument(
        "--named",
        action="store_true",
        help="questions that name someone, which take two query embeddings instead of one",
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--pg-admin", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    results = [
        asyncio.run(run_size(n, users, args))
        for users in sorted(args.users)
        for n in sorted(args.sizes)
    ]
    print(json.dumps(results))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
