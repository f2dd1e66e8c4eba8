"""``memstack export`` and ``memstack import``: moving memory between deployments as a
JSON Lines file (see the README, "Moving memory")."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from memstack.cli.app import app, cli_settings, console, error, with_memory

if TYPE_CHECKING:
    from collections.abc import Iterator

    from rich.progress import Progress


def _bar() -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    return Progress(*columns, console=console, transient=True)


def _counts(title: str, rows: Iterator[tuple[str, ...]], headers: tuple[str, ...]) -> None:
    console.print(title, soft_wrap=True, markup=False, highlight=False)
    table = Table()
    for col in headers:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    console.print(table)


@app.command("export")
def export_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="The file to write (JSON Lines).")],
    user: Annotated[str | None, typer.Option("--user", help="The user to export.")] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Every user, and the knowledge base.")
    ] = False,
) -> None:
    """Write a user's memory (--user), or every user's and the knowledge base (--all), to
    a file: the ledger, the fact history, summaries, tool results and task state. Drain
    or let the workers finish first: messages still queued are not in the ledger yet."""
    if (user is None) == (not all_):
        raise error("name one user with --user, or export all with --all")
    settings = cli_settings()
    with _bar() as bar:
        task = bar.add_task("exporting", total=None)

        def advance(stage: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None, description=stage)

        report = with_memory(settings, lambda mem: mem.export(out, user_id=user, progress=advance))
    rows = ((kind, str(n)) for kind, n in sorted(report.records.items()))
    _counts(f"exported {len(report.users)} user(s) to {out}", rows, ("records", "count"))
    for doc in report.skipped_documents:
        console.print(f"skipped document {doc}: a chunk is missing (add it again)")
    if report.withheld_facts:
        console.print(
            f"left out {report.withheld_facts} fact row(s) whose stored value cannot be read "
            "back (the server log names them)"
        )


@app.command("import")
def import_command(
    path: Annotated[Path, typer.Argument(help="A file `memstack export` wrote.")],
) -> None:
    """Read an export into this deployment. The whole file is checked first: a bad line
    is reported with its number and nothing is written. Rows already here are kept, so
    importing a file twice changes nothing; messages and summaries are embedded with
    this deployment's embedder, facts are written as they were."""
    if not path.is_file():
        raise error(f"no file {path}")
    settings = cli_settings()
    with _bar() as bar:
        task = bar.add_task("checking", total=None)

        def advance(stage: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None, description=stage)

        report = with_memory(settings, lambda mem: mem.import_file(path, progress=advance))
    kinds = sorted(set(report.records) | set(report.written))
    rows = (
        (kind, str(report.records.get(kind, 0)), str(report.written.get(kind, 0))) for kind in kinds
    )
    title = f"imported {len(report.users)} user(s) from {path}"
    _counts(title, rows, ("records", "in the file", "written"))
