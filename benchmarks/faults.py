"""The fault table (every accepted message reaches every layer), and the loss window
of a Redis kill -9.

Runs the scenarios of the fault suite (``tests/faults``) through its harness, on a
Redis, a PostgreSQL cluster and a Chroma server it starts itself on free ports (never
the shared 6379 / 5432), and prints one table:

    scenario | sent | in ledger | in vectors | facts | dead letters | lost | duplicates | seconds

"sent" counts acknowledged messages (``remember()`` returned); "in vectors" those named
in the ``msg_ids`` of a dialogue vector; "lost" those missing from the ledger or from
every vector; "duplicates" ledger rows nobody acknowledged, vector ids stored twice,
messages in two exchange units and second current values of a fact.

Then the loss window of Redis itself: a steady load of ``remember()`` calls (no retry,
no worker running, so every acknowledged job waits in the stream), Redis SIGKILLed
mid-load and started again on its AOF, the survivors ingested: acknowledged against
ingested, per ``appendfsync`` setting, with the write latency under each.

Run: ``python benchmarks/faults.py [--messages 3000] [--scenario worker-kills ...]``
(``--scenario loss-window`` for the Redis measurement alone; ``--outage-s`` shortens
the 30-second PostgreSQL and Chroma outages for a quick look).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The harness lives with the tests; the repository root makes it importable.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from sqlalchemy import select  # noqa: E402

from memstack.stores.sql.models import MessageRow  # noqa: E402
from tests.faults.checker import Row, format_table, markdown_table  # noqa: E402
from tests.faults.deployment import ORACLE_SETTINGS  # noqa: E402
from tests.faults.lab import Lab  # noqa: E402
from tests.faults.scenarios import SCENARIOS, gather_with  # noqa: E402
from tests.faults.workload import Loader, plan_workload  # noqa: E402

LOSS_WINDOW = "loss-window"


def scenario_kwargs(name: str, messages: int, outage_s: float) -> dict[str, Any]:
    """Each scenario's size for ``--messages`` (the size of the worker-kill run)."""
    scale = messages / 3000
    if name == "worker-kills":
        return {"messages": messages}
    if name == "concurrency":
        return {"messages": max(100, messages // 3)}
    if name == "redis-kill":
        return {"messages": max(100, messages // 2)}
    if name == "reindex":
        return {"messages": max(100, messages // 3)}
    if name in ("postgres-outage", "chroma-outage"):
        return {"messages": max(100, round(600 * scale)), "outage_s": outage_s}
    return {}


@dataclass
class LossRow:
    appendfsync: str
    acknowledged: int
    lost: int
    window_ms: float
    p50_ms: float
    p99_ms: float
    rate: float
    failed_calls: int

    def cells(self) -> list[str]:
        return [
            self.appendfsync,
            str(self.acknowledged),
            str(self.lost),
            f"{self.window_ms:.0f}",
            f"{self.p50_ms:.2f}",
            f"{self.p99_ms:.2f}",
            f"{self.rate:.0f}",
            str(self.failed_calls),
        ]


LOSS_COLUMNS = (
    "appendfsync",
    "acknowledged",
    "lost",
    "loss window (ms)",
    "remember p50 (ms)",
    "remember p99 (ms)",
    "writes/s",
    "calls failed at the kill",
)


def loss_table(rows: list[LossRow]) -> str:
    return markdown_table(LOSS_COLUMNS, [r.cells() for r in rows])


async def loss_window(lab: Lab, fsync: str, *, seconds: float, rate: float) -> LossRow:
    """Writes at ``rate``/s for ``seconds``, SIGKILL of Redis, restart on its AOF, an
    in-process drain of what survived: acknowledged messages missing from the ledger
    are what the kill lost. ``fsync`` "off" runs Redis with no persistence at all."""
    if fsync == "off":
        server = lab.own_redis(appendonly=False)
    else:
        server = lab.own_redis(appendonly=True, appendfsync=fsync)
    dep = lab.services(redis=server).deployment(**ORACLE_SETTINGS)  # big batches to drain
    mem = await dep.open()
    try:
        size = math.ceil((rate or 5000) * seconds * 1.5) + 64
        wl = plan_workload(size, users=8, sessions_per_user=4)
        loader = Loader(mem, retry=False, rate=rate or None)
        stop = asyncio.Event()
        killed_at = 0.0

        async def kill() -> None:
            nonlocal killed_at
            await asyncio.sleep(seconds)
            killed_at = time.monotonic()
            server.kill9()
            stop.set()

        await gather_with(loader.run(wl, stop=stop), kill())
    finally:
        await mem.close()
    await asyncio.to_thread(server.start)
    survivor = await dep.open()
    try:
        await survivor.drain(summarize=False)
        async with survivor.db_sessions() as s:
            ingested = set(await s.scalars(select(MessageRow.msg_id)))
    finally:
        await survivor.close()
    lost = [s for s in loader.acked if s.msg_id not in ingested]
    window = (killed_at - min(s.acked_at for s in lost)) * 1000 if lost else 0.0
    p50, p99 = loader.latencies_ms()
    return LossRow(
        fsync,
        len(loader.acked),
        len(lost),
        window,
        p50,
        p99,
        len(loader.acked) / seconds,
        loader.failed_calls,
    )


async def main(args: argparse.Namespace) -> int:
    wanted = args.scenario or [*SCENARIOS, LOSS_WINDOW]
    lab = Lab(Path(tempfile.mkdtemp(prefix="memstack-faults-bench-")))
    rows: list[Row] = []
    losses: list[LossRow] = []
    try:
        for name in wanted:
            if name == LOSS_WINDOW:
                for fsync in args.fsync:
                    print(f"… loss window, appendfsync {fsync}", file=sys.stderr, flush=True)
                    try:
                        losses.append(
                            await loss_window(
                                lab, fsync, seconds=args.loss_seconds, rate=args.loss_rate
                            )
                        )
                    finally:
                        lab.release()
                continue
            print(f"… {name}", file=sys.stderr, flush=True)
            started = time.monotonic()
            try:
                row = await SCENARIOS[name](
                    lab, **scenario_kwargs(name, args.messages, args.outage_s)
                )
            except Exception as exc:  # a scenario that cannot run is a row too
                row = Row(name, drained=False, seconds=time.monotonic() - started)
                row.extra_failures.append(f"did not run: {type(exc).__name__}: {exc}"[:500])
            finally:
                lab.release()
            rows.append(row)
            print(row.explain(), file=sys.stderr, flush=True)
    finally:
        lab.close()
    if rows:
        print(format_table(rows))
        for row in rows:
            if not row.ok:
                print(f"\n{row.scenario}:")
                for note in [*row.extra_failures, *row.notes]:
                    print(f"- {note}")
    if losses:
        print()
        print("Redis kill -9 under a steady write load (no retry, no worker during the load):")
        print(loss_table(losses))
    return 0 if all(r.ok for r in rows) else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--messages", type=int, default=3000, help="size of the worker-kill run (others scale)"
    )
    p.add_argument(
        "--scenario",
        action="append",
        choices=[*SCENARIOS, LOSS_WINDOW],
        help="run only this one (repeatable); default: all, then the loss window",
    )
    p.add_argument("--outage-s", type=float, default=30.0, help="PostgreSQL / Chroma outage")
    p.add_argument("--loss-seconds", type=float, default=3.0, help="write load before the kill")
    p.add_argument(
        "--loss-rate", type=float, default=500.0, help="remember() calls per second (0: flat out)"
    )
    p.add_argument(
        "--fsync",
        action="append",
        choices=["everysec", "always", "off"],
        help="appendfsync settings of the loss window; off: no AOF at all "
        "(default: off, everysec, always)",
    )
    args = p.parse_args(argv)
    args.fsync = args.fsync or ["off", "everysec", "always"]
    return args


if __name__ == "__main__":
    # SIGTERM unwinds like Ctrl-C, so every server started here is closed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(asyncio.run(main(parse())))
