"""The fault scenarios (every accepted message reaches every layer, through crashes,
Redis loss and many workers), which ``tests/faults/test_faults.py`` asserts and
``benchmarks/faults.py`` tabulates (:data:`SCENARIOS`), and the faults they inject.

Each scenario runs memstack on servers of a :class:`~tests.faults.lab.Lab`, breaks one
of them on purpose while a workload is sent, and returns its row of the fault table.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from sqlalchemy import select

from memstack.core.errors import MemstackError
from memstack.stores.sql.models import MessageRow
from tests.faults.checker import Row, sample
from tests.faults.deployment import WorkerProcess
from tests.faults.lab import Lab, Scenario, Services
from tests.faults.processes import ServiceError
from tests.faults.servers import SlowEmbeddings
from tests.faults.stores import snapshot, wait_drained
from tests.faults.workload import Loader, Sent, Turn, plan_workload

# --- faults and their timing -------------------------------------------------------------


async def kill_workers_repeatedly(
    workers: Sequence[WorkerProcess],
    *,
    kills: int,
    interval_s: float,
    until: Callable[[], bool] | None = None,
) -> int:
    """Every ``interval_s``: SIGKILL one worker (in turn) and start it again. Returns
    how many kills were made (fewer when ``until()`` turns true first)."""
    done = 0
    turn = 0
    while done < kills:
        await asyncio.sleep(interval_s)
        if until is not None and until():
            break
        # In turn, but only a worker that got past its start: killing one still
        # importing tests nothing.
        ready = [w for w in workers if w.ready()]
        if not ready:
            continue
        order = [workers[(turn + k) % len(workers)] for k in range(len(workers))]
        w = next(x for x in order if x in ready)
        turn = workers.index(w) + 1
        w.kill9()
        w.start()
        done += 1
    return done


async def gather_with(main: Awaitable[None], *side: Awaitable[Any]) -> None:
    """Run ``main`` with side tasks; side tasks are cancelled if ``main`` fails."""
    tasks = [asyncio.ensure_future(s) for s in side]
    try:
        await main
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# --- the fault scenarios ------------------------------------------------------------------


def _loader_failures(loader: Loader) -> list[str]:
    out = []
    if loader.failed:
        out.append(
            f"{len(loader.failed)} messages never acknowledged despite retries: "
            f"{loader.failed[0][1][:200]}"
        )
    if loader.refused:
        out.append(f"{len(loader.refused)} messages refused: {loader.refused[0][1][:200]}")
    return out


async def scenario_control(lab: Lab, *, messages: int = 300, workers: int = 1) -> Row:
    """No fault: ``workers`` worker processes ingest ``messages`` messages. With one
    worker this must pass on any code base; it shows the harness itself loses and
    invents nothing (with two, it measures what concurrency alone costs)."""
    name = f"control ({workers} worker{'s' if workers > 1 else ''}, no fault)"
    async with Scenario(lab.services(), name) as sc:
        await sc.workers(workers)
        loader = Loader(sc.mem, rate=max(messages / 3, 50))
        await loader.run(plan_workload(messages))
        row = await sc.check(loader.acked, drain_timeout_s=60)
    row.extra_failures += _loader_failures(loader)
    return row


async def scenario_concurrency(lab: Lab, *, messages: int = 1000) -> Row:
    """No fault, two workers: what concurrent ingest alone costs."""
    return await scenario_control(lab, messages=messages, workers=2)


async def scenario_worker_kills(
    lab: Lab,
    *,
    messages: int = 3000,
    kills: int = 8,
    interval_s: float = 1.0,
    oracle_users: int | None = 2,
) -> Row:
    """(a) Two workers; every ``interval_s`` one of them is SIGKILLed and started again,
    ``kills`` times, while ``messages`` messages are sent and ingested."""
    # The clean replay of two users of six (a third of the messages) keeps it short.
    async with Scenario(lab.services(), "kill -9 workers", oracle_users=oracle_users) as sc:
        workers = await sc.workers(2)
        wl = plan_workload(messages)
        loader = Loader(sc.mem, rate=max(messages / 10, 50))
        made = 0

        async def killer() -> None:
            nonlocal made
            made = await kill_workers_repeatedly(workers, kills=kills, interval_s=interval_s)

        await gather_with(loader.run(wl), killer())
        row = await sc.check(loader.acked, drain_timeout_s=120)
    row.notes.append(f"{made} worker kills, {sum(w.starts for w in workers)} worker starts")
    row.extra_failures += _loader_failures(loader)
    return row


async def _consumer_pending(sc: Scenario) -> dict[str, int]:
    """Jobs each consumer of the ingest group holds (delivered, not acknowledged)."""
    redis, stream = sc.mem.queue.redis, sc.mem.queue.stream
    out: dict[str, int] = {}
    for group in await redis.xinfo_groups(stream):
        for info in await redis.xinfo_consumers(stream, group["name"]):
            name = info["name"]
            out[name.decode() if isinstance(name, bytes) else str(name)] = int(info["pending"])
    return out


async def scenario_worker_dies(lab: Lab, *, messages: int = 400, workers: int = 3) -> Row:
    """``workers`` workers on one stream; one is SIGKILLed holding jobs and
    not started again: the others claim its jobs (after ``ingest_claim_idle_ms``), and
    every message is ingested once."""
    import socket

    async with Scenario(lab.services(), f"{workers} workers, one dies") as sc:
        procs = await sc.workers(workers)
        loader = Loader(sc.mem, rate=max(messages / 8, 50))
        victim = procs[0]
        name = f"{socket.gethostname()}-{victim.pid}"
        held = 0

        async def kill_holding_jobs() -> None:
            nonlocal held
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and loader.done < messages:
                held = (await _consumer_pending(sc)).get(name, 0)
                if held and loader.done > messages // 4:
                    victim.kill9()
                    return
                await asyncio.sleep(0.02)

        await gather_with(loader.run(plan_workload(messages, users=5)), kill_holding_jobs())
        row = await sc.check(loader.acked, drain_timeout_s=120)
        left = (await _consumer_pending(sc)).get(name, 0)
    row.notes.append(f"worker {victim.pid} killed holding {held} jobs; it holds {left} now")
    if victim.alive() or not held:
        row.extra_failures.append("the worker was not killed while it held jobs")
    if left:
        row.extra_failures.append(f"{left} jobs of the dead worker were never claimed")
    row.extra_failures += _loader_failures(loader)
    return row


async def scenario_redis_kill(
    lab: Lab, *, messages: int = 1500, crashes: int = 2, fsync: str = "always"
) -> Row:
    """(b) Redis (``appendonly yes``, ``appendfsync always``) is SIGKILLed under load and
    started again on the same port and folder, ``crashes`` times; the loader retries."""
    redis_server = lab.own_redis(appendonly=True, appendfsync=fsync)
    async with Scenario(lab.services(redis=redis_server), f"kill -9 redis (aof {fsync})") as sc:
        await sc.workers(2)
        wl = plan_workload(messages)
        loader = Loader(sc.mem, rate=max(messages / 10, 50))
        downtime: list[float] = []

        async def crash() -> None:
            for _ in range(crashes):
                await asyncio.sleep(10 / (crashes + 1))
                await asyncio.to_thread(redis_server.kill9)
                t = time.monotonic()
                await asyncio.sleep(1.0)
                await asyncio.to_thread(redis_server.start)
                downtime.append(time.monotonic() - t)

        await gather_with(loader.run(wl), crash())
        row = await sc.check(loader.acked, drain_timeout_s=60)
    row.notes.append(
        f"{len(downtime)} crashes, down {sum(downtime):.1f} s in all; "
        f"{loader.retries} remember() retries"
    )
    row.extra_failures += _loader_failures(loader)
    return row


async def scenario_redis_flushall(lab: Lab, *, per_session: int = 30, after: int = 4) -> Row:
    """(c) Sessions of ``per_session`` messages are ingested; then, with the workers
    running, the test Redis is flushed (FLUSHALL) and ``after`` more messages go to
    every session. The workers must recover and ingest them; ``context()`` of a
    session must show its last messages again, rebuilt from the ledger."""
    redis_server = lab.own_redis()
    async with Scenario(lab.services(redis=redis_server), "redis FLUSHALL") as sc:
        await sc.workers(2)
        wl = plan_workload(12 * (per_session + after), users=6, sessions_per_user=2)
        before = [s[:per_session] for s in wl.sessions]
        later = [s[per_session:] for s in wl.sessions]
        loader = Loader(sc.mem)
        await loader.run(before)
        drained_before, state = await wait_drained(sc.mem, 60)
        if not drained_before:
            raise ServiceError(f"the backlog did not drain before the flush: {state}")
        await asyncio.to_thread(redis_server.flushall)
        flushed_at = len(loader.acked)
        # Keep sending while the workers find out: ~2 s of traffic.
        paced = Loader(sc.mem, rate=max(len(later) * after / 2, 10))
        await paced.run(later)
        sent = [*loader.acked, *paced.acked]
        row = await sc.check(sent, drain_timeout_s=15)
        row.extra_failures += await _window_failures(sc, sent, wl.sessions[0][0])
    ingested = set(sc.last.ledger) if sc.last is not None else set()
    missing_after = sum(1 for s in paced.acked if s.msg_id not in ingested)
    row.notes.append(
        f"{flushed_at} messages before the flush, {len(paced.acked)} after "
        f"({missing_after} of them never reached the ledger)"
    )
    row.extra_failures += _loader_failures(loader) + _loader_failures(paced)
    return row


async def _window_failures(sc: Scenario, sent: Sequence[Sent], first: Turn) -> list[str]:
    """The window of ``first``'s session after the loss: its newest messages, old and
    new, as ``context()`` shows them."""
    n = sc.mem.settings.recent_window_read
    mine = sorted((s for s in sent if s.turn.session_id == first.session_id),
                  key=lambda s: s.turn.ts_ms)  # fmt: skip
    expected = [s.msg_id for s in mine[-n:]]
    try:
        ctx = await sc.mem.context(first.user_id, first.session_id, "What is my budget?")
    except MemstackError as exc:
        return [f"context() failed after the flush: {exc}"]
    shown = [i.key for i in ctx.manifest if i.layer == "window"]
    if set(shown) == set(expected):
        return []
    missing = [m for m in expected if m not in shown]
    return [
        f"context() window of {first.session_id} after the flush shows "
        f"{len(shown)} messages, {len(set(shown) & set(expected))} of its last {n} "
        f"(window_rebuilt={ctx.window_rebuilt}); missing {sample(missing, 4)}"
    ]


class _Restartable(Protocol):
    def stop(self) -> None: ...

    def start(self) -> object: ...


async def _outage(
    services: Services,
    server: _Restartable,
    name: str,
    label: str,
    *,
    messages: int,
    outage_s: float,
    start_after_s: float,
) -> Row:
    """``server`` (``name`` in the row, ``label`` in its note) is stopped for
    ``outage_s`` during ingest, then started again."""
    async with Scenario(services, f"{name} down {outage_s:.0f} s") as sc:
        await sc.workers(2)
        wl = plan_workload(messages)
        loader = Loader(sc.mem, rate=messages / (start_after_s + outage_s + 1))
        back: list[float] = []

        async def outage() -> None:
            await asyncio.sleep(start_after_s)
            await asyncio.to_thread(server.stop)
            await asyncio.sleep(outage_s)
            await asyncio.to_thread(server.start)
            back.append(time.monotonic())

        await gather_with(loader.run(wl), outage())
        drained = await wait_drained(sc.mem, 90)
        drained_at = time.monotonic()
        row = await sc.check(loader.acked, drain_timeout_s=1)
        row.drained = drained[0]
    row.notes.append(f"drained {drained_at - back[0]:.1f} s after {label} came back")
    row.extra_failures += _loader_failures(loader)
    return row


async def scenario_postgres_outage(
    lab: Lab, *, messages: int = 700, outage_s: float = 30.0, start_after_s: float = 3.0
) -> Row:
    """(d) The test PostgreSQL is shut down (immediate) for ``outage_s`` during ingest,
    then started again: no loss, no dead letters."""
    pg = lab.own_postgres()
    return await _outage(
        lab.services(postgres=pg), pg, "postgres", "PostgreSQL",
        messages=messages, outage_s=outage_s, start_after_s=start_after_s,
    )  # fmt: skip


async def scenario_chroma_outage(
    lab: Lab, *, messages: int = 700, outage_s: float = 30.0, start_after_s: float = 3.0
) -> Row:
    """(e) The Chroma server is stopped for ``outage_s`` during ingest, then started
    again on the same data: no loss, no dead letters."""
    chroma = lab.own_chroma()
    return await _outage(
        lab.services(chroma=chroma), chroma, "chroma", "Chroma",
        messages=messages, outage_s=outage_s, start_after_s=start_after_s,
    )  # fmt: skip


async def _mid_batch(sc: Scenario, embeddings: SlowEmbeddings, target: str) -> list[str]:
    """Until the worker is mid-batch: it wrote the ledger rows of a batch holding the
    target's messages and waits for their embeddings. Returns those rows' ids."""
    deadline = time.monotonic() + 30
    while True:
        async with sc.mem.db_sessions() as s:
            rows = list(await s.scalars(
                select(MessageRow.msg_id).where(MessageRow.user_id == target)
            ))  # fmt: skip
        if rows and embeddings.in_flight:
            return rows
        if time.monotonic() > deadline:
            raise ServiceError("the worker never got mid-batch on the target's messages")
        await asyncio.sleep(0.05)


async def scenario_forget_mid_batch(
    lab: Lab, *, messages: int = 80, delay_s: float = 2.0, after_s: float = 5.0
) -> Row:
    """(f) One worker embeds through a server that answers after ``delay_s``; while it
    is mid-batch (ledger written, embedding in flight), ``forget_user(u)`` runs. When
    the batch is over and ``after_s`` more have passed, nothing of u may be in the
    ledger, the facts or the vectors; the other user's messages must all be there."""
    embeddings = SlowEmbeddings(delay_s)
    lab.track(embeddings)
    overrides: dict[str, object] = {"embedder": "openai", "embed_url": embeddings.url}
    async with Scenario(lab.services(), "forget mid-batch", oracle=False, settings=overrides) as sc:
        await sc.mem.memory_vectors()  # its dimension probe, before the clock matters
        wl = plan_workload(messages, users=2, sessions_per_user=2)
        target, keep = wl.users
        loader = Loader(sc.mem)
        await loader.run(wl)  # all queued first: the worker's first batch is a full one
        await sc.workers(1)
        rows = await _mid_batch(sc, embeddings, target)
        forgotten = await sc.mem.forget_user(target)
        drained = await wait_drained(sc.mem, 60)
        await embeddings.idle()
        await asyncio.sleep(after_s)
        kept = [s for s in loader.acked if s.turn.user_id == keep]
        row = await sc.check(kept, drain_timeout_s=1, users=[keep])
        row.drained = drained[0]
        left = await snapshot(sc.mem, sc.dep.vector_url, [target])
        remains = {
            "ledger rows": len(left.ledger),
            "facts": len(left.facts),
            "vectors": len(left.vectors),
        }
        if any(remains.values()):
            row.extra_failures.append(
                f"forgotten user {target} still has "
                + ", ".join(f"{n} {what}" for what, n in remains.items())
                + f" {after_s:.0f} s after the batch (forget_user said {forgotten})"
            )
        ctx = await sc.mem.facts(target)
        if ctx:
            row.extra_failures.append(f"facts({target}) still answers {len(ctx)} facts")
    row.notes.append(f"forget_user during a batch of {len(rows)} ledger rows of the target")
    row.extra_failures += _loader_failures(loader)
    return row


