"""``memstack kb``: the knowledge base searched by the session knowledge cache."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from memstack.cli.app import app, cli_settings, console, with_memory

if TYPE_CHECKING:
    from memstack import AddResult, AsyncMemory, KBHit, Skipped

kb_app = typer.Typer(
    help="The knowledge base searched by the session knowledge cache.", no_args_is_help=True
)
app.add_typer(kb_app, name="kb")
NamespaceOption = Annotated[
    str, typer.Option("--namespace", "-n", help="Knowledge base namespace (tenant).")
]


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

    settings = cli_settings()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("reading", total=None)

        def advance(done: int, total: int, result: AddResult) -> None:
            bar.update(task, completed=done, total=total, description=result.doc_id)

        results = with_memory(
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
    docs = with_memory(cli_settings(), lambda mem: mem.kb_list(namespace=namespace))
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
    doc = with_memory(cli_settings(), lambda mem: mem.kb_remove(doc_id, namespace=namespace))
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
    settings = cli_settings()

    async def work(mem: AsyncMemory) -> tuple[list[KBHit], int | None]:
        kb = await mem.knowledge_base(namespace)
        hits = await kb.search(query, top_k, min_score=-1.0 if all_ else None)
        # Only when nothing is found: say whether there was anything to find.
        return hits, None if hits else len(await kb.documents())

    hits, documents = with_memory(settings, work)
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
