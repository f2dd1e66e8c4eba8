"""What every command shares: the typer app, the console, the settings as loaded for a
command, a memory opened for one piece of work, and the one way an error is shown.

Every error a command ends with is one line on stderr, ``error: …``: a store that is
down, a bad setting, a usage mistake, a bug. ``--debug`` (or ``MEMSTACK_DEBUG=1``) adds
the traceback above it.

Nothing here imports Redis, SQLAlchemy or a model: ``memstack --help`` imports every
command module, so each imports what it needs inside the command.
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from memstack.core.errors import MemstackError

if TYPE_CHECKING:
    from memstack import AsyncMemory
    from memstack.core.settings import Settings

T = TypeVar("T")
console = Console()
# Errors and warnings: stderr, never wrapped (one line whatever the terminal's width).
err_console = Console(stderr=True, soft_wrap=True)


class _Debug:
    """Whether errors show their traceback: ``--debug`` or MEMSTACK_DEBUG."""

    on = False


def _env_debug() -> bool:
    return os.environ.get("MEMSTACK_DEBUG", "").lower() not in ("", "0", "false", "no")


def one_line(text: str) -> str:
    """``text`` on one line: a driver's message may run over several."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def _describe(exc: BaseException) -> str:
    if isinstance(exc, MemstackError):
        return one_line(str(exc))
    # Not one of ours: a bug or an unexpected failure; its type says more than its text.
    text = one_line(str(exc))
    hint = "" if _Debug.on else " (--debug shows the traceback)"
    return f"{type(exc).__name__}{': ' + text if text else ''}{hint}"


def report(exc: BaseException) -> None:
    """Print ``exc`` as one ``error:`` line on stderr, after its traceback with --debug."""
    if _Debug.on:
        traceback.print_exception(exc, file=sys.stderr)
    err_console.print(f"[red]error:[/red] {escape(_describe(exc))}", highlight=False)


def error(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` as the command's one ``error:`` line; the caller raises the exit
    it returns."""
    err_console.print(f"[red]error:[/red] {escape(one_line(message))}", highlight=False)
    return typer.Exit(code)


def fail(exc: BaseException, code: int = 1) -> typer.Exit:
    """Print an error as one line; the caller raises the exit it returns."""
    report(exc)
    return typer.Exit(code)


class _Group(TyperGroup):
    """The app's group: runs the command, and shows whatever it ends with as one line."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        _Debug.on = _env_debug()
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.TyperException as exc:  # click's errors (typer carries its own click)
            _usage_error(exc)
            code = exc.exit_code
        except typer.Abort:  # a question answered no, or stdin closed: no error, nothing done
            err_console.print("Aborted.")
            code = 1
        except Exception as exc:
            report(exc)
            code = 1
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


def _usage_error(exc: typer.TyperException) -> None:
    """A usage mistake: the command's usage line, then the ``error:`` line."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        return  # the command's help, which typer printed while raising it
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        err_console.print(ctx.get_usage(), markup=False, highlight=False)
    err_console.print(f"[red]error:[/red] {escape(one_line(exc.format_message()))}")


app = typer.Typer(
    cls=_Group,
    help="memstack: layered memory for long-running AI agents.",
    no_args_is_help=True,
    # A local's value may be a password (a URL, a key): no traceback shows them.
    pretty_exceptions_show_locals=False,
)


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
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Show the traceback above an error (also MEMSTACK_DEBUG=1), and the "
            "servers' INFO logs.",
        ),
    ] = False,
) -> None:
    """memstack: layered memory for long-running AI agents."""
    if debug:
        _Debug.on = True


def debugging() -> bool:
    """Whether this run asked for tracebacks and INFO logs."""
    return _Debug.on


def cli_settings(*, warn: bool = True) -> Settings:
    """The settings, every URL checked part by part: a bad one is one line and exit 2.
    A ``MEMSTACK_*`` variable no setting reads is a ``warning:`` line (unless ``warn`` is
    False: ``memstack config`` lists them itself)."""
    from memstack.core.environment import UnknownSettingWarning
    from memstack.core.settings import load_settings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnknownSettingWarning)
        try:
            settings = load_settings()
        except MemstackError as exc:
            raise error(str(exc), 2) from exc
    for w in caught:
        if not issubclass(w.category, UnknownSettingWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        elif warn:
            err_console.print(f"[yellow]warning:[/yellow] {escape(str(w.message))}")
    return settings


def with_memory(settings: Settings, work: Callable[[AsyncMemory], Awaitable[T]]) -> T:
    """Open the memory, run ``work`` on it, close it; a memstack error is one line, exit 1."""
    import asyncio

    from memstack import AsyncMemory

    async def run() -> T:
        async with await AsyncMemory.open(settings) as mem:
            return await work(mem)

    try:
        return asyncio.run(run())
    except MemstackError as exc:
        raise fail(exc) from exc
