"""``memstack status``: the live ingest workers and how far behind ingest is."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from memstack.cli.app import app, cli_settings, console, error, with_memory

if TYPE_CHECKING:
    from memstack import AsyncMemory, IngestStatus


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """The live ingest workers (id, host, pid, seconds since the last heartbeat), and
    per ingest stream the jobs not yet acknowledged and how long the oldest has waited.
    Exit 1 when jobs wait and no worker is alive."""
    settings = cli_settings()
    if settings.embedded_redis:
        raise error(
            "the embedded Redis lives inside one process; no other process can see its "
            "workers or queue. Set MEMSTACK_REDIS_URL."
        )

    async def read(mem: AsyncMemory) -> IngestStatus:
        return await mem.status()

    report = with_memory(settings, read)
    if as_json:
        body = {
            "workers": [asdict(w) for w in report.workers],
            "streams": [asdict(s) for s in report.streams],
            "pending": report.pending,
            "oldest_age_s": report.oldest_age_s,
            "stalled": report.stalled,
        }
        typer.echo(json.dumps(body, indent=2))
    else:
        _print(report)
    if report.stalled:
        raise typer.Exit(1)


def _print(report: IngestStatus) -> None:
    workers = Table(title=f"workers alive: {len(report.workers)}")
    for col in ("worker", "host", "pid", "last beat"):
        workers.add_column(col)
    for w in report.workers:
        workers.add_row(w.worker_id, w.host, str(w.pid), f"{w.age_s:.1f} s ago")
    console.print(workers)
    streams = Table(title="ingest streams")
    for col in ("stream", "pending", "oldest waits", "dead letters"):
        streams.add_column(col)
    for s in report.streams:
        streams.add_row(s.stream, str(s.pending), f"{s.oldest_age_s:.1f} s", str(s.dead_letters))
    console.print(streams)
    if report.stalled:
        console.print(
            f"[red]{report.pending} jobs wait and no worker is alive:[/red] "
            "start `memstack worker` with the same settings."
        )
