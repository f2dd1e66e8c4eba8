"""`memstack calibrate`: where to cut vector hits by distance, read from this deployment's
own memory."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstack import AsyncMemory, Settings, ValidationError


@dataclass(frozen=True)
class Calibration:
    queries: int
    distances: tuple[float, ...]
    drop_share: float

    @property
    def threshold(self) -> float | None:
        """The distance above which ``drop_share`` of the hits lie."""
        if not self.distances:
            return None
        ordered = sorted(self.distances)
        idx = min(len(ordered) - 1, max(0, round(len(ordered) * (1.0 - self.drop_share)) - 1))
        return round(ordered[idx], 4)

    def percentiles(self) -> dict[int, float]:
        if len(self.distances) < 2:
            return {}
        cuts = statistics.quantiles(self.distances, n=10, method="inclusive")
        return {10 * (i + 1): round(c, 4) for i, c in enumerate(cuts)}


async def calibrate(
    mem: AsyncMemory,
    *,
    queries: Sequence[str] = (),
    user_id: str | None = None,
    sample: int = 200,
    drop_share: float = 0.4,
) -> Calibration:
    """Distances of the vector hits of sample queries, and the cut that drops ``drop_share``.

    With ``queries`` (and the ``user_id`` they belong to) those are asked; otherwise
    ``sample`` user messages drawn from the ledger are asked against their own user's
    memory, each ignoring the hit of its own message (a distance of 0 says nothing).
    """
    from sqlalchemy import func, select

    from memstack.core.ids import validate_id
    from memstack.stores.sql.models import MessageRow

    if not 0.0 < drop_share < 1.0:
        raise ValidationError(f"drop share must be within (0, 1), got {drop_share}")
    asks: list[tuple[str, str, str | None]] = []
    if queries:
        if user_id is None:
            raise ValidationError("queries need the user_id whose memory they are asked against")
        validate_id("user_id", user_id)
        asks = [(user_id, q, None) for q in queries if q.strip()]
    else:
        if sample <= 0:
            raise ValidationError(f"sample must be positive, got {sample}")
        stmt = select(MessageRow.user_id, MessageRow.content, MessageRow.msg_id).where(
            MessageRow.role == "user"
        )
        if user_id is not None:
            stmt = stmt.where(MessageRow.user_id == validate_id("user_id", user_id))
        async with mem.db_sessions() as s:
            rows = (await s.execute(stmt.order_by(func.random()).limit(sample))).all()
        asks = [(r.user_id, r.content, r.msg_id) for r in rows]
    store = await mem.memory_vectors()
    distances: list[float] = []
    top_k = mem.settings.vector_top_k
    for uid, text, own in asks:
        [vector] = await mem.embedder.embed_queries([text])
        for hit in await store.search(vector, scope={"user_id": uid}, top_k=top_k + 1):
            ids = str(hit.metadata.get("msg_ids") or hit.metadata.get("msg_id") or "").split(",")
            if own is not None and own in ids:
                continue
            distances.append(1.0 - hit.score)
    return Calibration(len(asks), tuple(distances), drop_share)


def calibrate_cli(
    console: Any,
    settings: Settings,
    queries: Path | None,
    user: str | None,
    sample: int,
    drop: float,
) -> None:
    import asyncio

    import typer
    from rich.table import Table

    from memstack.core.errors import MemstackError

    texts: list[str] = []
    if queries is not None:
        if not queries.is_file():
            console.print(f"[red]error:[/red] no file {queries}")
            raise typer.Exit(2)
        texts = [line.strip() for line in queries.read_text(encoding="utf-8").splitlines()]
        texts = [t for t in texts if t]

    async def go() -> Calibration:
        async with await AsyncMemory.open(settings) as mem:
            return await calibrate(mem, queries=texts, user_id=user, sample=sample, drop_share=drop)

    try:
        result = asyncio.run(go())
    except MemstackError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
    if not result.distances:
        console.print("no vector hits: ingest some messages first (memstack worker / drain)")
        raise typer.Exit(1)
    table = Table(
        title=f"cosine distance of {len(result.distances)} hits, {result.queries} queries"
    )
    table.add_column("percentile")
    table.add_column("distance")
    for p, d in result.percentiles().items():
        table.add_row(str(p), f"{d:.4f}")
    console.print(table)
    console.print(
        f"a cut at [bold]{result.threshold}[/bold] drops {drop:.0%} of the hits: "
        f"MEMSTACK_DISTANCE_THRESHOLD={result.threshold}"
    )
    print(
        json.dumps(
            {
                "queries": result.queries,
                "hits": len(result.distances),
                "threshold": result.threshold,
            }
        ),
        flush=True,
    )
