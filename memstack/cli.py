"""The ``memstack`` command line (typer + rich)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from memstack import db
from memstack.errors import MemstackError
from memstack.settings import Settings, load_settings

app = typer.Typer(help="memstack: layered memory for long-running AI agents.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema (Alembic).", no_args_is_help=True)
app.add_typer(db_app, name="db")
console = Console()


def _settings() -> Settings:
    try:
        return load_settings()
    except MemstackError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc


def describe_mode(settings: Settings) -> str:
    parts = [
        "Redis: " + (settings.redis_url or "embedded (in-process fakeredis, not persistent)"),
        "Database: "
        + (settings.database_url or f"embedded SQLite at {settings.home / 'memstack.db'}"),
        f"Vectors: {settings.vector_store} "
        + (settings.vector_url or f"embedded in {settings.home}"),
    ]
    return "\n".join(parts)


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Bring the database schema to REVISION (default: head)."""
    settings = _settings()
    try:
        db.upgrade(settings, revision)
    except MemstackError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
    console.print(
        f"database at revision [bold]{db.head_revision() if revision == 'head' else revision}"
    )


@app.command()
def doctor() -> None:
    """Reach each configured store, print its version and mode; exit 1 if one is down."""
    from memstack.doctor import run_checks

    settings = _settings()
    results = asyncio.run(run_checks(settings))
    table = Table(title="memstack doctor")
    for col in ("store", "mode", "status", "detail"):
        table.add_column(col)
    ok = True
    for r in results:
        ok &= r.ok
        table.add_row(r.store, r.mode, "[green]ok[/green]" if r.ok else "[red]down[/red]", r.detail)
    console.print(table)
    if not ok:
        raise typer.Exit(1)


@app.command()
def config() -> None:
    """Print every setting as a Markdown table (the README's configuration table)."""
    from memstack.settings import settings_table

    print(settings_table())


@app.command()
def demo(
    locale: Annotated[str, typer.Option(help="zh or en")] = "zh",
) -> None:
    """Run a short scripted conversation (seed 002: a budget stated, then changed)."""
    from memstack.demo import run_demo

    settings = _settings()
    try:
        asyncio.run(run_demo(settings, console, locale))
    except MemstackError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc


@app.command()
def worker(
    batch: Annotated[int | None, typer.Option(help="Jobs per batch (default: settings)")] = None,
) -> None:
    """Run an ingest worker until SIGTERM/SIGINT; the batch in hand is finished first."""
    from memstack.memory import AsyncMemory

    settings = _settings()
    if settings.embedded_redis:
        console.print(
            "[red]error:[/red] the embedded Redis lives inside one process; a separate worker "
            "cannot see its queue. Set MEMSTACK_REDIS_URL, or call drain() in your process."
        )
        raise typer.Exit(2)
    if batch is not None:
        settings = settings.model_copy(update={"ingest_batch": batch})

    async def run() -> None:
        import signal

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with await AsyncMemory.open(settings) as mem:
            w = await mem.worker()
            console.print(f"worker {w.consumer} reading {mem.queue.stream} (batch {w.batch_size})")
            report = await w.run(stop)
            console.print(
                f"stopped: {report.processed} processed, {report.failed} failed, "
                f"{report.dead_lettered} dead-lettered, {report.summaries} summaries"
            )

    try:
        asyncio.run(run())
    except MemstackError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc


def main() -> None:
    app()