async def scenario_reindex_during_ingest(lab: Lab, *, messages: int = 1000) -> Row:
    """(g) ``AsyncMemory.reindex()`` while two worker processes ingest: no dead letters,
    every message in the vectors afterwards."""
    async with Scenario(lab.services(), "reindex during ingest") as sc:
        await sc.workers(2)
        wl = plan_workload(messages)
        loader = Loader(sc.mem, rate=max(messages / 10, 50))
        reports: list[Any] = []

        async def reindex() -> None:
            await asyncio.sleep(4)
            reports.append(await sc.mem.reindex())

        await gather_with(loader.run(wl), reindex())
        row = await sc.check(loader.acked, drain_timeout_s=60)
    if reports:
        r = reports[0]
        row.notes.append(f"reindex rebuilt {getattr(r, 'messages', '?')} messages mid-ingest")
    row.extra_failures += _loader_failures(loader)
    return row


SCENARIOS: dict[str, Callable[..., Awaitable[Row]]] = {
    "control": scenario_control,
    "concurrency": scenario_concurrency,
    "worker-kills": scenario_worker_kills,
    "worker-dies": scenario_worker_dies,
    "redis-kill": scenario_redis_kill,
    "redis-flushall": scenario_redis_flushall,
    "postgres-outage": scenario_postgres_outage,
    "chroma-outage": scenario_chroma_outage,
    "forget-mid-batch": scenario_forget_mid_batch,
    "reindex": scenario_reindex_during_ingest,
}
