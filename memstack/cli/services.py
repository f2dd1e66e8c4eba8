"""The long-running processes: the ingest worker, the HTTP API and the MCP server."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from memstack.cli.app import app, cli_settings, console, fail
from memstack.core.errors import MemstackError


@app.command()
def worker(
    batch: Annotated[int | None, typer.Option(help="Jobs per batch (default: settings)")] = None,
) -> None:
    """Run an ingest worker until SIGTERM/SIGINT; the batch in hand is finished first."""
    from memstack import AsyncMemory

    settings = cli_settings()
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
        raise fail(exc) from exc


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
) -> None:
    """Run the HTTP API (FastAPI under uvicorn); /docs describes every route."""
    import uvicorn

    from memstack.server.http import create_app

    settings = cli_settings()
    if settings.embedded_redis:
        console.print(
            "[yellow]embedded mode:[/yellow] the queue lives in this process; "
            "POST /v1/admin/drain turns pending messages into facts and vectors."
        )
    uvicorn.run(create_app(settings), host=host, port=port)


@app.command("mcp")
def mcp_(
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            "-u",
            help="Serve this user's memory only: the tools take no user_id, and no other "
            "user's memory can be reached.",
        ),
    ] = None,
    allow_forget: Annotated[
        bool | None,
        typer.Option(
            "--allow-forget/--no-forget",
            help="Offer the destructive tools (forget_user). Default: only without --user.",
        ),
    ] = None,
) -> None:
    """Serve memstack's MCP tools over stdio (for an MCP client such as Claude Desktop)."""
    from memstack.server.mcp import create_server

    settings = cli_settings()
    try:
        server = create_server(settings, user_id=user, allow_forget=allow_forget)
    except MemstackError as exc:
        raise fail(exc, 2) from exc
    server.run("stdio")
