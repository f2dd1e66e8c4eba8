"""The long-running processes: the ingest worker, the HTTP API and the MCP server."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from memstack.cli.app import (
    app,
    cli_settings,
    console,
    debugging,
    err_console,
    error,
    fail,
    with_memory,
)
from memstack.core.errors import MemstackError

if TYPE_CHECKING:
    from memstack import AsyncMemory
    from memstack.core.settings import Settings


@app.command()
def worker(
    batch: Annotated[int | None, typer.Option(help="Jobs per batch (default: settings)")] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="Serve Prometheus /metrics of this worker on this port."),
    ] = None,
    metrics_host: Annotated[str, typer.Option(help="Interface of --metrics-port.")] = "127.0.0.1",
) -> None:
    """Run an ingest worker until SIGTERM/SIGINT; the batch in hand is finished first.
    Every MEMSTACK_WORKER_LOG_INTERVAL_S it logs its progress and the backlog."""
    import logging

    from memstack import AsyncMemory

    settings = cli_settings()
    if settings.embedded_redis:
        raise error(
            "the embedded Redis lives inside one process; a separate worker cannot see its "
            "queue. Set MEMSTACK_REDIS_URL, or call drain() in your process."
        )
    refuse_unsafe(settings)
    if batch is not None:
        settings = settings.model_copy(update={"ingest_batch": batch})
    # The progress lines are INFO records of memstack's loggers; nothing else is set up.
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("memstack").setLevel(logging.INFO)
    if metrics_port is not None:
        from prometheus_client import start_http_server

        # A worker has no HTTP server of its own; this one answers /metrics only.
        start_http_server(metrics_port, addr=metrics_host)

    async def run() -> None:
        import signal

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with await AsyncMemory.open(settings) as mem:
            w = await mem.worker()
            streams = [stream for stream, _dead in mem.queue.pairs]
            where = streams[0] if len(streams) == 1 else f"{len(streams)} ingest shards"
            console.print(f"worker {w.consumer} reading {where} (batch {w.batch_size})")
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
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="API processes sharing the port and the stores (needs MEMSTACK_REDIS_URL "
            "and MEMSTACK_VECTOR_URL when above 1).",
        ),
    ] = 1,
) -> None:
    """Run the HTTP API (FastAPI under uvicorn); /docs describes every route."""
    import uvicorn

    settings = cli_settings()
    if workers > 1:
        _refuse_shared_processes(settings)
    refuse_unsafe(settings)
    # The app opens the stores in its lifespan, where a store that is down becomes
    # uvicorn's traceback: open them once here first, so it is one line instead.
    with_memory(settings, _nothing)
    if workers > 1:
        # Each process builds its own app from the environment (create_app(None)), the
        # same settings this process just checked.
        uvicorn.run(
            "memstack.server.http:create_app", factory=True, host=host, port=port, workers=workers
        )
        return
    from memstack.server.http import create_app

    if settings.embedded_redis:
        console.print(
            "[yellow]embedded mode:[/yellow] the queue lives in this process; "
            "POST /v1/admin/drain turns pending messages into facts and vectors."
        )
    uvicorn.run(create_app(settings), host=host, port=port)


def refuse_unsafe(settings: Settings) -> None:
    """Stop here (one line, exit 2) in a configuration `memstack doctor` calls unsafe,
    unless MEMSTACK_ALLOW_UNSAFE is set: then one warning line says what is unsafe. The
    embedded default is one process and never refused."""
    from rich.markup import escape

    from memstack.ops.safety import override_warning, refusal, unsafe_settings

    found = asyncio.run(unsafe_settings(settings))
    if not found:
        return
    if not settings.allow_unsafe:
        raise error(refusal(found), 2)
    # stderr: an MCP server's stdout is its protocol.
    warning = escape(override_warning(found))
    err_console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)


async def _nothing(_mem: AsyncMemory) -> None:
    """What the check before serving does with the opened memory."""


def _refuse_shared_processes(settings: Settings) -> None:
    """Several API processes share the stores only through servers: the embedded Redis
    and the local vector store in MEMSTACK_HOME live inside one process."""
    if settings.embedded_redis:
        raise error(
            "--workers above 1 needs MEMSTACK_REDIS_URL: the embedded Redis (and its "
            "ingest queue) lives inside one process."
        )
    if not settings.vector_url:
        raise error(
            "--workers above 1 needs MEMSTACK_VECTOR_URL (a Chroma server or Qdrant): the "
            "local vector store in MEMSTACK_HOME is held by one process."
        )


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
    refuse_unsafe(settings)
    try:
        server = create_server(
            settings, user_id=user, allow_forget=allow_forget, log_level=_mcp_log_level()
        )
    except MemstackError as exc:
        raise fail(exc, 2) from exc
    try:
        server.run("stdio")
    except BaseExceptionGroup as group:
        # The server opens the memory in its lifespan, inside a task group: a store
        # that is down arrives wrapped; shown as the one line it is.
        raise fail(_first_leaf(group)) from group


def _mcp_log_level() -> Literal["INFO", "WARNING"]:
    """stderr of an MCP server is read by people only when something is wrong: warnings
    and errors, unless --debug asks for the INFO lines (migrations, HTTP requests)."""
    return "INFO" if debugging() else "WARNING"


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception in a (nested) exception group that is not a group."""
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first
