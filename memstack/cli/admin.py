"""Setting up and looking after a deployment: the schema, the health check, the settings,
the demo, maintenance, re-embedding and dead letters."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from memstack.cli.app import app, cli_settings, console, fail, with_memory
from memstack.core.errors import MemstackError

if TYPE_CHECKING:
    from memstack import AsyncMemory

db_app = typer.Typer(
    help="Database schema (Alembic) and the Redis key layout.", no_args_is_help=True
)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Bring the database schema to REVISION (default: head), and a Redis server's keys
    to the current layout."""
    from memstack.ops.upgrade import upgrade

    settings = cli_settings()
    try:
        report = upgrade(settings, revision)
    except MemstackError as exc:
        raise fail(exc) from exc
    console.print(f"database at revision [bold]{report.revision}")
    if report.redis_keys_moved is not None:
        console.print(
            f"Redis keys at layout [bold]{report.redis_layout}[/bold] "
            f"({report.redis_keys_moved} moved)"
        )


@app.command()
def doctor() -> None:
    """Reach each configured store, print its version and mode; exit 1 if one is down,
    needs `memstack db upgrade`, or is set up to lose data (a Redis that keeps nothing on
    disk; in server mode, a store each process would keep under its own working
    directory)."""
    from memstack.ops.doctor import run_checks

    settings = cli_settings()
    results = asyncio.run(run_checks(settings))
    table = Table(title="memstack doctor")
    for col in ("store", "mode", "status", "detail"):
        table.add_column(col)
    ok = True
    for r in results:
        ok &= r.ok
        color = "green" if r.ok else "red"
        table.add_row(r.store, r.mode, f"[{color}]{r.label}[/{color}]", r.detail)
    console.print(table)
    if not ok:
        raise typer.Exit(1)


@app.command()
def config(
    markdown: Annotated[
        bool, typer.Option("--markdown", help="The defaults as the README's Markdown table.")
    ] = False,
) -> None:
    """Show every setting's value in effect and where it came from (secrets masked), and
    warn about MEMSTACK_* variables that no setting reads; exit 1 if there are any."""
    import os

    from memstack.core.settings import settings_table
    from memstack.ops.config import dotenv_file, unknown_variables, values_in_effect

    if markdown:
        print(settings_table())
        return
    dotenv = dotenv_file()
    table = Table(title="memstack settings in effect")
    for col in ("variable", "value", "from"):
        table.add_column(col, overflow="fold")
    for row in values_in_effect(cli_settings(), os.environ, dotenv):
        table.add_row(
            row.variable,
            Text(row.value),
            row.source,
            style=None if row.source == "default" else "bold",
        )
    console.print(table)
    unknown = unknown_variables(os.environ, dotenv)
    for u in unknown:
        hint = f"; did you mean {u.suggestion}?" if u.suggestion else ""
        console.print(f"[yellow]warning:[/yellow] {u.variable} ({u.source}) is not a setting{hint}")
    if unknown:
        raise typer.Exit(1)


@app.command()
def demo(
    locale: Annotated[str, typer.Option(help="zh or en")] = "zh",
) -> None:
    """Run a short scripted conversation (a budget stated, then changed)."""
    from memstack.ops.demo import run_demo

    settings = cli_settings()
    try:
        asyncio.run(run_demo(settings, console, locale))
    except MemstackError as exc:
        raise fail(exc) from exc


# --- maintenance ------------------------------------------------------------------------


@app.command()
def maintain(
    apply: Annotated[bool, typer.Option("--apply", help="Do it (default: a dry run).")] = False,
) -> None:
    """Archive cold facts and prune inactive users' old dialogue vectors.

    Without --apply it only reports what would go.
    """
    settings = cli_settings()

    async def work(mem: AsyncMemory) -> None:
        report = await mem.maintain(dry_run=not apply)
        verb = "would" if report.dry_run else "did"
        console.print(f"facts: {verb} archive {report.facts_archived}")
        console.print(
            f"vectors: {verb} prune {report.vectors_pruned} dialogue chunks of "
            f"{len(report.inactive_users)} users silent for {settings.retention_dialogue_days} days"
        )
        leaks = await mem.keys_without_ttl()
        console.print(
            f"redis: {len(leaks)} keys without a TTL" + (f": {leaks[:10]}" if leaks else "")
        )

    with_memory(settings, work)


@app.command()
def reindex(
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    embedder: Annotated[
        str | None,
        typer.Option(help="Re-embed with this embedder (e.g. e5-small), kept from then on."),
    ] = None,
) -> None:
    """Drop semantic memory and rebuild it from the ledger with the configured embedder
    (or --embedder); facts are not extracted again."""
    from rich.progress import Progress

    settings = cli_settings()
    if embedder is not None:
        settings = settings.with_embedder(embedder)
    if not yes:
        typer.confirm(
            f"Drop the {settings.key_prefix}_memory collection and re-embed every message?",
            abort=True,
        )

    async def work(mem: AsyncMemory) -> None:
        with Progress(console=console) as bar:
            task = bar.add_task("re-embedding", total=None)
            report = await mem.reindex(
                progress=lambda done, total: bar.update(task, completed=done, total=total)
            )
        console.print(
            f"reindexed {report.messages} messages into {report.chunks} chunks "
            f"and {report.summaries} summaries with {mem.embedder.model_version}"
            + (f"; {report.documents} knowledge-base documents moved" if report.documents else "")
        )

    with_memory(settings, work)


@app.command("dead-letters")
def dead_letters(
    requeue: Annotated[
        bool, typer.Option("--requeue", help="Put them back on the ingest stream.")
    ] = False,
) -> None:
    """List ingest jobs that failed on every delivery, or requeue them."""
    settings = cli_settings()

    async def work(mem: AsyncMemory) -> None:
        if requeue:
            console.print(f"requeued {await mem.queue.requeue_dead()} jobs")
            return
        table = Table(title="dead letters")
        for col in ("msg_id", "user_id", "deliveries", "error"):
            table.add_column(col)
        for d in await mem.dead_letters():
            table.add_row(
                d.fields.get("msg_id", "?"),
                d.fields.get("user_id", "?"),
                str(d.deliveries),
                d.error,
            )
        console.print(table)

    with_memory(settings, work)
