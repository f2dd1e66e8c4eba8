"""The ``memstack`` command line (typer + rich)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from memstack.core.errors import MemstackError
from memstack.core.settings import Settings, load_settings
from memstack.ops.doctor import check_urls

if TYPE_CHECKING:
    from memstack import AddResult, AsyncMemory, KBHit, Skipped

app = typer.Typer(help="memstack: layered memory for long-running AI agents.", no_args_is_help=True)
db_app = typer.Typer(
    help="Database schema (Alembic) and the Redis key layout.", no_args_is_help=True
)
app.add_typer(db_app, name="db")
console = Console()


def _settings() -> Settings:
    """The settings, with the server URLs parsed: a bad one is one line and exit 2."""
    try:
        settings = load_settings()
        check_urls(settings)  # parsed, not connected: no traceback for a bad one
        return settings
    except MemstackError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Bring the database schema to REVISION (default: head), and a Redis server's keys
    to the current layout."""
    from memstack.ops.upgrade import upgrade

    settings = _settings()
    try:
        report = upgrade(settings, revision)
    except MemstackError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
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

    settings = _settings()
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
def config() -> None:
    """Print every setting as a Markdown table (the README's configuration table)."""
    from memstack.core.settings import settings_table

    print(settings_table())


@app.command()
def demo(
    locale: Annotated[str, typer.Option(help="zh or en")] = "zh",
) -> None:
    """Run a short scripted conversation (a budget stated, then changed)."""
    from memstack.ops.demo import run_demo

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
    from memstack import AsyncMemory

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


# --- knowledge base ----------------------------------------------------------------

kb_app = typer.Typer(
    help="The knowledge base searched by the session knowledge cache.", no_args_is_help=True
)
app.add_typer(kb_app, name="kb")
NamespaceOption = Annotated[
    str, typer.Option("--namespace", "-n", help="Knowledge base namespace (tenant).")
]
T = TypeVar("T")


def _with_memory(settings: Settings, work: Callable[[AsyncMemory], Awaitable[T]]) -> T:
    from memstack import AsyncMemory

    async def run() -> T:
        async with await AsyncMemory.open(settings) as mem:
            return await work(mem)

    try:
        return asyncio.run(run())
    except MemstackError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc


