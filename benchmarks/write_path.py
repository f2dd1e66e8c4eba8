"""Write-path latency: N ``remember`` calls against the local Redis server.

Last line: ``{"n": …, "p50_ms": …, "p99_ms": …}``. The goal (docs/spec.md, Write path):
p99 < 2 ms.
Run: ``python benchmarks/write_path.py [--n 10000] [--redis-url URL]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from memstack.core.settings import load_settings
from memstack.memory import AsyncMemory


async def main(n: int, redis_url: str) -> dict[str, float]:
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    settings = load_settings(
        redis_url=redis_url, home=Path(tempfile.mkdtemp()), key_prefix=prefix, embedder="hashing"
    )
    mem = await AsyncMemory.open(settings)
    sessions = [f"s{i}" for i in range(100)]
    text = "我想买一台轻薄笔记本，预算不超过五千，重点关注续航和重量。" * 3
    try:
        for _ in range(200):  # warm the script cache and the connection pool
            await mem.remember("warm", "warm", "user", text)
        samples: list[float] = []
        for i in range(n):
            t0 = time.perf_counter()
            await mem.remember(f"u{i % 100}", sessions[i % 100], "user", text)
            samples.append((time.perf_counter() - t0) * 1000)
    finally:
        r = mem.working.redis
        keys = [k async for k in r.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await r.delete(*keys)
        await mem.close()
    samples.sort()
    return {
        "n": n,
        "p50_ms": round(statistics.median(samples), 3),
        "p99_ms": round(samples[int(0.99 * len(samples)) - 1], 3),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = ap.parse_args()
    result = asyncio.run(main(args.n, args.redis_url))
    print(f"write path over {result['n']} calls", file=sys.stderr)
    print(json.dumps(result))
