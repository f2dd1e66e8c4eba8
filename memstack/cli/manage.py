"""Reading memory back and correcting it by hand: ``memstack users``, ``sessions``,
``messages``, ``message get|delete``, ``search``, ``facts`` (and ``facts set|delete``,
``facts candidates|confirm|reject``), ``identity`` (and ``identity set``),
``forget-session`` and ``forget-user``."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from memstack.cli.app import app, cli_settings, console, with_memory

if TYPE_CHECKING:
    from memstack import AsyncMemory, Message, StoredCandidate, StoredFact, UserIdentity

UserArg = Annotated[str, typer.Argument(help="The user.", show_default=False)]
SessionArg = Annotated[str, typer.Argument(help="A session of the user.", show_default=False)]
MsgIdArg = Annotated[
    str, typer.Argument(help="A message id, as remember() returned it.", show_default=False)
]
LimitOption = Annotated[int, typer.Option(help="Rows per page (1-1000).")]
OffsetOption = Annotated[int, typer.Option(help="Rows to skip.")]


def _moment(value: str | None) -> datetime | float | None:
    """An option's time: ISO 8601 with its offset, or epoch seconds (the library refuses a
    time without a zone)."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is neither ISO 8601 (2026-03-01T10:00:00+08:00) nor epoch seconds"
        ) from None


def _when(at: datetime | None) -> str:
    return "" if at is None else at.isoformat(timespec="seconds")


def _message_table(title: str, messages: list[Message]) -> Table:
    table = Table(title=title)
    for col in ("msg_id", "time", "role", "content"):
        table.add_column(col, overflow="fold")
    for m in messages:
        role = f"{m.role} ({m.name})" if m.name else m.role
        table.add_row(Text(m.msg_id), _when(m.created_at), Text(role), Text(m.content))
    return table


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _fact_table(title: str, facts: list[StoredFact], *, history: bool = False) -> Table:
    table = Table(title=title)
    columns = ["key", "value", "source", "confidence", "valid from"]
    columns += ["valid until", "message"] if history else ["message"]
    for col in columns:
        table.add_column(col, overflow="fold")
    for f in facts:
        source = f"{f.source} (message deleted)" if f.source_deleted else f.source
        if f.candidate_id is not None:
            source += f" (candidate {f.candidate_id})"
        row: list[str | Text] = [Text(f.key), Text(_value(f.value)), source]
        row.append(f"{f.confidence:.2f}")
        row.append(_when(f.valid_from))
        if history:
            row.append(_when(f.valid_until))
        row.append(Text(f.msg_id))
        table.add_row(*row)
    return table


def _counts(title: str, deleted: dict[str, int]) -> None:
    console.print(f"{title}: " + ", ".join(f"{k} {v}" for k, v in deleted.items()))


# --- reading ---------------------------------------------------------------------------------


@app.command()
def users(limit: LimitOption = 100, offset: OffsetOption = 0) -> None:
    """Users with messages in the ledger, with their counts and last message time."""
    found = with_memory(cli_settings(), lambda mem: mem.users(limit=limit, offset=offset))
    table = Table(title="users")
    for col in ("user", "sessions", "messages", "last message"):
        table.add_column(col)
    for u in found:
        table.add_row(Text(u.user_id), str(u.sessions), str(u.messages), _when(u.last_message_at))
    console.print(table)


@app.command()
def sessions(user_id: UserArg) -> None:
    """The user's sessions in the ledger, oldest first."""
    found = with_memory(cli_settings(), lambda mem: mem.sessions(user_id))
    table = Table(title=f"sessions of {user_id}")
    for col in ("session", "messages", "first message", "last message"):
        table.add_column(col)
    for s in found:
        table.add_row(
            Text(s.session_id), str(s.messages), _when(s.first_message_at), _when(s.last_message_at)
        )
    console.print(table)


@app.command()
def messages(
    user_id: UserArg, session_id: SessionArg, limit: LimitOption = 100, offset: OffsetOption = 0
) -> None:
    """One page of a session's messages as stored, oldest first."""
    found = with_memory(
        cli_settings(),
        lambda mem: mem.messages(user_id, session_id, limit=limit, offset=offset),
    )
    console.print(_message_table(f"{user_id} / {session_id}", found))


message_app = typer.Typer(
    help="One message: read it, or delete it everywhere.", no_args_is_help=True
)
app.add_typer(message_app, name="message")


