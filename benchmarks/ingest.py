"""Ingest throughput against the cost of embedding alone.

Ingests N messages of realistic length (LoCoMo turns, read from shared/eval-data) through
``remember`` + one in-process worker (real Redis, PostgreSQL, Chroma embedded, the
default embedder), then embeds the very chunks the pipeline stored,
in batches of the same size, with no pipeline around them. The work is split into
rounds that alternate the two, so a change in the shared machine's load hits both
sides alike; figures are medians over rounds.

Last line: ``{"msgs_per_s": …, "embed_only_per_s": …, "ratio": …}``; goal ratio ≥ 0.7.
Run: ``python benchmarks/ingest.py [--n 2000] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from memstack.core.settings import load_settings
from memstack.memory import AsyncMemory
from memstack.stores.sql import db

DATA = Path(__file__).resolve().parents[2] / "shared" / "eval-data" / "locomo_dev5.json.gz"


def turns(path: Path) -> Iterator[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        convs = json.load(fh)
    while True:  # cycle: the dev split has ~2,900 turns
        for conv in convs:
            c = conv["conversation"]
            for key in sorted(k for k in c if k.startswith("session_") and isinstance(c[k], list)):
                for turn in c[key]:
                    yield turn["text"]


async def run(n: int, rounds: int, redis_url: str, pg_admin: str, data: Path) -> dict[str, float]:
    name = f"memstack_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = pg_admin.rsplit("/", 1)[0] + "/" + name
    settings = load_settings(
        redis_url=redis_url,
        database_url=url,
        home=Path(tempfile.mkdtemp()),
        key_prefix=f"bench{uuid.uuid4().hex[:6]}",
    )
    db.upgrade(settings)
    mem = await AsyncMemory.open(settings)
    pipeline_rates: list[float] = []
    embed_rates: list[float] = []
    total_chunks = 0
    try:
        await mem.embedder.embed(["warm up the model"])
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        source = turns(data)
        per_round = n // rounds
        for r in range(rounds):
            # Sessions of 100 messages, each user one session.
            users = [f"r{r}u{j}" for j in range((per_round + 99) // 100)]
            for i in range(per_round):
                await mem.remember(
                    users[i // 100],
                    f"{users[i // 100]}s",
                    "user" if i % 2 == 0 else "assistant",
                    next(source),
                    ts=t0 + timedelta(seconds=r * n + i),
                )
            start = time.perf_counter()
            report = await mem.drain(summarize=False)
            pipeline_rates.append(per_round / (time.perf_counter() - start))
            assert report.processed == per_round, report

            store = await mem.memory_vectors()
            [probe] = await mem.embedder.embed(["a"])
            chunks: list[str] = []
            for u in users:
                hits = await store.search(probe, scope={"user_id": u}, top_k=10_000)
                chunks += [h.text for h in hits]
            total_chunks += len(chunks)
            batch = settings.ingest_batch
            start = time.perf_counter()
            for i in range(0, len(chunks), batch):
                await mem.embedder.embed(chunks[i : i + batch])
            embed_rates.append(per_round / (time.perf_counter() - start))
            print(
                f"round {r}: pipeline {pipeline_rates[-1]:.1f} msg/s, "
                f"embedding alone {embed_rates[-1]:.1f} msg/s ({len(chunks)} chunks)",
                file=sys.stderr,
            )
    finally:
        r_ = mem.working.redis
        keys = [k async for k in r_.scan_iter(match=f"{settings.key_prefix}:*", count=1000)]
        if keys:
            await r_.delete(*keys)
        await mem.close()
        with psycopg.connect(pg_admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    ratios = [p / e for p, e in zip(pipeline_rates, embed_rates, strict=True)]
    print(f"{n} messages, {total_chunks} chunks, {rounds} rounds", file=sys.stderr)
    return {
        "msgs_per_s": round(statistics.median(pipeline_rates), 1),
        "embed_only_per_s": round(statistics.median(embed_rates), 1),
        "ratio": round(statistics.median(ratios), 3),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()
    print(
        json.dumps(
            asyncio.run(run(args.n, args.rounds, args.redis_url, args.pg_admin_url, args.data))
        )
    )
