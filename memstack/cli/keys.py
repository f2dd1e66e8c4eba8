"""``memstack keys``: the API keys of the HTTP API (create, list, revoke)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from memstack.cli.app import app, cli_settings, console, error, with_memory
from memstack.core.api_keys import KB_WRITE, SCOPES

if TYPE_CHECKING:
    from memstack import ApiKey

keys_app = typer.Typer(
    help="API keys of the HTTP API: once one exists, every /v1 request needs a key.",
    no_args_is_help=True,
)
app.add_typer(keys_app, name="keys")


def _when(at: datetime | None) -> str:
    return "" if at is None else at.strftime("%Y-%m-%d %H:%M")


def _holder(key: ApiKey) -> Text:
    return Text("(admin key)", style="bold") if key.user_id is None else Text(key.user_id)


@keys_app.command("create")
def keys_create(
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="The user whose memory the key reaches.")
    ] = None,
    admin: Annotated[bool, typer.Option("--admin", help="A key that reaches everything.")] = False,
    kb_write: Annotated[
        bool, typer.Option("--kb-write", help=f"Grant {KB_WRITE}: {SCOPES[KB_WRITE]}.")
    ] = False,
) -> None:
    """Create a key and print it once, on the last line; only a hash of it is stored."""
    if (user is None) == (not admin):
        raise error("give --user USER or --admin (one of them)")
    scopes = [KB_WRITE] if kb_write else []
    settings = cli_settings()
    key, text = with_memory(settings, lambda mem: mem.create_key(user, admin=admin, scopes=scopes))
    who = "admin key" if key.admin else f"key of user {key.user_id}"
    grants = f" ({', '.join(sorted(key.scopes))})" if key.scopes else ""
    console.print(f"created {who}{grants}: id {key.key_id}", markup=False, highlight=False)
    console.print("store it now, it is not shown again:", markup=False, highlight=False)
    # Plain, unwrapped and last, for scripts: `memstack keys create … | tail -n 1`.
    typer.echo(text)


@keys_app.command("list")
def keys_list() -> None:
    """Every key of this deployment (MEMSTACK_KEY_PREFIX), revoked ones included."""
    found = with_memory(cli_settings(), lambda mem: mem.list_keys())
    if not found:
        console.print("no API keys: the HTTP API is open unless MEMSTACK_API_TOKEN is set")
        return
    table = Table(title="API keys", caption="times in UTC")
    for col in ("id", "user", "scopes", "created", "revoked"):
        table.add_column(col, no_wrap=col in ("id", "created", "revoked"))
    for key in found:
        table.add_row(
            key.key_id,
            _holder(key),
            " ".join(sorted(key.scopes)),
            _when(key.created_at),
            _when(key.revoked_at),
        )
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id, as `memstack keys list` shows.")],
) -> None:
    """Revoke a key for good; servers refuse it within 2 seconds."""
    key = with_memory(cli_settings(), lambda mem: mem.revoke_key(key_id))
    console.print(f"revoked {key.key_id} ({_when(key.revoked_at)} UTC)", markup=False)