@message_app.command("get")
def message_get(user_id: UserArg, msg_id: MsgIdArg) -> None:
    """Show one message of the user (exit 1 if the user has no such message)."""
    m = with_memory(cli_settings(), lambda mem: mem.get_message(user_id, msg_id))
    console.print(_message_table(f"{user_id} / {m.session_id}", [m]))


@message_app.command("delete")
def message_delete(user_id: UserArg, msg_id: MsgIdArg) -> None:
    """Delete one message in every layer; the facts it stated stay, marked."""
    deleted = with_memory(cli_settings(), lambda mem: mem.delete_message(user_id, msg_id))
    _counts(f"deleted {msg_id}", deleted)


@app.command()
def search(
    user_id: UserArg,
    query: Annotated[str, typer.Argument(help="What to look for.", show_default=False)],
    limit: Annotated[int, typer.Option(help="Most hits (1-100).")] = 10,
    since: Annotated[str | None, typer.Option(help="From this time (ISO 8601 or epoch s).")] = None,
    until: Annotated[
        str | None, typer.Option(help="Up to this time (ISO 8601 or epoch s).")
    ] = None,
) -> None:
    """The user's messages that best answer QUERY, best first."""
    low, high = _moment(since), _moment(until)

    async def work(mem: AsyncMemory) -> Any:
        return await mem.search(user_id, query, limit=limit, since=low, until=high)

    hits = with_memory(cli_settings(), work)
    table = Table(title=f"{user_id}: {query}")
    for col in ("score", "time", "session", "role", "text", "msg_id"):
        table.add_column(col, overflow="fold")
    for h in hits:
        table.add_row(
            f"{h.score:.3f}",
            _when(h.created_at),
            Text(h.session_id),
            Text(h.role),
            Text(h.text),
            Text(h.msg_id),
        )
    console.print(table)


# --- facts -----------------------------------------------------------------------------------


class _ShowByDefault(TyperGroup):
    """A group whose ``show`` is the default: ``memstack facts USER`` shows the facts,
    ``facts set|delete …`` correct them (and ``identity USER`` as ``facts``)."""

    # ctx is the Context of the click that typer vendors, which it does not export.

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["show", *args]
        return super().parse_args(ctx, args)


facts_app = typer.Typer(
    cls=_ShowByDefault,
    help="The user's facts: `memstack facts USER` shows them, `set` and `delete` correct "
    "them by hand, `candidates` lists those read with too little confidence, which "
    "`confirm` and `reject` decide (a user named like a command: `memstack facts show USER`).",
    no_args_is_help=True,
)
app.add_typer(facts_app, name="facts")
KeyArg = Annotated[str, typer.Argument(help="The fact's key (city, diet, budget…).")]


@facts_app.command("show")
def facts_show(
    user_id: UserArg,
    history: Annotated[bool, typer.Option("--history", help="Every value ever held.")] = False,
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="What held then (ISO 8601 or epoch s).")
    ] = None,
) -> None:
    """The user's current facts (or those of --as-of, or --history)."""
    at = _moment(as_of)

    async def work(mem: AsyncMemory) -> list[StoredFact]:
        if history:
            return await mem.fact_history(user_id)
        return await mem.facts(user_id, as_of=at)

    found = with_memory(cli_settings(), work)
    title = f"facts of {user_id}" + (f" as of {as_of}" if as_of else "")
    console.print(_fact_table(title, found, history=history))


@facts_app.command("set")
def facts_set(
    user_id: UserArg,
    key: KeyArg,
    value: Annotated[str, typer.Argument(help="The value: JSON, or else text.")],
) -> None:
    """Set KEY to VALUE by hand; the value it replaces stays in the history."""
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = value
    fact = with_memory(cli_settings(), lambda mem: mem.set_fact(user_id, key, parsed))
    console.print(_fact_table(f"facts of {user_id}", [fact]))


@facts_app.command("delete")
def facts_delete(user_id: UserArg, key: KeyArg) -> None:
    """End the current value of KEY (kept in the history)."""
    fact = with_memory(cli_settings(), lambda mem: mem.delete_fact(user_id, key))
    console.print(_fact_table(f"ended fact of {user_id}", [fact], history=True))


CandidateIdArg = Annotated[
    int,
    typer.Argument(help="A candidate's id, as `facts candidates` lists it.", show_default=False),
]


