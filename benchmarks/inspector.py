"""The inspector's pages for one user with many messages: does a page stay quick at 10k?

Stores: the local Redis and PostgreSQL servers (a throw-away database), vectors embedded
in a temp folder, the hashing embedder (seeding 10k messages through the real write
path and worker is then about half a minute; the default embedder's query cost is in
``benchmarks/context.py``). One user, one session of ``--messages`` messages, a fact
that changed; then each page is fetched ``--repeat`` times through the app in process
(httpx's ASGI transport: rendering and the stores, no network).

Prints the median and p95 time of each page and, as its last line, JSON
``{"messages": …, "<page>_p50_ms": …}``.
Run: ``python benchmarks/inspector.py [--messages 10000] [--repeat 30]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg

from memstack import AsyncMemory, load_settings
from memstack.server.http import create_app

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def seed(mem: AsyncMemory, user: str, session: str, count: int) -> None:
    await mem.remember(user, session, "user", "My budget is at most 5000 dollars.", ts=T0)
    for i in range(1, count - 1):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"message {i:05d} about topic {i % 97}"
        await mem.remember(user, session, role, text, ts=T0 + timedelta(seconds=i))
    later = T0 + timedelta(seconds=count)
    await mem.remember(user, session, "user", "Actually my budget is 8000 dollars.", ts=later)
    await mem.drain(summarize=False)


async def timed(client: httpx.AsyncClient, url: str, repeat: int) -> list[float]:
    spent = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = await client.get(url)
        spent.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return spent


async def run(count: int, repeat: int, database_url: str) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="inspector-bench-"))
    settings = load_settings(
        home=home,
        key_prefix=f"ib{uuid.uuid4().hex[:8]}",
        embedder="hashing",
        redis_url="redis://127.0.0.1:6379/0",
        database_url=database_url,
        auto_migrate=True,
    )
    user, session = "bench-user", "long-session"
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        started = time.perf_counter()
        await seed(app.state.memory, user, session, count)
        print(f"seeded {count} messages in {time.perf_counter() - started:.1f} s")
        transport = httpx.ASGITransport(app=app)
        pages = {
            "users": "/ui",
            "user": f"/ui/users/{user}",
            "session_newest": f"/ui/users/{user}/sessions/{session}",
            "session_first": f"/ui/users/{user}/sessions/{session}?page=1",
            "session_middle": f"/ui/users/{user}/sessions/{session}?page={count // 100}",
            "context_preview": f"/ui/users/{user}/context?q=what+is+my+budget&session={session}",
        }
        result: dict[str, float] = {"messages": count}
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for name, url in pages.items():
                spent = sorted(await timed(client, url, repeat))
                p50, p95 = statistics.median(spent), spent[int(0.95 * (len(spent) - 1))]
                print(f"{name:16s} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms")
                result[f"{name}_p50_ms"] = round(p50, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    name = f"memstack_inspector_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = f"postgresql://postgres@127.0.0.1:5432/{name}"
        print(json.dumps(asyncio.run(run(args.messages, args.repeat, url))))
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
