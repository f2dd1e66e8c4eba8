"""Ingest throughput against the cost of embedding alone.

Ingests N messages of realistic length (LoCoMo turns, read from shared/eval-data) through
``remember`` + one in-process worker (real Redis, PostgreSQL, Chroma embedded, the
default all-MiniLM-L6-v2 embedder), then embeds the very chunks the pipeline stored,
in batches of the same size, with no pipeline around them.

Last line: ``{"msgs_per_s": …, "embed_only_per_s": …, "ratio": …}``; goal ratio ≥ 0.7.
Run: ``python benchmarks/ingest.py [--n 2000]``
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from memstack import db
from memstack.memory import AsyncMemory
from memstack.settings import load_settings

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


async def run(n: int, redis_url: str, pg_admin: str, data: Path) -> dict[str, float]:
    name = f"memstack_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = pg_admin.rsplit("/", 1)[0] + "/" + name
    settings = load_settings(
        redis_url=redis_url,
        database_url=url,
        home=Path(tempfile.mkdtemp()),
        key_prefix=f"bench{uuid.uuid4().hex[:6]}",
        embedder="minilm",
    )
    db.upgrade(settings)
    mem = await AsyncMemory.open(settings)
    try:
        await mem.embedder.embed(["warm up the model"])
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        source = turns(data)
        for i in range(n):
            user = f"u{i // 200}"  # sessions of 200 messages, 10 users at n=2000
            await mem.remember(
                user,
                f"s{i // 200}",
                "user" if i % 2 == 0 else "assistant",
                next(source),
                ts=t0 + timedelta(seconds=i),
            )
        start = time.perf_counter()
        report = await mem.drain(summarize=False)
        pipeline_s = time.perf_counter() - start
        assert report.processed == n, report

        store = await mem.memory_vectors()
        chunks: list[str] = []
        for u in range((n + 199) // 200):
            [probe] = await mem.embedder.embed(["a"])
            hits = await store.search(probe, scope={"user_id": f"u{u}"}, top_k=10_000)
            chunks += [h.text for h in hits]
        batch = settings.ingest_batch
        start = time.perf_counter()
        for i in range(0, len(chunks), batch):
            await mem.embedder.embed(chunks[i : i + batch])
        embed_s = time.perf_counter() - start
    finally:
        r = mem.working.redis
        keys = [k async for k in r.scan_iter(match=f"{settings.key_prefix}:*", count=1000)]
        if keys:
            await r.delete(*keys)
        await mem.close()
        with psycopg.connect(pg_admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    msgs_per_s = n / pipeline_s
    embed_only = n / embed_s
    print(
        f"{n} messages, {len(chunks)} chunks: pipeline {pipeline_s:.1f} s, "
        f"embedding alone {embed_s:.1f} s",
        file=sys.stderr,
    )
    return {
        "msgs_per_s": round(msgs_per_s, 1),
        "embed_only_per_s": round(embed_only, 1),
        "ratio": round(msgs_per_s / embed_only, 3),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args.n, args.redis_url, args.pg_admin_url, args.data))))
