"""What one message costs in each store: bytes in Redis (window, state, queued job),
in PostgreSQL (ledger with its BM25 terms, facts, summaries, indexes included) and in
the vector store (Chroma's files per vector). docs/scaling.md builds on these figures.

Ingests N LoCoMo turns (``--users`` users, one session each) with the real Redis and
PostgreSQL servers and Chroma embedded in a temporary folder. The hashing embedder is
used: its vectors have MiniLM's 384 dimensions, so the vector store's bytes are the
same, and the run takes seconds, not minutes.

Two deployments are measured, with a third of the messages and with all of them, so
that the store's fixed cost (Chroma's shard collections and indexes) drops out of the
bytes per vector.

Last line: ``{"redis_bytes_per_window_msg": …, "redis_bytes_per_queued_job": …,
"pg_bytes_per_msg": …, "vectors_per_msg": …, "vector_bytes_per_vector": …,
"vectors_per_gb": …}``. Run: ``python benchmarks/footprint.py [--n 9000] [--users 30]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from memstack import AsyncMemory
from memstack.core.settings import load_settings
from memstack.stores.sql import db

# The LoCoMo reader of benchmarks/ingest.py, beside this file.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import DATA, turns

TABLES = (
    "memory_message",
    "agent_memory_fact",
    "memory_session_summary",
    "memory_user",
)


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def _redis_bytes(mem: AsyncMemory, pattern: str) -> int:
    redis = mem.working.redis
    total = 0
    async for key in redis.scan_iter(match=pattern, count=1000):
        total += int(await redis.memory_usage(key, samples=0) or 0)
    return total


async def _say(mem: AsyncMemory, n: int, users: int, data: Path) -> None:
    source = turns(data)
    per_user = n // users
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(per_user * users):
        u = f"u{i // per_user}"
        role = "user" if i % 2 == 0 else "assistant"
        await mem.remember(u, f"{u}s", role, next(source), ts=t0 + timedelta(seconds=i))


async def measure(mem: AsyncMemory, n: int, users: int, data: Path, pg: str) -> dict[str, Any]:
    prefix = mem.settings.key_prefix
    await _say(mem, n, users, data)
    queued = await _redis_bytes(mem, f"{prefix}:ingest")
    await mem.drain()
    windows = await _redis_bytes(mem, f"{prefix}:session:*:window")
    window_msgs = 0
    for j in range(users):
        window_msgs += len(await mem.window(f"u{j}", f"u{j}s", 40))
    vectors = await (await mem.memory_vectors()).count()
    with psycopg.connect(pg) as conn:
        sizes = {
            t: int(conn.execute("SELECT pg_total_relation_size(%s)", (t,)).fetchone()[0])  # type: ignore[index]
            for t in TABLES
        }
    return {
        "messages": n,
        "redis_bytes_per_queued_job": round(queued / n),
        "redis_bytes_per_window_msg": round(windows / max(window_msgs, 1)),
        "pg_bytes_per_msg": round(sum(sizes.values()) / n),
        "pg_tables_bytes": sizes,
        "vectors": vectors,
        "vectors_per_msg": round(vectors / n, 3),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    name = f"memstack_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = args.pg_admin_url.rsplit("/", 1)[0] + "/" + name
    home = Path(tempfile.mkdtemp())
    settings = load_settings(
        redis_url=args.redis_url,
        database_url=url,
        home=home,
        embedder="hashing",
        key_prefix=f"bench{uuid.uuid4().hex[:6]}",
    )
    db.upgrade(settings)
    mem = await AsyncMemory.open(settings)
    try:
        result = await measure(mem, args.n, args.users, args.data, url)
    finally:
        redis = mem.working.redis
        keys = [k async for k in redis.scan_iter(match=f"{settings.key_prefix}:*", count=1000)]
        if keys:
            await redis.delete(*keys)
        await mem.close()  # Chroma's files are complete once it is closed
        chroma = _dir_bytes(home)  # the embedded stores but the SQL, which is on the server
        shutil.rmtree(home, ignore_errors=True)
        with psycopg.connect(args.pg_admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    result["chroma_bytes"] = chroma
    result["vector_bytes_per_vector"] = round(chroma / max(result["vectors"], 1))
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=9000)
    ap.add_argument("--users", type=int, default=30)
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()
    # Two deployments, a third of the messages and all of them: the difference is what
    # one more vector costs, without the store's fixed cost (Chroma's shards, indexes).
    small = asyncio.run(run(argparse.Namespace(**{**vars(args), "n": args.n // 3})))
    large = asyncio.run(run(args))
    marginal = (large["chroma_bytes"] - small["chroma_bytes"]) / max(
        large["vectors"] - small["vectors"], 1
    )
    print(json.dumps({"small": small, "large": large}, indent=1), file=sys.stderr)
    print(
        json.dumps(
            {
                "redis_bytes_per_window_msg": large["redis_bytes_per_window_msg"],
                "redis_bytes_per_queued_job": large["redis_bytes_per_queued_job"],
                "pg_bytes_per_msg": large["pg_bytes_per_msg"],
                "vectors_per_msg": large["vectors_per_msg"],
                "vector_bytes_per_vector": round(marginal),
                "vectors_per_gb": round(1e9 / marginal),
            }
        )
    )


if __name__ == "__main__":
    main()