def _candidate_table(title: str, candidates: list[StoredCandidate]) -> Table:
    table = Table(title=title)
    columns = ("id", "key", "value", "confidence", "status", "said at", "decided at", "message")
    for col in columns:
        table.add_column(col, overflow="fold")
    for c in candidates:
        table.add_row(
            str(c.id),
            Text(c.key),
            Text(_value(c.value)),
            f"{c.confidence:.2f}",
            c.status,
            _when(c.said_at),
            _when(c.decided_at),
            Text(c.msg_id),
        )
    return table


@facts_app.command("candidates")
def facts_candidates(
    user_id: UserArg,
    status: Annotated[
        str, typer.Option(help="pending, confirmed, rejected, superseded or all.")
    ] = "pending",
    as_of: Annotated[
        str | None,
        typer.Option("--as-of", help="Those pending then (ISO 8601 or epoch s)."),
    ] = None,
    key: Annotated[str | None, typer.Option(help="One fact key.")] = None,
) -> None:
    """Facts read with too little confidence to be the user's, newest first: they wait
    here, never served, until confirmed or rejected."""
    at = _moment(as_of)

    async def work(mem: AsyncMemory) -> list[StoredCandidate]:
        return await mem.candidates(user_id, status=status, as_of=at, key=key)

    found = with_memory(cli_settings(), work)
    title = f"{status} fact candidates of {user_id}" + (f" as of {as_of}" if as_of else "")
    console.print(_candidate_table(title, found))


@facts_app.command("confirm")
def facts_confirm(user_id: UserArg, candidate_id: CandidateIdArg) -> None:
    """Confirm a pending candidate: it becomes the user's current fact."""
    fact = with_memory(cli_settings(), lambda mem: mem.confirm_candidate(user_id, candidate_id))
    console.print(_fact_table(f"facts of {user_id}", [fact]))


@facts_app.command("reject")
def facts_reject(user_id: UserArg, candidate_id: CandidateIdArg) -> None:
    """Reject a pending candidate: it is kept as rejected and never served."""
    found = with_memory(cli_settings(), lambda mem: mem.reject_candidate(user_id, candidate_id))
    console.print(_candidate_table(f"fact candidates of {user_id}", [found]))


# --- the user's names ----------------------------------------------------------------------------

identity_app = typer.Typer(
    cls=_ShowByDefault,
    help="The names the user speaks under when several people talk: `memstack identity "
    "USER` shows them, `set` binds them (a user named like a command: `identity show USER`).",
    no_args_is_help=True,
)
app.add_typer(identity_app, name="identity")


def _print_identity(found: UserIdentity) -> None:
    console.print(Text(f"user: {found.user_id}"))
    console.print(Text(f"display name: {found.display_name or '(none)'}"))
    console.print(Text(f"aliases: {', '.join(found.aliases) or '(none)'}"))


@identity_app.command("show")
def identity_show(user_id: UserArg) -> None:
    """The user's display name and aliases."""
    _print_identity(with_memory(cli_settings(), lambda mem: mem.identity(user_id)))


@identity_app.command("set")
def identity_set(
    user_id: UserArg,
    name: Annotated[str | None, typer.Option("--name", help="The display name.")] = None,
    alias: Annotated[
        list[str] | None, typer.Option("--alias", help="Another name (repeat for more).")
    ] = None,
) -> None:
    """Bind the user's names, replacing those bound before (no option unbinds them all);
    only the user's messages unnamed or under one of them feed the user's facts."""
    aliases = alias or []

    async def work(mem: AsyncMemory) -> UserIdentity:
        return await mem.set_identity(user_id, display_name=name, aliases=aliases)

    _print_identity(with_memory(cli_settings(), work))


# --- erasure ---------------------------------------------------------------------------------


@app.command("forget-session")
def forget_session(user_id: UserArg, session_id: SessionArg) -> None:
    """Erase one session of the user in every layer; the user's facts stay."""
    deleted = with_memory(cli_settings(), lambda mem: mem.forget_session(user_id, session_id))
    _counts(f"forgot session {session_id} of {user_id}", deleted)


@app.command("forget-user")
def forget_user(
    user_id: UserArg,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Erase everything memory holds about the user, in every layer. Cannot be undone."""
    settings = cli_settings()
    if not yes:
        typer.confirm(f"Erase everything memstack holds about {user_id!r}?", abort=True)
    erased = with_memory(settings, lambda mem: mem.forget_user(user_id))
    _counts(f"forgot {user_id}", erased)
    if erased.revoked_keys:
        console.print("revoked API keys: " + ", ".join(erased.revoked_keys))
