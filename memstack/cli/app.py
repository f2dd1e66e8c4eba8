"""What every command shares: the typer app, the console, the settings as loaded for a
command, and a memory opened for one piece of work."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from memstack.core.errors import MemstackError
from memstack.core.settings import Settings, load_settings
from memstack.ops.doctor import check_urls

if TYPE_CHECKING:
    from memstack import AsyncMemory

app = typer.Typer(help="memstack: layered memory for long-running AI agents.", no_args_is_help=True)
console = Console()
T = TypeVar("T")


def _print_version(asked: bool) -> None:
    if asked:
        from memstack import __version__

        console.print(f"memstack {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """memstack: layered memory for long-running AI agents."""


def cli_settings() -> Settings:
    """The settings, with the server URLs parsed: a bad one is one line and exit 2."""
    try:
        settings = load_settings()
        check_urls(settings)  # parsed, not connected: no traceback for a bad one
        return settings
    except MemstackError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc


def fail(exc: MemstackError, code: int = 1) -> typer.Exit:
    """Print a memstack error as one line; the caller raises the exit it returns."""
    console.print(f"[red]error:[/red] {escape(str(exc))}")
    return typer.Exit(code)


def with_memory(settings: Settings, work: Callable[[AsyncMemory], Awaitable[T]]) -> T:
    """Open the memory, run ``work`` on it, close it; a memstack error is one line, exit 1."""
    from memstack import AsyncMemory

    async def run() -> T:
        async with await AsyncMemory.open(settings) as mem:
            return await work(mem)

    try:
        return asyncio.run(run())
    except MemstackError as exc:
        raise fail(exc) from exc