@kb_app.command("add")
def kb_add(
    paths: Annotated[list[Path], typer.Argument(help="Text or Markdown files, or folders.")],
    namespace: NamespaceOption = "default",
) -> None:
    """Add or replace documents; unchanged ones are skipped.

    A file named here must be a usable text or Markdown file, or nothing is added. In a
    folder, files that are empty, binary, over MEMSTACK_MAX_DOCUMENT_BYTES or of another
    type are skipped and listed, and the rest is added: the exit code is 0 when anything
    was added (or found unchanged), 1 when nothing could be.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from memstack import AddReport

    settings = _settings()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("reading", total=None)

        def advance(done: int, total: int, result: AddResult) -> None:
            bar.update(task, completed=done, total=total, description=result.doc_id)

        results = _with_memory(
            settings, lambda mem: mem.kb_add(*paths, namespace=namespace, progress=advance)
        )
    table = Table(title=f"knowledge base {namespace!r}")
    for col in ("doc_id", "status", "chunks", "title"):
        table.add_column(col)
    for r in results:
        table.add_row(r.doc_id, r.status, str(r.chunk_count), Text(r.title))
    console.print(table)
    counts = Counter(r.status for r in results)
    skipped = results.skipped if isinstance(results, AddReport) else []
    summary = [f"{counts[s]} {s}" for s in ("added", "replaced", "unchanged") if counts[s]]
    console.print(", ".join([*summary, *([f"{len(skipped)} skipped"] if skipped else [])]))
    _print_skipped(skipped)


SKIPS_SHOWN = 50


def _print_skipped(skipped: list[Skipped]) -> None:
    if not skipped:
        return
    console.print(f"skipped {len(skipped)} file{'s' if len(skipped) != 1 else ''}:")
    for s in skipped[:SKIPS_SHOWN]:
        console.print(f"  {s.path}: {s.reason}", markup=False, highlight=False)
    if len(skipped) > SKIPS_SHOWN:
        console.print(f"  … and {len(skipped) - SKIPS_SHOWN} more")


@kb_app.command("list")
def kb_list(namespace: NamespaceOption = "default") -> None:
    """List the documents of the knowledge base."""
    docs = _with_memory(_settings(), lambda mem: mem.kb_list(namespace=namespace))
    if not docs:
        console.print(f"knowledge base {namespace!r} is empty")
        return
    table = Table(title=f"knowledge base {namespace!r}: {len(docs)} documents")
    for col in ("doc_id", "title", "chunks", "updated", "source"):
        table.add_column(col)
    for d in docs:
        updated = d.updated_at.strftime("%Y-%m-%d %H:%M")
        table.add_row(d.doc_id, Text(d.title), str(d.chunk_count), updated, Text(d.source))
    console.print(table)


@kb_app.command("remove")
def kb_remove(
    doc_id: Annotated[str, typer.Argument(help="Id shown by `memstack kb list`.")],
    namespace: NamespaceOption = "default",
) -> None:
    """Remove a document and its chunks."""
    doc = _with_memory(_settings(), lambda mem: mem.kb_remove(doc_id, namespace=namespace))
    console.print(f"removed {doc.doc_id} ({doc.chunk_count} chunks)")


@kb_app.command("search")
def kb_search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    top_k: Annotated[int | None, typer.Option(help="Hits (default: kb_top_k).")] = None,
    all_: Annotated[
        bool,
        typer.Option("--all", help="Also show the nearest chunks scoring below kb_min_score."),
    ] = False,
    namespace: NamespaceOption = "default",
) -> None:
    """Search the knowledge base as Level 2 does each turn: hits scoring below
    kb_min_score are noise and left out (unless --all)."""
    settings = _settings()

    async def work(mem: AsyncMemory) -> tuple[list[KBHit], int | None]:
        kb = await mem.knowledge_base(namespace)
        hits = await kb.search(query, top_k, min_score=-1.0 if all_ else None)
        # Only when nothing is found: say whether there was anything to find.
        return hits, None if hits else len(await kb.documents())

    hits, documents = _with_memory(settings, work)
    if not hits:
        if documents == 0:
            console.print(f"no hits: knowledge base {namespace!r} is empty")
        else:
            plural = "s" if documents != 1 else ""
            console.print(
                f"no hits: no chunk of knowledge base {namespace!r} ({documents} document"
                f"{plural}) scores at least {settings.kb_min_score:g} (kb_min_score); "
                "--all shows the nearest anyway"
            )
        return
    table = Table(title=f"{len(hits)} hit{'s' if len(hits) != 1 else ''}")
    for col in ("score", "doc_id", "chunk", "text"):
        table.add_column(col)
    for h in hits:
        text = h.text if len(h.text) <= 120 else h.text[:119] + "…"
        noise = h.score < settings.kb_min_score  # shown with --all only
        table.add_row(
            f"{h.score:.3f}", h.doc_id, str(h.chunk_idx), Text(text), style="dim" if noise else None
        )
    console.print(table)


@app.command("eval")
def eval_(
    dataset: Annotated[str, typer.Argument(help="locomo, longmemeval or facts")],
    data: Annotated[
        Path, typer.Option(help="Dataset file (.json or .json.gz; JSONL cases for facts).")
    ],
    semantic_budget: Annotated[
        int | None, typer.Option(help="Tokens of related history (default 1000 / 2000).")
    ] = None,
    limit: Annotated[
        int | None, typer.Option(help="Conversations (LoCoMo), questions or fact cases.")
    ] = None,
    top_k: Annotated[
        int | None,
        typer.Option(help="Candidates per recall channel (default: sized to the budget)."),
    ] = None,
    home: Annotated[
        Path | None, typer.Option(help="Embedded stores (default: a temp dir).")
    ] = None,
) -> None:
    """Evidence recall of context() on LoCoMo or LongMemEval, or fact extraction on cases
    of user messages (facts); last line is JSON."""
    if dataset == "facts":
        from memstack.eval.facts import run_cli as facts_cli

        if semantic_budget is not None or top_k is not None:
            console.print("[red]error:[/red] --semantic-budget and --top-k are for recall evals")
            raise typer.Exit(2)
        facts_cli(console, _settings(), data, limit, home)
        return
    from memstack.eval.recall import run_cli

    run_cli(console, _settings(), dataset, data, semantic_budget, limit, top_k, home)


@app.command()
def calibrate(
    queries: Annotated[Path | None, typer.Option(help="One query per line (needs --user).")] = None,
    user: Annotated[str | None, typer.Option(help="Whose memory to ask.")] = None,
    sample: Annotated[int, typer.Option(help="Ledger messages to sample as queries.")] = 200,
    drop: Annotated[float, typer.Option(help="Share of hits the cut should drop.")] = 0.4,
) -> None:
    """Distance distribution of sample queries and the cut dropping ~40%."""
    from memstack.ops.calibrate import calibrate_cli

    calibrate_cli(console, _settings(), queries, user, sample, drop)


# --- maintenance ------------------------------------------------------------------------


@app.command()
def maintain(
    apply: Annotated[bool, typer.Option("--apply", help="Do it (default: a dry run).")] = False,
) -> None:
    """Archive cold facts and prune inactive users' old dialogue vectors.

    Without --apply it only reports what would go.
    """
    settings = _settings()

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

    _with_memory(settings, work)


@app.command()
def reindex(
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Drop semantic memory and rebuild it from the ledger with the configured embedder."""
    from rich.progress import Progress

    settings = _settings()
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
        )

    _with_memory(settings, work)


@app.command("dead-letters")
def dead_letters(
    requeue: Annotated[
        bool, typer.Option("--requeue", help="Put them back on the ingest stream.")
    ] = False,
) -> None:
    """List ingest jobs that failed on every delivery, or requeue them."""
    settings = _settings()

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

    _with_memory(settings, work)


# --- network entry points ---------------------------------------------------------------


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
) -> None:
    """Run the HTTP API (FastAPI under uvicorn); /docs describes every route."""
    import uvicorn

    from memstack.server.http import create_app

    settings = _settings()
    if settings.embedded_redis:
        console.print(
            "[yellow]embedded mode:[/yellow] the queue lives in this process; "
            "POST /v1/admin/drain turns pending messages into facts and vectors."
        )
    uvicorn.run(create_app(settings), host=host, port=port)


@app.command("mcp")
def mcp_() -> None:
    """Serve memstack's MCP tools over stdio (for an MCP client such as Claude Desktop)."""
    from memstack.server.mcp import create_server

    create_server(_settings()).run("stdio")


def main() -> None:
    app()
